//! The status page on the admin listener (`GET /`): live bytes saved by mechanism and
//! content type over the last hour, cache and encoding hit rates, the resources and
//! dictionaries that saved most, origin latency, the proxy pair's link, and the
//! configuration in force.
//!
//! [`StatusBoard`] keeps what the page shows, in bounded memory: a ring of per-minute
//! tallies for the last hour, and Space-Saving counters (Metwally, Agrawal & El
//! Abbadi, 2005) for the top resources and dictionaries since start. The page is
//! HTML and a script of wirefold's own (`page.html`, `page.js`) that draws SVG from
//! `GET /status.json`, refreshed every few seconds; it loads nothing from elsewhere.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::Config;
use crate::metrics::{content_type_family, Metrics, CONTENT_TYPE_FAMILIES};
use crate::model::Provenance;
use crate::record::{LinkSample, RequestRecord};
use delta::derived::LookupResult;

/// The page: HTML with the first status inlined (so it draws before any fetch).
pub const PAGE_HTML: &str = include_str!("page.html");
/// The page's script, served as `/status.js` (the page's CSP allows only its own).
pub const PAGE_SCRIPT: &str = include_str!("page.js");
/// Where the page's first status goes.
const INITIAL_MARKER: &str = "{{initial-status}}";

/// Minutes the board keeps.
const MINUTES: usize = 60;
/// Resources and dictionaries tracked (the page shows the first few).
const TRACKED_RESOURCES: usize = 128;
const TRACKED_DICTIONARIES: usize = 32;
const SHOWN: usize = 10;
/// Cache outcomes in the order tallied (`Provenance::label`).
const CACHE_OUTCOMES: [&str; 6] = ["hit", "stale", "revalidated", "miss", "bypass", "file"];
/// Origin latency buckets: upper bounds in milliseconds, 0.5 ms doubling to 16 s, then
/// everything longer.
const LATENCY_BOUNDS_MS: [f64; 16] = [
    0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0,
];

/// What the status page shows, updated by every request's record.
pub struct StatusBoard {
    board: Mutex<Board>,
    started: SystemTime,
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard {
            board: Mutex::new(Board {
                minutes: vec![Minute::default(); MINUTES],
                resources: TopN::new(TRACKED_RESOURCES),
                dictionaries: TopN::new(TRACKED_DICTIONARIES),
                link_latest: None,
            }),
            started: SystemTime::now(),
        }
    }
}

struct Board {
    /// Minute `m` (since the epoch) is at `m % MINUTES` while it is the last hour's.
    minutes: Vec<Minute>,
    resources: TopN,
    dictionaries: TopN,
    link_latest: Option<(SystemTime, LinkSample)>,
}

#[derive(Clone, Default)]
struct Minute {
    /// Minutes since the epoch.
    index: u64,
    requests: u64,
    /// Per mechanism, per content type family (`CONTENT_TYPE_FAMILIES` order).
    bytes: HashMap<Cow<'static, str>, [Tally; CONTENT_TYPE_FAMILIES.len()]>,
    cache: [u64; CACHE_OUTCOMES.len()],
    origin: Latencies,
    dictionaries_announced: u64,
    dictionary_coded: u64,
    link: LinkTally,
}

#[derive(Clone, Copy, Default)]
struct Tally {
    responses: u64,
    original: u64,
    sent: u64,
    /// Per response, never negative: a coding that cost bytes saved none.
    saved: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.responses += other.responses;
        self.original += other.original;
        self.sent += other.sent;
        self.saved += other.saved;
    }
}

#[derive(Clone, Copy, Default)]
struct Latencies {
    count: u64,
    total_micros: u64,
    max_micros: u64,
    /// Per `LATENCY_BOUNDS_MS` bucket, and one for longer.
    buckets: [u64; LATENCY_BOUNDS_MS.len() + 1],
}

impl Latencies {
    fn add(&mut self, wait: Duration) {
        let micros = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        self.count += 1;
        self.total_micros = self.total_micros.saturating_add(micros);
        self.max_micros = self.max_micros.max(micros);
        let ms = wait.as_secs_f64() * 1000.0;
        let bucket = LATENCY_BOUNDS_MS
            .iter()
            .position(|&bound| ms <= bound)
            .unwrap_or(LATENCY_BOUNDS_MS.len());
        self.buckets[bucket] += 1;
    }

