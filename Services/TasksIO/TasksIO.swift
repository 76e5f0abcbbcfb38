import BoardInterface

/// The interface of the block-task boards (`demo.tasks`, one per execution mode in tests).
public enum TasksIO {
    /// Input: a job that takes `millis` milliseconds.
    public struct Job: BusPayload, Hashable {
        public var tag: String
        public var millis: Int
        public init(tag: String, millis: Int) {
            self.tag = tag
            self.millis = millis
        }
    }

    /// Output: a job finished.
    public struct Done: BusPayload, Hashable {
        public var tag: String
        public init(tag: String) { self.tag = tag }
    }
}
