import DequeModule

/// A bounded set, forgetting the oldest first.
struct BoundedSet<Element: Hashable> {
    private var order = Deque<Element>()
    private var members: Set<Element> = []
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    func contains(_ element: Element) -> Bool { members.contains(element) }

    /// Whether it was not a member yet.
    @discardableResult
    mutating func insert(_ element: Element) -> Bool {
        guard members.insert(element).inserted else { return false }
        order.append(element)
        if order.count > capacity { members.remove(order.removeFirst()) }
        return true
    }

    /// Forgets `element` (a scan of at most `capacity`, only when it is a member).
    mutating func remove(_ element: Element) {
        guard members.remove(element) != nil else { return }
        order.removeAll { $0 == element }
    }
}
