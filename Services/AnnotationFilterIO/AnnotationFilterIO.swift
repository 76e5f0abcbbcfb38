import BoardInterface
import Flux

/// The interface of the annotation filter board (`demo.annotations`), which owns the Flux store
/// `annotationFilter` (the PlanGrid example: a state struct, a toggle action, `isFiltering`).
public enum AnnotationFilterIO {
    public static let id: BoardID = "demo.annotations"
    public static let store = "annotationFilter"

    public struct State: Codable, Sendable, Hashable {
        /// Enabled filters, sorted.
        public var filters: [String] = []
        /// Whether any filter is on.
        public var isFiltering = false
        public init() {}
    }

    /// Action `toggle`: turns a filter on or off.
    public struct Toggle: Action, Codable, Hashable {
        public static let name = "toggle"
        public var filter: String
        public init(filter: String) { self.filter = filter }
    }
}
