//! Behaviour of the store through its public API, including restarts and damage on disk.

mod common;

use std::fs;
use std::sync::Arc;
use std::thread;

use common::{blob_path, content, files_under, open, open_with_budget};
use wirefold_store::{Hash, Store, StoreConfig, StoreError};

#[test]
fn blobs_records_and_encodings_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let body = content(1, 5000);
    let hash = store.put_blob(&body).unwrap();
    assert_eq!(hash, Hash::of(&body));
    assert!(store.has_blob(&hash));
    assert_eq!(store.get_blob(&hash).unwrap().unwrap(), body);
    assert_eq!(store.get_blob(&Hash::of(b"never stored")).unwrap(), None);

    store.put_record("page:/index", b"meta", &[hash]).unwrap();
    assert_eq!(store.get_record("page:/index").unwrap().unwrap(), b"meta");
    store
        .put_record("page:/index", b"meta2", &[hash, hash])
        .unwrap();
    assert_eq!(store.get_record("page:/index").unwrap().unwrap(), b"meta2");
    store.put_record("no-refs", b"", &[]).unwrap();
    assert_eq!(store.get_record("no-refs").unwrap().unwrap(), b"");
    store.remove_record("no-refs").unwrap();
    store.remove_record("never there").unwrap();
    assert_eq!(store.get_record("no-refs").unwrap(), None);

    store.put_encoding(&hash, "br-5", b"compressed").unwrap();
    assert_eq!(
        store.get_encoding(&hash, "br-5").unwrap().unwrap(),
        &b"compressed"[..]
    );
    assert_eq!(store.get_encoding(&hash, "gzip-6").unwrap(), None);
    store.put_encoding(&hash, "br-5", b"recompressed").unwrap();
    assert_eq!(
        store.get_encoding(&hash, "br-5").unwrap().unwrap(),
        &b"recompressed"[..]
    );

    let stats = store.stats();
    assert_eq!(stats.blobs, 3);
    assert_eq!(stats.disk_bytes, 5000 + 10 + 12);
    assert_eq!(stats.records, 1);
    assert_eq!(
        stats.memory_bytes,
        5000 + 10 + 12,
        "both encodings were read"
    );
}

#[test]
fn concurrent_updates_of_one_record_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    common::concurrent_updates_lose_nothing(&[common::open(dir.path())]);
}

/// Another writer replacing the record under every attempt: the update gives up
/// after its attempts, saying which record, and what that writer stored is kept.
#[test]
fn an_update_that_always_loses_gives_up_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::open(dir.path());
    let key = "hist:example.org/contended";
    let mut rival = 0u32;
    let outcome = store.update_record(key, |_| {
        rival += 1;
        store
            .put_record(key, format!("rival {rival}").as_bytes(), &[])
            .unwrap();
        Some((b"mine".to_vec(), Vec::new()))
    });
    assert!(
        matches!(&outcome, Err(StoreError::Contended { key: k, attempts })
            if k == key && *attempts == wirefold_store::UPDATE_ATTEMPTS),
        "{outcome:?}"
    );
    assert_eq!(rival, wirefold_store::UPDATE_ATTEMPTS);
    assert_eq!(
        store.get_record(key).unwrap().unwrap(),
        format!("rival {rival}").as_bytes()
    );
}

#[test]
fn references_must_name_stored_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let absent = Hash::of(b"absent");
    assert!(
        matches!(store.put_record("k", b"v", &[absent]), Err(StoreError::MissingBlob(h)) if h == absent)
    );
    assert!(
        matches!(store.put_encoding(&absent, "br-5", b"x"), Err(StoreError::MissingBlob(h)) if h == absent)
    );
    assert_eq!(store.stats().records, 0);
}

