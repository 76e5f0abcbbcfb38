import BusCore
import Foundation

/// What a typed handler's payload coding costs per message, without sockets: the echo board's
/// decode and encode of its `Echo` struct, in JSON and in CBOR.
enum CodecBench {
    struct Echo: Codable { var data: String }

    /// Nanoseconds per decode + encode of an echo payload of about `bytes` bytes, in `format`.
    static func decodeAndEncode(bytes: Int, format: PayloadFormat, iterations: Int) throws -> Double {
        let payload = try PayloadCodec.encode(PayloadCodec.decode(Echo.self, from: echoPayload(bytes: bytes)), format: format)
        var size = 0
        let start = monotonicNanoseconds()
        for _ in 0..<iterations {
            size &+= try PayloadCodec.encode(PayloadCodec.decode(Echo.self, from: payload, format: format), format: format).count
        }
        let elapsed = Double(monotonicNanoseconds() - start) / Double(iterations)
        precondition(size > 0)
        return elapsed
    }

    static func run(iterations: Int) throws {
        for bytes in ProcessInfo.processInfo.environment["CODEC_SIZE"].flatMap { Int($0) }.map { [$0] } ?? [100, 65_536] {
            for format in PayloadFormat.allCases {
                let count = bytes > 1000 ? max(1, iterations / 100) : iterations
                let nanoseconds = try decodeAndEncode(bytes: bytes, format: format, iterations: count)
                print("decode + encode \(bytes) B echo, \(format.rawValue): \(Int(nanoseconds)) ns")
                let payload = try PayloadCodec.encode(PayloadCodec.decode(Echo.self, from: echoPayload(bytes: bytes)), format: format)
                let value = try PayloadCodec.decode(Echo.self, from: payload, format: format)
                var start = monotonicNanoseconds()
                for _ in 0..<count { _ = try PayloadCodec.decode(Echo.self, from: payload, format: format) }
                print("  decode \((monotonicNanoseconds() - start) / UInt64(count)) ns")
                start = monotonicNanoseconds()
                for _ in 0..<count { _ = try PayloadCodec.encode(value, format: format) }
                print("  encode \((monotonicNanoseconds() - start) / UInt64(count)) ns")
            }
        }
    }
}
