import BusCore
import Foundation

/// What a typed handler's payload coding costs per message, without sockets: the echo board's
/// decode and encode of its `Echo` struct, in JSON and in CBOR.
enum CodecBench {
    struct Echo: Codable { var data: String }

    /// Nanoseconds per decode and per encode of an echo payload of about `bytes` bytes.
    static func costs(bytes: Int, format: PayloadFormat, iterations: Int) throws -> (decode: Double, encode: Double) {
        let value = try PayloadCodec.decode(Echo.self, from: echoPayload(bytes: bytes))
        let payload = try PayloadCodec.encode(value, format: format)
        var size = 0
        var start = monotonicNanoseconds()
        for _ in 0..<iterations { size &+= try PayloadCodec.decode(Echo.self, from: payload, format: format).data.utf8.count }
        let decode = Double(monotonicNanoseconds() - start) / Double(iterations)
        start = monotonicNanoseconds()
        for _ in 0..<iterations { size &+= try PayloadCodec.encode(value, format: format).count }
        let encode = Double(monotonicNanoseconds() - start) / Double(iterations)
        precondition(size > 0)
        return (decode, encode)
    }

    static func run(iterations: Int) throws {
        for bytes in [100, 65_536] {
            for format in PayloadFormat.allCases {
                let (decode, encode) = try costs(bytes: bytes, format: format, iterations: bytes > 1000 ? max(1, iterations / 100) : iterations)
                print("\(bytes) B echo payload, \(format.rawValue): decode \(Int(decode)) ns, encode \(Int(encode)) ns")
            }
        }
    }
}