#[test]
fn contents_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (blob, streamed) = {
        let store = open(dir.path());
        let blob = store.put_blob(b"hello").unwrap();
        let mut writer = store.blob_writer().unwrap();
        writer.write(b"streamed ").unwrap();
        writer.write(b"body").unwrap();
        let streamed = writer.finish().unwrap();
        store.put_record("r", b"value", &[blob, streamed]).unwrap();
        store.put_encoding(&blob, "zstd-3", b"zz").unwrap();
        (blob, streamed)
    };
    let store = open(dir.path());
    assert_eq!(store.get_blob(&blob).unwrap().unwrap(), &b"hello"[..]);
    assert_eq!(
        store.get_blob(&streamed).unwrap().unwrap(),
        &b"streamed body"[..]
    );
    assert_eq!(streamed, Hash::of(b"streamed body"));
    assert_eq!(store.get_record("r").unwrap().unwrap(), b"value");
    assert_eq!(
        store.get_encoding(&blob, "zstd-3").unwrap().unwrap(),
        &b"zz"[..]
    );
    let stats = store.stats();
    assert_eq!(
        (stats.blobs, stats.disk_bytes, stats.records),
        (3, 5 + 13 + 2, 1)
    );
}

#[test]
fn storing_the_same_bytes_twice_keeps_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let first = store.put_blob(b"same").unwrap();
    let second = store.put_blob(b"same").unwrap();
    let mut writer = store.blob_writer().unwrap();
    writer.write(b"sa").unwrap();
    writer.write(b"me").unwrap();
    let third = writer.finish().unwrap();
    assert_eq!((first, second), (third, third));
    assert_eq!(store.stats().blobs, 1);
    assert_eq!(store.stats().disk_bytes, 4);
    assert_eq!(
        files_under(&dir.path().join("blobs")),
        [blob_path(dir.path(), &first)]
    );
    assert!(files_under(&dir.path().join("tmp")).is_empty());
}

#[test]
fn eviction_removes_least_recently_used_blobs_and_what_references_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_budget(dir.path(), 3000);
    let a = store.put_blob(&content(1, 1000)).unwrap();
    let b = store.put_blob(&content(2, 1000)).unwrap();
    let c = store.put_blob(&content(3, 900)).unwrap();
    let b_encoded = store.put_blob(&content(9, 50)).unwrap();
    store.put_encoding(&b, "br-5", &content(9, 50)).unwrap();
    store.put_record("uses-b", b"", &[b]).unwrap();
    store.put_record("uses-a-and-c", b"", &[a, c]).unwrap();
    assert_eq!(store.get_blob(&a).unwrap().unwrap(), content(1, 1000));

    // Over budget by 950: b is now the least recently used and goes with its dependants.
    let d = store.put_blob(&content(4, 1000)).unwrap();
    assert!(!store.has_blob(&b));
    assert!(!blob_path(dir.path(), &b).exists());
    assert_eq!(store.get_record("uses-b").unwrap(), None);
    assert_eq!(store.get_encoding(&b, "br-5").unwrap(), None);
    assert!(
        !store.has_blob(&b_encoded),
        "an encoding's blob goes with its source"
    );
    assert!(store.has_blob(&a) && store.has_blob(&c) && store.has_blob(&d));
    assert!(store.get_record("uses-a-and-c").unwrap().is_some());
    let stats = store.stats();
    assert!(stats.disk_bytes <= 3000, "{stats:?}");
    assert_eq!((stats.blobs, stats.records), (3, 1));

    // Referencing the encoded blob of a live source keeps it stored when the source goes.
    let e = store.put_blob(&content(5, 100)).unwrap();
    store.put_encoding(&e, "gzip-6", &content(6, 10)).unwrap();
    store
        .put_record("uses-encoding", b"", &[Hash::of(&content(6, 10))])
        .unwrap();
    for seed in 10..16 {
        store.put_blob(&content(seed, 700)).unwrap();
        store.get_blob(&Hash::of(&content(6, 10))).unwrap();
    }
    assert!(!store.has_blob(&e));
    assert!(store.has_blob(&Hash::of(&content(6, 10))));
    assert!(store.get_record("uses-encoding").unwrap().is_some());
    assert!(store.stats().disk_bytes <= 3000);
    assert_eq!(
        files_under(&dir.path().join("blobs")).len() as u64,
        store.stats().blobs
    );
}