    fn merge(&mut self, other: &Latencies) {
        self.count += other.count;
        self.total_micros = self.total_micros.saturating_add(other.total_micros);
        self.max_micros = self.max_micros.max(other.max_micros);
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }

    fn mean_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_micros as f64 / self.count as f64 / 1000.0)
    }

    /// The bucket bound at or under which a share `q` of the waits fell; `None` when
    /// there were none, infinity for the longest bucket (shown as "more than 16 s").
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        let wanted = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, count) in self.buckets.iter().enumerate() {
            seen += count;
            if self.count > 0 && seen >= wanted {
                return Some(LATENCY_BOUNDS_MS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }
}

#[derive(Clone, Copy, Default)]
struct LinkTally {
    rate_samples: u64,
    rate_total: u64,
    rtt_samples: u64,
    rtt_total_micros: u64,
}

impl StatusBoard {
    /// Counts a completed request in the current minute.
    pub fn add(&self, record: &RequestRecord) {
        self.add_at(record, SystemTime::now());
    }

    fn add_at(&self, record: &RequestRecord, now: SystemTime) {
        let index = minute_of(now);
        let family = record
            .content_type
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .map_or("other", content_type_family);
        let family = CONTENT_TYPE_FAMILIES
            .iter()
            .position(|f| *f == family)
            .unwrap_or(CONTENT_TYPE_FAMILIES.len() - 1);
        let saved = record.saved();
        let mut board = self.board.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut board.minutes[(index % MINUTES as u64) as usize];
        if slot.index != index {
            *slot = Minute {
                index,
                ..Minute::default()
            };
        }
        slot.requests += 1;
        if let Some(mechanism) = &record.mechanism {
            let tally = match slot.bytes.get_mut(mechanism.as_ref()) {
                Some(tallies) => &mut tallies[family],
                None => {
                    let tallies = slot.bytes.entry(mechanism.clone()).or_default();
                    &mut tallies[family]
                }
            };
            tally.add(&Tally {
                responses: 1,
                original: record.original_bytes,
                sent: record.bytes_sent,
                saved,
            });
        }
        if let Some(cache) = record.cache {
            slot.cache[cache_outcome(cache)] += 1;
        }
        if let Some(wait) = record.origin_wait {
            slot.origin.add(wait);
        }
        slot.dictionaries_announced += u64::from(record.dictionary_announced);
        slot.dictionary_coded += u64::from(record.dictionary_used.is_some());
        if let Some(sample) = record.link {
            let link = &mut slot.link;
            if let Some(rate) = sample.delivery_rate {
                link.rate_samples += 1;
                link.rate_total = link.rate_total.saturating_add(rate);
            }
            if let Some(rtt) = sample.rtt {
                link.rtt_samples += 1;
                link.rtt_total_micros = link
                    .rtt_total_micros
                    .saturating_add(u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX));
            }
            board.link_latest = Some((now, sample));
        }
        if saved > 0 {
            if let Some(resource) = &record.resource {
                board.resources.add(resource, saved);
            }
            if let Some(dictionary) = record.dictionary_used {
                board.dictionaries.add(&dictionary.to_hex(), saved);
            }
        }
    }

    /// The last hour, minute by minute up to `now`, and the rankings since start.
    fn snapshot(&self, now: SystemTime) -> BoardSnapshot {
        let current = minute_of(now);
        let first = current.saturating_sub(MINUTES as u64 - 1);
        let board = self.board.lock().unwrap_or_else(PoisonError::into_inner);
        let hour: Vec<Option<&Minute>> = (first..=current)
            .map(|index| {
                let slot = &board.minutes[(index % MINUTES as u64) as usize];
                (slot.index == index).then_some(slot)
            })
            .collect();
        let minutes = (first..=current).map(|m| m * 60).collect();

        let mut by_mechanism: HashMap<&str, (Tally, Vec<u64>)> = HashMap::new();
        let mut by_family: Vec<(Tally, Vec<u64>)> =
            vec![(Tally::default(), vec![0; MINUTES]); CONTENT_TYPE_FAMILIES.len()];
        let mut cache = [0u64; CACHE_OUTCOMES.len()];
        let mut origin = Latencies::default();
        let mut origin_by_minute = Vec::with_capacity(MINUTES);
        let (mut requests, mut announced, mut dictionary_coded) = (0, 0, 0);
        let mut link = LinkTally::default();
        for (i, minute) in hour.iter().enumerate() {
            let Some(minute) = minute else {
                origin_by_minute.push(None);
                continue;
            };
            requests += minute.requests;
            announced += minute.dictionaries_announced;
            dictionary_coded += minute.dictionary_coded;
            for (total, n) in cache.iter_mut().zip(minute.cache) {
                *total += n;
            }
            origin.merge(&minute.origin);
            origin_by_minute.push(minute.origin.mean_ms());
            link.rate_samples += minute.link.rate_samples;
            link.rate_total = link.rate_total.saturating_add(minute.link.rate_total);
            link.rtt_samples += minute.link.rtt_samples;
            link.rtt_total_micros = link
                .rtt_total_micros
                .saturating_add(minute.link.rtt_total_micros);
            for (mechanism, tallies) in &minute.bytes {
                let (total, series) = by_mechanism
                    .entry(mechanism.as_ref())
                    .or_insert_with(|| (Tally::default(), vec![0; MINUTES]));
                for (family, tally) in tallies.iter().enumerate() {
                    total.add(tally);
                    series[i] += tally.saved;
                    by_family[family].0.add(tally);
                    by_family[family].1[i] += tally.saved;
                }
            }
        }

        let row = |name: &str, tally: &Tally| Row {
            name: name.to_string(),
            responses: tally.responses,
            original: tally.original,
            sent: tally.sent,
            saved: tally.saved,
        };
        let mut mechanisms: Vec<Row> = by_mechanism
            .iter()
            .map(|(name, (tally, _))| row(name, tally))
            .collect();
        mechanisms.sort_by(|a, b| b.saved.cmp(&a.saved).then(b.responses.cmp(&a.responses)));
        let mut content_types: Vec<Row> = CONTENT_TYPE_FAMILIES
            .iter()
            .zip(&by_family)
            .filter(|(_, (tally, _))| tally.responses > 0)
            .map(|(name, (tally, _))| row(name, tally))
            .collect();
        content_types.sort_by_key(|row| std::cmp::Reverse(row.saved));
        let series = |named: Vec<(&str, &Tally, &Vec<u64>)>| {
            let mut series: Vec<Series> = named
                .into_iter()
                .filter(|(_, tally, _)| tally.saved > 0)
                .map(|(name, tally, values)| Series {
                    name: name.to_string(),
                    total: tally.saved,
                    values: values.clone(),
                })
                .collect();
            series.sort_by_key(|s| std::cmp::Reverse(s.total));
            series
        };
        let saved_by_mechanism = series(
            by_mechanism
                .iter()
                .map(|(name, (tally, values))| (*name, tally, values))
                .collect(),
        );
        let saved_by_content_type = series(
            CONTENT_TYPE_FAMILIES
                .iter()
                .zip(&by_family)
                .map(|(name, (tally, values))| (*name, tally, values))
                .collect(),
        );
        let mut totals = Tally::default();
        for (tally, _) in by_mechanism.values() {
            totals.add(tally);
        }
        let cache_counts = CACHE_OUTCOMES.into_iter().zip(cache).collect();
        let served_from_cache = cache[0] + cache[1] + cache[2];
        let cacheable = served_from_cache + cache[3];
        let link_rows: Vec<Row> = mechanisms
            .iter()
            .filter(|r| r.name.starts_with("link-"))
            .cloned()
            .collect();
        BoardSnapshot {
            minutes,
            requests,
            totals: row("all", &totals),
            saved_by_mechanism,
            saved_by_content_type,
            mechanisms,
            content_types,
            cache: CacheSnapshot {
                counts: cache_counts,
                hit_rate: rate(served_from_cache, cacheable),
            },
            top_resources: board.resources.top(SHOWN),
            dictionaries: DictionarySnapshot {
                announced,
                used: dictionary_coded,
                top: board.dictionaries.top(SHOWN),
            },
            origin: OriginSnapshot {
                exchanges: origin.count,
                mean_ms: origin.mean_ms(),
                p50_ms: origin.quantile_ms(0.5).map(finite_or_marker),
                p95_ms: origin.quantile_ms(0.95).map(finite_or_marker),
                max_ms: (origin.count > 0).then(|| origin.max_micros as f64 / 1000.0),
                mean_by_minute: origin_by_minute,
            },
            link: LinkSnapshot {
                exchanges: link_rows.iter().map(|r| r.responses).sum(),
                outcomes: link_rows,
                latest: board.link_latest.map(|(at, sample)| LinkReading {
                    at: unix_seconds(at),
                    rate_bps: sample.delivery_rate.map(|r| r.saturating_mul(8)),
                    rtt_ms: sample.rtt.map(|d| d.as_secs_f64() * 1000.0),
                }),
                mean_rate_bps: (link.rate_samples > 0)
                    .then(|| link.rate_total / link.rate_samples * 8),
                mean_rtt_ms: (link.rtt_samples > 0)
                    .then(|| link.rtt_total_micros as f64 / link.rtt_samples as f64 / 1000.0),
            },
        }
    }
}

