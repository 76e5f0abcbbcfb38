import BusCore
import CBoardBusZeroMQ
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

extension CurveKeyPair {
    /// A new key pair from libzmq (`zmq_curve_keypair`, which draws from the system's generator).
    package static func generate(name: String? = nil) throws -> CurveKeyPair {
        guard ZMQCurve.isAvailable else { throw ZMQCurve.unavailable }
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        guard zmq_curve_keypair(&publicKey, &secretKey) == 0 else { throw ZMQContext.lastError("zmq_curve_keypair") }
        return try CurveKeyPair(
            publicKey: String(decoding: publicKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self),
            secretKey: String(decoding: secretKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self), name: name)
    }

    /// The key pair in `path`, or a new one written there (mode 0600) when there is no file yet.
    package static func loadOrCreate(path: String, name: String? = nil) throws -> (keys: CurveKeyPair, created: Bool) {
        if FileManager.default.fileExists(atPath: path) {
            let keys = try load(path: path)
            guard let secretKey = keys.secretKey else { throw BusError(.badArgument, "key file \(path) has no secret-key") }
            // A public key that is not the secret key's would be handed to clients, whose
            // handshakes would then fail without a word: the file is refused instead.
            var derived = [CChar](repeating: 0, count: 41)
            guard zmq_curve_public(&derived, secretKey) == 0,
                String(decoding: derived.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self) == keys.publicKey
            else { throw BusError(.badArgument, "key file \(path): its public-key is not its secret-key's") }
            return (keys, false)
        }
        let keys = try generate(name: name)
        try keys.writeSecret(to: path)
        return (keys, true)
    }
}

/// libzmq's CURVE support.
package enum ZMQCurve {
    /// Whether this libzmq was built with CURVE (`zmq_has("curve")`; Debian's is).
    package static var isAvailable: Bool { zmq_has("curve") != 0 }

    static let unavailable = BusError(.transport, "this libzmq has no CURVE support (zmq_has(\"curve\") is 0)")

    /// A 32-byte key in Z85 text.
    static func z85(_ key: Data) -> String? {
        guard key.count == 32 else { return nil }
        var text = [CChar](repeating: 0, count: 41)
        let done = key.withUnsafeBytes { bytes in
            zmq_z85_encode(&text, bytes.bindMemory(to: UInt8.self).baseAddress, 32) != nil
        }
        return done ? String(decoding: text.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }
}

/// A ZAP handler (ZeroMQ RFC 27) for one context: every CURVE (and, on a socket with a ZAP domain,
/// NULL) handshake on that context's sockets is put to `decide`, on a thread of its own, before
/// the connection is accepted. `decide` gets the mechanism, the peer's address and, for CURVE, its
/// public key (Z85); it returns the name to accept the peer under (its `User-Id`), or nil to refuse.
package final class ZAPHandler: @unchecked Sendable {
    package struct Request: Sendable {
        package var domain: String
        package var address: String
        package var mechanism: String
        /// The client's public key (Z85) for CURVE.
        package var publicKey: String?
    }

    private let socket: ZMQSocket
    private let running = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)

    /// Binds `inproc://zeromq.zap.01` in `context` and starts answering. Must be made before the
    /// sockets it guards bind. (Handshakes that fail before ZAP is asked, a peer without CURVE or
    /// with another server key, are seen by a ``ConnectionWatch``.)
    package init(context: ZMQContext, decide: @escaping @Sendable (Request) -> String?) throws {
        socket = try ZMQSocket(context: context, kind: .reply)
        do {
            try socket.set(.linger(.zero))
            try socket.bind("inproc://zeromq.zap.01")
        } catch {
            socket.close()
            throw error
        }
        startThread(named: "zap") { [self] in
            while running.load(ordering: .acquiring) {
                if ZMQSocket.poll([socket], timeoutMilliseconds: 100)[0], let frames = try? socket.receive() {
                    _ = try? socket.send(Self.answer(frames, decide: decide))
                }
            }
            socket.close()
            finished.signal()
        }
    }

    /// The reply to one request: version, request id, status code, status text, user id, metadata.
    static func answer(_ frames: [Data], decide: (Request) -> String?) -> [Data] {
        func text(_ index: Int) -> String { index < frames.count ? String(decoding: frames[index], as: UTF8.self) : "" }
        let requestID = frames.count > 1 ? frames[1] : Data()
        guard frames.count >= 6, text(0) == "1.0" else {
            return [Data("1.0".utf8), requestID, Data("500".utf8), Data("malformed ZAP request".utf8), Data(), Data()]
        }
        let mechanism = text(5)
        let request = Request(
            domain: text(2), address: text(3), mechanism: mechanism,
            publicKey: mechanism == "CURVE" && frames.count > 6 ? ZMQCurve.z85(frames[6]) : nil)
        if let user = decide(request) {
            return [Data("1.0".utf8), requestID, Data("200".utf8), Data("OK".utf8), Data(user.utf8), metadata(publicKey: request.publicKey)]
        }
        return [Data("1.0".utf8), requestID, Data("400".utf8), Data("key not allowed".utf8), Data(), Data()]
    }

    /// The property every message of an accepted CURVE connection carries with its key (Z85):
    /// one name may have several keys, and a key removed under a name that stays is told apart
    /// by it.
    package static let curveKeyProperty = "X-Curve-Key"

    /// The ZAP reply's metadata (ZMTP's property list: a name's length in one byte, the name, the
    /// value's length in four bytes big-endian, the value): the CURVE key, if any.
    static func metadata(publicKey: String?) -> Data {
        guard let publicKey else { return Data() }
        var bytes = [UInt8(curveKeyProperty.utf8.count)] + Array(curveKeyProperty.utf8)
        withUnsafeBytes(of: UInt32(publicKey.utf8.count).bigEndian) { bytes += $0 }
        return Data(bytes + Array(publicKey.utf8))
    }

    /// Stops the thread and closes the socket (before the context is terminated).
    package func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        finished.wait()
    }
}
