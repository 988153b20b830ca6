//! Per resource, the last distinct instances (newest first), bounded in count and
//! bytes: the bases deltas are computed against.

use serde::{Deserialize, Serialize};
use store::{Hash, Store, StoreError};
use wirefold_http::conditional::EntityTag;

#[derive(Serialize, Deserialize, Default, Debug)]
pub struct History {
    pub versions: Vec<Version>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// SHA-256 of the decoded content, hex.
    pub hash: String,
    pub etag: Option<String>,
    /// Unix seconds when first seen.
    pub time: u64,
    pub size: u64,
}

impl Version {
    pub fn hash(&self) -> Option<Hash> {
        self.hash.parse().ok()
    }
}

fn record_key(resource: &str) -> String {
    format!("hist:{resource}")
}

pub fn load(store: &Store, resource: &str) -> Result<History, StoreError> {
    Ok(store
        .get_record(&record_key(resource))?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default())
}

/// Makes `version` the newest; an instance seen before moves to the front rather
/// than appearing twice. Keeps at most `keep` versions and `keep_bytes` bytes (the
/// newest always). Returns whether the newest instance changed. Concurrent recorders
/// (requests of this instance, or instances sharing a store) never drop each other's
/// versions: the store applies the change to whatever the last writer left.
pub fn record(
    store: &Store,
    resource: &str,
    version: Version,
    keep: usize,
    keep_bytes: u64,
) -> Result<bool, StoreError> {
    let mut changed = false;
    // No blob references: an evicted old version must not take the history with it;
    // readers skip versions whose body is gone.
    store.update_record(&record_key(resource), |stored| {
        let mut history: History = stored
            .and_then(|bytes| serde_json::from_slice(bytes).ok())
            .unwrap_or_default();
        changed = history
            .versions
            .first()
            .is_none_or(|newest| newest.hash != version.hash);
        if history.versions.first() == Some(&version) {
            return None;
        }
        history.add(version.clone(), keep, keep_bytes);
        #[allow(
            clippy::expect_used,
            reason = "a struct of strings and numbers serializes: serde_json fails only on \
                      maps with non-string keys and on failing `Serialize` impls"
        )]
        Some((
            serde_json::to_vec(&history).expect("histories serialize"),
            Vec::new(),
        ))
    })?;
    Ok(changed)
}

impl History {
    /// Puts `version` first (dropping an earlier copy) and trims to the bounds.
    fn add(&mut self, version: Version, keep: usize, keep_bytes: u64) {
        self.versions.retain(|v| v.hash != version.hash);
        self.versions.insert(0, version);
        let mut bytes = 0;
        let kept = self
            .versions
            .iter()
            .take_while(|v| {
                bytes += v.size;
                bytes <= keep_bytes
            })
            .count()
            .clamp(1, keep.max(1));
        self.versions.truncate(kept);
    }

    /// The newest held version (other than `current`) whose validator the client
    /// listed: a base it holds.
    pub fn base_for(&self, held: &[EntityTag], current: &Hash) -> Option<&Version> {
        let current = current.to_hex();
        self.versions
            .iter()
            .filter(|v| v.hash != current)
            .find(|v| {
                v.etag
                    .as_deref()
                    .and_then(EntityTag::parse)
                    .is_some_and(|tag| held.iter().any(|h| h.weak_eq(&tag)))
            })
    }
}

/// The site part of a resource key (`<site><path and query>`): what precedes its path.
pub fn site_of(resource: &str) -> &str {
    resource.find('/').map_or(resource, |i| &resource[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(n: u8, size: u64) -> Version {
        Version {
            hash: Hash::of(&[n]).to_hex(),
            etag: Some(format!("\"v{n}\"")),
            time: n as u64,
            size,
        }
    }

    #[test]
    fn keeps_distinct_newest_first_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), store::StoreConfig::default()).unwrap();
        assert!(record(&store, "r", version(1, 10), 3, 1000).unwrap());
        assert!(
            !record(&store, "r", version(1, 10), 3, 1000).unwrap(),
            "identical successive instances are one"
        );
        for n in 2..=5 {
            assert!(record(&store, "r", version(n, 10), 3, 1000).unwrap());
        }
        let h = load(&store, "r").unwrap();
        assert_eq!(
            h.versions.iter().map(|v| v.time).collect::<Vec<_>>(),
            vec![5, 4, 3]
        );
        record(&store, "r", version(9, 995), 3, 1000).unwrap();
        assert_eq!(load(&store, "r").unwrap().versions.len(), 1, "byte bound");
        record(&store, "r", version(7, 2000), 3, 1000).unwrap();
        assert_eq!(
            load(&store, "r").unwrap().versions.len(),
            1,
            "the newest is always kept"
        );
    }

    #[test]
    fn finds_a_base_the_client_holds() {
        let h = History {
            versions: vec![version(3, 1), version(2, 1), version(1, 1)],
        };
        let current = Hash::of(&[3]);
        let held = [
            EntityTag::parse("\"v1\"").unwrap(),
            EntityTag::parse("W/\"v3\"").unwrap(),
        ];
        assert_eq!(h.base_for(&held, &current).unwrap().time, 1);
        assert!(h
            .base_for(&[EntityTag::parse("\"v9\"").unwrap()], &current)
            .is_none());
    }
}