/// The longest bucket has no bound: shown as -1 ("more than the last bound").
fn finite_or_marker(ms: f64) -> f64 {
    if ms.is_finite() {
        ms
    } else {
        -1.0
    }
}

fn rate(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn cache_outcome(provenance: Provenance) -> usize {
    let label = provenance.label();
    CACHE_OUTCOMES
        .iter()
        .position(|l| *l == label)
        .unwrap_or(CACHE_OUTCOMES.len() - 1)
}

fn minute_of(time: SystemTime) -> u64 {
    unix_seconds(time) / 60
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Space-Saving: at most `capacity` keys counted; a new key, when full, replaces the
/// one with the least and inherits its count (its possible overcount, `error`). A key
/// whose true total exceeds the smallest count is never lost, so the top of the list
/// is right for the heavy hitters a status page is about.
struct TopN {
    capacity: usize,
    entries: HashMap<String, Ranked>,
}

#[derive(Clone, Copy, Default)]
struct Ranked {
    saved: u64,
    responses: u64,
    error: u64,
}

impl TopN {
    fn new(capacity: usize) -> Self {
        TopN {
            capacity,
            entries: HashMap::with_capacity(capacity),
        }
    }

    fn add(&mut self, key: &str, saved: u64) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.saved += saved;
            entry.responses += 1;
            return;
        }
        let mut entry = Ranked {
            saved,
            responses: 1,
            error: 0,
        };
        if self.entries.len() >= self.capacity {
            let smallest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.saved)
                .map(|(k, e)| (k.clone(), e.saved));
            if let Some((key, least)) = smallest {
                self.entries.remove(&key);
                entry.saved += least;
                entry.error = least;
            }
        }
        self.entries.insert(key.to_string(), entry);
    }

    fn top(&self, n: usize) -> Vec<RankedRow> {
        let mut rows: Vec<RankedRow> = self
            .entries
            .iter()
            .map(|(name, e)| RankedRow {
                name: name.clone(),
                saved: e.saved,
                responses: e.responses,
                overcount: e.error,
            })
            .collect();
        rows.sort_by(|a, b| b.saved.cmp(&a.saved).then_with(|| a.name.cmp(&b.name)));
        rows.truncate(n);
        rows
    }
}

