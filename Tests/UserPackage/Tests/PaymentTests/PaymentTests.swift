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
}
