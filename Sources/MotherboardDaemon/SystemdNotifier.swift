import BusCore
import MotherboardCore
import Foundation

/// The service manager's notify protocol (`sd_notify(3)`), spoken when `NOTIFY_SOCKET` is set:
/// `READY=1` once the fleet's always-on boards are all registered, `STATUS=` lines as that
/// changes, `WATCHDOG=1` at half of `WATCHDOG_USEC` (from the routing loop's tick, so a stuck
/// loop stops the pings and systemd restarts the broker), and `STOPPING=1` on shutdown. Each is
/// one datagram on the AF_UNIX socket the variable names (`@` for the abstract namespace).
/// Sends never block; a lost datagram is not retried.
public final class SystemdNotifier: @unchecked Sendable {
    private let descriptor: Int32
    private var address = sockaddr_un()
    private let addressLength: socklen_t
    /// Half the watchdog interval, when systemd asked for pings (and for this process).
    public let watchdogInterval: Duration?
    // Touched on the loop thread only.
    private var lastWatchdog: ContinuousClock.Instant?
    private var lastStatus: String?
    private(set) var isReady = false

    /// Nil when `NOTIFY_SOCKET` is not set (not run by a service manager) or not usable.
    public init?(environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty, path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            return nil
        }
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }  // abstract namespace
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in bytes.enumerated() { buffer[index] = byte }
        }
        addressLength = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let forUs = environment["WATCHDOG_PID"].map { Int32($0) == getpid() } ?? true
        if forUs, let text = environment["WATCHDOG_USEC"], let microseconds = Int64(text), microseconds > 0 {
            watchdogInterval = .microseconds(microseconds / 2)
        } else {
            watchdogInterval = nil
        }
    }

    deinit { close(descriptor) }

    /// Sends one notification (lines `KEY=value`).
    @discardableResult
    public func notify(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                sendto(descriptor, bytes, bytes.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL), socketAddress, addressLength) == bytes.count
            }
        }
    }

    /// Per tick of the routing loop: readiness and status from the always-on boards live, and the
    /// watchdog ping when due.
    func tick(live: Int, expected: Int, now: ContinuousClock.Instant) {
        let status =
            live >= expected ? "fleet ready: \(live) always-on board(s) running" : "starting: \(live) of \(expected) always-on board(s) running"
        if !isReady, live >= expected {
            isReady = true
            lastStatus = status
            notify("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())")
        } else if status != lastStatus {
            lastStatus = status
            notify("STATUS=\(status)")
        }
        if let watchdogInterval, lastWatchdog.map({ $0.duration(to: now) >= watchdogInterval }) ?? true {
            lastWatchdog = now
            notify("WATCHDOG=1")
        }
    }
}
