import BoardInterface

/// The interface of the recorder board (`demo.recorder`): it records, in order, everything that
/// reaches it, so that a person or a test can see what flowed where.
///
/// Arguments: `--from a,b` (run-time flows delivering those boards' outputs here),
/// `--completions-of a,b` (run-time completion flows), `--actions x,y` (action subscriptions).
/// Any activation is recorded too.
public enum RecorderIO {
    public static let id: BoardID = "demo.recorder"

    /// One thing that reached the recorder.
    public struct Entry: BusPayload, Hashable {
        /// `activation`, `flow`, `completion` or `action`.
        public var kind: String
        public var source: String
        public var typeName: String
        /// The payload as JSON text.
        public var payload: String
        public init(kind: String, source: String, typeName: String, payload: String) {
            self.kind = kind
            self.source = source
            self.typeName = typeName
            self.payload = payload
        }
    }

    /// Command `recorded`: everything so far, in arrival order.
    public struct Recorded: BoardCommand, Hashable {
        public static let commandName = "recorded"
        public typealias Reply = Recording
        public init() {}
    }

    /// Reply of ``Recorded``.
    public struct Recording: BusPayload, Hashable {
        public var entries: [Entry]
        public init(entries: [Entry]) { self.entries = entries }

        /// The entries of one kind.
        public func of(_ kind: String) -> [Entry] { entries.filter { $0.kind == kind } }
    }
}

extension RecorderIO {
    /// Command `threads`: where the board process runs its work. It sleeps on each clock, runs a
    /// job on the main actor and a detached task, then lists the process's threads.
    public struct Threads: BoardCommand, Hashable {
        public static let commandName = "threads"
        public typealias Reply = ThreadReport
        /// How long each sleep asks for.
        public var sleepMilliseconds: Int
        public init(sleepMilliseconds: Int) { self.sleepMilliseconds = sleepMilliseconds }
    }

    /// Reply of ``Threads``: thread names as the kernel has them (`/proc/self/task/*/comm`).
    public struct ThreadReport: BusPayload, Hashable {
        /// Every thread of the process, sorted.
        public var threads: [String]
        /// The thread the command's handler started on.
        public var handlerThread: String
        /// Whether the main actor's job ran on the main thread.
        public var mainActorOnMainThread: Bool
        /// The thread a detached task ran on.
        public var detachedThread: String
        /// Whether that task could assume the main actor's isolation (`MainActor.assumeIsolated`).
        public var detachedAssumesMainActor: Bool
        /// Whether a sleep of `UInt64.max` ns or `Int64.max` s, started first, ended before the others.
        public var longestSleepsWoke: Bool
        /// Per way of sleeping (`nanoseconds`, `continuous`, `suspending`): the milliseconds it took.
        public var sleptMilliseconds: [String: Double]
        public init(
            threads: [String], handlerThread: String, mainActorOnMainThread: Bool, detachedThread: String, detachedAssumesMainActor: Bool,
            longestSleepsWoke: Bool,
            sleptMilliseconds: [String: Double]
        ) {
            self.threads = threads
            self.handlerThread = handlerThread
            self.mainActorOnMainThread = mainActorOnMainThread
            self.detachedThread = detachedThread
            self.detachedAssumesMainActor = detachedAssumesMainActor
            self.longestSleepsWoke = longestSleepsWoke
            self.sleptMilliseconds = sleptMilliseconds
        }
    }
}
