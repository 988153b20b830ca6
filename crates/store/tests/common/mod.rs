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
