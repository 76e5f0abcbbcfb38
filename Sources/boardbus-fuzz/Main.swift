import Foundation

/// `boardbus-fuzz NAME [FILE|DIR…]`: runs harness NAME (header, cbor, json, mdp, route, policy, allowlist, manifest, keyfile, monitor, nats, journal).
///
/// Built normally, it replays the inputs in the files and directories given (the corpora and
/// crash fixtures, in `scripts/test`). Built with `-sanitize=fuzzer,address -D BOARDBUS_FUZZ`
/// (`scripts/fuzz`), it is a libFuzzer target: the rest of the command line is libFuzzer's.
@main
enum FuzzCommand {
    static func main() {
        var arguments = CommandLine.arguments
        // The harness is named first; libFuzzer's own child processes (-merge, -fork) are started
        // with libFuzzer's arguments alone, so they find it in the environment this one sets.
        let name: String
        if arguments.count >= 2, Harnesses.all[arguments[1]] != nil {
            name = arguments.remove(at: 1)
        } else if let inherited = ProcessInfo.processInfo.environment["BOARDBUS_FUZZ_HARNESS"], Harnesses.all[inherited] != nil {
            name = inherited
        } else {
            FileHandle.standardError.write(Data("usage: boardbus-fuzz \(Harnesses.all.keys.sorted().joined(separator: "|")) [FILE|DIR…]\n".utf8))
            exit(2)
        }
        setenv("BOARDBUS_FUZZ_HARNESS", name, 1)
        let harness = Harnesses.all[name]!
        Current.harness = harness
        #if BOARDBUS_FUZZ
            exit(runLibFuzzer(arguments))
        #else
            var inputs = 0
            for path in arguments.dropFirst() {
                for file in files(at: path) {
                    guard let data = FileManager.default.contents(atPath: file) else { continue }
                    harness(data)
                    inputs += 1
                }
            }
            print("\(name): \(inputs) input(s) replayed")
        #endif
    }

    /// The files at `path`: itself, or those in it (sorted).
    static func files(at path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return [] }
        guard isDirectory.boolValue else { return [path] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { "\(path)/\($0)" }
    }
}

/// The harness libFuzzer's callback runs (set once, before the driver starts).
enum Current {
    nonisolated(unsafe) static var harness: @Sendable (Data) -> Void = { _ in }
}

#if BOARDBUS_FUZZ
    @_silgen_name("LLVMFuzzerRunDriver")
    private func runDriver(
        _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt

    /// libFuzzer's entry for each input (its runtime names it even when the driver is given a callback).
    @_cdecl("LLVMFuzzerTestOneInput")
    func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
        Current.harness(data.map { Data(bytes: $0, count: size) } ?? Data())
        return 0
    }

    private func runLibFuzzer(_ arguments: [String]) -> CInt {
        var pointers: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        var count = CInt(arguments.count)
        return pointers.withUnsafeMutableBufferPointer { buffer in
            var base = buffer.baseAddress
            return runDriver(&count, &base, testOneInput)
        }
    }
#endif
