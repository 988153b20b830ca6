//! Surge-like load (Barford & Crovella 1998), the workload of Seshan, Stemm & Katz's
//! server experiment: clients that each fetch a page chosen by Zipf popularity, then
//! the page's embedded objects one after another on their keep-alive connection, then
//! sit idle for a heavy-tailed (Pareto) time: on/off. Clients are added in steps; each
//! step reports the requests completed per second, so the peak a server sustains
//! behind its egress shows. The site (heavy-tailed object sizes) is the caller's: a
//! JSON list of pages and their objects, written with the files it names.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Uri;
use serde::Deserialize;
use serde_json::json;

use crate::client::{self, ExchangeError, Sender};
use crate::target::Target;

/// The pages of a site, most popular first (Zipf rank = position).
#[derive(Debug, Deserialize)]
pub struct Site {
    pub pages: Vec<Page>,
}

#[derive(Debug, Deserialize)]
pub struct Page {
    /// Origin-form path of the page.
    pub path: String,
    /// Origin-form paths of its embedded objects, in document order.
    pub objects: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SiteError {
    #[error("the site lists no pages")]
    Empty,
    #[error("{0:?} is not an origin-form path (one starting with /)")]
    Path(String),
}

impl Site {
    /// Checks every path, so that a run never fails on a bad one halfway.
    pub fn check(&self) -> Result<(), SiteError> {
        if self.pages.is_empty() {
            return Err(SiteError::Empty);
        }
        let paths = self
            .pages
            .iter()
            .flat_map(|page| std::iter::once(&page.path).chain(&page.objects));
        for path in paths {
            if !path.starts_with('/') || path.parse::<Uri>().is_err() {
                return Err(SiteError::Path(path.clone()));
            }
        }
        Ok(())
    }
}

pub struct SurgeOptions {
    /// The server, and the fields of every request (its path is not used).
    pub target: Target,
    /// Checked ([`Site::check`]).
    pub site: Site,
    /// Clients running in each step, non-decreasing: `[1, 2, 4, 8]`.
    pub steps: Vec<usize>,
    pub step_length: Duration,
    /// Mean idle time of a client between pages (Pareto, shape 1.5).
    pub mean_off: Duration,
    /// Zipf exponent of page popularity (1.0 in Surge).
    pub zipf: f64,
    pub seed: u64,
}

/// One step's counts.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepReport {
    pub clients: usize,
    /// Requests answered 2xx within the step.
    pub completed: u64,
    /// Answers not 2xx, and exchanges that failed (connect, reset, broken body).
    pub errors: u64,
    /// Body bytes of the completed answers, as sent.
    pub body_bytes: u64,
    pub seconds: f64,
}

