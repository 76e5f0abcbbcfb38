import BoardKit
import CommentsIO
import Flux
import FluxBus

/// The comments board owns the persistent `comments` store.
let store = CommentsStore(dispatcher: Dispatcher())
var board = Board(id: CommentsIO.id)
let remote = try RemoteStore(
    name: CommentsIO.store, queryStore: store, persistence: try StorePersistence.forStore(CommentsIO.store, board: board.id))
remote.action(CommentsIO.Reply.self, named: CommentsIO.Reply.name)
remote.action(CommentsIO.Delete.self, named: CommentsIO.Delete.name)
board.host(remote)
// Activation only starts the board (it may be started on demand); the store is the interface.
board.onAnyActivation { _, _ in }
try await board.run()
