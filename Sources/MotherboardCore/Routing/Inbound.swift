import BusCore

/// One message as it reaches the broker's handlers: the connection it came on, the board it comes
/// from (nil: a client), the remote principal it acts for (nil: a local peer) and when.
package struct Inbound {
    package let peer: PeerID
    let sender: LiveBoard?
    package let principal: String?
    package let now: ContinuousClock.Instant
}
