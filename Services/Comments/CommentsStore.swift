import BoardBusDemoCommentsIO
import Flux
import Foundation

/// The WordPressFlux comments store: state per post, delete and reply actions, and queries by
/// post that make the store "fetch" that post's comments.
final class CommentsStore: QueryStore<CommentsIO.State, CommentsIO.PostQuery>, @unchecked Sendable {
    init(dispatcher: Dispatcher) {
        super.init(initialState: CommentsIO.State(), dispatcher: dispatcher)
    }

    override func onDispatch(_ action: any Action) throws {
        switch action {
        case let reply as CommentsIO.Reply:
            guard !reply.content.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { throw Refusal("a comment needs content") }
            if reply.parent != 0, state.comments[String(reply.postID)]?.contains(where: { $0.id == reply.parent }) != true {
                throw Refusal("post \(reply.postID) has no comment \(reply.parent) to reply to")
            }
            transaction { state in
                state.comments[String(reply.postID), default: []].append(
                    CommentsIO.Comment(id: state.nextID, parent: reply.parent, content: reply.content))
                state.nextID += 1
            }
        case let delete as CommentsIO.Delete:
            guard let index = state.comments[String(delete.postID)]?.firstIndex(where: { $0.id == delete.id }) else { return }
            state.comments[String(delete.postID)]?.remove(at: index)
        default:
            break
        }
    }

    /// Runs when the set of active queries changes (not on state changes): posts newly queried
    /// are fetched, which shows as `fetching` and then as their comments.
    override func queriesChanged() {
        let posts = Set(activeQueries.map(\.postID)).sorted()
        let toFetch = posts.filter { state.comments[String($0)] == nil }
        transaction { state in
            state.queriedPosts = posts
            for post in toFetch { state.fetching[String(post)] = true }
        }
        guard !toFetch.isEmpty else { return }
        // The "network" answers at once here; the fetching state was published first.
        transaction { state in
            for post in toFetch {
                state.comments[String(post)] = [CommentsIO.Comment(id: state.nextID, parent: 0, content: "first comment on post \(post)")]
                state.nextID += 1
                state.fetching[String(post)] = false
            }
        }
    }
}
