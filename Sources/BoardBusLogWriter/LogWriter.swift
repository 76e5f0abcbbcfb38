import Glibc

/// Writes what one board prints to its log file and rotates the file at its limit, as runit's
/// svlogd and daemontools' multilog do: the board's standard output and error are a pipe, this
/// writer is the pipe's only reader, and it runs as a process of its own (`boardbus-log-writer`,
/// or `motherboard log-writer` where that small executable is missing), started beside the board.
/// It uses the C library only: the process costs a board about 0.7 MB of private memory and one
/// thread.
///
/// Since the writer decides where every byte goes, no file ever holds more than `maximumBytes`
/// and a board's logs never take more than `generations + 1` times the limit, however fast it
/// writes: a board that writes faster than the disk waits on its pipe, as it would on a full
/// terminal. Rotation renames (`log` → `log.1` → … → `log.<generations>`, the oldest removed), so
/// no line is lost to it. A file is cut after a whole line when one fits; a line longer than the
/// limit is cut at the limit, before a UTF-8 character rather than in it.
///
/// The writer outlives the broker (a broker restarted with `kill -9` adopts the board and its
/// writer goes on) and ends when the board's end of the pipe closes: when the board and whatever
/// it started have exited.
public struct LogWriter: Sendable {
    public let path: String
    public let maximumBytes: Int
    public let generations: Int

    public init(path: String, maximumBytes: Int, generations: Int = 3) {
        self.path = path
        self.maximumBytes = max(4096, maximumBytes)
        self.generations = max(1, generations)
    }

    /// Runs as the writer process: ignores the terminal's Ctrl-C and hang-up (they are for the
    /// board; the writer lives as long as the board's output), then copies standard input.
    public func runAsProcess() {
        signal(SIGINT, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        run(input: STDIN_FILENO)
    }

    /// Copies `input` to the log until end of file. A write the disk refuses (full, gone) drops
    /// what it held; the next write that succeeds is preceded by a line saying how much was lost.
    public func run(input: Int32) {
        var file = Output(writer: self)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            file.append(buffer[0..<count])
        }
        file.close()
    }

    /// Where, in `bytes`, to cut so that the first part fits in `room` bytes: after its last
    /// newline; with none, nil when `fileIsEmpty` is false (rotate first), else at `room`, moved
    /// back to the start of a UTF-8 character.
    static func cut(_ bytes: ArraySlice<UInt8>, room: Int, fileIsEmpty: Bool) -> Int? {
        let fitting = bytes.prefix(max(0, room))
        if let newline = fitting.lastIndex(of: UInt8(ascii: "\n")) { return newline + 1 }
        guard fileIsEmpty else { return nil }
        var end = fitting.endIndex
        // A continuation byte (10xxxxxx) at the cut: the character started before it.
        var steps = 0
        while end > fitting.startIndex, steps < 3, bytes[end] & 0xC0 == 0x80 {
            end -= 1
            steps += 1
        }
        return end > fitting.startIndex ? end : fitting.endIndex
    }

    private struct Output {
        let writer: LogWriter
        var descriptor: Int32 = -1
        var size = 0
        var lost = 0
        var lostBecause = ""

        init(writer: LogWriter) {
            self.writer = writer
            open()
            if size > writer.maximumBytes { rotate() }
        }

        mutating func open() {
            descriptor = Glibc.open(writer.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            var info = stat()
            size = descriptor >= 0 && fstat(descriptor, &info) == 0 ? Int(info.st_size) : 0
        }

        mutating func close() {
            if descriptor >= 0 { _ = Glibc.close(descriptor) }
            descriptor = -1
        }

        mutating func rotate() {
            close()
            let base = writer.path
            unlink("\(base).\(writer.generations)")
            for generation in stride(from: writer.generations - 1, through: 1, by: -1) {
                rename("\(base).\(generation)", "\(base).\(generation + 1)")
            }
            rename(base, "\(base).1")
            open()
        }

        mutating func append(_ bytes: ArraySlice<UInt8>) {
            if descriptor < 0 { open() }
            if lost > 0, descriptor >= 0 {
                let note = Array("boardbus log-writer: \(lost) bytes of this board's output were lost (\(lostBecause))\n".utf8)
                lost = 0
                place(note[...])
            }
            place(bytes)
        }

        private mutating func place(_ bytes: ArraySlice<UInt8>) {
            var pending = bytes
            while !pending.isEmpty {
                let room = writer.maximumBytes - size
                if pending.count <= room {
                    write(pending)
                    return
                }
                if let end = LogWriter.cut(pending, room: room, fileIsEmpty: size == 0) {
                    write(pending[..<end])
                    pending = pending[end...]
                }
                rotate()
            }
        }

        private mutating func write(_ bytes: ArraySlice<UInt8>) {
            var offset = bytes.startIndex
            while offset < bytes.endIndex, descriptor >= 0 {
                let written = bytes[offset...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else {
                    lostBecause = written < 0 ? String(cString: strerror(errno)) : "nothing written"
                    break
                }
                offset += written
                size += written
            }
            if descriptor < 0 { lostBecause = "cannot open \(writer.path)" }
            lost += bytes.endIndex - offset
        }
    }
}