#[test]
fn after_restart_eviction_follows_insertion_order() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = {
        let store = open_with_budget(dir.path(), 2000);
        let a = store.put_blob(&content(1, 1000)).unwrap();
        let b = store.put_blob(&content(2, 1000)).unwrap();
        store.get_blob(&a).unwrap();
        [a, b]
    };
    let store = open_with_budget(dir.path(), 2000);
    store.put_blob(&content(3, 1000)).unwrap();
    assert!(!store.has_blob(&a));
    assert!(store.has_blob(&b));
}

#[test]
fn a_smaller_budget_evicts_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        for seed in 0..5 {
            store.put_blob(&content(seed, 1000)).unwrap();
        }
    }
    let store = open_with_budget(dir.path(), 2500);
    assert_eq!(store.stats().disk_bytes, 2000);
    assert!(store.has_blob(&Hash::of(&content(4, 1000))));
}

#[test]
fn open_recovers_from_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, lost, lost_encoding) = {
        let store = open(dir.path());
        let kept = store.put_blob(b"kept").unwrap();
        let lost = store.put_blob(b"lost").unwrap();
        store.put_encoding(&lost, "br-5", b"lost-encoded").unwrap();
        store.put_record("uses-lost", b"", &[kept, lost]).unwrap();
        store.put_record("uses-kept", b"", &[kept]).unwrap();
        (kept, lost, Hash::of(b"lost-encoded"))
    };
    // A rename that did not survive the crash, a blob written but never indexed, and a write
    // in flight.
    fs::remove_file(blob_path(dir.path(), &lost)).unwrap();
    let orphan = Hash::of(b"orphan");
    let orphan_path = blob_path(dir.path(), &orphan);
    fs::create_dir_all(orphan_path.parent().unwrap()).unwrap();
    fs::write(&orphan_path, b"orphan").unwrap();
    fs::write(dir.path().join("tmp").join("4242-0.tmp"), b"half a bo").unwrap();

    let store = open(dir.path());
    assert!(store.has_blob(&kept));
    assert!(!store.has_blob(&lost));
    assert!(!store.has_blob(&orphan));
    assert!(!store.has_blob(&lost_encoding));
    assert!(!orphan_path.exists());
    assert!(files_under(&dir.path().join("tmp")).is_empty());
    assert_eq!(store.get_record("uses-lost").unwrap(), None);
    assert!(store.get_record("uses-kept").unwrap().is_some());
    assert_eq!(
        files_under(&dir.path().join("blobs")),
        [blob_path(dir.path(), &kept)]
    );
    let stats = store.stats();
    assert_eq!((stats.blobs, stats.disk_bytes, stats.records), (1, 4, 1));
}

#[test]
fn a_damaged_blob_file_is_removed_with_what_references_it() {
    let dir = tempfile::tempdir().unwrap();
    let (damaged, healthy) = {
        let store = open(dir.path());
        let damaged = store.put_blob(&content(1, 300)).unwrap();
        let healthy = store.put_blob(&content(2, 300)).unwrap();
        store
            .put_record("uses-damaged", b"", &[damaged, healthy])
            .unwrap();
        store.put_record("uses-healthy", b"", &[healthy]).unwrap();
        store.put_encoding(&damaged, "br-5", b"enc").unwrap();
        (damaged, healthy)
    };
    let path = blob_path(dir.path(), &damaged);
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 1;
    fs::write(&path, bytes).unwrap();

    // Reopened, so the read cannot come from the memory cache.
    let store = open(dir.path());
    let before = store.changes();
    assert_eq!(store.get_blob(&damaged).unwrap(), None);
    assert_eq!(
        store.changes(),
        before + 1,
        "the removal is a counted write"
    );
    assert!(!store.has_blob(&damaged));
    assert!(!path.exists());
    assert_eq!(store.get_record("uses-damaged").unwrap(), None);
    assert_eq!(store.get_encoding(&damaged, "br-5").unwrap(), None);
    assert_eq!(store.get_blob(&healthy).unwrap().unwrap(), content(2, 300));
    assert!(store.get_record("uses-healthy").unwrap().is_some());
    let again = store.put_blob(&content(1, 300)).unwrap();
    assert_eq!(store.get_blob(&again).unwrap().unwrap(), content(1, 300));
}

