/// The indexes the broker keeps as lists by key (store owners, action subscribers).
extension Dictionary {
    /// Removes the elements matching `predicate` from the list at `key`, and the key once its
    /// list is empty.
    mutating func removeFromList<Element>(at key: Key, where predicate: (Element) -> Bool) where Value == [Element] {
        guard var list = self[key] else { return }
        list.removeAll(where: predicate)
        self[key] = list.isEmpty ? nil : list
    }
}
