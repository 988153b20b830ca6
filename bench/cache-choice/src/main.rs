//! Get/insert throughput with 2 threads and hit ratio for moka and quick_cache, on a
//! Zipf-skewed key stream over 100,000 URLs with 10% one-off keys (a scan), at the
//! proxy's 16,384 entries. Today's empty-when-full map is measured beside them.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

const CAPACITY: usize = 16_384;
const KEYS: usize = 100_000;
const ZIPF_EXPONENT: f64 = 1.0;
const SCAN_SHARE: f64 = 0.10;
const OPS_PER_THREAD: usize = 2_000_000;
const THREADS: usize = 2;

type Value = Arc<[u8; 64]>;

/// The operations a measured cache offers (all hold `String` keys like the proxy's).
trait Cache: Sync {
    fn get(&self, key: &str) -> Option<Value>;
    fn insert(&self, key: &str, value: Value);
}

struct Moka(moka::sync::Cache<String, Value>);
impl Cache for Moka {
    fn get(&self, key: &str) -> Option<Value> {
        self.0.get(key)
    }
    fn insert(&self, key: &str, value: Value) {
        self.0.insert(key.to_string(), value);
    }
}

struct Quick(quick_cache::sync::Cache<String, Value>);
impl Cache for Quick {
    fn get(&self, key: &str) -> Option<Value> {
        self.0.get(key)
    }
    fn insert(&self, key: &str, value: Value) {
        self.0.insert(key.to_string(), value);
    }
}

/// What the proxy did before: one mutex, and the map emptied when full.
struct ClearWhenFull(Mutex<HashMap<String, Value>>);
impl Cache for ClearWhenFull {
    fn get(&self, key: &str) -> Option<Value> {
        self.0.lock().unwrap().get(key).cloned()
    }
    fn insert(&self, key: &str, value: Value) {
        let mut map = self.0.lock().unwrap();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(key.to_string(), value);
    }
}

/// xorshift64*: deterministic streams without a dependency.
struct Rng(u64);
impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One thread's keys: Zipf ranks, and one-off keys never seen again.
fn stream(thread: usize, cumulative: &[f64]) -> Vec<String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (thread as u64 + 1));
    let total = *cumulative.last().unwrap();
    (0..OPS_PER_THREAD)
        .map(|i| {
            if rng.next_f64() < SCAN_SHARE {
                format!("https://site.example/once/{thread}/{i}")
            } else {
                let rank = cumulative.partition_point(|&c| c < rng.next_f64() * total);
                format!("https://site.example/page/{rank}")
            }
        })
        .collect()
}

/// (operations per second over all threads, hit ratio).
fn measure(cache: &dyn Cache, streams: &[Vec<String>]) -> (f64, f64) {
    let barrier = Barrier::new(streams.len());
    let started = Instant::now();
    let hits: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = streams
            .iter()
            .map(|keys| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let value: Value = Arc::new([7; 64]);
                    barrier.wait();
                    let mut hits = 0;
                    for key in keys {
                        match cache.get(key) {
                            Some(_) => hits += 1,
                            None => cache.insert(key, value.clone()),
                        }
                    }
                    hits
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let ops = (streams.len() * OPS_PER_THREAD) as f64;
    (ops / started.elapsed().as_secs_f64(), hits as f64 / ops)
}

fn main() {
    let mut cumulative = Vec::with_capacity(KEYS);
    let mut sum = 0.0;
    for rank in 1..=KEYS {
        sum += 1.0 / (rank as f64).powf(ZIPF_EXPONENT);
        cumulative.push(sum);
    }
    let streams: Vec<Vec<String>> = (0..THREADS).map(|t| stream(t, &cumulative)).collect();
    println!(
        "{THREADS} threads x {OPS_PER_THREAD} get-or-insert, Zipf s={ZIPF_EXPONENT} over {KEYS} keys, \
         {:.0}% one-off keys, capacity {CAPACITY}",
        SCAN_SHARE * 100.0
    );
    let caches: [(&str, Box<dyn Cache>); 3] = [
        ("moka", Box::new(Moka(moka::sync::Cache::new(CAPACITY as u64)))),
        ("quick_cache", Box::new(Quick(quick_cache::sync::Cache::new(CAPACITY)))),
        ("clear-when-full", Box::new(ClearWhenFull(Mutex::new(HashMap::new())))),
    ];
    for (name, cache) in caches {
        let (ops_per_second, hit_ratio) = measure(cache.as_ref(), &streams);
        println!(
            "{name:>16}: {:>6.2} M ops/s, hit ratio {:.1}%",
            ops_per_second / 1e6,
            hit_ratio * 100.0
        );
    }
}
