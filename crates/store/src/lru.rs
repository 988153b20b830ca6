//! Least-recently-used bookkeeping keyed by blob hash, weighted in bytes.

use std::collections::{BTreeMap, HashMap};

use crate::Hash;

pub(crate) struct Lru<V> {
    entries: HashMap<Hash, Entry<V>>,
    /// Tick of last use → hash; the first entry is the least recently used.
    order: BTreeMap<u64, Hash>,
    next_tick: u64,
    weight: u64,
}

struct Entry<V> {
    value: V,
    weight: u64,
    tick: u64,
}

impl<V> Lru<V> {
    pub(crate) fn new() -> Lru<V> {
        Lru {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_tick: 0,
            weight: 0,
        }
    }

    /// Inserts or replaces `hash`, making it the most recently used.
    pub(crate) fn insert(&mut self, hash: Hash, value: V, weight: u64) {
        self.remove(&hash);
        let tick = self.tick();
        self.order.insert(tick, hash);
        self.entries.insert(
            hash,
            Entry {
                value,
                weight,
                tick,
            },
        );
        self.weight += weight;
    }

    /// Marks `hash` as just used; false when absent. An entry already among the most
    /// recently used quarter stays where it is: at most `next_tick - tick` entries were
    /// used after it, and moving a hot entry on every hit (a tree removal and insertion
    /// under the store's lock) would change no eviction soon to come.
    pub(crate) fn touch(&mut self, hash: &Hash) -> bool {
        let Some(last) = self.entries.get(hash).map(|entry| entry.tick) else {
            return false;
        };
        if self.next_tick - last <= self.entries.len() as u64 / 4 {
            return true;
        }
        let tick = self.tick();
        self.order.remove(&last);
        self.order.insert(tick, *hash);
        if let Some(entry) = self.entries.get_mut(hash) {
            entry.tick = tick;
        }
        true
    }

    /// The value of `hash`, marking it as just used.
    pub(crate) fn get(&mut self, hash: &Hash) -> Option<&V> {
        if !self.touch(hash) {
            return None;
        }
        self.entries.get(hash).map(|entry| &entry.value)
    }

    pub(crate) fn contains(&self, hash: &Hash) -> bool {
        self.entries.contains_key(hash)
    }

    pub(crate) fn remove(&mut self, hash: &Hash) -> Option<V> {
        let entry = self.entries.remove(hash)?;
        self.order.remove(&entry.tick);
        self.weight -= entry.weight;
        Some(entry.value)
    }

    #[allow(
        clippy::expect_used,
        reason = "every change to `order` changes `entries` in the same call"
    )]
    pub(crate) fn pop_oldest(&mut self) -> Option<(Hash, V)> {
        let (_, hash) = self.order.pop_first()?;
        let entry = self.entries.remove(&hash).expect("order and entries agree");
        self.weight -= entry.weight;
        Some((hash, entry.value))
    }

    /// Hashes with their weights, least recently used first.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = (Hash, u64)> + '_ {
        self.order
            .values()
            .map(|hash| (*hash, self.entries[hash].weight))
    }

    pub(crate) fn weight(&self) -> u64 {
        self.weight
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> Hash {
        Hash([n; 32])
    }

    #[test]
    fn evicts_least_recently_used_first() {
        let mut lru = Lru::new();
        lru.insert(h(1), "one", 10);
        lru.insert(h(2), "two", 20);
        lru.insert(h(3), "three", 30);
        assert_eq!(lru.get(&h(1)), Some(&"one"));
        assert_eq!(lru.weight(), 60);
        assert_eq!(lru.pop_oldest(), Some((h(2), "two")));
        assert_eq!(
            lru.oldest_first().collect::<Vec<_>>(),
            [(h(3), 30), (h(1), 10)]
        );
        assert_eq!(lru.remove(&h(3)), Some("three"));
        assert_eq!(lru.weight(), 10);
        assert_eq!(lru.len(), 1);
        lru.insert(h(1), "uno", 5);
        assert_eq!(lru.weight(), 5);
        assert!(!lru.touch(&h(9)));
    }

    #[test]
    fn only_entries_outside_the_recent_quarter_move() {
        let mut lru = Lru::new();
        for n in 1..=8 {
            lru.insert(h(n), n, 1);
        }
        // 7 is second newest of 8: within the newest quarter, it stays.
        assert!(lru.touch(&h(7)));
        assert_eq!(lru.oldest_first().last(), Some((h(8), 1)));
        // 1 is the oldest: it becomes the newest, and 2 is the next to go.
        assert!(lru.touch(&h(1)));
        assert_eq!(lru.oldest_first().last(), Some((h(1), 1)));
        assert_eq!(lru.pop_oldest(), Some((h(2), 2)));
    }
}
