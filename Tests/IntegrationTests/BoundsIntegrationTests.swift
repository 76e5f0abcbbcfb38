import BoardKitTesting
import BusCore
import BusZeroMQ
import Foundation
import Synchronization
import Testing

/// A flag one thread sets and another reads.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}

/// The tables a peer can fill, with the real broker: bounded while the peer is there, freed once
/// its connection closes.
@Suite("Tables a peer fills", .serialized, .timeLimit(.minutes(3)))
struct BoundsIntegrationTests {
    /// A gauge's value in `busctl metrics`.
    static func gauge(_ name: String, in fleet: TestFleet) async throws -> Double? {
        let text = try await fleet.busctl("metrics").standardOutput
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.split(separator: " ")[1])
        }
        return nil
    }

    /// A board of the test's own: registers `far.sink`, reads all it is sent and answers nothing
    /// but heartbeats, until `stop`.
    static func sink(at endpoint: String, until stop: Flag) async throws {
        try await withRawDealer(connectedTo: endpoint, configure: { try $0.set(.linger(.zero)) }) { sink in try serve(sink, until: stop) }
    }

    private static func serve(_ sink: ZMQSocket, until stop: Flag) throws {
        let registration = Registration(id: "far.sink", pid: getpid(), commands: ["hold"])
        let register = EnvelopeHeader(kind: .register, flags: .replyExpected, correlationID: 1, timeoutMilliseconds: 5_000, source: "far.sink")
        _ = try sink.send(try Envelope(header: register, payload: try PayloadCodec.encode(registration)).frames())
        let clock = ContinuousClock()
        let end = clock.now + .seconds(120)
        var beat = clock.now
        while !stop.isSet, clock.now < end {
            if sink.waitReadable(timeoutMilliseconds: 50) { while try sink.receive() != nil, sink.waitReadable(timeoutMilliseconds: 0) {} }
            if clock.now >= beat {
                _ = try sink.send(try Envelope(header: EnvelopeHeader(kind: .heartbeat, source: "far.sink")).frames())
                beat = clock.now + .milliseconds(300)
            }
        }
    }

    /// A client renews 1 100 stores nobody owns and sends 2 200 commands with a 49-day deadline to
    /// a board that reads them and never answers: past 1 024 subscriptions and 2 048 pending
    /// requests it is refused (`busy`), and once it closes its connection both go within seconds
    /// while the board stays. (200 000 renewals took the broker from 36 to 315 MB, still 296 MB
    /// 10 s after the client left.)
    @Test func aClientThatLeavesTakesItsSubscriptionsAndPendingRequestsWithIt() async throws {
        try await TestFleet.with(manifest: greeterManifest) { fleet in
            let endpoint = fleet.address.endpoint
            let stop = Flag()
            async let board: Void = Self.sink(at: endpoint, until: stop)
            defer { stop.set() }
            #expect(try await eventually { try await fleet.busctl("status", "far.sink").exitCode == 0 })
            let busy = try await withRawDealer(connectedTo: endpoint, configure: { try $0.set(.linger(.zero)) }) { client -> Int in
                var busy = 0
                func read(waiting milliseconds: Int) throws {
                    while client.waitReadable(timeoutMilliseconds: milliseconds), let frames = try client.receive() {
                        if try Envelope(frames: frames).carriedError?.code == .busy { busy += 1 }
                    }
                }
                // Every message is sent: past the socket's high-water mark, once it has room.
                func send(_ frames: [Data]) throws {
                    while try client.send(frames) != .sent {
                        try read(waiting: 0)
                        usleep(1_000)
                    }
                }
                for number in 0..<1_100 {
                    let renew = EnvelopeHeader(kind: .store, target: "nobody.\(number)", typeName: StoreOperation.renew)
                    try send(try Envelope(header: renew).frames())
                }
                for number in 0..<2_200 {
                    let command = EnvelopeHeader(
                        kind: .command, flags: .replyExpected, correlationID: UInt64(number + 1), timeoutMilliseconds: .max, target: "far.sink",
                        typeName: "hold")
                    try send(try Envelope(header: command, payload: Data("{}".utf8)).frames())
                    if number % 100 == 99 { try read(waiting: 0) }
                }
                let clock = ContinuousClock()
                let end = clock.now + .seconds(30)
                while busy < 2_200 - 2_048, clock.now < end { try read(waiting: 100) }
                try read(waiting: 200)
                return busy
            }
            #expect(busy == 2_200 - 2_048)
            #expect(try await eventually { try await Self.gauge("boardbus_refused_subscriptions_total", in: fleet) == 1_100 - 1_024 })
            // The client's sockets closed with its thread: what it held is freed within seconds.
            let freed = try await eventually(timeout: .seconds(10), checkingEvery: .milliseconds(200)) {
                let pending = try await Self.gauge("boardbus_pending_requests", in: fleet)
                let subscriptions = try await Self.gauge("boardbus_store_subscriptions", in: fleet)
                return pending == 0 && subscriptions == 0
            }
            let metrics = try await fleet.busctl("metrics").standardOutput
            #expect(freed, "\(metrics)")
            #expect(try await fleet.busctl("status", "far.sink").exitCode == 0)
            stop.set()
            try await board
        }
    }
}

