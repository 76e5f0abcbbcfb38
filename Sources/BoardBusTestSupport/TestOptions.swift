import Glibc

/// Tests that `scripts/test` leaves out unless asked, by environment variable.
public enum TestOptions {
    /// `BOARDBUS_CANARIES=1`: the canaries that check a third-party bug still reproduces (libzmq
    /// 4.3's ping aborts). Whether such a bug shows within a test's time depends on the machine's
    /// load, so they are no part of the gate.
    public static var canaries: Bool { flag("BOARDBUS_CANARIES") }

    static func flag(_ name: String) -> Bool {
        guard let value = getenv(name) else { return false }
        return String(cString: value) == "1"
    }
}
