extension EnvelopeHeader {
    /// What the header's type-name field names, which depends on the kind: one wire field, six
    /// meanings. Read it through this instead of comparing `typeName` with the kind in mind.
    public enum Subject: Hashable, Sendable, CustomStringConvertible {
        /// `activate`, `output`, `flowEvent`: the `busTypeName` of the payload's type (empty when
        /// the sender did not say).
        case payloadType(String)
        /// `command`: the command's name (`BoardCommand.commandName`).
        case command(String)
        /// `action`: the action's name (`BoardAction.actionName`).
        case action(String)
        /// `dispatch`: the store action's name; `store`: the store operation (`StoreOperation`).
        case storeAction(String)
        case storeOperation(String)
        /// `control`: the broker operation (`ControlOperation`).
        case control(String)
        /// `error`: the error's code (its payload has the message).
        case error(BusError.Code)
        /// `reply`, `register`, `unregister`, `heartbeat`, `complete`: the field is not used.
        case none

        public var description: String {
            switch self {
            case .payloadType(let name): name.isEmpty ? "untyped payload" : "payload \(name)"
            case .command(let name): "command \(name)"
            case .action(let name): "action \(name)"
            case .storeAction(let name): "store action \(name)"
            case .storeOperation(let name): "store operation \(name)"
            case .control(let name): "control \(name)"
            case .error(let code): "error \(code)"
            case .none: "nothing"
            }
        }
    }

    /// What ``typeName`` names for this header's kind.
    public var subject: Subject {
        switch kind {
        case .activate, .output, .flowEvent: .payloadType(typeName)
        case .command: .command(typeName)
        case .action: .action(typeName)
        case .dispatch: .storeAction(typeName)
        case .store: .storeOperation(typeName)
        case .control: .control(typeName)
        case .error: .error(BusError.Code(name: typeName))
        case .reply, .register, .unregister, .heartbeat, .complete: .none
        }
    }
}
