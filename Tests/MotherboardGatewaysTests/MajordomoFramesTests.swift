import Foundation
import Testing

@testable import MotherboardGateways

/// MDP frames in both dialects, without sockets: what the endpoint reads and writes.
@Suite("Majordomo frames")
struct MajordomoFramesTests {
    let peer = Data([0x00, 0x6B, 0x8B, 0x45, 0x67])
    let client = Majordomo.clientHeader
    let worker = Majordomo.workerHeader

    @Test func aClientRequestIsReadInEitherDialect() throws {
        let body = [Data("demo.greeter".utf8), Data("greet".utf8), Data(#"{"name":"x"}"#.utf8)]
        let rfc = try #require(Majordomo.Incoming(frames: [peer, client, Data([0x01])] + body))
        #expect(rfc.peer == peer && rfc.dialect == .rfc && rfc.sender == .client(.request) && rfc.body == body)
        let delimited = try #require(Majordomo.Incoming(frames: [peer, Data(), client, Data([0x02])] + body))
        #expect(delimited.dialect == .delimited && delimited.sender == .client(.request) && delimited.body == body)
        // The same byte means another command in the other dialect; an undefined one is nil.
        #expect(Majordomo.Incoming(frames: [peer, client, Data([0x02])] + body)?.sender == .client(.partial))
        #expect(Majordomo.Incoming(frames: [peer, client, Data([0x04])] + body)?.sender == .client(nil))
        #expect(Majordomo.Incoming(frames: [peer, Data(), client, Data([0x01])] + body)?.sender == .client(nil))
    }

    @Test func everyWorkerCommandIsNamedAndAnUnknownOneIsNil() {
        for command in [Majordomo.WorkerCommand.ready, .request, .partial, .final, .heartbeat, .disconnect] {
            for dialect in [Majordomo.Dialect.rfc, .delimited] {
                let frames = Majordomo.toWorker(peer, dialect: dialect, command: command, body: [Data("b".utf8)])
                let read = Majordomo.Incoming(frames: frames)
                #expect(read?.sender == .worker(command) && read?.dialect == dialect && read?.body == [Data("b".utf8)])
            }
        }
        #expect(Majordomo.Incoming(frames: [peer, worker, Data([0x07])])?.sender == .worker(nil))
    }

    @Test func whatIsNotMDPIsDropped() {
        #expect(Majordomo.Incoming(frames: [peer, client]) == nil)  // too few frames
        #expect(Majordomo.Incoming(frames: [peer, Data("MDPC01".utf8), Data([0x01])]) == nil)  // another version
        #expect(Majordomo.Incoming(frames: [peer, client, Data([0x01, 0x00])]) == nil)  // a command of two bytes
        #expect(Majordomo.Incoming(frames: [peer, client, Data()]) == nil)  // of none
        #expect(Majordomo.Incoming(frames: [peer, Data(), Data(), client]) == nil)  // two delimiters
    }

    @Test func aFinalToAClientIsWrittenInItsDialect() {
        let service = Data("demo.greeter".utf8)
        let body = [Data("reply".utf8)]
        #expect(Majordomo.finalToClient(peer, dialect: .rfc, service: service, body: body) == [peer, client, Data([0x03]), service] + body)
        #expect(Majordomo.finalToClient(peer, dialect: .delimited, service: service, body: body) == [peer, Data(), client, Data([0x04])] + body)
        for dialect in [Majordomo.Dialect.rfc, .delimited] {
            for command in [Majordomo.ClientCommand.request, .partial, .final] {
                #expect(Majordomo.ClientCommand(command.byte(in: dialect), dialect: dialect) == command)
            }
        }
    }
}
