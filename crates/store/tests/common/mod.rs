//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a subset of these helpers
#![allow(
    clippy::expect_used,
    reason = "test support: a failed expectation fails the test"
)]

use std::path::{Path, PathBuf};

use wirefold_store::{Hash, Store, StoreConfig};

pub fn open(dir: &Path) -> Store {
    Store::open(dir, StoreConfig::default()).expect("store opens")
}

pub fn open_with_budget(dir: &Path, max_bytes: u64) -> Store {
    let config = StoreConfig {
        max_bytes,
        memory_bytes: max_bytes,
        max_object_bytes: max_bytes,
    };
    Store::open(dir, config).expect("store opens")
}

/// Distinct content of `len` bytes for each `seed`.
pub fn content(seed: u32, len: usize) -> Vec<u8> {
    let mut data: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect();
    data[..4].copy_from_slice(&seed.to_le_bytes());
    data
}

pub fn blob_path(dir: &Path, hash: &Hash) -> PathBuf {
    let hex = hash.to_hex();
    dir.join("blobs").join(&hex[..2]).join(hex)
}

/// Every file below `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Threads on each of `stores` (instances sharing one durable tier, or one store
/// shared by threads) append their own entries to one record by read-modify-write at
/// once; every entry must be there afterwards, none dropped by a concurrent writer.
pub fn concurrent_updates_lose_nothing(stores: &[Store]) {
    const THREADS_PER_STORE: usize = 4;
    const APPENDS: usize = 25;
    let key = "hist:example.org/contended";
    std::thread::scope(|scope| {
        for (s, store) in stores.iter().enumerate() {
            for t in 0..THREADS_PER_STORE {
                scope.spawn(move || {
                    for n in 0..APPENDS {
                        let entry = format!("{s}.{t}.{n};");
                        store
                            .update_record(key, |current| {
                                let mut value = current.unwrap_or_default().to_vec();
                                value.extend_from_slice(entry.as_bytes());
                                Some((value, Vec::new()))
                            })
                            .expect("the update lands within its attempts");
                    }
                });
            }
        }
    });
    let value = stores[0]
        .get_record(key)
        .unwrap()
        .expect("the record exists");
    let value = String::from_utf8(value).unwrap();
    let mut entries: Vec<&str> = value.split_terminator(';').collect();
    entries.sort_unstable();
    entries.dedup();
    assert_eq!(
        entries.len(),
        stores.len() * THREADS_PER_STORE * APPENDS,
        "entries lost to concurrent writers"
    );
    // `None` from the change leaves the record alone.
    stores[0].update_record(key, |_| None).unwrap();
    assert_eq!(
        stores[0].get_record(key).unwrap().unwrap(),
        value.as_bytes()
    );
}
