//! The driver: workers on keep-alive HTTP/1.1 connections, each a client of its own
//! (its held instances, its dictionaries), running until the deadline; a sampler of
//! the watched processes beside them.
//!
//! A worker talks either to `wirefold serve --origin` directly (origin-form requests,
//! every coding and delta) or through the proxy pair, to `wirefold client` as its
//! forward proxy (absolute-form requests for the soak origin; the client proxy
//! decodes, so no codings or dictionaries there). Each request follows a plan drawn at
//! random: plain with some `Accept-Encoding`, RFC 9842 dictionary, revalidation,
//! RFC 3229 delta, range, HEAD, or hostile.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use store::memo::Bounded;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use wirefold_http::delta::A_IM;
use wirefold_http::dictionary::{
    available_dictionary_value, use_as_dictionary_match, AVAILABLE_DICTIONARY,
};
use wirefold_http::url_pattern;

use crate::catalogue::{InstanceId, CATALOGUE};
use crate::hostile::{self, Hostile, FIELD_CASES, RAW_CASES};
use crate::report::Report;
use crate::sample::{self, Sample};
use crate::stats::{Record, Stats};
use crate::truth::Truths;
use crate::verify::{verify, verify_dictionary, Answer, Asked, Verdict};

pub use crate::options::{DriveOptions, PairTarget};

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("nothing to drive: give the direct server, the pair, or both")]
    NoTarget,
    #[error("--connections must be at least 1")]
    NoConnections,
    #[error("--hostile-share and --pair-share must be between 0 and 1")]
    Share,
}

