import BusCore
import Testing

@testable import MotherboardCore

/// The policy's decision cache, per principal: one principal's many questions empty only its own
/// cache (a cache emptied whole at 4 096 entries let one principal evict every other's).
@Suite("Policy decision cache")
struct PolicyDecisionsTests {
    @Test func onePrincipalsManyQuestionsDoNotEvictAnothersDecisions() {
        var cache = PolicyDecisions()
        var walks = 0
        let allowed = AccessPolicy.Decision(allowed: true, rule: "test")
        func ask(_ principal: String, _ target: String) {
            _ = cache.decide(PolicyQuestion(principal: principal, operation: .call, target: target, command: "greet")) {
                walks += 1
                return allowed
            }
        }
        ask("steady", "demo.greeter")
        for number in 0..<(3 * PolicyDecisions.maximumPerPrincipal) { ask("noisy", "far.\(number)") }
        #expect(cache.count(of: "noisy") <= PolicyDecisions.maximumPerPrincipal)
        let before = walks
        ask("steady", "demo.greeter")
        #expect(walks == before)
        #expect(cache.count(of: "steady") == 1)
    }
}