#[derive(Serialize)]
struct BoardSnapshot {
    /// The minutes charted, oldest first, as Unix times of their start.
    minutes: Vec<u64>,
    requests: u64,
    totals: Row,
    saved_by_mechanism: Vec<Series>,
    saved_by_content_type: Vec<Series>,
    mechanisms: Vec<Row>,
    content_types: Vec<Row>,
    cache: CacheSnapshot,
    top_resources: Vec<RankedRow>,
    dictionaries: DictionarySnapshot,
    origin: OriginSnapshot,
    link: LinkSnapshot,
}

#[derive(Clone, Serialize)]
struct Row {
    name: String,
    responses: u64,
    original: u64,
    sent: u64,
    saved: u64,
}

/// Bytes saved per minute (aligned with `minutes`).
#[derive(Serialize)]
struct Series {
    name: String,
    total: u64,
    values: Vec<u64>,
}

#[derive(Serialize)]
struct CacheSnapshot {
    counts: BTreeMap<&'static str, u64>,
    /// Served from the cache (hit, stale, revalidated) among what it could serve.
    hit_rate: Option<f64>,
}

#[derive(Serialize)]
struct RankedRow {
    name: String,
    saved: u64,
    responses: u64,
    /// At most this much of `saved` may belong to keys it displaced.
    overcount: u64,
}

