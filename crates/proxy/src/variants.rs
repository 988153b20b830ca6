//! Adaptive fidelity's service, which the `adapt` stage uses: the variants of
//! originals (made in the background on first sight, under a CPU budget, kept in the
//! store by content hash and typed [`Variant`]), their URLs under
//! [`VARIANT_PREFIX`], the passive estimate of each client network's link (SPAND's
//! idea: shared by all clients of a /24 or /48, from TCP_INFO of our own
//! connections), and the egress controller's maximum-fidelity fraction.

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fidelity::choice::{EgressController, LinkEstimate, Smoothed};
use fidelity::image::{self as images, ImageError};
use fidelity::text::{self as texts, TextError};
use fidelity::FidelityConfig;
use serde::{Deserialize, Serialize};
use store::memo::Bounded;
use store::{Hash, Store};
use wirefold_http::fidelity::{alternates, ImageFormat, TextKind, VariantDescription};
use wirefold_http::ContentCoding;

use crate::background::Background;
use crate::live::LiveConfig;
use crate::metrics::{FidelityMetrics, KindLabels, Metrics, ReasonLabels};
use crate::page_weight::PageWeights;
use crate::record::LinkSample;
use delta::derived::Variant;

/// Where variants live: `/.wirefold/v/<original hex>/<variant hex>.<extension>`.
/// Content addressed both ways, so a URL names one body forever (`immutable`).
pub const VARIANT_PREFIX: &str = "/.wirefold/v/";

/// The ladders remembered in memory (each a few hundred bytes, and about 200 more per
/// rung once its `Alternates` entries are written).
const LADDERS_IN_MEMORY: usize = 16_384;
/// Client networks remembered in memory.
const NETWORKS_IN_MEMORY: usize = 16_384;
/// A network's estimate is written to the store at most this often.
const NETWORK_KEEP_INTERVAL: Duration = Duration::from_secs(10);
/// The egress controller's period.
const EGRESS_PERIOD: Duration = Duration::from_secs(1);

/// What an original is, for its variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginalKind {
    Image(ImageFormat),
    Text(TextKind),
}

impl OriginalKind {
    /// The kind of original a `Content-Type` names, if it may have variants. AVIF
    /// originals may not: no AVIF decoder is built in, so they weigh in a page as
    /// fixed bytes and are never queued.
    pub fn of(content_type: &str) -> Option<OriginalKind> {
        ImageFormat::from_media_type(content_type)
            .filter(|format| *format != ImageFormat::Avif)
            .map(OriginalKind::Image)
            .or_else(|| TextKind::from_media_type(content_type).map(OriginalKind::Text))
    }
}

/// A text body's bytes once compressed with each coding the compression profile
/// keeps bodies in (`None`: identity): what a client pays for it. Empty for images,
/// which are not compressed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CodedSizes(Vec<(Option<ContentCoding>, u64)>);

impl CodedSizes {
    /// Measures `bytes` as sent whole and with each of `codings`.
    pub fn measure(bytes: &[u8], codings: &[(ContentCoding, u32)]) -> CodedSizes {
        let mut sizes = vec![(None, bytes.len() as u64)];
        for &(coding, level) in codings {
            let len = codec::compress(coding, level, bytes).len() as u64;
            sizes.push((Some(coding), len));
        }
        CodedSizes(sizes)
    }

    /// The size with `coding`, if it was measured.
    pub fn get(&self, coding: Option<ContentCoding>) -> Option<u64> {
        self.0
            .iter()
            .find(|(c, _)| *c == coding)
            .map(|(_, len)| *len)
    }

    fn stored(&self) -> Vec<StoredSize> {
        self.0
            .iter()
            .map(|(coding, len)| StoredSize {
                coding: coding.map_or("identity", ContentCoding::token).to_string(),
                len: *len,
            })
            .collect()
    }

    fn of_stored(stored: &[StoredSize]) -> CodedSizes {
        CodedSizes(
            stored
                .iter()
                .filter_map(|s| {
                    let coding = match s.coding.as_str() {
                        "identity" => None,
                        token => Some(ContentCoding::from_token(token)?),
                    };
                    Some((coding, s.len))
                })
                .collect(),
        )
    }
}

/// One kept variant of an original.
#[derive(Clone, Debug, PartialEq)]
pub struct Rung {
    pub variant: Variant,
    /// The variant body's SHA-256.
    pub hash: Hash,
    pub len: u64,
    /// Its `Content-Type`.
    pub media_type: String,
    /// A minified text's sizes after compression (empty for images).
    pub sizes: CodedSizes,
    extension: &'static str,
}

impl Rung {
    /// Its URL, beside the original's hash.
    pub fn url(&self, original: &Hash) -> String {
        format!(
            "{VARIANT_PREFIX}{}/{}.{}",
            original.to_hex(),
            self.hash.to_hex(),
            self.extension
        )
    }

