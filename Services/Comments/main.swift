import BoardKit
import BoardBusDemoCommentsIO
import Flux
import FluxBus

/// The comments board owns the persistent `comments` store.
let store = CommentsStore(dispatcher: Dispatcher())
var board = Board(id: CommentsIO.id)
let host = try StoreHost(
    name: CommentsIO.store, queryStore: store, persistence: try StorePersistence.forStore(CommentsIO.store, of: board))
host.action(CommentsIO.Reply.self, named: CommentsIO.Reply.name)
host.action(CommentsIO.Delete.self, named: CommentsIO.Delete.name)
board.host(host)
// Activation only starts the board (it may be started on demand); the store is the interface.
board.onAnyActivation { _, _ in }
board.runAsProcess()
