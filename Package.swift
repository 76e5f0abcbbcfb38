// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "BoardBus",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "BusCore", targets: ["BusCore"]),
        .library(name: "BoardKit", targets: ["BoardKit"]),
        .library(name: "BoardKitTesting", targets: ["BoardKitTesting"]),
        .library(name: "Flux", targets: ["Flux"]),
        .library(name: "FluxBus", targets: ["FluxBus"]),
        .library(name: "MotherboardCore", targets: ["MotherboardCore"]),
        .executable(name: "motherboard", targets: ["motherboard"]),
        .executable(name: "busctl", targets: ["busctl"]),
        .executable(name: "Login", targets: ["Login"]),
        .executable(name: "Dashboard", targets: ["Dashboard"]),
        .executable(name: "Greeter", targets: ["Greeter"]),
        .executable(name: "Payment", targets: ["Payment"]),
        .executable(name: "Tasks", targets: ["Tasks"]),
        .executable(name: "Recorder", targets: ["Recorder"]),
        .executable(name: "Gate", targets: ["Gate"]),
        .executable(name: "Comments", targets: ["Comments"]),
        .executable(name: "AnnotationFilter", targets: ["AnnotationFilter"]),
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
        .package(url: "https://github.com/swhitty/FlyingFox", from: "0.27.1"),
    ],
    targets: [
        // libzmq from Debian's libzmq3-dev (zmq.h in /usr/include, `link "zmq"` in the module map;
        // its pkg-config flags are not used: they name krb5's include directory, which SwiftPM
        // refuses with a warning on every build). Only BusZeroMQ imports it.
        .systemLibrary(name: "CZeroMQ", providers: [.apt(["libzmq3-dev"])]),
        // The motherboard's accept() and accept4(): keep libzmq's listeners away from the
        // descriptor limit (accept_guard.c says how and why).
        .target(name: "CAcceptGuard"),
        // Envelope, header codec, errors, settings: no I/O.
        .target(name: "BusCore", dependencies: [.product(name: "Logging", package: "swift-log")]),
        // The only module that calls libzmq.
        .target(name: "BusZeroMQ", dependencies: ["CZeroMQ", "BusCore"]),
        .target(
            name: "MotherboardCore",
            dependencies: [
                "BusCore", "BusZeroMQ", "CAcceptGuard",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "FlyingFox", package: "FlyingFox"),
                .product(name: "FlyingSocks", package: "FlyingFox"),
            ]
        ),
        .executableTarget(
            name: "motherboard",
            dependencies: [
                "MotherboardCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "BoardKit",
            dependencies: [
                "BusCore", "BusZeroMQ",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
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
        .target(
            name: "BoardKitTesting",
            dependencies: [
                "BoardKit", "BusCore", "MotherboardCore",
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
            ],
            // In release builds, linked with the Swift runtime and Foundation inside: a `busctl`
            // process starts in about two thirds of the time, without loading and relocating
            // their shared libraries. (Debug builds, which tests use, link them as usual.)
            swiftSettings: [.unsafeFlags(["-static-stdlib"], .when(configuration: .release))],
            linkerSettings: [.unsafeFlags(["-static-stdlib"], .when(configuration: .release))]
        ),

        // Example fleet: one executable per board, one interface library per board.
        .target(name: "LoginIO", dependencies: ["BoardKit"], path: "Services/LoginIO"),
        .target(name: "DashboardIO", dependencies: ["BoardKit", "LoginIO"], path: "Services/DashboardIO"),
        .target(name: "GreeterIO", dependencies: ["BoardKit"], path: "Services/GreeterIO"),
        .executableTarget(name: "Login", dependencies: ["BoardKit", "LoginIO"], path: "Services/Login"),
        .executableTarget(
            name: "Dashboard",
            dependencies: ["BoardKit", "DashboardIO", "LoginIO", "GreeterIO"],
            path: "Services/Dashboard"
        ),
        .executableTarget(name: "Greeter", dependencies: ["BoardKit", "GreeterIO", "LoginIO"], path: "Services/Greeter"),
        .target(name: "PaymentIO", dependencies: ["BoardKit"], path: "Services/PaymentIO"),
        .target(name: "TasksIO", dependencies: ["BoardKit"], path: "Services/TasksIO"),
        .target(name: "RecorderIO", dependencies: ["BoardKit"], path: "Services/RecorderIO"),
        .executableTarget(name: "Payment", dependencies: ["BoardKit", "PaymentIO"], path: "Services/Payment"),
        .executableTarget(
            name: "Tasks", dependencies: ["BoardKit", "TasksIO", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Services/Tasks"),
        .executableTarget(
            name: "Recorder",
            dependencies: ["BoardKit", "FluxBus", "RecorderIO", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Services/Recorder"),
        .target(name: "GateIO", dependencies: ["BoardKit"], path: "Services/GateIO"),
        .executableTarget(name: "Gate", dependencies: ["BoardKit", "GateIO"], path: "Services/Gate"),
        .target(name: "CommentsIO", dependencies: ["BoardKit", "Flux"], path: "Services/CommentsIO"),
        .executableTarget(name: "Comments", dependencies: ["BoardKit", "Flux", "FluxBus", "CommentsIO"], path: "Services/Comments"),
        .target(name: "AnnotationFilterIO", dependencies: ["BoardKit", "Flux"], path: "Services/AnnotationFilterIO"),
        .executableTarget(
            name: "AnnotationFilter", dependencies: ["BoardKit", "Flux", "FluxBus", "AnnotationFilterIO"],
            path: "Services/AnnotationFilter"),

        // Benchmark: the C baseline (zmq_proxy + echo peer), the echo board, the driver.
        .target(name: "BaselineSupport"),
        .executableTarget(name: "zmq-baseline-proxy", dependencies: ["BaselineSupport"], linkerSettings: [.linkedLibrary("zmq")]),
        .executableTarget(name: "zmq-baseline-echo", dependencies: ["BaselineSupport"], linkerSettings: [.linkedLibrary("zmq")]),
        .executableTarget(name: "bench-echo-board", dependencies: ["BoardKit"]),
        .executableTarget(
            name: "boardbus-bench",
            dependencies: [
                "BoardKit", "BoardKitTesting", "BusCore", "BusZeroMQ", "FluxBus", "MotherboardCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        .testTarget(name: "BusCoreTests", dependencies: ["BusCore", "BoardKitTesting"]),
        .testTarget(
            name: "BoardKitTests",
            dependencies: [
                "BoardKit", "BoardKitTesting", "BusCore", "Flux", "FluxBus", "MotherboardCore",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]),
        .testTarget(name: "FluxTests", dependencies: ["Flux"]),
        // Stores over the bus: the store host and watch on their own, then with the real fleet.
        .testTarget(
            name: "FluxBusTests",
            dependencies: [
                "FluxBus", "Flux", "BoardKit", "BoardKitTesting", "BusCore", "CommentsIO", "AnnotationFilterIO",
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // The broker's logic without I/O, and its ROUTER over real sockets.
        .testTarget(name: "MotherboardCoreTests", dependencies: ["MotherboardCore", "BusCore", "BusZeroMQ", "BoardKitTesting"]),
        // The socket loop, frame reuse and backlog accounting over real ZeroMQ sockets.
        .testTarget(name: "BusZeroMQTests", dependencies: ["BusZeroMQ", "BusCore", "BoardKitTesting"]),
        // Whole fleets of real processes (TestFleet): semantics, failures, attacks, protocol.
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "BoardKitTesting", "BoardKit", "BusCore", "BusZeroMQ", "FluxBus", "LoginIO", "DashboardIO", "GreeterIO", "PaymentIO",
                "TasksIO", "RecorderIO", "GateIO", "CommentsIO",
            ],
            exclude: ["Python"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
