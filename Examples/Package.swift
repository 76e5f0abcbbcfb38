// swift-tools-version:6.0
// A board in a package of its own, depending on BoardBus as a user's package would (here by
// path; elsewhere `.package(url: "<BoardBus's repository>", from: "…")`). Built and tested by
// BoardBus's scripts/test.
import PackageDescription

let package = Package(
    name: "CounterExample",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "BoardBus", path: "..")
    ],
    targets: [
        // The board's interface: what other boards, clients and tests import.
        .target(name: "CounterIO", dependencies: [.product(name: "BoardKit", package: "BoardBus")]),
        // The board's process.
        .executableTarget(
            name: "Counter",
            dependencies: ["CounterIO", .product(name: "BoardKit", package: "BoardBus")]
        ),
        .testTarget(
            name: "CounterTests",
            dependencies: [
                "CounterIO",
                .product(name: "BoardKit", package: "BoardBus"),
                .product(name: "BoardKitTesting", package: "BoardBus"),
                // TestFleet runs these executables: depending on them gets them built beside the tests.
                "Counter",
                .product(name: "motherboard", package: "BoardBus"),
                .product(name: "busctl", package: "BoardBus"),
                .product(name: "boardbus-log-writer", package: "BoardBus"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