#[derive(Serialize)]
struct DictionarySnapshot {
    /// Responses offering a dictionary, last hour.
    announced: u64,
    /// Responses compressed against one (dcb, dcz), last hour.
    used: u64,
    /// By bytes saved since start, named by SHA-256.
    top: Vec<RankedRow>,
}

#[derive(Serialize)]
struct OriginSnapshot {
    exchanges: u64,
    mean_ms: Option<f64>,
    /// Bucket bounds (0.5 ms doubling); -1 for "more than 16 s".
    p50_ms: Option<f64>,
    p95_ms: Option<f64>,
    max_ms: Option<f64>,
    mean_by_minute: Vec<Option<f64>>,
}

#[derive(Serialize)]
struct LinkSnapshot {
    /// Link requests answered, last hour.
    exchanges: u64,
    /// By how they ended (`link-confirm`, `link-delta`, …).
    outcomes: Vec<Row>,
    latest: Option<LinkReading>,
    mean_rate_bps: Option<u64>,
    mean_rtt_ms: Option<f64>,
}

#[derive(Serialize)]
struct LinkReading {
    at: u64,
    rate_bps: Option<u64>,
    rtt_ms: Option<f64>,
}

/// `GET /status.json`.
#[derive(Serialize)]
struct Status {
    now: u64,
    started: u64,
    #[serde(flatten)]
    board: BoardSnapshot,
    encoding_cache: EncodingCache,
    /// The configuration in force as TOML, secrets redacted.
    config: String,
}

#[derive(Serialize)]
struct EncodingCache {
    hit: u64,
    quick_hit: u64,
    miss: u64,
    /// Kept encodings found (at the kept or the on-the-fly level), since start.
    hit_rate: Option<f64>,
}

/// The status as JSON (`GET /status.json`).
pub fn status_json(board: &StatusBoard, metrics: &Metrics, config: &Config) -> String {
    let now = SystemTime::now();
    let lookups = |result| {
        metrics
            .encoding_cache
            .get(&LookupResult { result })
            .map_or(0, |counter| counter.get())
    };
    let (hit, quick_hit, miss) = (lookups("hit"), lookups("quick_hit"), lookups("miss"));
    let status = Status {
        now: unix_seconds(now),
        started: unix_seconds(board.started),
        board: board.snapshot(now),
        encoding_cache: EncodingCache {
            hit,
            quick_hit,
            miss,
            hit_rate: rate(hit + quick_hit, hit + quick_hit + miss),
        },
        config: config_in_force(config),
    };
    // Plain numbers, strings and options: serializing cannot fail.
    serde_json::to_string(&status).unwrap_or_default()
}

/// The page, with the current status inlined for its first drawing. `<` is escaped
/// so nothing in the data (a resource's name) can close the script element.
pub fn page(board: &StatusBoard, metrics: &Metrics, config: &Config) -> String {
    let initial = status_json(board, metrics, config).replace('<', "\\u003c");
    PAGE_HTML.replace(INITIAL_MARKER, &initial)
}

