import BusCore
@testable import BusZeroMQ
import Foundation
import Testing

@Suite("Received message")
struct ReceivedMessageTests {
    /// The envelope a client's loop hands on is moved out whole: header and payload as received.
    @Test func takingTheEnvelopeGivesItWhole() {
        let header = EnvelopeHeader(kind: .command, correlationID: 7, source: "client", target: "greeter", scope: .root, typeName: "greet")
        let payload = Data((0..<100).map { UInt8($0) })
        let message = ReceivedMessage(routingID: Data([0, 1, 2, 3, 4]), content: .success(Envelope(header: header, payload: payload)))
        let envelope = message.takeEnvelope()
        #expect(envelope?.header == header)
        #expect(envelope?.payload == payload)
    }

    /// Frames that are not an envelope give none.
    @Test func framesThatAreNoEnvelopeGiveNone() {
        let malformed = MalformedMessage(BusError(.malformed, "short header"), answerWith: 9)
        let message = ReceivedMessage(routingID: nil, content: .failure(malformed))
        #expect(message.takeEnvelope() == nil)
    }
}
