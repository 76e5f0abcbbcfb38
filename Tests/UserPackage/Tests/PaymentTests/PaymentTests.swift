import BoardKit
import BoardKitTesting
import PaymentIO
import Testing

/// The user's board under the real broker, with BoardBus taken by version.
@Suite("A user's package", .timeLimit(.minutes(2)))
struct PaymentTests {
    @Test func theUsersPaymentBoardRunsUnderTheMotherboard() async throws {
        let manifest = #"{ "boards": [ { "id": "shop.payment", "executable": "Payment", "start": "always" } ] }"#
        try await TestFleet.with(manifest: manifest) { fleet in
            let receipt = try await fleet.withClient { client in
                try await client.interact(with: PaymentIO.id, PaymentIO.Pay(cents: 1250))
            }
            #expect(receipt.paid == 1250)
            let listed = try await fleet.busctl("list")
            #expect(listed.standardOutput.contains("shop.payment"), "\(listed.standardError)")
        }
    }

    /// The testing guide's InProcessFleet example with the testing product alone imported: the manifest
    /// type comes with it, and the always-on board answers the first call of every run.
    @Test func theUsersBoardRunsInProcessWithTheTestingProductAlone() async throws {
        let manifest = FleetManifest(boards: [.init(id: PaymentIO.id, executable: "Payment", start: .always)])
        for _ in 0..<20 {
            try await InProcessFleet.with(manifest: manifest, programs: [PaymentIO.id: { _ in Self.payment() }]) { fleet in
                let receipt = try await fleet.client.interact(with: PaymentIO.id, PaymentIO.Pay(cents: 5))
                #expect(receipt.paid == 5)
            }
        }
    }

    /// The board as `Payment`'s main builds it.
    static func payment() -> Board {
        var board = Board(id: PaymentIO.id)
        board.onCommand(PaymentIO.Pay.self) { pay, _ in PaymentIO.Receipt(paid: pay.cents) }
        return board
    }
}