/// The page's Content-Security-Policy: its own script and nothing from elsewhere.
pub const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The configuration as TOML with its secrets replaced.
fn config_in_force(config: &Config) -> String {
    let mut shown = config.clone();
    let redacted = || Some("(redacted)".to_string());
    if shown.admin_token.is_some() {
        shown.admin_token = redacted();
    }
    if shown.link.token.is_some() {
        shown.link.token = redacted();
    }
    toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot show the configuration: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::net::SocketAddr;

    fn record(
        mechanism: &'static str,
        content_type: &'static str,
        original: u64,
        sent: u64,
    ) -> RequestRecord {
        let req = http::Request::get("/x").body(()).unwrap();
        let conn = crate::model::ConnInfo {
            peer: SocketAddr::from(([127, 0, 0, 1], 1)),
            tls: false,
            socket: None,
        };
        let mut record = RequestRecord::arriving(&req, conn);
        record.mechanism = Some(mechanism.into());
        record.content_type = Some(HeaderValue::from_static(content_type));
        record.original_bytes = original;
        record.bytes_sent = sent;
        record
    }

    #[test]
    fn minutes_roll_over_and_the_hour_forgets() {
        let board = StatusBoard::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 * 60);
        board.add_at(&record("br", "text/html", 1000, 200), t0);
        board.add_at(
            &record("br", "text/css", 500, 100),
            t0 + Duration::from_secs(61),
        );
        board.add_at(
            &record("identity", "image/png", 300, 300),
            t0 + Duration::from_secs(61),
        );
        let snap = board.snapshot(t0 + Duration::from_secs(61));
        assert_eq!(snap.requests, 3);
        assert_eq!(snap.minutes.len(), MINUTES);
        assert_eq!(*snap.minutes.last().unwrap(), 1_001 * 60);
        let br = &snap.saved_by_mechanism[0];
        assert_eq!((br.name.as_str(), br.total), ("br", 1200));
        assert_eq!(&br.values[MINUTES - 2..], &[800, 400]);
        assert_eq!(snap.saved_by_mechanism.len(), 1, "identity saved nothing");
        let families: Vec<&str> = snap
            .saved_by_content_type
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(families, ["html", "css"]);
        assert_eq!((snap.totals.original, snap.totals.sent), (1800, 600));

        // An hour later the first minute is gone; the slot it used is reused.
        let later = t0 + Duration::from_secs(60 * 60);
        board.add_at(&record("gzip", "text/html", 100, 50), later);
        let snap = board.snapshot(later);
        assert_eq!(snap.requests, 3, "1,000's minute left the hour");
        assert_eq!(snap.totals.saved, 400 + 50);
    }

    #[test]
    fn top_n_keeps_the_heavy_hitters_in_bounded_memory() {
        let mut top = TopN::new(4);
        for i in 0..1000 {
            top.add(&format!("/once/{i}"), 1);
            top.add("/heavy", 10);
            if i % 2 == 0 {
                top.add("/medium", 5);
            }
        }
        assert!(top.entries.len() <= 4);
        let rows = top.top(2);
        assert_eq!(rows[0].name, "/heavy");
        assert_eq!((rows[0].saved, rows[0].responses), (10_000, 1000));
        assert_eq!(rows[1].name, "/medium");
    }

    #[test]
    fn latency_quantiles_come_from_the_buckets() {
        let mut l = Latencies::default();
        for ms in [1, 1, 1, 3, 100] {
            l.add(Duration::from_millis(ms));
        }
        assert_eq!(l.quantile_ms(0.5), Some(1.0));
        assert_eq!(l.quantile_ms(0.95), Some(128.0));
        assert_eq!(l.max_micros, 100_000);
        assert_eq!(Latencies::default().quantile_ms(0.5), None);
    }

    #[test]
    fn secrets_are_not_shown() {
        let mut config = Config {
            admin_token: Some("hunter2".into()),
            ..Config::default()
        };
        config.link.token = Some("s3cret-link".into());
        let shown = config_in_force(&config);
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret-link"),
            "{shown}"
        );
        assert!(shown.contains("admin_token = \"(redacted)\""), "{shown}");
    }

    #[test]
    fn the_inlined_status_cannot_close_its_script() {
        let board = StatusBoard::default();
        let mut r = record("br", "text/html", 1000, 10);
        r.resource = Some("example.org/</script><script>alert(1)</script>".into());
        board.add(&r);
        let html = page(&board, &Metrics::new(), &Config::default());
        assert!(!html.contains("</script><script>alert"), "escaped");
        assert!(html.contains("\\u003c/script>"));
        assert!(!html.contains(INITIAL_MARKER));
    }
}