impl StepReport {
    pub fn requests_per_second(&self) -> f64 {
        self.completed as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

#[derive(Debug)]
pub struct SurgeReport {
    pub steps: Vec<StepReport>,
    pub first_error: Option<String>,
}

impl SurgeReport {
    /// The highest step rate.
    pub fn peak_requests_per_second(&self) -> f64 {
        self.steps
            .iter()
            .map(StepReport::requests_per_second)
            .fold(0.0, f64::max)
    }

    pub fn errors(&self) -> u64 {
        self.steps.iter().map(|s| s.errors).sum()
    }

    pub fn text(&self) -> String {
        let mut out = String::from("clients  req/s     errors  body KB/s\n");
        for step in &self.steps {
            out.push_str(&format!(
                "{:>7}  {:>8.1}  {:>6}  {:>9.1}\n",
                step.clients,
                step.requests_per_second(),
                step.errors,
                step.body_bytes as f64 / 1000.0 / step.seconds.max(f64::MIN_POSITIVE)
            ));
        }
        out.push_str(&format!(
            "peak {:.1} req/s, {} errors",
            self.peak_requests_per_second(),
            self.errors()
        ));
        if let Some(error) = &self.first_error {
            out.push_str(&format!(" (first: {error})"));
        }
        out
    }

    pub fn json(&self) -> String {
        let steps: Vec<_> = self
            .steps
            .iter()
            .map(|s| {
                json!({
                    "clients": s.clients,
                    "completed": s.completed,
                    "requests_per_second": s.requests_per_second(),
                    "errors": s.errors,
                    "body_bytes_per_second": s.body_bytes as f64 / s.seconds.max(f64::MIN_POSITIVE),
                })
            })
            .collect();
        json!({
            "peak_requests_per_second": self.peak_requests_per_second(),
            "errors": self.errors(),
            "steps": steps,
            "first_error": self.first_error,
        })
        .to_string()
    }
}

/// The counters of the step in progress, shared by every client.
#[derive(Default)]
struct Counters {
    completed: AtomicU64,
    errors: AtomicU64,
    body_bytes: AtomicU64,
}

impl Counters {
    /// Takes the counts so far and starts from zero.
    fn take(&self, clients: usize, seconds: f64) -> StepReport {
        StepReport {
            clients,
            completed: self.completed.swap(0, Ordering::Relaxed),
            errors: self.errors.swap(0, Ordering::Relaxed),
            body_bytes: self.body_bytes.swap(0, Ordering::Relaxed),
            seconds,
        }
    }
}

/// Runs the steps; clients still in an exchange when the last step ends are stopped
/// and their exchange is not counted.
pub async fn run(options: SurgeOptions) -> SurgeReport {
    let SurgeOptions {
        target,
        site,
        steps,
        step_length,
        mean_off,
        zipf,
        seed,
    } = options;
    let shared = Arc::new(Shared {
        target,
        popularity: Popularity::zipf(site.pages.len(), zipf),
        site,
        mean_off,
        counters: Counters::default(),
        stop: AtomicBool::new(false),
        first_error: std::sync::Mutex::new(None),
    });
    let mut clients = Vec::new();
    let mut reports = Vec::new();
    for &wanted in &steps {
        while clients.len() < wanted {
            let random = Random::new(seed ^ (clients.len() as u64).wrapping_mul(0x9e37_79b9));
            clients.push(tokio::spawn(client_loop(shared.clone(), random)));
        }
        let started = Instant::now();
        tokio::time::sleep(step_length).await;
        let report = shared
            .counters
            .take(clients.len(), started.elapsed().as_secs_f64());
        reports.push(report);
    }
    shared.stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.abort();
    }
    let first_error = shared
        .first_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    SurgeReport {
        steps: reports,
        first_error,
    }
}

struct Shared {
    target: Target,
    site: Site,
    popularity: Popularity,
    mean_off: Duration,
    counters: Counters,
    stop: AtomicBool,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Shared {
    fn failed(&self, error: &str) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert_with(|| error.to_owned());
    }
}

/// One client: pages with their objects (on), then an idle time (off), until stopped.
async fn client_loop(shared: Arc<Shared>, mut random: Random) {
    let mut sender: Option<Sender> = None;
    // Clients of one step start spread over a mean idle time, not all at once.
    tokio::time::sleep(pareto(&mut random, shared.mean_off)).await;
    while !shared.stop.load(Ordering::Relaxed) {
        let page = &shared.site.pages[shared.popularity.pick(random.unit())];
        for path in std::iter::once(&page.path).chain(&page.objects) {
            if let Err(e) = fetch(&shared, &mut sender, path).await {
                shared.failed(&format!("{path}: {e}"));
                sender = None;
                // A failing server is not hammered: the client goes idle.
                break;
            }
        }
        tokio::time::sleep(pareto(&mut random, shared.mean_off)).await;
    }
}

/// One GET on the client's connection (opened again if it closed). A request that
/// fails on a reused connection before any answer is sent once more on a new one, as
/// browsers do: the server may close an idle connection just as a request leaves.
async fn fetch(shared: &Shared, sender: &mut Option<Sender>, path: &str) -> Result<(), String> {
    let reused = sender.as_ref().is_some_and(|open| !open.is_closed());
    let answer = match exchange(shared, sender, path).await {
        Err(ExchangeError::Request(_)) if reused => {
            *sender = None;
            exchange(shared, sender, path).await
        }
        other => other,
    }
    .map_err(|e| e.to_string())?;
    if !answer.status.is_success() {
        return Err(format!("status {}", answer.status));
    }
    shared.counters.completed.fetch_add(1, Ordering::Relaxed);
    shared
        .counters
        .body_bytes
        .fetch_add(answer.body_bytes, Ordering::Relaxed);
    Ok(())
}

async fn exchange(
    shared: &Shared,
    sender: &mut Option<Sender>,
    path: &str,
) -> Result<client::Answer, ExchangeError> {
    let connection = match sender {
        Some(open) if !open.is_closed() => open,
        _ => {
            let (opened, driver) = client::connect(shared.target.addr()).await?;
            tokio::spawn(driver);
            sender.insert(opened)
        }
    };
    connection.ready().await.map_err(ExchangeError::Request)?;
    // Paths were checked by `Site::check`.
    let request = shared.target.request_to(path.parse().unwrap_or_default());
    client::exchange(connection, request).await
}

/// Page popularity: the cumulative Zipf distribution over ranks 1..=n.
struct Popularity {
    cumulative: Vec<f64>,
}

impl Popularity {
    fn zipf(pages: usize, exponent: f64) -> Popularity {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=pages)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(exponent);
                total
            })
            .collect();
        for weight in &mut cumulative {
            *weight /= total;
        }
        Popularity { cumulative }
    }

    /// The page index for a uniform sample in [0, 1).
    fn pick(&self, unit: f64) -> usize {
        self.cumulative
            .partition_point(|&c| c <= unit)
            .min(self.cumulative.len().saturating_sub(1))
    }
}

