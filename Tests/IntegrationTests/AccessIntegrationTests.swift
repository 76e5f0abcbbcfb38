import BusCore
import BoardKit
import BoardKitTesting
import Foundation
import BoardBusDemoGreeterIO
import Testing

/// Who may talk to a fleet, and what a stuck board does to the others.
@Suite("Access and stuck boards", .serialized, .timeLimit(.minutes(3)))
struct AccessIntegrationTests {
    @Test func theRuntimeDirectoryIsPrivate() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let attributes = try FileManager.default.attributesOfItem(atPath: fleet.address.runtimeDirectory)
            #expect((attributes[.posixPermissions] as? Int) == 0o700)
        }
    }

    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
    func peersOfAnotherUserAreRefusedEvenWhenTheSocketIsOpen() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            // Open every door the file system has; the broker's uid filter must still refuse.
            chmod(fleet.directory, 0o755)
            chmod(fleet.address.runtimeDirectory, 0o755)
            chmod(try #require(fleet.address.ipcPath), 0o777)
            let busctl = "\(fleet.binaryDirectory)/busctl"
            let stranger = try await ChildProcess(
                executable: "/usr/bin/setpriv",
                arguments: ["--reuid=65534", "--regid=65534", "--clear-groups", busctl, "list", "--bus", fleet.address.endpoint, "--timeout", "1"],
                environment: fleet.environment, directory: fleet.directory, name: "stranger"
            ).wait(timeout: .seconds(30))
            #expect(stranger.exitCode == 1)
            // Said as a refusal, not a bare timeout.
            #expect(stranger.standardError.hasPrefix("busctl: unauthorized: "), "\(stranger.standardError)")
            #expect(stranger.standardError.contains("accepts peers of its own user only"), "\(stranger.standardError)")
            #expect(try await fleet.busctl("list").exitCode == 0)
        }
    }

    @Test func aStoppedBoardStallsNoOneAndComesBack() async throws {
        try await TestFleet.with(manifest: exampleManifest) { fleet in
            let pid = try #require(fleet.pid(of: GreeterIO.id))
            #expect(kill(pid, SIGSTOP) == 0)
            defer { kill(pid, SIGCONT) }
            // A group stop reaches each thread in turn: wait until every one has stopped.
            let stopped = await eventually {
                let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
                return !tasks.isEmpty
                    && tasks.allSatisfy { task in
                        ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8)) ?? "").contains(") T ")
                    }
            }
            #expect(stopped)
            try await fleet.withClient { client in
                // A call to the stuck board ends within its deadline with a typed error…
                let error = await #expect(throws: BusError.self) {
                    try await client.interact(with: GreeterIO.id, GreeterIO.Ping(sequence: 1), timeout: .seconds(1))
                }
                #expect(error?.code == .timeout || error?.code == .boardNotRunning)
                // …the others keep answering, and the stuck board leaves the registry.
                #expect(try await client.call("app.dashboard", command: "show", payload: Data("{}".utf8), timeout: .seconds(5)).count > 0)
                let dropped = try await eventually { try await client.list().boards.allSatisfy { $0.id != GreeterIO.id } }
                #expect(dropped)
                // Resumed, it hears it is unknown and registers again.
                kill(pid, SIGCONT)
                let back = try await eventually { try await client.list().boards.contains { $0.id == GreeterIO.id && $0.pid == pid } }
                #expect(back)
                #expect(try await client.interact(with: GreeterIO.id, GreeterIO.Ping(sequence: 2)).sequence == 2)
            }
        }
    }
}
