import BoardInterface
import Flux

/// The interface of the comments board (`demo.comments`), which owns the persistent Flux store
/// `comments` (the WordPressFlux example: comments per post, delete and reply, a fetching state,
/// queries by post).
public enum CommentsIO {
    public static let id: BoardID = "demo.comments"
    public static let store = "comments"

    public struct Comment: Codable, Sendable, Hashable {
        public var id: Int
        public var parent: Int
        public var content: String
        public init(id: Int, parent: Int, content: String) {
            self.id = id
            self.parent = parent
            self.content = content
        }
    }

    /// The store's state. Keys are post ids written as strings (JSON object keys).
    public struct State: Codable, Sendable, Hashable {
        public var comments: [String: [Comment]] = [:]
        public var fetching: [String: Bool] = [:]
        /// Posts some board holds a query on, ascending.
        public var queriedPosts: [Int] = []
        public var nextID = 1
        public init() {}
    }

    /// Action `delete`.
    public struct Delete: Action, Codable, Hashable {
        public static let name = "delete"
        public var postID: Int
        public var id: Int
        public init(postID: Int, id: Int) {
            self.postID = postID
            self.id = id
        }
    }

    /// Action `reply`.
    public struct Reply: Action, Codable, Hashable {
        public static let name = "reply"
        public var postID: Int
        public var parent: Int
        public var content: String
        public init(postID: Int, parent: Int, content: String) {
            self.postID = postID
            self.parent = parent
            self.content = content
        }
    }

    /// A query: the comments of one post.
    public struct PostQuery: Codable, Sendable, Hashable {
        public var postID: Int
        public init(postID: Int) { self.postID = postID }
    }
}
