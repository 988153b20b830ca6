//! Bounded concurrent memos: what the proxy remembers in memory to skip work (decoded
//! cache entries, file resolutions, origins, dictionary announcements, origin waits).
//!
//! Eviction is S3-FIFO (`quick_cache`, chosen by `bench/cache-choice.sh`, see
//! docs/architecture.md): a new key must be asked for again before it can displace
//! keys that are, so a burst of one-off keys (a crawler, a scan) leaves the hot set
//! in place.

use std::hash::Hash;
use std::time::{Duration, Instant};

/// What a borrowed key implements to look up an owned one ([`Bounded::get`]).
pub use quick_cache::Equivalent;
use quick_cache::Weighter;

/// A concurrent map bounded by entries or by weight, optionally forgetting entries a
/// time after they were inserted.
pub struct Bounded<K, V> {
    entries: quick_cache::sync::Cache<K, Kept<V>, KeptWeight>,
    weight_of: fn(&V) -> u64,
    time_to_live: Option<Duration>,
}

#[derive(Clone)]
struct Kept<V> {
    value: V,
    inserted: Instant,
    /// Computed once on insert: eviction asks for it often.
    weight: u64,
}

#[derive(Clone)]
struct KeptWeight;

impl<K, V> Weighter<K, Kept<V>> for KeptWeight {
    fn weight(&self, _: &K, kept: &Kept<V>) -> u64 {
        kept.weight
    }
}

impl<K: Eq + Hash, V: Clone> Bounded<K, V> {
    /// At most `capacity` entries.
    pub fn with_entries(capacity: usize) -> Self {
        Self::with_weight(capacity as u64, capacity, |_| 1)
    }

    /// At most `capacity` in total of `weight_of` (e.g. bytes), expected to hold about
    /// `estimated_entries`. An entry weighing more than its share of the capacity is
    /// not kept.
    pub fn with_weight(capacity: u64, estimated_entries: usize, weight_of: fn(&V) -> u64) -> Self {
        Bounded {
            entries: quick_cache::sync::Cache::with_weighter(
                estimated_entries,
                capacity,
                KeptWeight,
            ),
            weight_of,
            time_to_live: None,
        }
    }

    /// Entries older than `time_to_live` are no longer returned.
    pub fn expiring_after(self, time_to_live: Duration) -> Self {
        Bounded {
            time_to_live: Some(time_to_live),
            ..self
        }
    }

    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.get_until(key).map(|(value, _)| value)
    }

    /// The value under `key` and, for a memo whose entries expire, when this one does.
    pub fn get_until<Q>(&self, key: &Q) -> Option<(V, Option<Instant>)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let kept = self.entries.get(key)?;
        match self.time_to_live {
            Some(ttl) if kept.inserted.elapsed() >= ttl => None,
            ttl => Some((kept.value, ttl.map(|ttl| kept.inserted + ttl))),
        }
    }

    pub fn insert(&self, key: K, value: V) {
        // Weight 0 would pin the entry (never evicted): everything weighs at least 1.
        let weight = (self.weight_of)(&value).max(1);
        let kept = Kept {
            value,
            inserted: Instant::now(),
            weight,
        };
        self.entries.insert(key, kept);
    }

    pub fn remove<Q>(&self, key: &Q)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.entries.remove(key);
    }

    /// Forgets every entry (what they were computed from changed).
    pub fn clear(&self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_their_time_to_live() {
        let memo = Bounded::with_entries(16).expiring_after(Duration::ZERO);
        memo.insert("k".to_string(), 1);
        assert_eq!(memo.get("k"), None);
        let memo = Bounded::with_entries(16).expiring_after(Duration::from_secs(3600));
        memo.insert("k".to_string(), 1);
        assert_eq!(memo.get("k"), Some(1));
        let (value, until) = memo.get_until("k").unwrap();
        assert_eq!(value, 1);
        let left = until.unwrap() - Instant::now();
        assert!(left > Duration::from_secs(3590) && left <= Duration::from_secs(3600));
        let forever = Bounded::with_entries(16);
        forever.insert("k".to_string(), 1);
        assert_eq!(forever.get_until("k"), Some((1, None)));
        memo.remove("k");
        assert_eq!(memo.get("k"), None);
    }

    #[test]
    fn weight_bounds_what_is_kept() {
        let memo: Bounded<u32, Vec<u8>> = Bounded::with_weight(1000, 10, |v| v.len() as u64);
        for key in 0..100 {
            memo.insert(key, vec![0; 100]);
        }
        let kept = (0..100).filter(|k| memo.get(k).is_some()).count();
        assert!((1..=10).contains(&kept), "{kept} entries of 100 bytes kept");
    }
}
