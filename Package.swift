// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "BoardBus",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "BusCore", targets: ["BusCore"]),
        .library(name: "BoardInterface", targets: ["BoardInterface"]),
        .library(name: "BoardKit", targets: ["BoardKit"]),
        .library(name: "BoardKitTesting", targets: ["BoardKitTesting"]),
        .library(name: "Flux", targets: ["Flux"]),
        .library(name: "FluxBus", targets: ["FluxBus"]),
        .library(name: "MotherboardCore", targets: ["MotherboardCore"]),
        .executable(name: "motherboard", targets: ["motherboard"]),
        .executable(name: "busctl", targets: ["busctl"]),
        .executable(name: "boardbus-log-writer", targets: ["boardbus-log-writer"]),
        .executable(name: "BoardBusDemoLogin", targets: ["BoardBusDemoLogin"]),
        .executable(name: "BoardBusDemoDashboard", targets: ["BoardBusDemoDashboard"]),
        .executable(name: "BoardBusDemoGreeter", targets: ["BoardBusDemoGreeter"]),
        .executable(name: "BoardBusDemoPayment", targets: ["BoardBusDemoPayment"]),
        .executable(name: "BoardBusDemoTasks", targets: ["BoardBusDemoTasks"]),
        .executable(name: "BoardBusDemoRecorder", targets: ["BoardBusDemoRecorder"]),
        .executable(name: "BoardBusDemoGate", targets: ["BoardBusDemoGate"]),
        .executable(name: "BoardBusDemoComments", targets: ["BoardBusDemoComments"]),
        .executable(name: "BoardBusDemoOrders", targets: ["BoardBusDemoOrders"]),
        .executable(name: "BoardBusDemoAnnotationFilter", targets: ["BoardBusDemoAnnotationFilter"]),
        .executable(name: "boardbus-bench", targets: ["boardbus-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // `scripts/docs`: the API reference (a command plugin; nothing of it is linked).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // libzmq from Debian's libzmq3-dev (zmq.h in /usr/include, `link "zmq"` in the module map;
        // its pkg-config flags are not used: they name krb5's include directory, which SwiftPM
        // refuses with a warning on every build). Only BusZeroMQ imports it.
        .systemLibrary(name: "CBoardBusZeroMQ", providers: [.apt(["libzmq3-dev"])]),
        // The Linux calls Swift's Glibc module does not export (prctl, mallinfo2, SO_PEERCRED) and
        // the headers of eventfd, timerfd, epoll and signalfd: libc only.
        .target(name: "CBoardBusLinux"),
        // libnats from Debian's libnats-dev (nats/nats.h, `link "nats"`): only BusNATS imports it.
        .systemLibrary(name: "CBoardBusNATS", providers: [.apt(["libnats-dev"])]),
        // The NATS client the motherboard's NATS gateway uses, and the fleet's subjects there.
        .target(name: "BusNATS", dependencies: ["CBoardBusNATS", "BusCore"]),
        // The motherboard's accept() and accept4(): keep libzmq's listeners away from the
        // descriptor limit (accept_guard.c says how and why).
        .target(name: "CBoardBusAcceptGuard"),
        // What writes each board's log, rotating it at its limit: the C library only, so that the
        // process beside every board stays small.
        .target(name: "BoardBusLogWriter"),
        .executableTarget(name: "boardbus-log-writer", dependencies: ["BoardBusLogWriter"]),
        // Payload coding with no bus type in it: CBOR, the JSON fast path, payload schemas, UTF-8
        // helpers. Foundation only.
        .target(name: "BusCodec"),
        // Envelope, header codec, wire messages, errors, settings, the PayloadCodec facade: no I/O.
        .target(name: "BusCore", dependencies: ["BusCodec", .product(name: "Logging", package: "swift-log")]),
        // The only module that calls libzmq.
        .target(name: "BusZeroMQ", dependencies: ["CBoardBusZeroMQ", "CBoardBusLinux", "BusCore"]),
        // The broker's logic: routing, registry, scopes, flows, supervision, the admission gate.
        // No I/O: driven by one thread with messages and the time.
        .target(
            name: "MotherboardCore",
            dependencies: [
                "BusCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        // What stands in front of the bus and speaks another protocol (Majordomo) or to another
        // motherboard (the uplink): each on a thread of its own, reaching the routing loop over the
        // broker's in-process endpoint. They know the broker by its protocol only: no edge to
        // MotherboardCore (the daemon hands them their settings).
        .target(
            name: "MotherboardGateways",
            dependencies: [
                "BusCore", "BusZeroMQ", "BusNATS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
            ]
        ),
        // The broker as a process: sockets, security, the launcher, the metrics endpoint, systemd,
        // logs, and the gateways it is given. Only the motherboard executable links it.
        .target(
            name: "MotherboardDaemon",
            dependencies: [
                "BusCore", "BusZeroMQ", "CBoardBusAcceptGuard", "MotherboardCore", "MotherboardGateways",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .executableTarget(
            name: "motherboard",
            dependencies: [
                "MotherboardCore", "MotherboardDaemon", "MotherboardGateways", "BoardBusLogWriter",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // What a board's interface library (`…IO`) needs: the command, action and payload protocols,
        // ids. No I/O.
        .target(name: "BoardInterface", dependencies: ["BusCore"]),
        .target(
            name: "BoardKit",
            dependencies: [
                "BoardInterface", "BusCore", "BusZeroMQ", "CBoardBusLinux",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "HeapModule", package: "swift-collections"),
            ]
        ),
        // Flux stores: the in-process library, and stores reached over the bus (durable with GRDB).
        .target(name: "Flux"),
        .target(
            name: "FluxBus",
            dependencies: [
                "Flux", "BoardKit", "BusCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        // For users' tests: TestFleet (the real processes; children spawned with swift-subprocess)
        // and InProcessFleet (the broker's logic and boards in one process, joined in memory).
        // What tests of any module share and that needs no bus: a seeded random generator.
        .target(name: "BoardBusTestSupport"),
        .target(
            name: "BoardKitTesting",
            dependencies: [
                "BoardKit", "BusCore", "MotherboardCore", "BoardBusTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .executableTarget(
            name: "busctl",
            dependencies: [
                "BoardKit", "BusCore", "BusZeroMQ", "FluxBus",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // Example fleet: one executable per board, one interface library per board.
        .target(name: "BoardBusDemoLoginIO", dependencies: ["BoardInterface"], path: "Services/LoginIO"),
        .target(name: "BoardBusDemoDashboardIO", dependencies: ["BoardInterface", "BoardBusDemoLoginIO"], path: "Services/DashboardIO"),
        .target(name: "BoardBusDemoGreeterIO", dependencies: ["BoardInterface"], path: "Services/GreeterIO"),
        .executableTarget(name: "BoardBusDemoLogin", dependencies: ["BoardKit", "BoardBusDemoLoginIO"], path: "Services/Login"),
        .executableTarget(
            name: "BoardBusDemoDashboard",
            dependencies: ["BoardKit", "BoardBusDemoDashboardIO", "BoardBusDemoLoginIO", "BoardBusDemoGreeterIO"],
            path: "Services/Dashboard"
        ),
        .executableTarget(
            name: "BoardBusDemoGreeter",
            dependencies: ["BoardKit", "BoardBusDemoGreeterIO", "BoardBusDemoLoginIO", .product(name: "Logging", package: "swift-log")],
            path: "Services/Greeter"),
        .target(name: "BoardBusDemoPaymentIO", dependencies: ["BoardInterface"], path: "Services/PaymentIO"),
        .target(name: "BoardBusDemoTasksIO", dependencies: ["BoardInterface"], path: "Services/TasksIO"),
        .target(name: "BoardBusDemoRecorderIO", dependencies: ["BoardInterface"], path: "Services/RecorderIO"),
        .executableTarget(name: "BoardBusDemoPayment", dependencies: ["BoardKit", "BoardBusDemoPaymentIO"], path: "Services/Payment"),
        .executableTarget(
            name: "BoardBusDemoTasks",
            dependencies: ["BoardKit", "BoardBusDemoTasksIO", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Services/Tasks"),
        .executableTarget(
            name: "BoardBusDemoRecorder",
            dependencies: ["BoardKit", "FluxBus", "BoardBusDemoRecorderIO", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Services/Recorder"),
        .target(name: "BoardBusDemoGateIO", dependencies: ["BoardInterface"], path: "Services/GateIO"),
        .executableTarget(name: "BoardBusDemoGate", dependencies: ["BoardKit", "BoardBusDemoGateIO"], path: "Services/Gate"),
        .target(name: "BoardBusDemoCommentsIO", dependencies: ["BoardInterface", "Flux"], path: "Services/CommentsIO"),
        .executableTarget(
            name: "BoardBusDemoComments", dependencies: ["BoardKit", "Flux", "FluxBus", "BoardBusDemoCommentsIO"], path: "Services/Comments"),
        .target(name: "BoardBusDemoOrdersIO", dependencies: ["BoardInterface", "Flux"], path: "Services/OrdersIO"),
        .executableTarget(
            name: "BoardBusDemoOrders", dependencies: ["BoardKit", "Flux", "FluxBus", "BoardBusDemoOrdersIO"], path: "Services/Orders"),
        .target(name: "BoardBusDemoAnnotationFilterIO", dependencies: ["BoardInterface", "Flux"], path: "Services/AnnotationFilterIO"),
        .executableTarget(
            name: "BoardBusDemoAnnotationFilter", dependencies: ["BoardKit", "Flux", "FluxBus", "BoardBusDemoAnnotationFilterIO"],
            path: "Services/AnnotationFilter"),

        // Benchmark: the C baseline (zmq_proxy + echo peer), the echo board, the driver.
        .target(name: "BoardBusBaselineSupport"),
        .executableTarget(name: "zmq-baseline-proxy", dependencies: ["BoardBusBaselineSupport"], linkerSettings: [.linkedLibrary("zmq")]),
        .executableTarget(name: "zmq-baseline-echo", dependencies: ["BoardBusBaselineSupport"], linkerSettings: [.linkedLibrary("zmq")]),
        .executableTarget(name: "zmq-baseline-client", linkerSettings: [.linkedLibrary("zmq")]),
        .executableTarget(name: "bench-echo-board", dependencies: ["BoardKit", "BusCore"]),
        // The fuzz harnesses (Sources/boardbus-fuzz): replays corpora when built as usual; a
        // libFuzzer target when built by scripts/fuzz.
        .executableTarget(
            name: "boardbus-fuzz",
            dependencies: [
                "BusCore", "BusCodec", "BusNATS", "MotherboardCore", "MotherboardGateways", "MotherboardTesting",
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(
            name: "boardbus-bench",
            dependencies: [
                "BoardKit", "BoardKitTesting", "BusCore", "BusZeroMQ", "Flux", "FluxBus", "MotherboardCore", "MotherboardTesting",
                "BoardBusDemoOrdersIO",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The fakes every test of the broker's logic and its gateways uses, and the fuzz harnesses
        // and the bench too: the recording transport, producer and links, the routing harness.
        .target(
            name: "MotherboardTesting",
            dependencies: ["BusCore", "MotherboardCore", "MotherboardGateways", .product(name: "Logging", package: "swift-log")]),

        // One test target per module, named after it.
        .testTarget(name: "BusCodecTests", dependencies: ["BusCodec", "BusCore", "BoardBusTestSupport"]),
        .testTarget(name: "BusCoreTests", dependencies: ["BusCore", "BusCodec", "BoardBusTestSupport"]),
        .testTarget(name: "BusNATSTests", dependencies: ["BusNATS", "BusCore"]),
        .testTarget(name: "BoardBusLogWriterTests", dependencies: ["BoardBusLogWriter", "BoardKitTesting"]),
        .testTarget(
            name: "BoardKitTests",
            dependencies: [
                "BoardKit", "BoardKitTesting", "BoardBusTestSupport", "BusCore", "BusZeroMQ", "Flux", "FluxBus",
                "MotherboardCore",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]),
        .testTarget(name: "FluxTests", dependencies: ["Flux"]),
        // Stores over the bus: the store host and watch on their own, then with the real fleet.
        .testTarget(
            name: "FluxBusTests",
            dependencies: [
                "FluxBus", "Flux", "BoardKit", "BoardKitTesting", "BusCore", "BoardBusDemoCommentsIO", "BoardBusDemoAnnotationFilterIO",
                "BoardBusDemoOrdersIO", "BoardBusDemoRecorderIO", .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // The broker's logic without I/O.
        .testTarget(
            name: "MotherboardCoreTests",
            // (the daemon only for its Prometheus series, where a test reads the exposition)
            dependencies: ["MotherboardCore", "MotherboardTesting", "MotherboardDaemon", "BusCore", "BoardBusTestSupport"]),
        // The gateways' sessions with fake links, and what they share.
        .testTarget(
            name: "MotherboardGatewaysTests",
            dependencies: ["MotherboardGateways", "MotherboardTesting", "BusCore", "BusNATS", "BusZeroMQ"]),
        // The broker as a process: its ROUTER over real sockets, state directory, logs, limits.
        .testTarget(
            name: "MotherboardDaemonTests",
            dependencies: [
                "MotherboardDaemon", "MotherboardCore", "MotherboardGateways", "MotherboardTesting", "BusCore", "BusZeroMQ", "BoardKitTesting",
                "BoardBusTestSupport",
            ]),
        // The socket loop, frame reuse and backlog accounting over real ZeroMQ sockets.
        .testTarget(name: "BusZeroMQTests", dependencies: ["BusZeroMQ", "BusCore", "BoardKitTesting"]),
        // Whole fleets of real processes (TestFleet): semantics, failures, attacks, protocol.
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "BoardKitTesting", "BoardKit", "BusCore", "BusZeroMQ", "FluxBus", "BoardBusDemoLoginIO", "BoardBusDemoDashboardIO",
                "BoardBusDemoGreeterIO", "BoardBusDemoPaymentIO",
                "BoardBusDemoTasksIO", "BoardBusDemoRecorderIO", "BoardBusDemoGateIO", "BoardBusDemoCommentsIO",
            ],
            exclude: ["Python"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
