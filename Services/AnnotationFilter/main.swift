import BoardBusDemoAnnotationFilterIO
import BoardKit
import Flux
import FluxBus

/// PlanGrid's annotation filter: the state changes only through the toggle handler.
final class AnnotationFilterStore: StatefulStore<AnnotationFilterIO.State>, @unchecked Sendable {
    init(dispatcher: Dispatcher) {
        super.init(initialState: AnnotationFilterIO.State(), dispatcher: dispatcher)
    }

    override func onDispatch(_ action: any Action) {
        guard let toggle = action as? AnnotationFilterIO.Toggle else { return }
        transaction { state in
            var filters = Set(state.filters)
            if filters.remove(toggle.filter) == nil { filters.insert(toggle.filter) }
            state.filters = filters.sorted()
            state.isFiltering = !filters.isEmpty
        }
    }
}

let store = AnnotationFilterStore(dispatcher: Dispatcher())
let host = try StoreHost(name: AnnotationFilterIO.store, store: store)
host.action(AnnotationFilterIO.Toggle.self, named: AnnotationFilterIO.Toggle.name)
var board = Board(id: AnnotationFilterIO.id)
board.host(host)
board.runAsProcess()
