import Foundation
import Logging
import Testing

@testable import MotherboardDaemon

/// The audit log in the state directory: rotated before it passes its limit, and each principal
/// within its rate, so that one key granted `control status` neither fills the disk (it wrote
/// 0.74 MB/s) nor rotates another principal's lines away.
@Suite("Audit log")
struct AuditLogTests {
    let directory: String
    init() throws {
        directory = NSTemporaryDirectory() + "boardbus-audit-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func lines(_ name: String) -> [Substring] {
        ((try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)) ?? "").split(separator: "\n")
    }

    @Test func aNoisyPrincipalIsHeldToItsRateAndAnotherStillWrites() {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = AuditLog(path: "\(directory)/audit.log", logger: Logger(label: "test"))
        let start = ContinuousClock.now
        for _ in 0..<10_000 { log.write(principal: "noisy", "noisy control status (grant)", now: start) }
        log.write(principal: "quiet", "quiet control restart (grant)", now: start)
        #expect(lines("audit.log").filter { $0.contains("noisy control") }.count == Int(AuditLog.burst))
        #expect(lines("audit.log").filter { $0.contains("quiet control") }.count == 1)
        // A second later: ten more, after a line saying how many were not written.
        for _ in 0..<100 { log.write(principal: "noisy", "noisy control status (grant)", now: start + .seconds(1)) }
        let written = lines("audit.log")
        #expect(written.filter { $0.contains("noisy control") }.count == Int(AuditLog.burst + AuditLog.linesPerSecond))
        #expect(written.contains { $0.contains("noisy audit: 9950 line(s) not written") })
    }

    @Test func theFileIsRotatedBeforeItPassesItsLimit() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = AuditLog(path: "\(directory)/audit.log", maximumBytes: 4_096, generations: 2, logger: Logger(label: "test"))
        let start = ContinuousClock.now
        for second in 0..<200 {
            for _ in 0..<10 { log.write(principal: "key\(second % 7)", "key control status (grant)", now: start + .seconds(second)) }
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(names == ["audit.log", "audit.log.1", "audit.log.2"])
        for name in names {
            let size = try #require(try FileManager.default.attributesOfItem(atPath: "\(directory)/\(name)")[.size] as? Int)
            #expect(size <= 4_096, "\(name): \(size)")
        }
    }
}