#[test]
fn a_corrupt_index_stops_open_and_is_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index.redb");
    let garbage: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(&index, &garbage).unwrap();
    match Store::open(dir.path(), StoreConfig::default()) {
        Err(err @ StoreError::Corrupt { .. }) => {
            let StoreError::Corrupt { path, .. } = &err else {
                unreachable!()
            };
            assert_eq!(path, &index);
            assert!(
                err.to_string().contains(&index.display().to_string()),
                "{err}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(fs::read(&index).unwrap(), garbage);
}

#[test]
fn one_store_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _store = open(dir.path());
    assert!(matches!(
        Store::open(dir.path(), StoreConfig::default()),
        Err(StoreError::InUse { .. })
    ));
}

#[test]
fn objects_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        max_bytes: 10_000,
        memory_bytes: 1000,
        max_object_bytes: 100,
    };
    let store = Store::open(dir.path(), config).unwrap();
    assert!(matches!(
        store.put_blob(&[0; 101]),
        Err(StoreError::TooLarge { limit: 100 })
    ));
    store.put_blob(&[0; 100]).unwrap();

    let mut writer = store.blob_writer().unwrap();
    writer.write(&[1; 60]).unwrap();
    assert!(matches!(
        writer.write(&[1; 41]),
        Err(StoreError::TooLarge { limit: 100 })
    ));
    assert!(matches!(
        writer.finish(),
        Err(StoreError::TooLarge { limit: 100 })
    ));
    assert!(files_under(&dir.path().join("tmp")).is_empty());
    assert_eq!(store.stats().blobs, 1);
}

#[test]
fn dropping_an_unfinished_writer_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut writer = store.blob_writer().unwrap();
    writer.write(&content(1, 200_000)).unwrap();
    assert_eq!(files_under(&dir.path().join("tmp")).len(), 1);
    drop(writer);
    assert!(files_under(&dir.path().join("tmp")).is_empty());
    assert!(files_under(&dir.path().join("blobs")).is_empty());
    assert_eq!(store.stats().blobs, 0);
}

#[test]
fn memory_cache_stays_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        max_bytes: 100_000,
        memory_bytes: 2500,
        max_object_bytes: 10_000,
    };
    let store = Store::open(dir.path(), config).unwrap();
    let hashes: Vec<Hash> = (0..5)
        .map(|seed| store.put_blob(&content(seed, 1000)).unwrap())
        .collect();
    let big = store.put_blob(&content(9, 5000)).unwrap();
    for hash in hashes.iter().chain([&big]) {
        store.get_blob(hash).unwrap().unwrap();
        assert!(store.stats().memory_bytes <= 2500);
    }
    assert_eq!(store.stats().memory_bytes, 2000);
}