    /// RFC 2295's source quality: the share of the original's bytes the ladder
    /// aimed at (0.7 per image step); a minified text means the same (1).
    pub fn source_quality(&self) -> f64 {
        match self.variant {
            Variant::Image { step, .. } => images::STEP_RATIO.powi(i32::from(step)),
            _ => 1.0,
        }
    }

    /// An image rung of `len` bytes at `step` below the original, in `format`.
    #[cfg(test)]
    pub fn of_image(format: ImageFormat, step: u8, len: u64) -> Rung {
        Rung {
            variant: Variant::Image { format, step },
            hash: Hash([step; 32]),
            len,
            media_type: format.media_type().to_string(),
            sizes: CodedSizes::default(),
            extension: format.extension(),
        }
    }

    /// An image rung's format, `None` for text.
    pub fn image_format(&self) -> Option<ImageFormat> {
        match self.variant {
            Variant::Image { format, .. } => Some(format),
            _ => None,
        }
    }
}

/// The variants of one original; empty when none was worth keeping.
#[derive(Debug, Default)]
pub struct Ladder {
    pub rungs: Vec<Rung>,
    /// A text original's sizes after compression, beside its rungs' (empty for
    /// images).
    pub original_sizes: CodedSizes,
    /// Image formats still to be made in a later pass ([`images::LATER_FORMATS`]);
    /// empty once the ladder is complete.
    pub later: Vec<ImageFormat>,
    /// The rungs' entries of `Alternates` beside the original they were made for,
    /// written on first use: every negotiable response carries them, and hashes in
    /// hex cost more than the rest of its head.
    listed: OnceLock<(Hash, String)>,
}

/// Equal variants, whether or not either has listed them yet.
impl PartialEq for Ladder {
    fn eq(&self, other: &Ladder) -> bool {
        self.rungs == other.rungs
            && self.original_sizes == other.original_sizes
            && self.later == other.later
    }
}

impl Ladder {
    /// A ladder of `rungs`, with the formats in `later` still to be made.
    #[cfg(test)]
    pub fn of(rungs: Vec<Rung>, later: Vec<ImageFormat>) -> Ladder {
        Ladder {
            rungs,
            later,
            ..Ladder::default()
        }
    }

    /// The rungs' entries of the RFC 2295 variant list (`Alternates`) for the ladder
    /// of `original`, in rung order: what follows the original's own entry.
    pub fn listed_rungs(&self, original: &Hash) -> Cow<'_, str> {
        let list = || {
            let urls: Vec<String> = self.rungs.iter().map(|r| r.url(original)).collect();
            let essences: Vec<_> = self
                .rungs
                .iter()
                .map(|r| wirefold_http::media_type_essence(&r.media_type))
                .collect();
            let described: Vec<_> = self
                .rungs
                .iter()
                .zip(&urls)
                .zip(&essences)
                .map(|((rung, url), media_type)| VariantDescription {
                    url,
                    source_quality: rung.source_quality(),
                    media_type,
                    length: rung.len,
                })
                .collect();
            alternates(&described)
        };
        let (listed_for, listed) = self.listed.get_or_init(|| (*original, list()));
        if listed_for == original {
            listed.into()
        } else {
            // A ladder is only ever read beside its own original; never wrong anyway.
            list().into()
        }
    }

    /// The share of the original's bytes `rung` saves for a client that gets
    /// `coding`: after compression for text (what the client pays), raw for images.
    /// `None` when that coding was not measured (the profile changed since).
    pub fn saving(&self, rung: &Rung, coding: Option<ContentCoding>) -> Option<f64> {
        if rung.sizes.0.is_empty() {
            return None;
        }
        let original = self.original_sizes.get(coding)?;
        Some(texts::saving(original, rung.sizes.get(coding)?))
    }
}

/// A ladder as the store keeps it (record `fidelity:<original hex>`).
#[derive(Serialize, Deserialize)]
struct StoredLadder {
    rungs: Vec<StoredRung>,
    /// Why there are no rungs, for an operator reading the store.
    refused: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    original_sizes: Vec<StoredSize>,
    /// Extensions of the formats still to be made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    later: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct StoredSize {
    /// A `Content-Encoding` token, or `identity`.
    coding: String,
    len: u64,
}

#[derive(Serialize, Deserialize)]
struct StoredRung {
    /// `minified`, or an image format's extension.
    kind: String,
    step: u8,
    hash: String,
    len: u64,
    media_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sizes: Vec<StoredSize>,
}

