import BusCore
