import BusCore

/// The boards a gateway keeps registered with a broker over one connection they share (the
/// uplink's boards with the parent, the NATS gateway's boards of other hosts with its own
/// motherboard): each one's registration, the answers awaited, and to which board a message of
/// the broker on that connection goes. `Extra` is what the gateway keeps beside each.
struct ServedBoards<Extra> {
    struct Board {
        var link: HelperBoard
        /// The broker's last refusal, logged once rather than at every retry.
        var lastRefusal: String?
        var extra: Extra
    }

    private(set) var boards: [ScopedName: Board] = [:]
    private var pending = PendingRegistrations()

    subscript(name: ScopedName) -> Board? {
        get { boards[name] }
        set { boards[name] = newValue }
    }

    var names: Dictionary<ScopedName, Board>.Keys { boards.keys }

    /// Adds `name` and registers it now.
    mutating func add(_ name: ScopedName, _ board: Board, now: ContinuousClock.Instant, ids: inout IDSource) {
        boards[name] = board
        register(name, now: now, ids: &ids)
    }

    /// Registers `name` now (again), remembering which registration the answer is for.
    mutating func register(_ name: ScopedName, now: ContinuousClock.Instant, ids: inout IDSource) {
        guard boards[name] != nil else { return }
        pending.register(&boards[name]!.link, as: name, now: now, id: ids.make())
    }

    /// A heartbeat for each registered board, the registration again for each that is not (at
    /// most once a second, later after refusals).
    mutating func keepAlive(now: ContinuousClock.Instant, ids: inout IDSource) {
        for name in boards.keys { pending.keepAlive(&boards[name]!.link, as: name, now: now, id: ids.make()) }
    }

    /// The link or the broker was lost: every board registers again.
    mutating func loseAll() {
        for name in boards.keys { boards[name]!.link.lose() }
    }

    /// Removes `name`, unregistering it.
    @discardableResult
    mutating func remove(_ name: ScopedName) -> Board? {
        guard let board = boards.removeValue(forKey: name) else { return nil }
        board.link.close()
        return board
    }

    /// Unregisters every board.
    mutating func removeAll() {
        for board in boards.values { board.link.close() }
        boards = [:]
    }

    /// The board a message of the broker on the shared connection is for: the one whose
    /// registration it answers, for a dispatch or store request the owner of the store it names
    /// (the first by name, as the broker itself chooses), else the board it names.
    mutating func addressee(of header: EnvelopeHeader) -> ScopedName? {
        if header.kind == .reply || header.kind == .error, header.correlationID != 0 {
            return pending.take(header.correlationID)
        }
        if header.kind == .dispatch || header.kind == .store {
            return boards.keys.filter { $0.scope == header.scope && boards[$0]?.link.registration.stores.contains(header.target) == true }.min()
        }
        return ScopedName(scope: header.scope, name: header.target)
    }

    /// What a message of the broker says to board `name` (nil: no such board).
    enum Reading {
        /// A heartbeat, or an answer to nothing the board asked.
        case ignored
        case accepted
        /// Refused, or not known (registered again at once then); `isNews` when it was registered
        /// or the broker says something else than the last time: worth a line in the log.
        case refused(BusError, isNews: Bool)
        /// A request for the board.
        case request
    }

    mutating func read(_ envelope: Envelope, for name: ScopedName, now: ContinuousClock.Instant, ids: inout IDSource) -> Reading? {
        guard var board = boards[name] else { return nil }
        let wasRegistered = board.link.registered
        let reading: Reading
        switch board.link.read(envelope) {
        case .heartbeat, .otherAnswer:
            reading = .ignored
        case .accepted:
            board.lastRefusal = nil
            reading = .accepted
        case .refused(let error):
            reading = .refused(error, isNews: wasRegistered || error.description != board.lastRefusal)
            board.lastRefusal = error.description
        case .request:
            reading = .request
        }
        boards[name] = board
        if case .refused(let error, _) = reading, error.code == .notRegistered { register(name, now: now, ids: &ids) }
        return reading
    }
}