#[derive(Clone, Copy, Debug)]
enum Route {
    Direct(SocketAddr),
    Pair(PairTarget),
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Direct(_) => "direct",
            Route::Pair(_) => "pair",
        }
    }

    /// Where the worker connects.
    fn addr(self) -> SocketAddr {
        match self {
            Route::Direct(server) => server,
            Route::Pair(pair) => pair.proxy,
        }
    }

    /// The request target for a catalogue target: origin-form, or absolute-form for
    /// the forward proxy.
    fn request_target(self, target: &str) -> String {
        match self {
            Route::Direct(_) => target.to_string(),
            Route::Pair(pair) => format!("http://{}{target}", pair.origin),
        }
    }

    fn host(self) -> String {
        match self {
            Route::Direct(server) => server.to_string(),
            Route::Pair(pair) => pair.origin.to_string(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    Plain,
    Dictionary,
    Revalidate,
    Delta,
    Range,
    Head,
    HostileFields,
    HostileRaw,
    Slowloris,
}

impl Plan {
    fn name(self) -> &'static str {
        match self {
            Plan::Plain => "plain",
            Plan::Dictionary => "dictionary",
            Plan::Revalidate => "revalidate",
            Plan::Delta => "delta",
            Plan::Range => "range",
            Plan::Head => "head",
            Plan::HostileFields => "hostile_fields",
            Plan::HostileRaw => "hostile_raw",
            Plan::Slowloris => "slowloris",
        }
    }
}

/// Ordinary plans and their weights per route. The pair's client proxy takes the
/// codings on itself, so its workers send no dictionaries.
const DIRECT_PLANS: &[(Plan, u64)] = &[
    (Plan::Plain, 30),
    (Plan::Dictionary, 20),
    (Plan::Revalidate, 15),
    (Plan::Delta, 20),
    (Plan::Range, 10),
    (Plan::Head, 5),
];
const PAIR_PLANS: &[(Plan, u64)] = &[
    (Plan::Plain, 45),
    (Plan::Revalidate, 25),
    (Plan::Delta, 10),
    (Plan::Range, 10),
    (Plan::Head, 10),
];

/// `Accept-Encoding` values of plain requests: none, each coding, browsers' lists.
const ACCEPT_ENCODINGS: &[&str] = &[
    "",
    "identity",
    "gzip",
    "br",
    "zstd",
    "deflate",
    "gzip, deflate, br",
    "gzip, deflate, br, zstd",
    "br;q=0.5, gzip;q=1.0, zstd;q=0.1",
    "*",
];

/// `Accept-Encoding` with a dictionary: Chromium's list (the server prefers dcz), and
/// one without zstd (so dcb, brotli with the dictionary, is chosen).
const DICTIONARY_ACCEPT_ENCODINGS: &[&str] = &[
    "gzip, deflate, br, zstd, dcb, dcz",
    "gzip, deflate, br, dcb",
];

/// Instances a worker holds per resource (what its `If-None-Match` lists).
const HELD_PER_RESOURCE: usize = 2;
/// Dictionaries a worker holds.
const HELD_DICTIONARIES: usize = 32;
/// The largest answer body read.
const BODY_LIMIT: usize = 32 << 20;
/// Slowloris connections open at once, across workers.
const SLOWLORIS_AT_ONCE: usize = 4;
/// The longest a raw hostile exchange may take.
const RAW_LIMIT: Duration = Duration::from_secs(12);

/// What every worker shares.
struct Shared {
    truths: Truths,
    /// Derived dictionaries fetched so far, by hash: bytes and `match` pattern.
    derived: Bounded<[u8; 32], (Bytes, String)>,
    stats: Stats,
    deadline: Instant,
    slowloris: Arc<Semaphore>,
    /// Watched processes found gone (reported once).
    gone: Mutex<HashSet<u32>>,
    options: DriveOptions,
}

/// A dictionary a worker holds.
#[derive(Clone)]
struct HeldDictionary {
    pattern: String,
    hash: [u8; 32],
    bytes: Bytes,
}

/// Runs the soak and reports. Samples the watched processes every
/// `sample_every`, and once more at the end.
pub async fn run(options: DriveOptions) -> Result<Report, DriveError> {
    if options.direct.is_none() && options.pair.is_none() {
        return Err(DriveError::NoTarget);
    }
    if options.connections == 0 {
        return Err(DriveError::NoConnections);
    }
    if !(0.0..=1.0).contains(&options.hostile_share) || !(0.0..=1.0).contains(&options.pair_share) {
        return Err(DriveError::Share);
    }
    let started = Instant::now();
    let shared = Arc::new(Shared {
        truths: Truths::default(),
        derived: Bounded::with_weight(64 << 20, 64, |(bytes, _): &(Bytes, String)| {
            bytes.len() as u64
        }),
        stats: Stats::new(started),
        deadline: started + options.duration,
        slowloris: Arc::new(Semaphore::new(SLOWLORIS_AT_ONCE)),
        gone: Mutex::new(HashSet::new()),
        options: options.clone(),
    });
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_loop(shared.clone(), samples.clone()));

    let routes = routes(&options);
    let workers: Vec<JoinHandle<()>> = routes
        .into_iter()
        .enumerate()
        .map(|(i, route)| {
            let worker = Worker {
                route,
                random: options.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1),
                connection: None,
                held: HashMap::new(),
                dictionaries: Vec::new(),
                slow: Vec::new(),
                shared: shared.clone(),
            };
            tokio::spawn(worker.run())
        })
        .collect();
    for worker in workers {
        if let Err(e) = worker.await {
            shared
                .stats
                .error("worker_panic", format!("a worker stopped: {e}"));
        }
    }
    sampler.abort();
    let _ = sampler.await;
    take_samples(&shared, &samples);
    let samples = std::mem::take(&mut *lock(&samples));
    Ok(Report::new(
        &options,
        started.elapsed(),
        shared.stats.snapshot(),
        samples,
    ))
}

