import BusCore

extension Motherboard {
    /// Peers whose connection closed (the daemon tells, from the connection's descriptor): what
    /// the broker kept for them goes — their store subscriptions, the requests and acknowledged
    /// actions they wait for, their monitors. A registered board is left to its own liveness
    /// (its process's end or its heartbeats), and so are the gateways' shared connections.
    package func peersLeft(_ peers: [PeerID]) {
        for peer in peers where registry.board(for: peer) == nil && !registry.isGateway(peer) && peer != links.uplink && peer != links.exporter {
            let subscriptions = subscriptions.count(of: peer)
            self.subscriptions.removeAll(of: peer)
            let requests = replies.takeAll(waitedForBy: peer).count
            if monitors.contains(peer) {
                monitors.remove(peer)
                logger.info("monitor detached: its connection is gone", metadata: ["peer": "\(label(peer))"])
            }
            counters.peersLeft += 1
            if subscriptions > 0 || requests > 0 {
                logger.debug(
                    "a connection closed: what it held is freed", metadata: ["subscriptions": "\(subscriptions)", "requests": "\(requests)"])
            }
        }
    }
}
