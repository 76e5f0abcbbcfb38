// Payload coding (CBOR, the JSON fast path, schemas) is its own module; whoever imports BusCore
// has it too.
@_exported import BusCodec
