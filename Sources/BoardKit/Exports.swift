@_exported import BusCore
