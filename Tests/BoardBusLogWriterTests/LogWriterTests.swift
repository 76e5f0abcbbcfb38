import BoardKitTesting
import Foundation
import Testing

@testable import BoardBusLogWriter

/// The log writer behind every board: whatever and however fast a board writes, no file passes
/// the limit, no line is lost to a rotation, and a cut never splits a UTF-8 character.
@Suite("Log writer")
struct LogWriterTests {
    /// Runs a writer on a pipe, feeds it `chunks` from another thread, and returns when it ends.
    private func write(_ chunks: [[UInt8]], to writer: LogWriter) async {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        let feeding = Thread {
            for chunk in chunks {
                var offset = 0
                while offset < chunk.count {
                    let written = chunk[offset...].withUnsafeBytes { Glibc.write(writeEnd, $0.baseAddress, $0.count) }
                    guard written > 0 else { break }
                    offset += written
                }
            }
            close(writeEnd)
        }
        feeding.start()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread {
                writer.run(input: readEnd)
                close(readEnd)
                done.resume()
            }.start()
        }
    }

    /// The files of a log, oldest first (`.3`, `.2`, `.1`, the log itself).
    private func files(_ path: String, generations: Int) -> [(name: String, data: [UInt8])] {
        let names = stride(from: generations, through: 1, by: -1).map { "\(path).\($0)" } + [path]
        return names.compactMap { name in FileManager.default.contents(atPath: name).map { (name, [UInt8]($0)) } }
    }

    @Test func aFastWriterNeverTakesAFilePastTheLimitAndNoLineIsLostToARotation() async throws {
        try await withTemporaryDirectory("log-writer") { directory in
            let path = "\(directory)/demo.chatty.log"
            let limit = 64 * 1024
            // 8 MiB of numbered lines of varying length, written in chunks that cut lines anywhere.
            var text = [UInt8]()
            var number = 0
            while text.count < 8 << 20 {
                text += Array("line \(number) \(String(repeating: "x", count: number % 300))\n".utf8)
                number += 1
            }
            let chunks = stride(from: 0, to: text.count, by: 7919).map { Array(text[$0..<min(text.count, $0 + 7919)]) }
            await write(chunks, to: LogWriter(path: path, maximumBytes: limit))
            let kept = files(path, generations: 3)
            #expect(kept.count == 4)
            for file in kept {
                #expect(file.data.count <= limit, "\(file.name) holds \(file.data.count) bytes")
            }
            // What the four files hold together is exactly the end of what was written.
            let together = kept.flatMap(\.data)
            #expect(together.count > 3 * limit)
            #expect(Array(text.suffix(together.count)) == together)
            #expect(!FileManager.default.fileExists(atPath: "\(path).4"))
        }
    }

    @Test func aLineLongerThanTheLimitIsCutBeforeACharacterNotInIt() async throws {
        try await withTemporaryDirectory("log-writer") { directory in
            let path = "\(directory)/demo.long.log"
            // 3- and 2-byte characters, so that the limit falls inside one at some cut.
            let line = Array((String(repeating: "€é", count: 3000) + "\n").utf8)
            await write([line], to: LogWriter(path: path, maximumBytes: 4096, generations: 5))
            let kept = files(path, generations: 5)
            #expect(kept.count == 4)
            for file in kept {
                #expect(file.data.count <= 4096)
                #expect(String(validating: file.data, as: UTF8.self) != nil, "\(file.name) has a character cut in two")
            }
            #expect(kept.flatMap(\.data) == line)
        }
    }

    @Test func aLogAlreadyPastTheLimitIsRotatedBeforeAnythingIsAdded() async throws {
        try await withTemporaryDirectory("log-writer") { directory in
            let path = "\(directory)/demo.old.log"
            let old = Data(repeating: UInt8(ascii: "o"), count: 10_000) + Data("\n".utf8)
            #expect(FileManager.default.createFile(atPath: path, contents: old))
            await write([Array("new\n".utf8)], to: LogWriter(path: path, maximumBytes: 4096))
            #expect(FileManager.default.contents(atPath: path) == Data("new\n".utf8))
            #expect(FileManager.default.contents(atPath: "\(path).1") == old)
        }
    }

    @Test func cutsFallAfterTheLastWholeLineThatFits() {
        let bytes = ArraySlice(Array("ab\ncd\nef".utf8))
        #expect(LogWriter.cut(bytes, room: 7, fileIsEmpty: false) == 6)
        #expect(LogWriter.cut(bytes, room: 2, fileIsEmpty: false) == nil)
        #expect(LogWriter.cut(bytes, room: 2, fileIsEmpty: true) == 2)
        // "é" is C3 A9: a cut at 1 would split it; at 0 nothing would fit, so it stays at 1.
        let accented = ArraySlice(Array("aé".utf8))
        #expect(LogWriter.cut(accented, room: 2, fileIsEmpty: true) == 1)
    }
}
