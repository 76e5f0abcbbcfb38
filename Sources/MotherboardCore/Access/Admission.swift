import BusCore
import Foundation

/// A message at the gate: what a rule may look at.
package struct AdmissionRequest {
    package let kind: MessageKind
    package let peer: PeerID
    package let peerKind: PeerKind
    /// The sender's board, when it is one.
    package let board: ScopedName?
    /// The header's target (a board's id, or empty).
    package let target: String
}

/// A rule that every message must pass before it is routed, on both of the broker's paths.
/// Returns nil to admit; an error refuses the message (answered to its sender when it waits).
package struct AdmissionRule: Sendable {
    package let name: String
    package let check: @Sendable (AdmissionRequest) -> BusError?

    package init(name: String, check: @escaping @Sendable (AdmissionRequest) -> BusError?) {
        self.name = name
        self.check = check
    }
}

extension Motherboard {
    /// What `peer` is, `sender` being its registered board if it has one.
    func peerKind(of peer: PeerID, sender: LiveBoard?) -> PeerKind {
        if sender != nil { return .board }
        if peer == links.uplink { return .uplink }
        if registry.isGateway(peer) { return .gateway }
        return registry.isRetired(peer) ? .retired : .client
    }

    /// The admission gate: the one place where a message is admitted before it is routed, by the
    /// parsed path (``receive(_:from:now:remote:process:)``, which answers the refusal) and the
    /// in-place path (``routeInPlace(_:from:now:)``, which leaves a refused message to the parsed
    /// path). A rule that must hold for every message is written here, once: the broker's own
    /// (a completed instance sends only control, heartbeats and a goodbye; a content type labels commands and replies
    /// only), then ``AccessControl/admissionRules`` in order. `target` is read only when there are rules.
    /// A remote principal's message is then asked of the access policy
    /// (``AccessControl/authorize(_:principal:scope:fromBoard:)``); the in-place path never routes one.
    func admit(
        _ kind: MessageKind, hasContentType: Bool, from peer: PeerID, sender: LiveBoard?, target: () -> String
    ) -> BusError? {
        // Its heartbeats are answered `ended` and a goodbye `Delivery` 0 by their handlers.
        if sender == nil, kind != .control, kind != .heartbeat, kind != .unregister, registry.isRetired(peer) {
            return BusError(.ended, "this board instance has completed")
        }
        if hasContentType, kind != .command, kind != .reply {
            return BusError(.badArgument, "a content type (header field 3) is for commands and replies only; send \(kind) as JSON")
        }
        guard !access.admissionRules.isEmpty else { return nil }
        let request = AdmissionRequest(kind: kind, peer: peer, peerKind: peerKind(of: peer, sender: sender), board: sender?.name, target: target())
        for rule in access.admissionRules {
            if let refusal = rule.check(request) { return refusal }
        }
        return nil
    }
}
