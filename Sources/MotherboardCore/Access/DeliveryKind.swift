import BusCore

/// Every kind of delivery the broker makes of a remote principal's message or on its behalf, and
/// the operation the access policy is asked for it (nil: not asked, and why in PROTOCOL 5.10's
/// table "Each delivery", which a test holds to this list). Whatever judges a delivery names its
/// kind here, so that a new kind is a new case, and a new row.
package enum DeliveryKind: String, CaseIterable, Sendable {
    case command, activation, start, output, action
    case flowSource, flowTarget
    case dispatch, storeRead, storeWatch, storeQuery
    case registration, storeName
    case monitorAttach, monitorCopy, monitorPayload
    case linkChain, control
    case ping, answer, storeChange, ownerAction, heartbeat, unregister, complete, deliveryReport, flowEvent, natsHostMessage

    /// The operation the policy is asked; nil for a delivery it is not asked about.
    package var operation: AccessPolicy.Operation? {
        switch self {
        case .command: .call
        case .activation, .flowTarget: .activate
        case .start: .start
        case .output: .emit
        case .action: .action
        case .flowSource, .monitorPayload: .monitorPayloads
        case .dispatch: .dispatch
        case .storeRead: .state
        case .storeWatch: .watch
        case .storeQuery: .query
        case .registration, .storeName: .register
        case .monitorAttach, .monitorCopy: .monitor
        case .linkChain: .serve
        case .control: .control
        case .ping, .answer, .storeChange, .ownerAction, .heartbeat, .unregister, .complete, .deliveryReport, .flowEvent, .natsHostMessage:
            nil
        }
    }
}
