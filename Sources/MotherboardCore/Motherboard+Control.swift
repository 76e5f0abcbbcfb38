import BusCore
import Foundation

extension Motherboard {
    /// Questions for the broker itself: `list` and `status`.
    func answerControl(_ envelope: Envelope, from peer: PeerID, now: ContinuousClock.Instant) {
        switch envelope.header.typeName {
        case ControlOperation.list:
            let boards = registry.boards.values.sorted { $0.id < $1.id }.map { info(for: $0, now: now) }
            let waiting = manifest.boards.filter { $0.start == .always && registry[$0.id] == nil }.map(\.id)
            reply(to: envelope, from: peer, with: BoardList(boards: boards, waitingFor: waiting))
        case ControlOperation.status:
            do {
                let request = try PayloadCodec.decode(StatusRequest.self, from: envelope.payload)
                if let board = registry[request.id] {
                    reply(to: envelope, from: peer, with: info(for: board, now: now))
                } else if let entry = manifest.board(request.id) {
                    reply(to: envelope, from: peer, with: BoardInfo(
                        id: entry.id, scope: entry.scope, pid: 0, state: "stopped", start: entry.start.rawValue,
                        inputType: nil, commands: [], actions: [], uptimeSeconds: 0, activations: 0,
                        commandsHandled: 0, actionsDelivered: 0))
                } else {
                    reply(to: envelope, from: peer, error: notLiveError(request.id.rawValue))
                }
            } catch let error as BusError {
                reply(to: envelope, from: peer, error: error)
            } catch {}
        default:
            reply(to: envelope, from: peer, error: BusError(.malformed, "unknown control operation '\(envelope.header.typeName)'"))
        }
    }

    private func info(for board: LiveBoard, now: ContinuousClock.Instant) -> BoardInfo {
        let registration = board.registration
        let uptime = board.registeredAt.duration(to: now)
        return BoardInfo(
            id: registration.id, scope: registration.scope, pid: registration.pid, state: "running",
            start: manifest.board(registration.id)?.start.rawValue ?? "external",
            inputType: registration.inputType, commands: registration.commands, actions: registration.actions,
            uptimeSeconds: Double(uptime.components.seconds) + Double(uptime.components.attoseconds) / 1e18,
            activations: board.activations, commandsHandled: board.commandsHandled, actionsDelivered: board.actionsDelivered)
    }
}
