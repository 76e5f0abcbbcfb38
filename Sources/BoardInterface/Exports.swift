// What an interface library (a board's `…IO` module: its id, commands, actions, inputs and
// outputs) needs, and nothing that does I/O: `import BoardInterface` is enough to write one, and
// it links no libzmq. BoardKit re-exports all of it.
@_exported import struct BusCore.BoardID
@_exported import protocol BusCore.BusPayload
@_exported import struct BusCore.Empty
@_exported import struct BusCore.Scope
@_exported import struct BusCore.BusError
