import BusCore

/// What the broker waits for: every request it forwarded and whose sender waits, by the
/// correlation id it travels under, and every action delivery waiting for its subscribers'
/// acknowledgements. Both routing paths (parsed and in place) insert, match and expire here, so
/// they cannot disagree about what is pending. (dbus-broker's `reply.c` keeps the same ledger:
/// a reply is accepted once, from the peer the call went to, before its deadline.)
///
/// No I/O and no clock of its own: the broker passes `now`, and relays what comes out.
struct ReplyRegistry {
    /// A request forwarded to a board, waiting for its reply.
    struct Request: Equatable {
        /// Who waits, and under which of its own correlation ids.
        var client: PeerID
        var clientCorrelationID: UInt64
        /// The board the request went to: only its connection may answer.
        var board: ScopedName
        var boardPeer: PeerID
        /// When it expires, and when the broker forwarded it (for the round-trip time monitors
        /// and metrics show), held as `FixedInstant`s: the broker stores and takes a request
        /// for every command it routes.
        private var expiry: FixedInstant
        private var forwarded: FixedInstant?
        /// Whether the client is a registered board (else its answer is counted as a client's,
        /// without looking it up).
        var clientIsBoard = true
        /// For one subscriber's part of an acknowledged action: the delivery it counts towards.
        var action: UInt64? = nil

        init(
            client: PeerID, clientCorrelationID: UInt64, board: ScopedName, boardPeer: PeerID, deadline: FixedInstant,
            sentAt: FixedInstant? = nil, clientIsBoard: Bool = true, action: UInt64? = nil
        ) {
            self.client = client
            self.clientCorrelationID = clientCorrelationID
            self.board = board
            self.boardPeer = boardPeer
            self.expiry = deadline
            self.forwarded = sentAt
            self.clientIsBoard = clientIsBoard
            self.action = action
        }

        var deadline: ContinuousClock.Instant { expiry.instant }
        var sentAt: ContinuousClock.Instant? { forwarded?.instant }

        /// Whether it expired at `now`.
        func hasExpired(at now: FixedInstant) -> Bool { expiry <= now }

        /// How long ago, at `now`, the broker forwarded it (nil: not recorded), in nanoseconds.
        func nanosecondsSinceForwarded(at now: FixedInstant) -> Int64? {
            forwarded.map { now.duration(since: $0).wholeNanoseconds }
        }
    }

    /// An acknowledged action waiting for its subscribers.
    struct ActionDelivery: Equatable {
        var client: PeerID
        var clientCorrelationID: UInt64
        var remaining: Int
        var acknowledged = 0
    }

    /// How an action part ended, once every part has.
    struct FinishedAction: Equatable {
        var client: PeerID
        var clientCorrelationID: UInt64
        /// The subscribers that acknowledged (the others died or missed the deadline).
        var acknowledged: Int
    }

    private var requests = CorrelationTable<Request>()
    private var actions: [UInt64: ActionDelivery] = [:]
    private var nextID: UInt64 = 1

    /// While fewer are pending than this, a request is taken without counting; past it, each is
    /// counted for its client and its board, within their shares, and none past
    /// ``maximumPending``: one sender, or one board that never answers, cannot fill the table.
    static let countedAbove = 1_024
    /// The counted requests one client may wait for.
    static let maximumPerClient = 1_024
    /// The counted requests that may wait on one board.
    static let maximumPerBoard = 4_096
    static let maximumPending = 65_536
    private var countedPerClient: [PeerID: Int] = [:]
    private var countedPerBoard: [ScopedName: Int] = [:]
    /// Requests whose payload is this large count their bytes toward their client's.
    static let countedRequestBytes = 4_096
    /// The bytes of large requests one client may have waiting for answers: a client that never
    /// reads its answers cannot queue more than this toward the boards it calls, nor hold a board
    /// busy with work nobody will read for longer than this much of it takes.
    static let maximumBytesPerClient = 16 << 20
    private var bytesPerClient: [PeerID: Int] = [:]
    /// What each counted request counts for, by correlation id: whether it takes a share of its
    /// client and its board, and its bytes. Empty while none is counted, which is all the hot path
    /// looks at.
    private var counted: [UInt64: (shares: Bool, bytes: Int)] = [:]

    /// The requests waiting for a reply.
    var count: Int { requests.count }
    var isEmpty: Bool { requests.isEmpty && actions.isEmpty }

    /// A correlation id not used before (by this broker): for a forwarded request, an action
    /// delivery, or a message the broker itself sends.
    mutating func makeCorrelationID() -> UInt64 {
        defer { nextID &+= 1 }
        return nextID
    }

