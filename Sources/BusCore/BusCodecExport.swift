// Payload coding (CBOR, the JSON fast path, schemas) is its own module; whoever imports BusCore
// has it too, as before the split.
@_exported import BusCodec
