import Foundation

/// Majordomo (MDP 0.2, ZeroMQ RFC 18) messages as the endpoint's ROUTER receives and sends them,
/// in both dialects: what arrives parsed into a peer, a dialect and a named command, and what
/// goes out built from them. Pure: no socket, no state.
package enum Majordomo {
    /// How a peer frames its messages; each is answered in the one it used.
    package enum Dialect: Sendable, Hashable {
        /// RFC 18: no delimiter; client commands 0x01–0x03, the service frame in replies.
        case rfc
        /// majortomo 0.2.0: an empty delimiter first; client commands numbered as the worker's.
        case delimited
    }

    package static let clientHeader = Data("MDPC02".utf8)
    package static let workerHeader = Data("MDPW02".utf8)

    /// A client's command. Its byte depends on the dialect.
    package enum ClientCommand: Sendable, Hashable {
        case request, partial, final

        package init?(_ byte: UInt8, dialect: Dialect) {
            switch (byte, dialect) {
            case (0x01, .rfc), (0x02, .delimited): self = .request
            case (0x02, .rfc), (0x03, .delimited): self = .partial
            case (0x03, .rfc), (0x04, .delimited): self = .final
            default: return nil
            }
        }

        package func byte(in dialect: Dialect) -> UInt8 {
            let rfc: UInt8 =
                switch self {
                case .request: 0x01
                case .partial: 0x02
                case .final: 0x03
                }
            return dialect == .rfc ? rfc : rfc + 1
        }
    }

    /// A worker's command (or the broker's to a worker): the same bytes in both dialects.
    package enum WorkerCommand: UInt8, Sendable, Hashable {
        case ready = 0x01
        case request = 0x02
        case partial = 0x03
        case final = 0x04
        case heartbeat = 0x05
        case disconnect = 0x06
    }

    /// A message from an MDP peer. A command byte the dialect does not define is kept as nil:
    /// a worker is told to disconnect, a client's is ignored.
    package struct Incoming: Sendable, Hashable {
        package enum Sender: Sendable, Hashable {
            case client(ClientCommand?)
            case worker(WorkerCommand?)
        }

        package let peer: Data
        package let dialect: Dialect
        package let sender: Sender
        /// The frames after the command.
        package let body: [Data]

        /// The ROUTER's frames (routing id first), or nil when they are not MDP (too few frames,
        /// no `MDPC02`/`MDPW02` header, a command that is not one byte): dropped, as RFC 18 says
        /// of invalid messages.
        package init?(frames: [Data]) {
            guard frames.count >= 3 else { return nil }
            var rest = frames.dropFirst()
            var dialect = Dialect.rfc
            if rest.first?.isEmpty == true {
                dialect = .delimited
                rest = rest.dropFirst()
            }
            guard let header = rest.first, let command = rest.dropFirst().first, command.count == 1 else { return nil }
            let byte = command[command.startIndex]
            if header == Majordomo.clientHeader {
                sender = .client(ClientCommand(byte, dialect: dialect))
            } else if header == Majordomo.workerHeader {
                sender = .worker(WorkerCommand(rawValue: byte))
            } else {
                return nil
            }
            self.peer = frames[0]
            self.dialect = dialect
            self.body = Array(rest.dropFirst(2))
        }
    }

    /// The frames of a `FINAL` to a client (routing id first), in its dialect: RFC 18 names the
    /// service; majortomo's dialect does not.
    package static func finalToClient(_ peer: Data, dialect: Dialect, service: Data, body: [Data]) -> [Data] {
        switch dialect {
        case .rfc: [peer, clientHeader, Data([ClientCommand.final.byte(in: .rfc)]), service] + body
        case .delimited: [peer, Data(), clientHeader, Data([ClientCommand.final.byte(in: .delimited)])] + body
        }
    }

    /// The frames of a command to a worker (routing id first), in its dialect.
    package static func toWorker(_ peer: Data, dialect: Dialect, command: WorkerCommand, body: [Data] = []) -> [Data] {
        let prefix: [Data] = dialect == .delimited ? [peer, Data()] : [peer]
        return prefix + [workerHeader, Data([command.rawValue])] + body
    }
}