    // MARK: - Insert

    /// Remembers a request forwarded to `board` on `boardPeer`; returns the correlation id it
    /// travels under, nil when it is refused (the client's or the board's share is spent, or the
    /// table is full: see ``countedAbove``). Its instants are fixed by the caller: the broker
    /// routes a command with one reading of the clock.
    mutating func expect(
        from client: PeerID, clientCorrelationID: UInt64, board: ScopedName, boardPeer: PeerID, deadline: FixedInstant,
        sentAt: FixedInstant? = nil, clientIsBoard: Bool = true, bytes: Int = 0
    ) -> UInt64? {
        // Most requests: few pending, a small payload. Taken as they are.
        guard requests.count >= Self.countedAbove || bytes >= Self.countedRequestBytes else {
            let id = makeCorrelationID()
            requests.insert(
                Request(
                    client: client, clientCorrelationID: clientCorrelationID, board: board, boardPeer: boardPeer, deadline: deadline,
                    sentAt: sentAt, clientIsBoard: clientIsBoard), for: id)
            return id
        }
        return expectCounted(
            from: client, clientCorrelationID: clientCorrelationID, board: board, boardPeer: boardPeer, deadline: deadline, sentAt: sentAt,
            clientIsBoard: clientIsBoard, bytes: bytes)
    }

    /// ``expect(from:clientCorrelationID:board:boardPeer:deadline:sentAt:clientIsBoard:bytes:)``
    /// for a request that counts toward its client's and its board's shares.
    @inline(never)
    private mutating func expectCounted(
        from client: PeerID, clientCorrelationID: UInt64, board: ScopedName, boardPeer: PeerID, deadline: FixedInstant,
        sentAt: FixedInstant?, clientIsBoard: Bool, bytes: Int
    ) -> UInt64? {
        let shares = requests.count >= Self.countedAbove
        if shares { guard refusal(client: client, board: board) == nil else { return nil } }
        let large = bytes >= Self.countedRequestBytes
        if large { guard bytesRefusal(client: client, bytes: bytes) == nil else { return nil } }
        if shares {
            countedPerClient[client, default: 0] += 1
            countedPerBoard[board, default: 0] += 1
        }
        if large { bytesPerClient[client, default: 0] += bytes }
        let id = makeCorrelationID()
        counted[id] = (shares, large ? bytes : 0)
        requests.insert(
            Request(
                client: client, clientCorrelationID: clientCorrelationID, board: board, boardPeer: boardPeer, deadline: deadline, sentAt: sentAt,
                clientIsBoard: clientIsBoard), for: id)
        return id
    }

    /// Why a new request of `client` to `board` would be refused now; nil when it would be taken.
    func refusal(client: PeerID, board: ScopedName) -> String? {
        guard requests.count >= Self.countedAbove else { return nil }
        if requests.count >= Self.maximumPending { return "the broker waits for \(requests.count) answers, as many as it may" }
        if countedPerClient[client, default: 0] >= Self.maximumPerClient {
            return "this connection waits for as many answers as it may (\(Self.maximumPerClient) past the first \(Self.countedAbove) pending)"
        }
        if countedPerBoard[board, default: 0] >= Self.maximumPerBoard {
            return "board '\(board)' has as many requests waiting for its answers as it may (\(Self.maximumPerBoard))"
        }
        return nil
    }

    /// Why a large request of `bytes` from `client` would be refused now; nil when it would be taken.
    func bytesRefusal(client: PeerID, bytes: Int) -> String? {
        guard bytes >= Self.countedRequestBytes else { return nil }
        let waiting = bytesPerClient[client, default: 0]
        guard waiting + bytes > Self.maximumBytesPerClient else { return nil }
        return
            "this connection has \(waiting) bytes of requests waiting for answers; at most \(Self.maximumBytesPerClient) may wait (read the answers first)"
    }

    /// Request `id` is out of the table: if it was counted, its shares are given back.
    private mutating func uncount(_ id: UInt64, _ request: Request) {
        guard let (shares, bytes) = counted.removeValue(forKey: id) else { return }
        if bytes > 0 { Self.decrement(&bytesPerClient, request.client, by: bytes) }
        guard shares else { return }
        Self.decrement(&countedPerClient, request.client)
        Self.decrement(&countedPerBoard, request.board)
    }

    private static func decrement<Key: Hashable>(_ counts: inout [Key: Int], _ key: Key, by amount: Int = 1) {
        guard let count = counts[key] else { return }
        counts[key] = count > amount ? count - amount : nil
    }

