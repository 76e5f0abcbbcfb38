import Foundation

/// The CPU time each thread of some processes used, from `/proc/<pid>/task/*/stat` (user +
/// system, in clock ticks), and how often each went to sleep or was put off the CPU (its
/// context switches, from `/proc/<pid>/task/*/status`): for `load` and `load-baseline`,
/// which print both per round trip, by process and thread name, so that a profile's "who is
/// busy" comes with a figure, and how many messages a thread handles per wake-up with another.
struct ThreadCPU {
    /// (process label, thread name) → ticks, threads of the same name added up.
    private(set) var ticks: [Key: Int] = [:]
    /// (process label, thread name) → voluntary + involuntary context switches, the same way.
    private(set) var switches: [Key: Int] = [:]

    struct Key: Hashable, Comparable {
        var process: String
        var thread: String
        static func < (lhs: Key, rhs: Key) -> Bool { (lhs.process, lhs.thread) < (rhs.process, rhs.thread) }
    }

    /// A sample of every thread of `processes` (label and pid) now.
    init(_ processes: [(label: String, pid: Int32)]) {
        for (label, pid) in processes {
            // The process's own line counts threads that have ended too (the load's connections
            // close before the second sample); the thread name "" stands for it.
            if let (_, total) = Self.read("/proc/\(pid)/stat") { ticks[Key(process: label, thread: "")] = total }
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            for task in tasks {
                guard let (name, used) = Self.read("/proc/\(pid)/task/\(task)/stat") else { continue }
                ticks[Key(process: label, thread: name), default: 0] += used
                switches[Key(process: label, thread: name), default: 0] += Self.contextSwitches("/proc/\(pid)/task/\(task)/status")
            }
        }
    }

    /// The name and the user + system ticks of a `stat` file.
    private static func read(_ path: String) -> (name: String, ticks: Int)? {
        guard let stat = try? String(contentsOfFile: path, encoding: .utf8), let open = stat.firstIndex(of: "("),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // After the name: the state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return (String(stat[stat.index(after: open)..<close]), user + system)
    }

    /// The `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of a `status` file, added.
    private static func contextSwitches(_ path: String) -> Int {
        guard let status = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        return status.split(separator: "\n").reduce(0) { total, line in
            guard line.contains("ctxt_switches:"),
                let value = line.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) })
            else { return total }
            return total + value
        }
    }

    /// Context switches per round trip between two samples, by thread (the threads that live
    /// through the load; not for the bench's own client, whose connections' threads end with it).
    static func switchesPerRoundTrip(from start: ThreadCPU, to end: ThreadCPU, roundTrips: Double, skipping: Set<String> = []) -> String {
        let processes = Set(end.switches.keys.map(\.process)).subtracting(skipping).sorted()
        return processes.map { process in
            let threads = end.switches.keys.filter { $0.process == process }.map { key in
                (key.thread, Double((end.switches[key] ?? 0) - (start.switches[key] ?? 0)) / max(roundTrips, 1))
            }
            let parts = threads.filter { $0.1 >= 0.005 }.sorted { $0.1 > $1.1 }.map { String(format: "%@ %.3f", $0.0, $0.1) }
            return String(format: "  %@ (%@)", process, parts.joined(separator: ", "))
        }.joined(separator: "\n")
    }

    /// Microseconds of CPU per round trip between two samples, by process and thread, busiest
    /// first within each process; threads that used almost nothing are left out.
    ///
    /// For the processes in `connections` (the bench's own, whose connections' threads start
    /// with the load and end before the second sample, some of them already gone), every thread
    /// but libzmq's I/O thread is shown as one: "connections".
    static func perRoundTrip(from start: ThreadCPU, to end: ThreadCPU, roundTrips: Double, connections: Set<String> = []) -> String {
        let microsecondsPerTick = 1e6 / Double(sysconf(Int32(_SC_CLK_TCK)))
        func micros(_ key: Key) -> Double {
            Double((end.ticks[key] ?? 0) - (start.ticks[key] ?? 0)) * microsecondsPerTick / max(roundTrips, 1)
        }
        let processes = Set(end.ticks.keys.map(\.process)).sorted()
        return processes.map { process in
            var threads = end.ticks.keys.filter { $0.process == process && !$0.thread.isEmpty }.map { ($0.thread, micros($0)) }
            var total = threads.reduce(0) { $0 + $1.1 }
            if connections.contains(process) {
                // The process's line, not the sum of its threads: it counts those that ended.
                total = micros(Key(process: process, thread: ""))
                threads = threads.filter { $0.0.hasPrefix("ZMQbg") }
                threads.append(("connections", total - threads.reduce(0) { $0 + $1.1 }))
            }
            let parts = threads.filter { $0.1 >= 0.05 }.sorted { $0.1 > $1.1 }.map { String(format: "%@ %.2f", $0.0, $0.1) }
            return String(format: "  %@ %.2f (%@)", process, total, parts.joined(separator: ", "))
        }.joined(separator: "\n")
    }
}
