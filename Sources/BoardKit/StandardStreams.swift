import Glibc

/// Writes `text` whole to a standard stream's descriptor (1 or 2): one `write` when the kernel
/// takes it all (on a pipe, a line of up to 4 KiB, `PIPE_BUF`, is then never interleaved with
/// another process's), else more, retrying partial writes and interruptions. Errors are
/// dropped: there is nowhere else to say them.
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
