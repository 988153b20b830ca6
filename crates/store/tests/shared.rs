//! The store on Redis, against real `redis-server`s: what one instance stores another
//! reads; large blobs are chunked; damaged or truncated values are absent and removed;
//! an unreachable Redis fails calls fast and is found again after it restarts, each
//! change reported once.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use testbed::redis::{RedisCluster, RedisServer};
use wirefold_store::{
    Hash, SharedState, StateObserver, Store, StoreConfig, StoreError, StoreLocation, CHUNK_BYTES,
};

fn open(url: &str, observer: Option<StateObserver>) -> Store {
    let location =
        StoreLocation::from_setting(Some(url), "unused".into(), Duration::from_millis(500))
            .unwrap();
    Store::open_at(&location, StoreConfig::default(), observer).unwrap()
}

/// Bytes that do not repeat, so no two chunks are alike.
fn body(len: usize, seed: u8) -> Vec<u8> {
    let mut state = u64::from(seed) + 1;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// What one instance stores, another (its own local tier, empty) reads.
fn shared_between_instances(url: &str) {
    let (a, b) = (open(url, None), open(url, None));
    let small = b"<p>hello fleet</p>".to_vec();
    let large = body(2 * CHUNK_BYTES + 1234, 7);
    let small_hash = a.put_blob(&small).unwrap();
    let large_hash = a.put_blob(&large).unwrap();
    assert_eq!(b.get_blob(&small_hash).unwrap().unwrap(), small);
    assert_eq!(b.get_blob(&large_hash).unwrap().unwrap(), large);
    assert!(b.has_blob(&large_hash));
    assert!(b.get_blob(&Hash::of(b"never stored")).unwrap().is_none());

    a.put_record("hist:example.org/a?x=1", b"one", &[small_hash])
        .unwrap();
    a.put_record("hist:example.org/b", b"two", &[]).unwrap();
    a.put_record("hist:other.org/c", b"three", &[]).unwrap();
    assert_eq!(b.get_record("hist:example.org/b").unwrap().unwrap(), b"two");
    let listed = b.records_with_prefix("hist:example.org/", 10).unwrap();
    assert_eq!(
        listed,
        vec![
            ("hist:example.org/a?x=1".to_string(), b"one".to_vec()),
            ("hist:example.org/b".to_string(), b"two".to_vec()),
        ]
    );
    assert!(matches!(
        b.records_with_prefix("hist:", 10),
        Err(StoreError::PrefixTooShort { .. })
    ));
    b.remove_record("hist:example.org/b").unwrap();
    assert!(a.get_record("hist:example.org/b").unwrap().is_none());
    assert!(matches!(
        a.put_record("k/", b"v", &[Hash::of(b"absent")]),
        Err(StoreError::MissingBlob(_))
    ));

    a.put_encoding(&large_hash, "br-5", b"pretend br").unwrap();
    assert_eq!(
        b.get_encoding(&large_hash, "br-5").unwrap().unwrap(),
        &b"pretend br"[..]
    );
    assert_eq!(
        b.get_encoding_in_memory(&large_hash, "br-5").unwrap(),
        &b"pretend br"[..]
    );
    assert!(matches!(
        a.put_encoding(&Hash::of(b"absent"), "br-5", b"x"),
        Err(StoreError::MissingBlob(_))
    ));
}

#[test]
fn one_redis_is_shared_by_instances() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path()).unwrap();
    shared_between_instances(&redis.url());
}

#[test]
fn a_redis_cluster_is_shared_by_instances() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path(), 3).unwrap();
    shared_between_instances(&cluster.url());
}

#[test]
fn concurrent_updates_from_two_instances_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path()).unwrap();
    common::concurrent_updates_lose_nothing(&[open(&redis.url(), None), open(&redis.url(), None)]);
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path(), 3).unwrap();
    common::concurrent_updates_lose_nothing(&[
        open(&cluster.url(), None),
        open(&cluster.url(), None),
    ]);
}