    /// The requests counted now, for `client` and for `board` (tests, metrics).
    func counted(client: PeerID) -> Int { countedPerClient[client] ?? 0 }
    func counted(board: ScopedName) -> Int { countedPerBoard[board] ?? 0 }
    func bytesWaiting(for client: PeerID) -> Int { bytesPerClient[client] ?? 0 }

    /// Begins an acknowledged action delivery to `subscribers` parts; returns its id, for
    /// ``expectActionPart(_:board:boardPeer:deadline:)``.
    mutating func beginAction(from client: PeerID, clientCorrelationID: UInt64, subscribers: Int) -> UInt64 {
        let id = makeCorrelationID()
        actions[id] = ActionDelivery(client: client, clientCorrelationID: clientCorrelationID, remaining: subscribers)
        return id
    }

    /// Remembers one subscriber's part of action delivery `action`; returns the correlation id
    /// it travels under.
    mutating func expectActionPart(_ action: UInt64, board: ScopedName, boardPeer: PeerID, deadline: ContinuousClock.Instant) -> UInt64 {
        guard let delivery = actions[action] else { preconditionFailure("no action delivery \(action)") }
        let id = makeCorrelationID()
        requests.insert(
            Request(
                client: delivery.client, clientCorrelationID: 0, board: board, boardPeer: boardPeer, deadline: FixedInstant(deadline), action: action),
            for: id)
        return id
    }

    // MARK: - Match

    /// Takes the request a reply from `peer` answers, if `peer` is the connection the request
    /// went to and `accept` agrees; otherwise nothing changes (a late reply, one that another
    /// connection forged, or one the caller routes another way: the request stays where it is)
    /// and nil is returned.
    mutating func takeReply(
        _ correlationID: UInt64, from peer: PeerID, accept: (Request) -> Bool = { _ in true }
    ) -> Request? {
        guard counted.isEmpty else { return takeCountedReply(correlationID, from: peer, accept: accept) }
        return requests.removeValue(forKey: correlationID) { $0.boardPeer == peer && accept($0) }
    }

    /// ``takeReply(_:from:accept:)`` while some requests are counted.
    @inline(never)
    private mutating func takeCountedReply(_ correlationID: UInt64, from peer: PeerID, accept: (Request) -> Bool) -> Request? {
        let request = requests.removeValue(forKey: correlationID) { $0.boardPeer == peer && accept($0) }
        if let request { uncount(correlationID, request) }
        return request
    }

    /// Takes a request by id, whoever answers it (the broker failing it).
    mutating func take(_ correlationID: UInt64) -> Request? {
        let request = requests.removeValue(forKey: correlationID)
        if !counted.isEmpty, let request { uncount(correlationID, request) }
        return request
    }

    /// Counts one part of an action delivery as ended; returns the delivery once every part has.
    /// `acknowledged` is how many subscribers the part stands for that acknowledged: 0 or 1 for a
    /// board, the count a parent motherboard reports for the part that went up the uplink.
    mutating func finishActionPart(_ action: UInt64, acknowledged: Int) -> FinishedAction? {
        guard var delivery = actions[action] else { return nil }
        delivery.remaining -= 1
        delivery.acknowledged += acknowledged
        guard delivery.remaining == 0 else {
            actions[action] = delivery
            return nil
        }
        actions[action] = nil
        return FinishedAction(client: delivery.client, clientCorrelationID: delivery.clientCorrelationID, acknowledged: delivery.acknowledged)
    }

    // MARK: - Expire

    /// Takes every request whose deadline has passed, oldest id first.
    mutating func takeExpired(now: ContinuousClock.Instant) -> [Request] {
        let now = FixedInstant(now)
        return take { $0.hasExpired(at: now) }
    }

    /// Takes every request waiting on `board`'s connection `peer` (it is gone), oldest id first.
    mutating func takeAll(waitingOn board: ScopedName, peer: PeerID) -> [Request] {
        take { $0.board == board && $0.boardPeer == peer }
    }

    /// Takes every request sent to a connection.
    mutating func takeAll(sentTo peer: PeerID) -> [Request] {
        take { $0.boardPeer == peer }
    }

    /// Takes every request `client` waits for (it left), and every action delivery it waits for.
    mutating func takeAll(waitedForBy client: PeerID) -> [Request] {
        actions = actions.filter { $0.value.client != client }
        return take { $0.client == client }
    }

    private mutating func take(where matches: (Request) -> Bool) -> [Request] {
        let taken = requests.removeAll(where: matches)
        if !counted.isEmpty { for (id, request) in taken { uncount(id, request) } }
        return taken.map(\.value)
    }
}