impl StoredLadder {
    fn into_ladder(self) -> Option<Ladder> {
        let rungs = self
            .rungs
            .into_iter()
            .map(|r| {
                let hash = Hash::from_hex(&r.hash).ok()?;
                let (variant, extension) = if r.kind == "minified" {
                    let kind = TextKind::from_media_type(&r.media_type)?;
                    (Variant::Minified, kind.extension())
                } else {
                    let format = ImageFormat::from_extension(&r.kind)?;
                    let step = r.step;
                    (Variant::Image { format, step }, format.extension())
                };
                Some(Rung {
                    variant,
                    hash,
                    len: r.len,
                    media_type: r.media_type,
                    sizes: CodedSizes::of_stored(&r.sizes),
                    extension,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let later = self
            .later
            .iter()
            .map(|extension| ImageFormat::from_extension(extension))
            .collect::<Option<Vec<_>>>()?;
        Some(Ladder {
            rungs,
            original_sizes: CodedSizes::of_stored(&self.original_sizes),
            later,
            listed: OnceLock::new(),
        })
    }

    fn of(ladder: &Ladder, refused: Option<String>) -> StoredLadder {
        let rungs = ladder
            .rungs
            .iter()
            .map(|r| StoredRung {
                kind: match r.variant {
                    Variant::Image { format, .. } => format.extension().to_string(),
                    _ => "minified".to_string(),
                },
                step: match r.variant {
                    Variant::Image { step, .. } => step,
                    _ => 0,
                },
                hash: r.hash.to_hex(),
                len: r.len,
                media_type: r.media_type.clone(),
                sizes: r.sizes.stored(),
            })
            .collect();
        StoredLadder {
            rungs,
            refused,
            original_sizes: ladder.original_sizes.stored(),
            later: ladder
                .later
                .iter()
                .map(|f| f.extension().to_string())
                .collect(),
        }
    }
}

fn ladder_key(original: &Hash) -> String {
    format!("fidelity:{}", original.to_hex())
}

/// The ladder (perhaps empty) the store keeps for `original`; `None` when there is
/// none or it cannot be read (it will be made again).
pub fn kept_ladder(store: &Store, original: &Hash) -> Result<Option<Ladder>, store::StoreError> {
    let Some(stored) = store.get_record(&ladder_key(original))? else {
        return Ok(None);
    };
    Ok(serde_json::from_slice::<StoredLadder>(&stored)
        .ok()
        .and_then(StoredLadder::into_ladder))
}

/// A client network: the /24 of an IPv4 address, the /48 of an IPv6 one (an
/// IPv4-mapped IPv6 address is its IPv4 address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Network(IpAddr);

impl Network {
    pub fn of(address: IpAddr) -> Network {
        match address.to_canonical() {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                Network(IpAddr::from([a, b, c, 0]))
            }
            IpAddr::V6(v6) => {
                let mut octets = v6.octets();
                octets[6..].fill(0);
                Network(IpAddr::from(octets))
            }
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}/24"),
            IpAddr::V6(v6) => write!(f, "{v6}/48"),
        }
    }
}

/// A network's smoothed link, as measured on our connections to its clients.
#[derive(Clone, Copy, Debug)]
struct NetworkLink {
    rtt_seconds: Smoothed,
    bytes_per_second: Smoothed,
    kept: Option<Instant>,
}

impl NetworkLink {
    fn new() -> NetworkLink {
        // RFC 6298's gain for RTT; the same for rate samples, which vary as much.
        NetworkLink {
            rtt_seconds: Smoothed::new(0.125),
            bytes_per_second: Smoothed::new(0.125),
            kept: None,
        }
    }

    fn estimate(&self) -> Option<LinkEstimate> {
        Some(LinkEstimate {
            rtt: Duration::from_secs_f64(self.rtt_seconds.get()?),
            bytes_per_second: self.bytes_per_second.get()?,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct StoredNetwork {
    rtt_seconds: f64,
    bytes_per_second: f64,
}

fn network_key(network: &Network) -> String {
    format!("network:{network}")
}

/// The service; one per server.
pub struct Variants {
    store: Option<Store>,
    background: Background,
    metrics: FidelityMetrics,
    ladders: Arc<Bounded<Hash, Arc<Ladder>>>,
    /// Originals queued or being made, so concurrent first sights queue one job.
    pending: Arc<Mutex<HashSet<Hash>>>,
    /// One maker at a time: with its pauses, that bounds its CPU (see `schedule`).
    maker: Arc<tokio::sync::Semaphore>,
    networks: Arc<Bounded<Network, NetworkLink>>,
    /// The egress controller's fraction, as `f64` bits.
    max_fraction: AtomicU64,
    /// Sizes of pages and subresources served, for a page's weight in a choice.
    pub pages: PageWeights,
}

impl Variants {
    pub fn new(store: Option<Store>, background: Background, metrics: &Metrics) -> Variants {
        Variants {
            store,
            background,
            metrics: metrics.fidelity.clone(),
            ladders: Arc::new(Bounded::with_entries(LADDERS_IN_MEMORY)),
            pending: Arc::default(),
            maker: Arc::new(tokio::sync::Semaphore::new(1)),
            networks: Arc::new(Bounded::with_entries(NETWORKS_IN_MEMORY)),
            max_fraction: AtomicU64::new(1.0_f64.to_bits()),
            pages: PageWeights::default(),
        }
    }

    /// The largest share of an original a response may carry now (1: no cap).
    pub fn max_fraction(&self) -> f64 {
        f64::from_bits(self.max_fraction.load(Ordering::Relaxed))
    }

    /// The ladder of `original`: `Some` (perhaps empty) once it was made, `None`
    /// before. Reads the store off the reactor on a memory miss.
    pub async fn ladder(&self, original: &Hash) -> Option<Arc<Ladder>> {
        if let Some(ladder) = self.ladders.get(original) {
            return Some(ladder);
        }
        let store = self.store.clone()?;
        let hash = *original;
        let ladder = tokio::task::spawn_blocking(move || kept_ladder(&store, &hash))
            .await
            .ok()?
            .ok()??;
        let ladder = Arc::new(ladder);
        self.ladders.insert(*original, ladder.clone());
        Some(ladder)
    }

    /// The body of a rung, from memory or the store (off the reactor).
    pub async fn body(&self, rung: &Rung) -> Option<Bytes> {
        let store = self.store.clone()?;
        if let Some(bytes) = store.get_blob_in_memory(&rung.hash) {
            return Some(bytes);
        }
        let hash = rung.hash;
        tokio::task::spawn_blocking(move || store.get_blob(&hash))
            .await
            .ok()?
            .ok()?
    }

    /// Queues `original` for its variants unless it is queued or the queue is full:
    /// for its first pass when `so_far` is `None`, else for the formats
    /// `so_far.later` names. Returns at once: the variants are made in the
    /// background, one pass of one original at a time, each pass followed by a pause
    /// of its duration × (1/`cpu_share` − 1), so the maker's average use stays within
    /// `cpu_share` of a core. A later pass queues behind the first passes waiting
    /// then: a new image's WebP ladder is worth more than an old one's AVIF. Without
    /// a store there is nowhere to keep variants, and nothing is queued. `codings`
    /// are the codings (and levels) the compression profile keeps this type in: a
    /// text variant is measured after each.
    pub fn schedule(
        &self,
        original: Hash,
        bytes: Bytes,
        content_type: &str,
        config: &FidelityConfig,
        codings: &[(ContentCoding, u32)],
        so_far: Option<Arc<Ladder>>,
    ) {
        let Some(store) = self.store.clone() else {
            return;
        };
        {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.contains(&original) {
                return;
            }
            if pending.len() >= config.queue {
                self.metrics.queue_full.inc();
                return;
            }
            pending.insert(original);
        }
        let pending = self.pending.clone();
        let maker = self.maker.clone();
        let background = self.background.clone();
        let metrics = self.metrics.clone();
        let ladders = self.ladders.clone();
        let job = Arc::new(Original {
            store,
            hash: original,
            bytes,
            content_type: content_type.to_string(),
            config: config.clone(),
            codings: codings.to_vec(),
        });
        tokio::spawn(async move {
            let mut so_far = so_far;
            while so_far.as_ref().is_none_or(|l| !l.later.is_empty()) {
                let Ok(_turn) = maker.clone().acquire_owned().await else {
                    break;
                };
                let (done, finished) = tokio::sync::oneshot::channel();
                let started = Instant::now();
                let (pass_job, pass_metrics, kept) = (job.clone(), metrics.clone(), so_far.clone());
                background.spawn_blocking(move || {
                    let _ = done.send(make_and_count(&pass_job, kept.as_deref(), &pass_metrics));
                });
                let made = finished.await.ok().flatten().map(Arc::new);
                if let Some(ladder) = &made {
                    // Served from memory during the pause already.
                    ladders.insert(original, ladder.clone());
                }
                let spent = started.elapsed();
                // The metric says what the budget bounded: the maker's working time.
                metrics.maker_seconds.inc_by(spent.as_secs_f64());
                tokio::time::sleep(spent.mul_f64(1.0 / job.config.cpu_share - 1.0)).await;
                let Some(ladder) = made else {
                    // Not kept: a later request queues it again.
                    break;
                };
                so_far = Some(ladder);
            }
            pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&original);
        });
    }

    /// Takes a passive sample of the client's link from the kernel's view of its
    /// connection (its earlier responses), and returns its network's smoothed
    /// estimate, if there is one yet.
    pub fn network_link(&self, peer: IpAddr, sample: Option<LinkSample>) -> Option<LinkEstimate> {
        let network = Network::of(peer);
        let known = self.networks.get(&network);
        let mut link = known.unwrap_or_else(NetworkLink::new);
        if let Some(sample) = sample {
            if let Some(rtt) = sample.rtt {
                link.rtt_seconds.add(rtt.as_secs_f64());
            }
            if let Some(rate) = sample.delivery_rate {
                // An application-limited sample (a small response) only shows the
                // path is at least that fast: it may raise an estimate, never start
                // or lower one.
                let rate = rate as f64;
                let raises = link.bytes_per_second.get().is_some_and(|c| rate > c);
                if !sample.app_limited || raises {
                    link.bytes_per_second.add(rate);
                }
            }
            self.metrics.network_samples.inc();
            let due = link
                .kept
                .is_none_or(|at| at.elapsed() >= NETWORK_KEEP_INTERVAL);
            if due {
                if let Some(estimate) = link.estimate() {
                    link.kept = Some(Instant::now());
                    self.keep_network(network, estimate);
                }
            }
            self.networks.insert(network, link);
        }
        // After this sample is in: a load finishing first would be overwritten by it.
        if known.is_none() {
            self.load_network(network);
        }
        link.estimate()
    }

    fn keep_network(&self, network: Network, estimate: LinkEstimate) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let stored = StoredNetwork {
            rtt_seconds: estimate.rtt.as_secs_f64(),
            bytes_per_second: estimate.bytes_per_second,
        };
        let Ok(value) = serde_json::to_vec(&stored) else {
            return;
        };
        self.background.spawn_blocking_unwatched(move || {
            if let Err(e) = store.put_unwatched_record(&network_key(&network), &value) {
                tracing::debug!(error = %e, %network, "network estimate not kept");
            }
        });
    }

    /// Starts what the memory does not estimate yet of `network` from the store's
    /// estimate, in the background (a later request of that network benefits). The
    /// first request's own sample is in the memory by then, and often starts only the
    /// round trip: an application-limited rate sample (a small response) cannot start
    /// the rate.
    fn load_network(&self, network: Network) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let networks = self.networks.clone();
        self.background.spawn_blocking_unwatched(move || {
            let Ok(Some(value)) = store.get_record(&network_key(&network)) else {
                return;
            };
            let Ok(stored) = serde_json::from_slice::<StoredNetwork>(&value) else {
                return;
            };
            let valid = |x: f64| x.is_finite() && x > 0.0;
            if !valid(stored.rtt_seconds) || !valid(stored.bytes_per_second) {
                return;
            }
            let mut link = networks.get(&network).unwrap_or_else(|| NetworkLink {
                // What the store holds needs no keeping again.
                kept: Some(Instant::now()),
                ..NetworkLink::new()
            });
            let mut filled = false;
            for (part, stored) in [
                (&mut link.rtt_seconds, stored.rtt_seconds),
                (&mut link.bytes_per_second, stored.bytes_per_second),
            ] {
                if part.get().is_none() {
                    part.add(stored);
                    filled = true;
                }
            }
            // Unchanged, it is not put back over samples added meanwhile.
            if filled {
                networks.insert(network, link);
            }
        });
    }

    /// Runs the egress controller for as long as `variants` lives: every second it
    /// reads the bytes sent since the last period, smooths them, and moves the
    /// maximum fraction to keep egress between `fidelity.egress_low` and
    /// `egress_high` of `fidelity.egress_limit_bps` (read live; 0 holds the fraction
    /// at 1).
    pub fn run_egress_controller(
        variants: &Arc<Variants>,
        live: Arc<LiveConfig>,
        metrics: Arc<Metrics>,
    ) {
        let weak: Weak<Variants> = Arc::downgrade(variants);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(EGRESS_PERIOD);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut controller: Option<(u64, f64, f64, EgressController)> = None;
            let mut last = (Instant::now(), metrics.totals().1);
            loop {
                ticks.tick().await;
                let Some(variants) = weak.upgrade() else {
                    return;
                };
                let now = (Instant::now(), metrics.totals().1);
                let seconds = now.0.duration_since(last.0).as_secs_f64().max(1e-3);
                let rate = now.1.saturating_sub(last.1) as f64 / seconds;
                last = now;
                let config = live.current().fidelity.clone();
                if config.egress_limit_bps == 0 || !config.enabled {
                    controller = None;
                    variants.set_max_fraction(1.0);
                    metrics.fidelity.egress.set(rate);
                    continue;
                }
                let settings = (
                    config.egress_limit_bps,
                    config.egress_low,
                    config.egress_high,
                );
                let same = controller
                    .as_ref()
                    .is_some_and(|(l, lo, hi, _)| (*l, *lo, *hi) == settings);
                if !same {
                    let fresh = EgressController::new(settings.0, settings.1, settings.2);
                    controller = Some((settings.0, settings.1, settings.2, fresh));
                }
                if let Some((_, _, _, c)) = controller.as_mut() {
                    let fraction = c.observe(rate);
                    variants.set_max_fraction(fraction);
                    metrics.fidelity.egress.set(c.egress());
                }
            }
        });
    }

    fn set_max_fraction(&self, fraction: f64) {
        self.max_fraction
            .store(fraction.to_bits(), Ordering::Relaxed);
        self.metrics.max_fraction.set(fraction);
    }

    /// Counts a choice by its reason.
    pub fn count_decision(&self, reason: &'static str, saved: u64) {
        self.metrics
            .decisions
            .get_or_create(&ReasonLabels { reason })
            .inc();
        self.metrics.bytes_saved.inc_by(saved);
    }
}

/// What a pass of making an original's variants came to.
#[derive(Debug)]
pub struct Made {
    /// The ladder as kept, with the rungs of earlier passes.
    pub ladder: Ladder,
    /// Rungs this pass made: the last ones of the ladder.
    pub new_rungs: usize,
    /// Why there are no rungs (a `wirefold_fidelity_refused_total` reason).
    pub refused: Option<&'static str>,
}

impl Made {
    /// Bytes the rungs save against the original: the smallest rung's raw saving.
    pub fn bytes_saved(&self, original_len: u64) -> u64 {
        self.ladder
            .rungs
            .iter()
            .map(|r| original_len.saturating_sub(r.len))
            .max()
            .unwrap_or(0)
    }
}

/// An original whose variants are to be made, with what making them reads.
pub struct Original {
    /// Where its variants and ladder are kept; its body is already there.
    pub store: Store,
    pub hash: Hash,
    pub bytes: Bytes,
    /// As it is served.
    pub content_type: String,
    pub config: FidelityConfig,
    /// The codings (and levels) the compression profile keeps its type in: a text
    /// variant is kept only when it saves `fidelity.text_min_saving` after one of
    /// them, or sent whole.
    pub codings: Vec<(ContentCoding, u32)>,
}

/// Makes the next pass of `original`'s variants and keeps them and its ladder in
/// the store, where a server's `adapt` stage finds them: the first pass when
/// `so_far` is `None` (text, and images in [`images::ladder_formats`]), else the
/// formats `so_far.later` names, added to its rungs. The ladder returned says in
/// `later` whether another pass is due. CPU-heavy: run it off the reactor. Fails
/// only when the store could not keep them (a later sight tries again).
pub fn make_and_keep(
    original: &Original,
    so_far: Option<&Ladder>,
) -> Result<Made, store::StoreError> {
    let Original {
        store,
        hash,
        bytes,
        content_type,
        config,
        codings,
    } = original;
    let mut ladder = Ladder::default();
    let made = match (OriginalKind::of(content_type), so_far) {
        (kind, Some(so_far)) => {
            ladder.rungs = so_far.rungs.clone();
            ladder.original_sizes = so_far.original_sizes.clone();
            match kind {
                Some(OriginalKind::Image(format)) => {
                    image_rungs(bytes, format, config, Some(&so_far.later))
                }
                // Only image ladders have later passes.
                _ => Ok(Vec::new()),
            }
        }
        (None, None) => Err("format"),
        (Some(OriginalKind::Image(format)), None) => {
            let made = image_rungs(bytes, format, config, None);
            let avif_sized = images::probe(bytes, &config.image_limits())
                .is_ok_and(|p| u64::from(p.width) * u64::from(p.height) <= config.avif_max_pixels);
            if made.is_ok() && config.avif && avif_sized && bytes.len() >= config.min_image_bytes {
                ladder.later = images::LATER_FORMATS.to_vec();
            }
            made
        }
        (Some(OriginalKind::Text(text)), None) => {
            text_rungs(bytes, text, content_type, config, codings).map(|made| {
                made.map_or_else(Vec::new, |(original_sizes, rung)| {
                    ladder.original_sizes = original_sizes;
                    vec![rung]
                })
            })
        }
    };
    let (rungs, refused) = match made {
        Ok(rungs) if rungs.is_empty() && ladder.rungs.is_empty() => (rungs, Some("no_saving")),
        Ok(rungs) => (rungs, None),
        Err(reason) => (Vec::new(), Some(reason)),
    };
    let new_rungs = rungs.len();
    for (variant, media_type, extension, body, sizes) in rungs {
        store.put_encoding(hash, &variant.to_string(), &body)?;
        ladder.rungs.push(Rung {
            variant,
            hash: Hash::of(&body),
            len: body.len() as u64,
            media_type,
            sizes,
            extension,
        });
    }
    let refs: Vec<Hash> = std::iter::once(*hash)
        .chain(ladder.rungs.iter().map(|r| r.hash))
        .collect();
    let stored = StoredLadder::of(&ladder, refused.map(str::to_string));
    let value = serde_json::to_vec(&stored).unwrap_or_default();
    store.put_record(&ladder_key(hash), &value, &refs)?;
    Ok(Made {
        ladder,
        new_rungs,
        refused,
    })
}

/// [`make_and_keep`] for the background maker: counts what it made or refused.
fn make_and_count(
    original: &Original,
    so_far: Option<&Ladder>,
    metrics: &FidelityMetrics,
) -> Option<Ladder> {
    let made = match make_and_keep(original, so_far) {
        Ok(made) => made,
        Err(e) => {
            tracing::debug!(error = %e, "variants not kept");
            return None;
        }
    };
    if let Some(reason) = made.refused {
        metrics
            .refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
    let first_new = made.ladder.rungs.len() - made.new_rungs;
    for rung in &made.ladder.rungs[first_new..] {
        let kind = match rung.variant {
            Variant::Image { .. } => "image",
            _ => "text",
        };
        metrics
            .variants_made
            .get_or_create(&KindLabels { kind })
            .inc();
    }
    Some(made.ladder)
}

/// The minified variant of a text original with both sizes after compression, or
/// `None` when it saves under `fidelity.text_min_saving` whatever the coding.
fn text_rungs(
    bytes: &[u8],
    kind: TextKind,
    content_type: &str,
    config: &FidelityConfig,
    codings: &[(ContentCoding, u32)],
) -> Result<Option<(CodedSizes, MadeRung)>, &'static str> {
    let minified = texts::minify(kind, content_type, bytes).map_err(|e: TextError| {
        tracing::debug!(error = %e, ?kind, "text keeps its original only");
        e.reason()
    })?;
    let original_sizes = CodedSizes::measure(bytes, codings);
    let sizes = CodedSizes::measure(&minified, codings);
    let worth_it = original_sizes
        .0
        .iter()
        .zip(&sizes.0)
        .any(|((_, o), (_, m))| texts::saving(*o, *m) >= config.text_min_saving);
    if !worth_it {
        return Ok(None);
    }
    Ok(Some((
        original_sizes,
        (
            Variant::Minified,
            content_type.to_string(),
            kind.extension(),
            minified,
            sizes,
        ),
    )))
}

type MadeRung = (Variant, String, &'static str, Vec<u8>, CodedSizes);

/// The rungs of an image in `formats`, or in [`images::ladder_formats`] when `None`.
fn image_rungs(
    bytes: &[u8],
    format: ImageFormat,
    config: &FidelityConfig,
    formats: Option<&[ImageFormat]>,
) -> Result<Vec<MadeRung>, &'static str> {
    if bytes.len() < config.min_image_bytes {
        return Ok(Vec::new());
    }
    let pixels = images::decode(bytes, format, &config.image_limits()).map_err(|e| {
        tracing::debug!(error = %e, "image keeps its original only");
        match e {
            ImageError::InputTooLarge { .. } => "too_large",
            ImageError::UnknownFormat | ImageError::FormatMismatch { .. } => "format",
            ImageError::TooManyPixels { .. } => "pixels",
            ImageError::Animated => "animated",
            ImageError::Decode(_) | ImageError::Truncated => "undecodable",
        }
    })?;
    let formats = formats.map_or_else(|| images::ladder_formats(format, &pixels), <[_]>::to_vec);
    Ok(formats
        .into_iter()
        .flat_map(|out| images::ladder(&pixels, bytes.len(), out, config.steps))
        .map(|r| {
            let variant = Variant::Image {
                format: r.format,
                step: r.step,
            };
            (
                variant,
                r.format.media_type().to_string(),
                r.format.extension(),
                r.bytes,
                CodedSizes::default(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avif_originals_have_no_variants() {
        assert_eq!(OriginalKind::of("image/avif"), None);
        assert_eq!(
            OriginalKind::of("image/webp"),
            Some(OriginalKind::Image(ImageFormat::Webp))
        );
    }

    #[test]
    fn networks_are_slash_24_and_slash_48() {
        let v4 = Network::of("203.0.113.77".parse().unwrap());
        assert_eq!(v4.to_string(), "203.0.113.0/24");
        assert_eq!(v4, Network::of("203.0.113.1".parse().unwrap()));
        let mapped = Network::of("::ffff:203.0.113.9".parse().unwrap());
        assert_eq!(mapped, v4);
        let v6 = Network::of("2001:db8:1234:5678::1".parse().unwrap());
        assert_eq!(v6.to_string(), "2001:db8:1234::/48");
    }

    /// A network's estimate is kept in the store and loaded from it by a server that
    /// has not seen the network, and neither moves the counts kept answers watch.
    #[tokio::test]
    async fn network_estimates_are_kept_and_loaded_unwatched() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), store::StoreConfig::default()).unwrap();
        let metrics = Metrics::new();
        let peer: IpAddr = "203.0.113.77".parse().unwrap();
        let sample = LinkSample {
            delivery_rate: Some(250_000),
            rtt: Some(Duration::from_millis(80)),
            app_limited: false,
        };
        let counts = |background: &Background| (store.changes(), background.changes());

        let background = Background::default();
        let before = counts(&background);
        let variants = Variants::new(Some(store.clone()), background.clone(), &metrics);
        let estimate = variants.network_link(peer, Some(sample)).unwrap();
        background.idle().await;
        let key = network_key(&Network::of(peer));
        assert!(store.get_record(&key).unwrap().is_some(), "kept");
        assert_eq!(counts(&background), before, "keeping");

        let background = Background::default();
        let before = counts(&background);
        let restarted = Variants::new(Some(store.clone()), background.clone(), &metrics);
        assert_eq!(restarted.network_link(peer, None), None);
        background.idle().await;
        let loaded = restarted.network_link(peer, None).unwrap();
        assert_eq!(loaded.bytes_per_second, estimate.bytes_per_second);
        assert_eq!(counts(&background), before, "loading");

        // A first request whose sample starts only the round trip (a small response's
        // rate sample is application-limited): the stored rate fills the rest.
        let background = Background::default();
        let restarted = Variants::new(Some(store.clone()), background.clone(), &metrics);
        let small = LinkSample {
            delivery_rate: Some(40_000),
            rtt: Some(Duration::from_millis(30)),
            app_limited: true,
        };
        assert_eq!(restarted.network_link(peer, Some(small)), None);
        background.idle().await;
        let filled = restarted.network_link(peer, None).unwrap();
        assert_eq!(filled.bytes_per_second, estimate.bytes_per_second);
        assert_eq!(
            filled.rtt,
            Duration::from_millis(30),
            "its own sample stays"
        );
    }

    /// The first pass leaves AVIF due for images within `avif_max_pixels` (in a build
    /// with the feature and with `fidelity.avif` on); the later pass adds its rungs
    /// after the first pass's and leaves nothing due.
    #[test]
    fn the_later_pass_is_due_only_for_images_it_is_worth_making() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), store::StoreConfig::default()).unwrap();
        let photo = images::sample_photo_jpeg(160, 120, 7, 92).unwrap();
        store.put_blob(&photo).unwrap();
        let original = |config: FidelityConfig| Original {
            store: store.clone(),
            hash: Hash::of(&photo),
            bytes: Bytes::from(photo.clone()),
            content_type: "image/jpeg".into(),
            config,
            codings: Vec::new(),
        };
        let first = |config| make_and_keep(&original(config), None).unwrap().ladder;
        let defaults = FidelityConfig::default();
        assert_eq!(first(defaults.clone()).later, images::LATER_FORMATS);
        for config in [
            FidelityConfig {
                avif: false,
                ..defaults.clone()
            },
            FidelityConfig {
                avif_max_pixels: 160 * 120 - 1,
                ..defaults.clone()
            },
        ] {
            assert!(first(config).later.is_empty());
        }

        let so_far = first(defaults.clone());
        let made = make_and_keep(&original(defaults), Some(&so_far)).unwrap();
        assert!(made.ladder.later.is_empty());
        assert_eq!(made.ladder.rungs[..so_far.rungs.len()], so_far.rungs[..]);
        let added = &made.ladder.rungs[so_far.rungs.len()..];
        assert_eq!(added.len(), made.new_rungs);
        assert!(added
            .iter()
            .all(|r| images::LATER_FORMATS.contains(&r.image_format().unwrap())));
        assert_eq!(added.is_empty(), images::LATER_FORMATS.is_empty());
        // What the next request reads from the store.
        let kept = kept_ladder(&store, &Hash::of(&photo)).unwrap().unwrap();
        assert_eq!(kept, made.ladder);
    }

