import Testing

@testable import BoardKit

/// The table a board's socket thread looks a command's synchronous handler up in: each name
/// finds its own handler and no other, whether the table compares names in turn (a few) or
/// hashes them (more).
@Suite struct NamedHandlersTests {
    @Test(arguments: [1, 4, 5, 40])
    func everyNameFindsItsOwnHandlerAndNoOther(count: Int) {
        // Short names (held in two words), long ones, names that differ only in their last byte
        // or in length, and one with characters of several bytes.
        let pool = ["echo", "echo.raw", "echo.rax", "echo.ra", "a-name-longer-than-fifteen-bytes", "a-name-longer-than-fifteen-bytez", "ünïcode"]
        let names = (0..<count).map { $0 < pool.count ? pool[$0] : "command.\($0)" }
        let table = NamedHandlers(Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, $0) }))
        for (index, name) in names.enumerated() { #expect(table[name] == index) }
        for unknown in ["", "echo.", "echo.raw ", "ECHO", "command.\(count + 1)", "a-name-longer-than-fifteen-bytes!", "u\u{308}nïcode"]
        where !names.contains(unknown) {
            #expect(table[unknown] == nil, "\(unknown)")
        }
    }
}