/// The route of each worker: `pair_share` of them on the pair when both are given.
fn routes(options: &DriveOptions) -> Vec<Route> {
    let n = options.connections;
    match (options.direct, options.pair) {
        (Some(direct), Some(pair)) => {
            let on_pair = ((n as f64 * options.pair_share).round() as usize).min(n);
            (0..n)
                .map(|i| {
                    if i < on_pair {
                        Route::Pair(pair)
                    } else {
                        Route::Direct(direct)
                    }
                })
                .collect()
        }
        (Some(direct), None) => vec![Route::Direct(direct); n],
        (None, Some(pair)) => vec![Route::Pair(pair); n],
        (None, None) => Vec::new(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn sample_loop(shared: Arc<Shared>, samples: Arc<Mutex<Vec<Sample>>>) {
    let mut every = tokio::time::interval(shared.options.sample_every);
    loop {
        every.tick().await;
        take_samples(&shared, &samples);
    }
}

/// Reads every watched process still there; one that is gone is an error, once.
fn take_samples(shared: &Shared, samples: &Mutex<Vec<Sample>>) {
    let seconds = shared.stats.started().elapsed().as_secs_f64();
    let mut samples = lock(samples);
    let (mut rss_kb, mut fds) = (0, 0);
    let mut gone = lock(&shared.gone);
    for watched in &shared.options.watch {
        match sample::read(watched.pid) {
            Some((rss, open)) => {
                rss_kb += rss;
                fds += open;
                samples.push(Sample {
                    seconds,
                    process: watched.name.clone(),
                    pid: watched.pid,
                    rss_kb: rss,
                    fds: open,
                });
            }
            None => {
                if gone.insert(watched.pid) {
                    shared.stats.error(
                        "process_exited",
                        format!("{} (pid {}) is gone", watched.name, watched.pid),
                    );
                }
            }
        }
    }
    drop(gone);
    let tally = shared.stats.snapshot();
    let rate = tally.requests as f64 / seconds.max(0.001);
    eprintln!(
        "soak: [{:>3}:{:02}] {} requests ({rate:.0}/s), {} wrong bodies, {} errors; rss {:.1} MB, {fds} fds",
        seconds as u64 / 60,
        seconds as u64 % 60,
        tally.requests,
        tally.wrong_bodies,
        tally.errors.values().sum::<u64>(),
        rss_kb as f64 / 1024.0,
    );
}

/// A failure without an answer: its kind and detail.
type Failure = (&'static str, String);

struct Worker {
    route: Route,
    random: u64,
    connection: Option<SendRequest<Full<Bytes>>>,
    /// Per resource, the whole instances this client holds, newest first, with the
    /// validator they came with.
    held: HashMap<u16, Vec<(InstanceId, String)>>,
    dictionaries: Vec<HeldDictionary>,
    /// Slowloris connections this worker started.
    slow: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Worker {
    fn next_random(&mut self) -> u64 {
        self.random = self.random.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.random;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next_random() % n.max(1)
    }

    async fn run(mut self) {
        while Instant::now() < self.shared.deadline {
            let plan = self.choose_plan();
            let resource = self.below(CATALOGUE.len() as u64) as u16;
            match plan {
                Plan::HostileRaw => self.raw(resource).await,
                Plan::Slowloris => self.slowloris(resource),
                _ => self.request(plan, resource).await,
            }
        }
        // Slowloris heads still open at the end are not judged.
        for task in self.slow.drain(..) {
            task.abort();
        }
    }

    fn choose_plan(&mut self) -> Plan {
        let hostile = self.next_random() as f64 / u64::MAX as f64;
        if hostile < self.shared.options.hostile_share {
            return match self.below(100) {
                0..=59 => Plan::HostileFields,
                60..=94 => Plan::HostileRaw,
                _ => Plan::Slowloris,
            };
        }
        let plans = match self.route {
            Route::Direct(_) => DIRECT_PLANS,
            Route::Pair(_) => PAIR_PLANS,
        };
        let mut pick = self.below(plans.iter().map(|(_, w)| w).sum());
        for (plan, weight) in plans {
            if pick < *weight {
                return *plan;
            }
            pick -= weight;
        }
        Plan::Plain
    }

    /// One request over the worker's connection, verified and counted.
    async fn request(&mut self, plan: Plan, resource: u16) {
        let target = CATALOGUE[resource as usize].target;
        let size = CATALOGUE[resource as usize].size as u64;
        let mut headers = HeaderMap::new();
        let mut body = Bytes::new();
        let mut method = Method::GET;
        let mut asked = Asked {
            resource,
            hostile: plan == Plan::HostileFields,
            ..Asked::default()
        };
        let held = self.held.get(&resource).cloned().unwrap_or_default();
        let mut case = "";
        match plan {
            Plan::Plain => self.accept_encoding(&mut headers),
            Plan::Dictionary => {
                let value = DICTIONARY_ACCEPT_ENCODINGS
                    [self.below(DICTIONARY_ACCEPT_ENCODINGS.len() as u64) as usize];
                headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
                if let Some(dictionary) = self.dictionary_for(target) {
                    headers.insert(
                        AVAILABLE_DICTIONARY,
                        available_dictionary_value(&dictionary.hash),
                    );
                    asked.dictionary = Some(dictionary.bytes);
                }
            }
            Plan::Revalidate => {
                self.accept_encoding(&mut headers);
                if let Some((id, tag)) = held.first() {
                    insert_tags(&mut headers, [tag.as_str()]);
                    asked.listed.push(*id);
                }
            }
            Plan::Delta => {
                self.accept_encoding(&mut headers);
                headers.insert(A_IM, HeaderValue::from_static("vcdiff"));
                insert_tags(&mut headers, held.iter().map(|(_, tag)| tag.as_str()));
                asked.listed.extend(held.iter().map(|(id, _)| *id));
            }
            Plan::Range => {
                // Within the first half: every version is longer than that.
                let start = self.below(size / 2);
                let value = if self.below(4) == 0 {
                    format!("bytes={start}-")
                } else {
                    format!("bytes={start}-{}", start + self.below(8192))
                };
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(header::RANGE, value);
                }
                asked.range_start = Some(start);
            }
            Plan::Head => {
                method = Method::HEAD;
                asked.head = true;
            }
            Plan::HostileFields => {
                let chosen = &FIELD_CASES[self.below(FIELD_CASES.len() as u64) as usize];
                case = chosen.name;
                let random = self.next_random();
                (chosen.build)(&mut Hostile {
                    headers: &mut headers,
                    body: &mut body,
                    asked: &mut asked,
                    held: &held,
                    random,
                });
            }
            Plan::HostileRaw | Plan::Slowloris => return,
        }
        let describe_headers = headers.clone();
        let describe = || {
            let fields: Vec<String> = describe_headers
                .iter()
                .map(|(n, v)| {
                    format!(
                        "{n}: {}",
                        String::from_utf8_lossy(&v.as_bytes()[..v.len().min(80)])
                    )
                })
                .collect();
            format!("{method} {target} {case} {}", fields.join("; "))
        };
        let kind = format!("{}.{}", self.route.name(), plan.name());
        let started = Instant::now();
        let exchanged = self.exchange(method.clone(), target, headers, body).await;
        let latency = started.elapsed();
        match exchanged {
            Ok((answer, answered_at)) => {
                asked.answered_at = Some(answered_at);
                let verdict = verify(&asked, &answer, &self.shared.truths);
                self.shared.stats.record(Record {
                    kind: &kind,
                    started,
                    latency: (!asked.hostile).then_some(latency),
                    status: Some(answer.status.as_u16()),
                    coding: coding_of(&answer),
                    verdict: &verdict,
                    describe: &describe,
                });
                if let Verdict::Correct {
                    held: Some(instance),
                } = verdict
                {
                    if !asked.hostile {
                        self.learn(&answer, instance).await;
                    }
                }
            }
            Err((failure, detail)) => {
                let verdict = Verdict::Failed {
                    kind: failure,
                    detail,
                };
                self.shared.stats.record(Record {
                    kind: &kind,
                    started,
                    latency: None,
                    status: None,
                    coding: None,
                    verdict: &verdict,
                    describe: &describe,
                });
            }
        }
    }

    /// One of `ACCEPT_ENCODINGS`, or none.
    fn accept_encoding(&mut self, headers: &mut HeaderMap) {
        let value = ACCEPT_ENCODINGS[self.below(ACCEPT_ENCODINGS.len() as u64) as usize];
        if !value.is_empty() {
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
        }
    }

    /// The newest dictionary whose pattern matches `target`.
    fn dictionary_for(&self, target: &str) -> Option<HeldDictionary> {
        self.dictionaries
            .iter()
            .find(|d| url_pattern::matches(&d.pattern, target))
            .cloned()
    }

    fn keep_dictionary(&mut self, dictionary: HeldDictionary) {
        self.dictionaries
            .retain(|d| d.pattern != dictionary.pattern && d.hash != dictionary.hash);
        self.dictionaries.insert(0, dictionary);
        self.dictionaries.truncate(HELD_DICTIONARIES);
    }

    /// Keeps a whole instance received; on the direct route, also what it offers as a
    /// dictionary (itself, or a derived dictionary to fetch).
    async fn learn(&mut self, answer: &Answer, (id, tag): (InstanceId, String)) {
        let list = self.held.entry(id.resource).or_default();
        list.retain(|(held, _)| *held != id);
        list.insert(0, (id, tag));
        list.truncate(HELD_PER_RESOURCE);
        if !matches!(self.route, Route::Direct(_)) {
            return;
        }
        if let Some(pattern) = use_as_dictionary_match(&answer.headers) {
            if let Some(truth) = self.shared.truths.get(id) {
                self.keep_dictionary(HeldDictionary {
                    pattern,
                    hash: truth.sha256,
                    bytes: truth.body.clone(),
                });
            }
        }
        if let Some((path, hash)) = dictionary_link(&answer.headers) {
            if !self.dictionaries.iter().any(|d| d.hash == hash) {
                self.fetch_dictionary(&path, hash).await;
            }
        }
    }

    /// Fetches a derived dictionary a page linked to (once across workers), checking
    /// that its content hashes to its name.
    async fn fetch_dictionary(&mut self, path: &str, hash: [u8; 32]) {
        if let Some((bytes, pattern)) = self.shared.derived.get(&hash) {
            self.keep_dictionary(HeldDictionary {
                pattern,
                hash,
                bytes,
            });
            return;
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, br, zstd"),
        );
        let started = Instant::now();
        let describe = || format!("GET {path}");
        let kind = format!("{}.dictionary_fetch", self.route.name());
        let (verdict, status, coding) = match self
            .exchange(Method::GET, path, headers, Bytes::new())
            .await
        {
            Ok((answer, _)) => match verify_dictionary(&answer, &hash) {
                Ok((bytes, pattern)) => {
                    self.shared
                        .derived
                        .insert(hash, (bytes.clone(), pattern.clone()));
                    self.keep_dictionary(HeldDictionary {
                        pattern,
                        hash,
                        bytes,
                    });
                    (
                        Verdict::Correct { held: None },
                        Some(answer.status.as_u16()),
                        coding_of(&answer),
                    )
                }
                Err(verdict) => (verdict, Some(answer.status.as_u16()), None),
            },
            Err((kind, detail)) => (Verdict::Failed { kind, detail }, None, None),
        };
        self.shared.stats.record(Record {
            kind: &kind,
            started,
            latency: Some(started.elapsed()),
            status,
            coding,
            verdict: &verdict,
            describe: &describe,
        });
    }

    /// Sends a request on the worker's connection (connecting as needed) and reads
    /// the whole answer. Any failure drops the connection.
    async fn exchange(
        &mut self,
        method: Method,
        target: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<(Answer, SystemTime), Failure> {
        let uri = self.route.request_target(target);
        let host = self.route.host();
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| ("request", e.to_string()))?;
        *request.headers_mut() = headers;
        if let Ok(host) = HeaderValue::from_str(&host) {
            request.headers_mut().insert(header::HOST, host);
        }
        let limit = self.shared.options.request_timeout;
        let exchanged = tokio::time::timeout(limit, async {
            let sender = self.connection().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| ("transport", format!("sending: {e}")))?;
            let answered_at = SystemTime::now();
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, BODY_LIMIT)
                .collect()
                .await
                .map_err(|e| ("transport", format!("reading the body: {e}")))?
                .to_bytes();
            Ok::<_, Failure>((
                Answer {
                    status: parts.status,
                    headers: parts.headers,
                    body,
                },
                answered_at,
            ))
        })
        .await;
        match exchanged {
            Ok(Ok((answer, at))) => {
                let closing = answer
                    .headers
                    .get(header::CONNECTION)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.to_ascii_lowercase().contains("close"));
                if closing {
                    self.connection = None;
                }
                Ok((answer, at))
            }
            Ok(Err(failure)) => {
                self.connection = None;
                Err(failure)
            }
            Err(_) => {
                self.connection = None;
                Err(("timeout", format!("no whole answer within {limit:?}")))
            }
        }
    }

    /// The worker's connection, ready for a request: kept alive, or new when the
    /// server closed it.
    async fn connection(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, Failure> {
        let kept = self.connection.take().filter(|s| !s.is_closed());
        let mut sender = match kept {
            Some(sender) => sender,
            None => connect(self.route.addr()).await?,
        };
        if sender.ready().await.is_err() {
            // Closed between answers (after a refusal, or idle): a new one.
            sender = connect(self.route.addr()).await?;
            sender
                .ready()
                .await
                .map_err(|e| ("connect", format!("a new connection closed at once: {e}")))?;
        }
        Ok(self.connection.insert(sender))
    }

    /// A malformed request over raw TCP.
    async fn raw(&mut self, resource: u16) {
        let case = &RAW_CASES[self.below(RAW_CASES.len() as u64) as usize];
        let target = self
            .route
            .request_target(CATALOGUE[resource as usize].target);
        let bytes = (case.build)(&target, &self.route.host());
        let started = Instant::now();
        let asked = Asked {
            resource,
            hostile: true,
            answered_at: Some(SystemTime::now() + RAW_LIMIT),
            ..Asked::default()
        };
        let verdict = match hostile::send_raw(
            self.route.addr(),
            &bytes,
            case.half_close,
            !case.must_close,
            RAW_LIMIT,
        )
        .await
        {
            Ok(result) => hostile::judge_raw(case, &result, &asked, &self.shared.truths),
            Err(e) => Verdict::Failed {
                kind: "connect",
                detail: e.to_string(),
            },
        };
        let kind = format!("{}.hostile_raw", self.route.name());
        self.shared.stats.record(Record {
            kind: &kind,
            started,
            latency: None,
            status: None,
            coding: None,
            verdict: &verdict,
            describe: &|| case.name.to_string(),
        });
    }

    /// Starts a slowloris head when fewer than `SLOWLORIS_AT_ONCE` are open; judged
    /// when the server closes it.
    fn slowloris(&mut self, resource: u16) {
        let Ok(permit) = self.shared.slowloris.clone().try_acquire_owned() else {
            return;
        };
        self.slow.retain(|task| !task.is_finished());
        let shared = self.shared.clone();
        let route = self.route;
        let target = route.request_target(CATALOGUE[resource as usize].target);
        self.slow.push(tokio::spawn(async move {
            let started = Instant::now();
            let verdict = hostile::slowloris(
                route.addr(),
                &target,
                &route.host(),
                shared.options.slowloris_limit,
            )
            .await;
            drop(permit);
            let kind = format!("{}.slowloris", route.name());
            shared.stats.record(Record {
                kind: &kind,
                started,
                latency: None,
                status: None,
                coding: None,
                verdict: &verdict,
                describe: &|| format!("slowloris {target}"),
            });
        }));
    }
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, Failure> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| ("connect", format!("{addr}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ("connect", format!("{addr}: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn insert_tags<'a>(headers: &mut HeaderMap, tags: impl IntoIterator<Item = &'a str>) {
    let list: Vec<&str> = tags.into_iter().collect();
    if list.is_empty() {
        return;
    }
    if let Ok(value) = HeaderValue::from_str(&list.join(", ")) {
        headers.insert(header::IF_NONE_MATCH, value);
    }
}

/// What an answer's body was coded with, for the report: `vcdiff` for a 226, its
/// `Content-Encoding`, or `identity`; `None` without a body.
fn coding_of(answer: &Answer) -> Option<String> {
    if answer.body.is_empty() {
        return None;
    }
    if answer.status.as_u16() == 226 {
        return Some("vcdiff".into());
    }
    Some(
        answer
            .headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("identity")
            .to_ascii_lowercase(),
    )
}

/// A `Link: <PATH>; rel="compression-dictionary"` whose last segment is the
/// dictionary's SHA-256 in hex: the path and the hash.
fn dictionary_link(headers: &HeaderMap) -> Option<(String, [u8; 32])> {
    headers
        .get_all(header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|link| {
            let (target, params) = link.trim().strip_prefix('<')?.split_once('>')?;
            let rel = params.split(';').any(|p| {
                p.trim()
                    .strip_prefix("rel=")
                    .is_some_and(|r| r.trim_matches('"') == "compression-dictionary")
            });
            if !rel || !target.starts_with('/') {
                return None;
            }
            let hex = target.rsplit('/').next()?;
            let hash: [u8; 32] = hex::decode(hex).ok()?.try_into().ok()?;
            Some((target.to_string(), hash))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_links_give_a_path_and_hash() {
        let hex = "ab".repeat(32);
        let mut headers = HeaderMap::new();
        headers.append(
            header::LINK,
            HeaderValue::from_str(&format!(
                "</style.css>; rel=preload, </.wirefold/dict/{hex}>; rel=\"compression-dictionary\""
            ))
            .unwrap(),
        );
        assert_eq!(
            dictionary_link(&headers),
            Some((format!("/.wirefold/dict/{hex}"), [0xab; 32]))
        );
        let mut other = HeaderMap::new();
        other.append(
            header::LINK,
            HeaderValue::from_static("</.wirefold/dict/zz>; rel=\"compression-dictionary\""),
        );
        assert_eq!(dictionary_link(&other), None);
    }

    #[test]
    fn routes_split_workers_between_targets() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let options = DriveOptions {
            direct: Some(addr),
            pair: Some(PairTarget {
                proxy: addr,
                origin: addr,
            }),
            connections: 8,
            ..DriveOptions::default()
        };
        let routes = routes(&options);
        let pair = routes
            .iter()
            .filter(|r| matches!(r, Route::Pair(_)))
            .count();
        assert_eq!((routes.len(), pair), (8, 3));
    }
}