    #[test]
    fn the_rungs_are_listed_once_and_for_their_own_original_only() {
        let ladder = Ladder {
            rungs: vec![
                Rung::of_image(ImageFormat::Webp, 1, 700),
                Rung::of_image(ImageFormat::Jpeg, 2, 490),
            ],
            ..Ladder::default()
        };
        let (own, other) = (Hash([1; 32]), Hash([2; 32]));
        let expected = |original: &Hash| {
            format!(
                "{{\"{}\" 0.700 {{type image/webp}} {{length 700}}}}, \
                 {{\"{}\" 0.490 {{type image/jpeg}} {{length 490}}}}",
                ladder.rungs[0].url(original),
                ladder.rungs[1].url(original)
            )
        };
        assert_eq!(ladder.listed_rungs(&own), expected(&own));
        assert!(matches!(ladder.listed_rungs(&own), Cow::Borrowed(_)));
        // Asked beside another original, it lists that one's URLs, not its memo.
        assert_eq!(ladder.listed_rungs(&other), expected(&other));
        assert_eq!(ladder.listed_rungs(&own), expected(&own));
        assert!(Ladder::default().listed_rungs(&own).is_empty());
    }

    #[test]
    fn a_stored_ladder_reads_back_typed() {
        let rung = Rung {
            variant: Variant::Image {
                format: ImageFormat::Webp,
                step: 2,
            },
            hash: Hash([3; 32]),
            len: 1234,
            media_type: "image/webp".into(),
            sizes: CodedSizes::default(),
            extension: "webp",
        };
        let mut ladder = Ladder {
            rungs: vec![rung.clone()],
            later: vec![ImageFormat::Avif],
            ..Ladder::default()
        };
        let read_back = |ladder: &Ladder| {
            let json = serde_json::to_vec(&StoredLadder::of(ladder, None)).unwrap();
            serde_json::from_slice::<StoredLadder>(&json)
                .unwrap()
                .into_ladder()
                .unwrap()
        };
        assert_eq!(read_back(&ladder), ladder);
        // A complete ladder stores no `later`, as ladders did before AVIF.
        ladder.later.clear();
        let json = serde_json::to_string(&StoredLadder::of(&ladder, None)).unwrap();
        assert!(!json.contains("later"), "{json}");
        assert_eq!(read_back(&ladder), ladder);
        let original = Hash([9; 32]);
        assert_eq!(
            rung.url(&original),
            format!(
                "/.wirefold/v/{}/{}.webp",
                original.to_hex(),
                Hash([3; 32]).to_hex()
            )
        );
        assert!((rung.source_quality() - 0.49).abs() < 1e-9);
    }
}
