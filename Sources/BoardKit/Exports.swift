// What a board author uses from BusCore, re-exported so that `import BoardKit` is enough to
// write a board, its interface library and a client. The rest of BusCore (the header codec, the
// broker's control messages, message kinds and flags) is the wire's business, not a board's:
// import BusCore for it explicitly.
@_exported import BoardInterface
@_exported import struct BusCore.BoardID
@_exported import struct BusCore.BusAddress
@_exported import struct BusCore.CurveKeyPair
@_exported import struct BusCore.CurveClientCredentials
@_exported import struct BusCore.CurveAllowList
@_exported import struct BusCore.BusError
@_exported import struct BusCore.BusLimits
@_exported import enum BusCore.BusLogging
@_exported import protocol BusCore.BusPayload
@_exported import struct BusCore.Empty
@_exported import enum BusCore.PayloadCodec
@_exported import enum BusCore.PayloadFormat
@_exported import struct BusCore.Delivery
@_exported import struct BusCore.Completion
@_exported import struct BusCore.FlowSpec
@_exported import struct BusCore.FlowID
@_exported import struct BusCore.FlowInfo
@_exported import struct BusCore.BoardInfo
@_exported import struct BusCore.BoardState
@_exported import struct BusCore.BoardList
@_exported import struct BusCore.FlowList
@_exported import struct BusCore.Introspection
@_exported import struct BusCore.Scope
@_exported import struct BusCore.ScopeTree
@_exported import struct BusCore.ScopeNode
@_exported import struct BusCore.StoreSnapshot
@_exported import struct BusCore.DispatchAck
@_exported import struct BusCore.QueryLease
@_exported import struct BusCore.TraceContext
@_exported import enum BusCore.BusTrace
@_exported import struct BusCore.MonitorFilter
@_exported import struct BusCore.MonitorRequest
@_exported import struct BusCore.MonitorEvent
@_exported import struct BusCore.MonitorPush
@_exported import struct BusCore.MetricsText
@_exported import class BusCore.PayloadSchema
@_exported import protocol BusCore.PayloadSchemaProviding
@_exported import struct BusCore.BoardSchemas
