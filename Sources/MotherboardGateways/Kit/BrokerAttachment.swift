import BusCore
import Foundation

/// A gateway's attachment to its own motherboard: it proves itself with the secret the
/// motherboard made for it (``UplinkAttach``), asked again each second until answered.
package struct BrokerAttachment {
    /// `uplink.attach` or `export.attach`.
    private let operation: String
    private let secret: String
    private var requestID: UInt64 = 0
    private var lastAsked: ContinuousClock.Instant?
    package private(set) var isAttached = false

    package init(operation: String, secret: String) {
        self.operation = operation
        self.secret = secret
    }

    /// The attach request to send now, if one is due (not attached, none asked in the last second).
    package mutating func request(now: ContinuousClock.Instant, ids: inout IDSource) -> Envelope? {
        guard !isAttached, lastAsked.map({ $0.duration(to: now) > .seconds(1) }) ?? true else { return nil }
        requestID = ids.make()
        lastAsked = now
        var header = EnvelopeHeader(kind: .control, correlationID: requestID, typeName: operation)
        header.flags.insert(.replyExpected)
        return Envelope(header: header, payload: PayloadCodec.encodeOrEmpty(UplinkAttach(secret: secret)))
    }

    package enum Answer {
        /// Attached; the reply's payload (the motherboard's link chain, for an uplink).
        case attached(Data)
        /// Refused, with what the motherboard said.
        case refused(String)
    }

    /// What `envelope` from the motherboard says of the attachment; nil when it is about
    /// something else (or comes after the attachment was answered).
    package mutating func read(_ envelope: Envelope) -> Answer? {
        guard !isAttached, requestID != 0, envelope.header.correlationID == requestID else { return nil }
        switch envelope.header.kind {
        case .reply:
            isAttached = true
            return .attached(envelope.payload)
        case .error:
            return .refused(String(decoding: envelope.payload, as: UTF8.self))
        default:
            return nil
        }
    }
}