/// A Pareto sample of shape 1.5 with the given mean, capped at 20 means (the tail of
/// a finite run).
fn pareto(random: &mut Random, mean: Duration) -> Duration {
    const SHAPE: f64 = 1.5;
    let scale = mean.as_secs_f64() * (SHAPE - 1.0) / SHAPE;
    let sample = scale / (1.0 - random.unit()).powf(1.0 / SHAPE);
    Duration::from_secs_f64(sample.min(mean.as_secs_f64() * 20.0))
}

/// SplitMix64: reproducible runs from a seed, without a dependency.
struct Random(u64);

impl Random {
    fn new(seed: u64) -> Random {
        Random(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_popularity_favours_low_ranks_in_proportion() {
        let popularity = Popularity::zipf(4, 1.0);
        let mut random = Random::new(7);
        let mut counts = [0u32; 4];
        for _ in 0..100_000 {
            counts[popularity.pick(random.unit())] += 1;
        }
        // Weights 1, 1/2, 1/3, 1/4 of 25/12: 48%, 24%, 16%, 12%.
        let shares: Vec<f64> = counts.iter().map(|&c| f64::from(c) / 100_000.0).collect();
        for (share, expected) in shares.iter().zip([0.48, 0.24, 0.16, 0.12]) {
            assert!((share - expected).abs() < 0.01, "{shares:?}");
        }
        assert_eq!(popularity.pick(0.999_999_999), 3);
    }

    #[test]
    fn pareto_idle_times_have_the_mean_asked_for_and_a_heavy_tail() {
        let mut random = Random::new(3);
        let mean = Duration::from_secs(1);
        let samples: Vec<f64> = (0..200_000)
            .map(|_| pareto(&mut random, mean).as_secs_f64())
            .collect();
        let average = samples.iter().sum::<f64>() / samples.len() as f64;
        // The cap at 20 means trims the tail a little.
        assert!((0.8..1.05).contains(&average), "{average}");
        assert!(samples
            .iter()
            .all(|s| (1.0 / 3.0 - 1e-9..=20.0).contains(s)));
        let long = samples.iter().filter(|&&s| s > 5.0).count();
        assert!(long > 1000, "a heavy tail: {long} idle times over 5 means");
    }

    #[test]
    fn a_site_with_a_bad_path_is_refused_before_the_run() {
        let site = |path: &str| Site {
            pages: vec![Page {
                path: "/index.html".into(),
                objects: vec![path.into()],
            }],
        };
        assert_eq!(site("/a.jpg").check(), Ok(()));
        assert_eq!(site("a.jpg").check(), Err(SiteError::Path("a.jpg".into())));
        assert_eq!(Site { pages: vec![] }.check(), Err(SiteError::Empty));
    }
}