/// A broker started again on a state directory whose files were broken while it was down.
@Suite("Restarting from a hostile state directory", .serialized, .timeLimit(.minutes(3)))
struct HostileStateIntegrationTests {
    /// The journal holds lines no broker writes (a dead letter with id 2^64-1 trapped every start;
    /// a put for an invalid board id trapped 5 s after it), a cut line and binary garbage; the
    /// audit log is binary garbage past its size limit; a store's database is garbage; the
    /// allow-list has a key cut at a multi-byte character, binary garbage and a name without a key
    /// among good lines (a bad line stopped the start). The broker starts, serves (the good key
    /// over tcp too), and says what it set aside; the board whose store cannot be opened fails on
    /// its own, typed, and nothing else does. Then the broker's key file is cut short (it stopped
    /// the start): the broker serves its ipc socket, keeps the file as it is, and opens no tcp
    /// endpoint.
    @Test func theBrokerStartsServesAndSaysWhatItSetAside() async throws {
        let manifest = """
            { "boards": [
                { "id": "demo.greeter", "executable": "BoardBusDemoGreeter", "start": "always" },
                { "id": "demo.comments", "executable": "BoardBusDemoComments", "start": "always" }
            ] }
            """
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("boardbus-hostile-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }
        try #"{"rules": [{"allow": ["call"], "principals": ["ann", "bob"], "targets": ["demo.greeter"]}]}"#.write(
            toFile: "\(work)/policy.json", atomically: true, encoding: .utf8)
        let port = try freeLoopbackPort()
        let endpoint = "tcp://127.0.0.1:\(port)"
        try await TestFleet.with(manifest: manifest, brokerArguments: ["--listen", endpoint, "--policy", "\(work)/policy.json"]) { fleet in
            let state = fleet.stateDirectory
            let database = "\(state)/stores/root/demo.comments.comments.sqlite"
            #expect(try await eventually { FileManager.default.fileExists(atPath: database) })
            var keys: [String: String] = [:]
            for name in ["ann", "bob"] {
                let made = try await fleet.busctl("keys", "new", name, "--out", "\(work)/\(name).key")
                #expect(made.exitCode == 0, "\(made.standardError)")
                keys[name] = String(made.standardOutput.split(separator: " ").last ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            }
            func greetOverTCP(as name: String) async throws -> ChildProcess.Result {
                try await fleet.busctl(
                    "call", "demo.greeter", "greet", #"{"name":"far"}"#, "--bus", endpoint, "--server-key", "\(state)/curve/server.pub",
                    "--client-key", "\(work)/\(name).key", "--timeout", "3")
            }
            try await fleet.restartBrokerAfterKill {
                // The comments board goes too: the new broker starts it, on its broken database.
                if let pid = fleet.pid(of: "demo.comments") {
                    kill(pid, SIGKILL)
                    _ = await eventually { kill(pid, 0) != 0 }
                }
                let bit: UInt64 = 1 << 63
                let header = Data(try HeaderCodec.encode(EnvelopeHeader(kind: .activate, target: "demo.greeter", typeName: "Greet"), version: 3))
                    .base64EncodedString()
                let payload = Data("{}".utf8).base64EncodedString()
                let letter =
                    #""letter":{"id":18446744073709551615,"board":"demo.greeter","scope":"","type":"Greet","attempts":3,"reason":"x","payloadBytes":2,"time":1}"#
                let lines = [
                    #"{"op":"dead","id":18446744073709551615,"header":"\#(header)","payload":"\#(payload)",\#(letter)}"#,
                    #"{"op":"put","id":\#(bit | 1),"board":"bad..id","scope":"","deliveries":1,"header":"\#(header)","payload":"\#(payload)"}"#,
                    #"{"op":"put","id":\#(bit | 2),"board":"demo.greeter","scope":"","deliveries":-5,"header":"\#(header)","payload":"\#(payload)"}"#,
                    #"{"op":"put","id":\#(bit | 3),"board":"demo.gree"#,
                ]
                var journal = Data(lines.joined(separator: "\n").utf8)
                journal += Data([0x0A, 0x00, 0xFF, 0xFE, 0x7B, 0x0A])
                try journal.write(to: URL(fileURLWithPath: "\(state)/deliveries.log"))
                try Data(repeating: 0xFF, count: 11 << 20).write(to: URL(fileURLWithPath: "\(state)/audit.log"))
                try Data("not a database at all".utf8).write(to: URL(fileURLWithPath: database))
                // Line 3: bob's key cut after 20 characters and a multi-byte one; 4: not UTF-8;
                // 5: a name without a key.
                var allowList = Data("# fleet keys\nann \(keys["ann"] ?? "")\nbob \(keys["bob"]?.prefix(20) ?? "")é\n".utf8)
                allowList += Data([0xFF, 0xFE, 0x20, 0x41, 0x0A]) + Data("carol\n".utf8)
                try allowList.write(to: URL(fileURLWithPath: "\(state)/curve/allowed.keys"))
            }
            // The greeter, which lived on, registers again with the new broker.
            #expect(try await eventually { try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"Ann"}"#).exitCode == 0 })
            // Past its grace, what was read of the journal is dead-lettered; nothing traps.
            try await Task.sleep(for: .seconds(6))
            #expect(kill(fleet.brokerPID, 0) == 0)
            #expect(try await fleet.busctl("dead-letters").exitCode == 0)
            let quarantine = try String(contentsOfFile: "\(state)/deliveries.log.quarantine", encoding: .isoLatin1)
            #expect(quarantine.split(separator: "\n").count == 5, "\(quarantine)")
            #expect(fleet.brokerLog.contains("delivery journal: a line was set aside"))
            #expect(fleet.brokerLog.contains("line=4"))
            // The journal holds nothing the next broker must set aside again.
            #expect(try String(contentsOfFile: "\(state)/deliveries.log", encoding: .utf8).isEmpty)
            // The board whose store cannot be opened is not running; the greeter still answers.
            let comments = try await fleet.busctl("status", "demo.comments")
            #expect(!comments.standardOutput.contains("running"), "\(comments.standardOutput)")
            #expect(try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"Bo"}"#).exitCode == 0)
            // The allow-list's good line lets ann in over tcp; bob's cut line refuses bob alone.
            let ann = try await greetOverTCP(as: "ann")
            #expect(ann.exitCode == 0, "\(ann.standardError)")
            #expect(try await greetOverTCP(as: "bob").exitCode != 0)
            let setAside = fleet.brokerLog.split(separator: "\n").filter { $0.contains("allow-list: a line was set aside") }
            #expect(
                setAside.count == 3 && ["line=3", "line=4", "line=5"].allSatisfy { mark in setAside.contains { $0.contains(mark) } }, "\(setAside)")

            // The broker's key file cut short: kept as it is, ipc served, no tcp endpoint.
            let keyFile = "\(state)/curve/server.key"
            let cut = try Data(contentsOf: URL(fileURLWithPath: keyFile)).dropLast(30)
            try await fleet.restartBrokerAfterKill { try Data(cut).write(to: URL(fileURLWithPath: keyFile)) }
            #expect(try await eventually { try await fleet.busctl("call", "demo.greeter", "greet", #"{"name":"Cy"}"#).exitCode == 0 })
            #expect(fleet.brokerLog.contains("the tcp endpoints stay closed"), "\(fleet.brokerLog.suffix(2000))")
            #expect(try Data(contentsOf: URL(fileURLWithPath: keyFile)) == Data(cut))
            #expect(try await greetOverTCP(as: "ann").exitCode != 0)
        }
    }
}
