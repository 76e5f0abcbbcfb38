import Testing

@testable import BusCore

/// The pending tables of the client and the broker: whatever ids arrive in whatever order, the
/// table must say what a dictionary would. The order that makes it fast (increasing ids, answers
/// mostly in order) is only one of the orders tried.
@Suite("Correlation table")
struct CorrelationTableTests {
    /// A deterministic generator (SplitMix64), so that a failure repeats.
    struct Random: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Checks every id the model has or had, and the count.
    static func expectSame(_ table: CorrelationTable<Int>, _ model: [UInt64: Int], probing ids: some Sequence<UInt64>, _ step: String) {
        #expect(table.count == model.count, "\(step): count")
        for id in ids where table[id] != model[id] {
            Issue.record("\(step): id \(id) has \(String(describing: table[id])), expected \(String(describing: model[id]))")
            return
        }
    }

    @Test(arguments: [
        // window in flight, share answered late (laggards), ids issued
        (8, 0.0, 5_000), (400, 0.01, 20_000), (1_000, 0.05, 30_000), (6_000, 0.0, 20_000), (50, 0.3, 10_000),
    ])
    func agreesWithADictionaryWhenRequestsAreAnsweredOutOfOrder(window: Int, lateShare: Double, issued: Int) {
        var random = Random(state: UInt64(window) &* 31 &+ UInt64(issued))
        var table = CorrelationTable<Int>()
        var model: [UInt64: Int] = [:]
        var inFlight: [UInt64] = []
        var late: [UInt64] = []
        var seen: [UInt64] = []
        for id in UInt64(1)...UInt64(issued) {
            let value = Int(random.next() % 1_000_000)
            table[id] = value
            model[id] = value
            seen.append(id)
            if Double(random.next() % 10_000) / 10_000 < lateShare { late.append(id) } else { inFlight.append(id) }
            // Answers come mostly in order: one of the oldest few.
            while inFlight.count > window {
                let pick = Int(random.next() % UInt64(min(8, inFlight.count)))
                let answered = inFlight.remove(at: pick)
                #expect(table.removeValue(forKey: answered) == model.removeValue(forKey: answered), "answer to \(answered)")
            }
            // A late one is answered now and then, long after its neighbours.
            if late.count > 40, random.next() % 50 == 0 {
                let answered = late.remove(at: Int(random.next() % UInt64(late.count)))
                #expect(table.removeValue(forKey: answered) == model.removeValue(forKey: answered), "late answer to \(answered)")
            }
            // A reply from the wrong peer, to a recent request or to a late one: refused, and the
            // request stays.
            if random.next() % 97 == 0, let wrong = (random.next() % 2 == 0 ? inFlight.last : late.first) {
                #expect(table.removeValue(forKey: wrong) { _ in false } == nil, "refused answer to \(wrong)")
                #expect(table[wrong] == model[wrong], "\(wrong) after a refused answer")
            }
            // The right one, checked first.
            if random.next() % 101 == 0, let right = late.popLast() {
                #expect(table.removeValue(forKey: right) { $0 == model[right] } == model.removeValue(forKey: right), "checked answer to \(right)")
            }
            // A second answer to the same id finds nothing.
            if random.next() % 89 == 0, let gone = seen.randomElement(using: &random), model[gone] == nil {
                #expect(table.removeValue(forKey: gone) == nil, "second answer to \(gone)")
            }
        }
        Self.expectSame(table, model, probing: seen, "after \(issued) ids, window \(window)")
        #expect(table.slotCount <= CorrelationTable<Int>.maximumSlots)
        let rest = table.removeAll()
        #expect(rest == model.keys.sorted().map { model[$0]! }, "what is left, oldest first")
        #expect(table.isEmpty)
        for id in seen.prefix(50) { #expect(table[id] == nil) }
    }

    @Test
    func anyIdsInAnyOrderAreKeptApart() {
        // Ids that share their low bits, at the ends of the range, and repeated: all in the
        // same few slots, so that growing and moving aside are forced.
        var random = Random(state: 7)
        var table = CorrelationTable<Int>(slots: 4)
        var model: [UInt64: Int] = [:]
        var probes = Set<UInt64>()
        let bases: [UInt64] = [0, 1, UInt64.max, UInt64.max - 4095, 1 << 63]
        for step in 0..<20_000 {
            let id = bases[Int(random.next() % UInt64(bases.count))] &+ (random.next() % 6) &* 4_096 &+ random.next() % 3
            probes.insert(id)
            switch random.next() % 4 {
            case 0, 1:
                table[id] = step
                model[id] = step
            case 2:
                #expect(table.removeValue(forKey: id) == model.removeValue(forKey: id))
            default:
                let cut = random.next()
                let taken = table.removeAll { UInt64($0) & 0xff < cut & 0xff }
                let expected = model.filter { UInt64($0.value) & 0xff < cut & 0xff }.keys.sorted()
                for id in expected { model[id] = nil }
                #expect(taken.map(\.id) == expected, "removeAll(where:) at step \(step)")
            }
        }
        Self.expectSame(table, model, probing: probes, "mixed ids")
        #expect(table.keys == model.keys.sorted())
    }

    @Test
    func aLongLivedRequestSurvivesTheRingWrappingRoundIt() {
        // One request nobody answers while a hundred thousand others come and go: it must still be
        // there (moved aside), and the ring must not have grown for it.
        var table = CorrelationTable<String>()
        table[1] = "slow"
        for id in UInt64(2)...100_000 {
            table[id] = "fast \(id)"
            #expect(table.removeValue(forKey: id) == "fast \(id)")
        }
        #expect(table.slotCount == 16)
        #expect(table.count == 1)
        #expect(table[1] == "slow")
        #expect(table.removeValue(forKey: 1) == "slow")
        #expect(table.isEmpty)
    }

    @Test
    func moreInFlightThanTheRingHoldsIsStillAllThere() {
        var table = CorrelationTable<UInt64>()
        let total = UInt64(CorrelationTable<UInt64>.maximumSlots * 3)
        for id in 1...total { table[id] = id * 2 }
        #expect(table.slotCount == CorrelationTable<UInt64>.maximumSlots)
        #expect(table.count == Int(total))
        // Answered newest first, the worst order for the ring.
        for id in stride(from: total, through: 1, by: -1) { #expect(table.removeValue(forKey: id) == id * 2) }
        #expect(table.isEmpty)
    }
}