#[test]
fn concurrent_use_keeps_the_store_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_with_budget(dir.path(), 20_000));
    let workers: Vec<_> = (0..4u32)
        .map(|worker| {
            let store = Store::clone(&store);
            thread::spawn(move || {
                for round in 0..40u32 {
                    let seed = worker * 1000 + round % 15;
                    let body = content(seed, 1000 + (seed as usize % 7) * 100);
                    let hash = match store.put_blob(&body) {
                        Ok(hash) => hash,
                        Err(err) => panic!("put failed: {err}"),
                    };
                    let _ = store.put_record(&format!("r{seed}"), b"v", &[hash]);
                    if let Some(read) = store.get_blob(&hash).unwrap() {
                        assert_eq!(read, body);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let stats = store.stats();
    assert!(stats.disk_bytes <= 20_000, "{stats:?}");
    assert_eq!(
        files_under(&dir.path().join("blobs")).len() as u64,
        stats.blobs
    );
    drop(store);
    let reopened = open_with_budget(dir.path(), 20_000);
    assert_eq!(reopened.stats().blobs, stats.blobs);
    assert_eq!(reopened.stats().records, stats.records);
}

#[test]
fn an_empty_index_file_is_initialised() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("index.redb"), b"").unwrap();
    let store = open(dir.path());
    store.put_blob(b"works").unwrap();
}

#[test]
fn handles_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync + Clone>() {}
    shareable::<Store>();
    fn sendable<T: Send>() {}
    sendable::<wirefold_store::BlobWriter>();
}

#[test]
fn hot_blobs_and_encodings_are_found_in_memory_and_forgotten_with_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        max_bytes: 10_000,
        memory_bytes: 10_000,
        max_object_bytes: 10_000,
    };
    let store = Store::open(dir.path(), config).unwrap();
    let source = store.put_blob(&[1u8; 3000]).unwrap();
    assert_eq!(store.get_blob_in_memory(&source).unwrap().len(), 3000);
    store.put_encoding(&source, "br-11", &[2u8; 100]).unwrap();
    assert_eq!(
        store.get_encoding_in_memory(&source, "br-11").unwrap(),
        vec![2u8; 100]
    );
    assert!(store.get_encoding_in_memory(&source, "gzip-9").is_none());
    // Push the source out of the byte budget: its encoding goes with it, in memory too.
    for i in 0..4u8 {
        store.put_blob(&[10 + i; 3000]).unwrap();
    }
    assert!(store.get_blob_in_memory(&source).is_none());
    assert!(store.get_encoding_in_memory(&source, "br-11").is_none());
    assert!(store.get_encoding(&source, "br-11").unwrap().is_none());
}

#[test]
fn records_are_listed_by_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    for key in ["hist:a/1", "hist:a/2", "hist:b/1", "http:a/1"] {
        store.put_record(key, key.as_bytes(), &[]).unwrap();
    }
    let keys: Vec<String> = store
        .records_with_prefix("hist:a/", 10)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["hist:a/1", "hist:a/2"]);
    assert_eq!(store.records_with_prefix("hist:", 2).unwrap().len(), 2);
    assert!(store.records_with_prefix("none:", 10).unwrap().is_empty());
}

#[test]
fn every_write_is_counted_once_it_took_effect_and_no_read_is() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let body = content(2, 3000);
    let mut counted = store.changes();
    let mut step = |what: &str| {
        let now = store.changes();
        assert_eq!(now, counted + 1, "{what}");
        counted = now;
    };
    let hash = store.put_blob(&body).unwrap();
    step("a blob");
    store.put_record("k", b"v", &[hash]).unwrap();
    step("a record");
    store
        .update_record("k", |_| Some((b"w".to_vec(), vec![hash])))
        .unwrap();
    step("an update");
    store.put_encoding(&hash, "br-11", b"coded").unwrap();
    step("an encoding");
    let mut writer = store.blob_writer().unwrap();
    writer.write(b"streamed").unwrap();
    writer.finish().unwrap();
    step("a streamed blob");
    store.remove_record("k").unwrap();
    step("a removal");
    let before_reads = store.changes();
    store.get_blob(&hash).unwrap();
    store.get_record("k").unwrap();
    store.get_encoding(&hash, "br-11").unwrap();
    store.update_record("k", |_| None).unwrap();
    assert_eq!(
        store.changes(),
        before_reads,
        "reads and an update that writes nothing"
    );
    store.put_unwatched_record("net", b"estimate").unwrap();
    assert_eq!(store.changes(), before_reads, "an unwatched record");
    assert_eq!(
        store.get_record("net").unwrap().as_deref(),
        Some(&b"estimate"[..])
    );
}
