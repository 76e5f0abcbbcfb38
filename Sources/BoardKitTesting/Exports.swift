// What a test of a fleet names from the broker's module, so that the testing product is all a
// user's test imports: MotherboardCore itself carries no stability promise.
@_exported import struct MotherboardCore.FleetManifest
@_exported import struct MotherboardCore.MotherboardSettings