#[test]
fn foreign_and_truncated_values_are_absent_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path()).unwrap();
    let writer = open(&redis.url(), None);
    let small = writer.put_blob(b"small body").unwrap();
    let large = writer.put_blob(&body(CHUNK_BYTES + 10, 3)).unwrap();

    // Someone else's value under a blob's key.
    let head = format!("wf:b:{{{}}}", small.to_hex());
    assert!(redis
        .ask(&format!("SET {head} foreign"))
        .unwrap()
        .starts_with("+OK"));
    // A chunk evicted by allkeys-lru.
    let chunk = format!("wf:b:{{{}}}:1", large.to_hex());
    assert!(redis
        .ask(&format!("DEL {chunk}"))
        .unwrap()
        .starts_with(":1"));
    // An encoding name that is no hash.
    writer.put_encoding(&small, "gzip-6", b"x").unwrap();
    let name = format!("wf:e:{{{}}}:gzip-6", small.to_hex());
    assert!(redis
        .ask(&format!("SET {name} short"))
        .unwrap()
        .starts_with("+OK"));

    let reader = open(&redis.url(), None);
    assert!(reader.get_blob(&small).unwrap().is_none());
    assert!(reader.get_blob(&large).unwrap().is_none());
    assert!(reader.get_encoding(&small, "gzip-6").unwrap().is_none());
    for key in [head, format!("wf:b:{{{}}}", large.to_hex()), name] {
        assert!(
            redis
                .ask(&format!("EXISTS {key}"))
                .unwrap()
                .starts_with(":0"),
            "{key} removed"
        );
    }
}

#[test]
fn an_unreachable_redis_fails_fast_and_is_found_again_each_change_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start(dir.path()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let observer: StateObserver = {
        let seen = seen.clone();
        Arc::new(move |state| seen.lock().unwrap().push(state))
    };
    let store = open(&redis.url(), Some(observer));
    let hash = store.put_blob(b"kept in memory too").unwrap();
    assert_eq!(store.shared_state(), Some(SharedState::Available));

    redis.kill();
    for _ in 0..20 {
        assert!(matches!(
            store.get_record("hist:example.org/x"),
            Err(StoreError::Unavailable { .. })
        ));
    }
    assert_eq!(store.shared_state(), Some(SharedState::Unreachable));
    // The local tier still answers for what it holds.
    assert!(store.get_blob_in_memory(&hash).is_some());
    assert_eq!(*seen.lock().unwrap(), [SharedState::Unreachable]);

    redis.restart().unwrap();
    let mut answered = false;
    for _ in 0..200 {
        if store.get_record("hist:example.org/x").is_ok() {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(answered, "the store reconnects after Redis restarts");
    assert_eq!(store.shared_state(), Some(SharedState::Available));
    assert_eq!(
        *seen.lock().unwrap(),
        [SharedState::Unreachable, SharedState::Available]
    );
}

#[test]
fn a_redis_slower_than_the_budget_counts_as_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path()).unwrap();
    let store = open(&redis.url(), None);
    store
        .put_record("hist:example.org/slow", b"v", &[])
        .unwrap();
    // The server answers nothing for 3 s; the store's budget is 500 ms.
    let port = redis.port;
    let sleeper = std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(&mut stream, b"DEBUG SLEEP 3\r\n").unwrap();
        let mut reply = [0; 16];
        let _ = std::io::Read::read(&mut stream, &mut reply);
    });
    // Once the server sleeps, a call waits out the budget and fails.
    let mut timed_out = false;
    for _ in 0..100 {
        if matches!(
            store.get_record("hist:example.org/slow"),
            Err(StoreError::Unavailable { .. })
        ) {
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        timed_out,
        "a call to a sleeping Redis fails within the budget"
    );
    assert_eq!(store.shared_state(), Some(SharedState::Unreachable));
    sleeper.join().unwrap();
    let mut answered = None;
    for _ in 0..200 {
        if let Ok(value) = store.get_record("hist:example.org/slow") {
            answered = value;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answered.as_deref(), Some(&b"v"[..]));
    assert_eq!(store.shared_state(), Some(SharedState::Available));
}
