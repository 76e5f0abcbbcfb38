import Glibc

/// Writes `text` whole to a standard stream's descriptor (1 or 2), as one `write` where the
/// kernel takes it all (a line from two processes on one pipe is not interleaved), retrying
/// partial writes and interruptions. Errors are dropped: there is nowhere else to say them.
func writeLine(_ text: String, to descriptor: Int32) {
    var bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeMutableBytes { Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
        if written > 0 {
            offset += written
        } else if written < 0 && errno == EINTR {
            continue
        } else {
            return
        }
    }
}
