import BusCore
import Foundation

/// How the broker's logic sends messages. The ZeroMQ ROUTER implements it in production, an
/// in-memory recorder in unit tests.
public protocol MotherboardTransport: AnyObject {
    /// Sends without blocking. Returns false when the peer is gone or its queue is full.
    func send(_ envelope: Envelope, to peer: PeerID) -> Bool
    /// Whether the peer is still connected (after a failed send: gone, or only full?).
    func isConnected(_ peer: PeerID) -> Bool
    /// Whether sends to the peer are refused because it does not read what it was sent (after
    /// a failed send: a live but slow peer, not one to drop).
    func isBacklogged(_ peer: PeerID) -> Bool
}

extension MotherboardTransport {
    public func isBacklogged(_ peer: PeerID) -> Bool { false }
}
