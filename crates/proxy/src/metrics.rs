//! What every mechanism saved or cost, in Prometheus text format.

use crate::model::CLIENT_CLOSED;
use delta::derived::{DerivedCounters, LookupResult};
use fidelity::choice::Reason;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// `method` is one of [`method_label`]'s fixed values.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: &'static str,
    pub status: StatusLabel,
}

/// The `status` label: a registered status (or [`CLIENT_CLOSED`]) by its code
/// (`404`), any other by its class (`5xx`). Origins choose statuses, and each label value is a series kept for
/// the life of the process: an origin answering 599, 598, … must not grow `/metrics`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum StatusLabel {
    Registered(u16),
    Class(u16),
}

impl StatusLabel {
    pub fn of(status: http::StatusCode) -> Self {
        let code = status.as_u16();
        if status.canonical_reason().is_some() || status == CLIENT_CLOSED {
            StatusLabel::Registered(code)
        } else {
            StatusLabel::Class(code / 100)
        }
    }
}

impl EncodeLabelValue for StatusLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        match self {
            StatusLabel::Registered(code) => write!(encoder, "{code}"),
            StatusLabel::Class(class) => write!(encoder, "{class}xx"),
        }
    }
}

/// `mechanism` is the representation sent (`identity`, `gzip`, `br`, `zstd`, `deflate`,
/// `passthrough` for origin-encoded bodies forwarded as they came);
/// `content_type` is one of [`content_type_family`]'s fixed values.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    /// Borrowed for the pipeline's own mechanisms: no allocation per response.
    pub mechanism: Cow<'static, str>,
    pub content_type: &'static str,
}

/// The `method` label: the standard methods by name, anything else `other`. Methods
/// come from clients, and every distinct label value is a series kept for the life
/// of the process: a client sending made-up methods must not grow `/metrics`.
/// Adds `links` to a hint counter: most responses send none, and then leave the
/// counter, shared by every connection thread, alone.
/// The prepared responses' counters, made at start (every result shows, at 0 until
/// it happens) and held, so that a prepared answer looks no label up.
pub struct PreparedCounters {
    /// Kept answers sent again.
    pub sent: Counter,
    /// Answers kept.
    pub kept: Counter,
    /// Kept answers the stages agreed with (`cache.prepared_verify`)…
    pub verified: Counter,
    /// …and those they did not.
    pub mismatch: Counter,
}

impl PreparedCounters {
    fn new(family: &Family<ResultLabels, Counter>) -> PreparedCounters {
        let counter = |result| family.get_or_create(&ResultLabels { result }).clone();
        PreparedCounters {
            sent: counter("sent"),
            kept: counter("kept"),
            verified: counter("verified"),
            mismatch: counter("mismatch"),
        }
    }
}

fn count_links(counter: &Counter, links: usize) {
    if links > 0 {
        counter.inc_by(links as u64);
    }
}

pub fn method_label(method: &http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
}

/// Every value [`content_type_family`] gives, `other` last.
pub const CONTENT_TYPE_FAMILIES: [&str; 11] = [
    "html",
    "css",
    "javascript",
    "json",
    "xml",
    "text",
    "image",
    "font",
    "wasm",
    "media",
    "other",
];

/// The `content_type` label: the family of a media type (`html`, `css`, `javascript`,
/// `json`, `xml`, `text`, `image`, `font`, `wasm`, `media`, `other`). Content types
/// come from origins, which must not grow `/metrics` either; parameters and case are
/// ignored (`text/HTML; charset=utf-8` is `html`).
pub fn content_type_family(content_type: &str) -> &'static str {
    let essence = wirefold_http::media_type_essence(content_type);
    let (major, minor) = essence.split_once('/').unwrap_or((&essence, ""));
    match (major, minor) {
        ("text", "html") | ("application", "xhtml+xml") => "html",
        ("text", "css") => "css",
        ("text" | "application", "javascript" | "ecmascript" | "x-javascript") => "javascript",
        ("image", _) => "image",
        (_, "json") => "json",
        (_, _) if minor.ends_with("+json") => "json",
        ("text" | "application", "xml") => "xml",
        (_, _) if minor.ends_with("+xml") => "xml",
        ("text", _) => "text",
        ("font", _) | ("application", "vnd.ms-fontobject" | "font-woff" | "x-font-ttf") => "font",
        ("application", "wasm") => "wasm",
        ("audio" | "video", _) => "media",
        _ => "other",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// A state of the shared store (`store::SharedState::as_str`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

/// Which response something went out in: `final` or `early` (a 103).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResponseLabels {
    pub response: &'static str,
}

/// Why something happened; values from a fixed set per metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// The access log's counters, registered with the metrics.
#[derive(Clone, Default)]
pub struct AccessLogCounters {
    /// Lines dropped because the queue was full.
    pub dropped: Counter,
    /// Writes (or flushes) that failed; their lines are lost.
    pub write_errors: Counter,
    /// Reopens (`SIGUSR1`) that failed; the log goes on in the file open before.
    pub reopen_failures: Counter,
}

/// Adaptive fidelity's counters (`crate::variants`), registered with the metrics.
#[derive(Clone, Default)]
pub struct FidelityMetrics {
    /// Choices made for negotiable responses, by reason (`original`, `slow_link`,
    /// `save_data`, `egress`).
    pub decisions: Family<ReasonLabels, Counter>,
    /// Body bytes a chosen variant saved against its original.
    pub bytes_saved: Counter,
    /// Variants made and kept, by kind (`image`, `text`).
    pub variants_made: Family<KindLabels, Counter>,
    /// Originals that got no variants, by reason (`pixels`, `format`, `animated`,
    /// `undecodable`, `too_large`, `no_saving`, and for text `invalid`, `too_deep`,
    /// `panicked`, `charset`).
    pub refused: Family<ReasonLabels, Counter>,
    /// Originals not queued for variants because the queue was full.
    pub queue_full: Counter,
    /// Seconds the background variant maker spent working.
    pub maker_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Passive link samples taken from TCP_INFO of client connections.
    pub network_samples: Counter,
    /// The egress controller's largest share of an original a response may carry.
    pub max_fraction: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Smoothed egress, bytes per second, as the controller sees it.
    pub egress: Gauge<f64, std::sync::atomic::AtomicU64>,
}

/// Why an original got no variants: `wirefold_fidelity_refused_total`'s reasons.
pub const FIDELITY_REFUSALS: [&str; 10] = [
    "pixels",
    "format",
    "animated",
    "undecodable",
    "too_large",
    "no_saving",
    // Text: rejected by its minifier (or not UTF-8, or a page whose script never
    // ends), nested too deep to parse safely, a minifier panic, not declared UTF-8.
    "invalid",
    "too_deep",
    "panicked",
    "charset",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Adaptive fidelity: decisions, variants, the egress controller.
    pub fidelity: FidelityMetrics,
    pub requests: Family<RequestLabels, Counter>,
    /// Bytes of the body before the encode stage (what would have been sent).
    pub bytes_original: Family<BytesLabels, Counter>,
    /// Bytes of the body actually sent.
    pub bytes_sent: Family<BytesLabels, Counter>,
    pub cache: Family<ResultLabels, Counter>,
    /// `cache{result="hit"}`, held: a prepared answer counts its hit without a label
    /// lookup.
    pub cache_hit: Counter,
    /// Prepared responses, by result.
    pub prepared: PreparedCounters,
    /// Derived-body lookups (`encoding_cache_lookups`), counted by the delta engine.
    pub encoding_cache: Family<LookupResult, Counter>,
    pub origin_errors: Family<ResultLabels, Counter>,
    pub origin_latency: Histogram,
    pub response_latency: Histogram,
    pub store_bytes: Gauge,
    pub store_blobs: Gauge,
    /// Large blobs in files of the store's directory, sent without a copy (`store::sendable`).
    pub store_sendable_files: Gauge,
    /// Blob lookups in the store's local (in-memory) tier, by result (sampled at scrape).
    pub store_memory_lookups: Family<ResultLabels, Counter>,
    /// The shared store's state: 1 for the current one, 0 for the others.
    pub store_shared_state: Family<StateLabels, Gauge>,
    /// Changes of the shared store's state, by the state entered.
    pub store_shared_changes: Family<StateLabels, Counter>,
    pub store_write_errors: Counter,
    /// Completed passes of the root scanner (encodings and deltas made ahead).
    pub root_scans: Counter,
    /// Link responses by how they ended (confirm, delta, stale-delta, full, …).
    pub link_outcomes: Family<ResultLabels, Counter>,
    /// Subresources pushed over the link with a page, by result (`full`, `held`:
    /// confirmed because the client announced it holds it, `withdrawn`).
    pub link_pushes: Family<ResultLabels, Counter>,
    /// Decoded bytes whole-body decodes hold in memory now, and the most held at once.
    pub decode_memory: Gauge,
    pub decode_memory_peak: Gauge,
    /// Whole-body decodes whose output was not kept, by reason (`budget`, `size`).
    pub decodes_unheld: Family<ReasonLabels, Counter>,
    /// Configuration reloads, `applied` or `refused`.
    pub config_reloads: Family<ResultLabels, Counter>,
    /// Access log lines dropped (queue full) and failed writes.
    pub access_log: AccessLogCounters,
    /// Page manifests built (a page version parsed), and the entries they hold.
    pub manifests_built: Counter,
    pub manifest_entries: Counter,
    /// `Link: rel=preload` values sent, by `response`: `final` or `early` (in a 103);
    /// the family's two counters, resolved once (most pages' responses count some).
    final_hint_links: Counter,
    early_hint_links: Counter,
    /// 103 Early Hints responses sent.
    pub early_hints: Counter,
    /// Idle HTTP/1.1 connections held outside hyper now, and how often one was
    /// parked (`park`).
    pub connections_parked: Gauge,
    pub connection_parks: Counter,
    /// Parked connections closed at `limits.max_connections` for new clients.
    pub parked_closed_for_room: Counter,
    /// HTTP/2 connections answering nothing asked to close for them.
    pub http2_closed_for_room: Counter,
    /// Client connections the main listener holds open now, and the times it found
    /// none of `limits.max_connections` free (`conn_slots`).
    pub connections_open: Gauge,
    pub connection_limit_waits: Counter,
    pub streamed_page_scans: Counter,
    /// Seconds each give-back of memory freed by parked connections took.
    pub memory_trims: Histogram,
    /// Totals kept beside the families so the demo can print a summary cheaply.
    totals: Totals,
}

/// `body_bytes_original` and `body_bytes_sent` of one mechanism and content type.
#[derive(Clone)]
pub struct BodyCounters {
    original: Counter,
    sent: Counter,
}

#[derive(Default)]
struct Totals {
    original: AtomicU64,
    sent: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Records that the shared store entered `state`: the state gauge moves, the
    /// change is counted.
    pub fn shared_store_entered(&self, state: store::SharedState) {
        self.shared_store_is(state);
        self.store_shared_changes
            .get_or_create(&StateLabels {
                state: state.as_str(),
            })
            .inc();
    }

    /// Brings the store's sampled figures up to `stats`: gauges set, counters advanced
    /// to the store's totals.
    pub fn store_sampled(&self, stats: &store::StoreStats) {
        self.store_bytes.set(stats.disk_bytes as i64);
        self.store_blobs.set(stats.blobs as i64);
        self.store_sendable_files.set(stats.sendable_files as i64);
        for (result, total) in [("hit", stats.memory_hits), ("miss", stats.memory_misses)] {
            let counter = self
                .store_memory_lookups
                .get_or_create(&ResultLabels { result });
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// Sets the shared store's state gauge to `state`.
    pub fn shared_store_is(&self, state: store::SharedState) {
        use store::SharedState::{Available, Full, Unreachable};
        for each in [Available, Unreachable, Full] {
            let labels = StateLabels {
                state: each.as_str(),
            };
            self.store_shared_state
                .get_or_create(&labels)
                .set(i64::from(each == state));
        }
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("wirefold");
        let requests = Family::default();
        registry.register(
            "requests",
            "Requests answered, by method and status",
            requests.clone(),
        );
        let bytes_original = Family::default();
        registry.register(
            "body_bytes_original",
            "Body bytes before encoding, by mechanism and content type",
            bytes_original.clone(),
        );
        let bytes_sent = Family::default();
        registry.register(
            "body_bytes_sent",
            "Body bytes sent, by mechanism and content type",
            bytes_sent.clone(),
        );
        let cache: Family<ResultLabels, Counter> = Family::default();
        registry.register("cache_lookups", "HTTP cache outcomes", cache.clone());
        let cache_hit = cache.get_or_create(&ResultLabels { result: "hit" }).clone();
        let prepared_family = Family::default();
        registry.register(
            "prepared_responses",
            "Prepared responses: answers kept, kept answers sent again, verifications",
            prepared_family.clone(),
        );
        let prepared = PreparedCounters::new(&prepared_family);
        let encoding_cache = Family::default();
        registry.register(
            "encoding_cache_lookups",
            "Cached-encoding outcomes",
            encoding_cache.clone(),
        );
        let origin_errors = Family::default();
        registry.register(
            "origin_errors",
            "Failed origin exchanges, by kind",
            origin_errors.clone(),
        );
        let origin_latency = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "origin_latency_seconds",
            "Time from sending a request upstream to its response head",
            origin_latency.clone(),
        );
        let response_latency = Histogram::new(exponential_buckets(0.0001, 2.0, 18));
        registry.register(
            "response_latency_seconds",
            "Time from a request's arrival to its response head",
            response_latency.clone(),
        );
        let store_bytes = Gauge::default();
        registry.register(
            "store_bytes",
            "Bytes of bodies in the store",
            store_bytes.clone(),
        );
        let store_blobs = Gauge::default();
        registry.register("store_blobs", "Bodies in the store", store_blobs.clone());
        let store_sendable_files = Gauge::default();
        registry.register(
            "store_sendable_files",
            "Large bodies held in unnamed files of the store's directory, sent with sendfile instead of copied",
            store_sendable_files.clone(),
        );
        let store_memory_lookups = Family::default();
        registry.register(
            "store_memory_lookups",
            "Blob lookups in the store's in-memory tier, by result",
            store_memory_lookups.clone(),
        );
        let store_shared_state = Family::default();
        registry.register(
            "store_shared_state",
            "The shared store's state (1 for the current one)",
            store_shared_state.clone(),
        );
        let store_shared_changes = Family::default();
        registry.register(
            "store_shared_changes",
            "Changes of the shared store's state, by the state entered",
            store_shared_changes.clone(),
        );
        let store_write_errors = Counter::default();
        registry.register(
            "store_write_errors",
            "Store writes that failed (served anyway)",
            store_write_errors.clone(),
        );
        let root_scans = Counter::default();
        registry.register(
            "root_scans",
            "Completed passes of the root scanner",
            root_scans.clone(),
        );
        let link_outcomes = Family::default();
        registry.register(
            "link_responses",
            "Link responses by outcome",
            link_outcomes.clone(),
        );
        let link_pushes = Family::default();
        registry.register(
            "link_pushes",
            "Subresources pushed over the link with a page, by result",
            link_pushes.clone(),
        );
        let connections_parked = Gauge::default();
        registry.register(
            "connections_parked",
            "Idle HTTP/1.1 connections parked outside hyper now (no buffers held)",
            connections_parked.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Client connections the main listener holds open now (served or parked)",
            connections_open.clone(),
        );
        let connection_limit_waits = Counter::default();
        registry.register(
            "connection_limit_waits",
            "Times the main listener stopped accepting at limits.max_connections",
            connection_limit_waits.clone(),
        );
        let connection_parks = Counter::default();
        registry.register(
            "connection_parks",
            "Times an idle HTTP/1.1 connection was parked",
            connection_parks.clone(),
        );
        let parked_closed_for_room = Counter::default();
        registry.register(
            "parked_closed_for_room",
            "Idle parked HTTP/1.1 connections closed at limits.max_connections to make room",
            parked_closed_for_room.clone(),
        );
        let http2_closed_for_room = Counter::default();
        registry.register(
            "http2_closed_for_room",
            "HTTP/2 connections answering nothing asked to close (GOAWAY) at limits.max_connections to make room (no parked one was left)",
            http2_closed_for_room.clone(),
        );
        let streamed_page_scans = Counter::default();
        registry.register(
            "streamed_page_scans",
            "Pages too large to buffer scanned for their manifest as they streamed",
            streamed_page_scans.clone(),
        );
        let memory_trims = Histogram::new(exponential_buckets(0.0001, 2.0, 14));
        registry.register(
            "memory_trim_seconds",
            "Time each give-back to the kernel of memory freed by parked connections took",
            memory_trims.clone(),
        );
        let decode_memory = Gauge::default();
        registry.register(
            "decode_memory_bytes",
            "Decoded bytes held in memory by whole-body decodes (limits.max_decoding_memory)",
            decode_memory.clone(),
        );
        let decode_memory_peak = Gauge::default();
        registry.register(
            "decode_memory_peak_bytes",
            "Most decoded bytes held by whole-body decodes at once since start",
            decode_memory_peak.clone(),
        );
        let decodes_unheld = Family::default();
        registry.register(
            "decodes_unheld",
            "Whole-body decodes not kept in memory (streamed, or refused if the body then failed to decode), by reason",
            decodes_unheld.clone(),
        );
        let config_reloads = Family::default();
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP, POST /reload), by result: applied or refused",
            config_reloads.clone(),
        );
        let access_log = AccessLogCounters::default();
        registry.register(
            "access_log_dropped",
            "Access log lines dropped because the writer was behind (log.access_buffer full)",
            access_log.dropped.clone(),
        );
        registry.register(
            "access_log_write_errors",
            "Access log writes that failed (their lines are lost)",
            access_log.write_errors.clone(),
        );
        registry.register(
            "access_log_reopen_failures",
            "Access log reopens (SIGUSR1) that failed; the log goes on in the file open before",
            access_log.reopen_failures.clone(),
        );
        let manifests_built = Counter::default();
        registry.register(
            "manifests_built",
            "Page manifests built (a page version's inline references read)",
            manifests_built.clone(),
        );
        let manifest_entries = Counter::default();
        registry.register(
            "manifest_entries",
            "Entries in the page manifests built",
            manifest_entries.clone(),
        );
        let hint_links = Family::<ResponseLabels, Counter>::default();
        registry.register(
            "hint_links",
            "Link rel=preload values sent, by response: final or early (103)",
            hint_links.clone(),
        );
        let final_hint_links = hint_links
            .get_or_create(&ResponseLabels { response: "final" })
            .clone();
        let early_hint_links = hint_links
            .get_or_create(&ResponseLabels { response: "early" })
            .clone();
        let early_hints = Counter::default();
        registry.register(
            "early_hints",
            "103 Early Hints responses sent",
            early_hints.clone(),
        );
        let fidelity = FidelityMetrics::default();
        fidelity.max_fraction.set(1.0);
        // Every reason and kind shows from the start, at 0, so a rate over them
        // needs no special case for "never happened yet".
        for reason in Reason::ALL {
            let reason = reason.label();
            fidelity
                .decisions
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        for kind in ["image", "text"] {
            fidelity
                .variants_made
                .get_or_create(&KindLabels { kind })
                .inc_by(0);
        }
        for reason in FIDELITY_REFUSALS {
            fidelity
                .refused
                .get_or_create(&ReasonLabels { reason })
                .inc_by(0);
        }
        registry.register(
            "fidelity_decisions",
            "Variant choices for negotiable responses, by reason",
            fidelity.decisions.clone(),
        );
        registry.register(
            "fidelity_bytes_saved",
            "Body bytes the chosen variants saved against their originals",
            fidelity.bytes_saved.clone(),
        );
        registry.register(
            "fidelity_variants_made",
            "Variants made and kept, by kind (image, text)",
            fidelity.variants_made.clone(),
        );
        registry.register(
            "fidelity_refused",
            "Originals that got no variants, by reason",
            fidelity.refused.clone(),
        );
        registry.register(
            "fidelity_queue_full",
            "Originals not queued for variants because fidelity.queue was full",
            fidelity.queue_full.clone(),
        );
        registry.register(
            "fidelity_maker_seconds",
            "Seconds the background variant maker worked (bounded by fidelity.cpu_share)",
            fidelity.maker_seconds.clone(),
        );
        registry.register(
            "fidelity_network_samples",
            "Passive link samples (TCP_INFO) taken from client connections",
            fidelity.network_samples.clone(),
        );
        registry.register(
            "fidelity_max_fraction",
            "The egress controller's largest share of an original a response may carry",
            fidelity.max_fraction.clone(),
        );
        registry.register(
            "fidelity_egress_bytes_per_second",
            "Smoothed egress as the fidelity controller sees it",
            fidelity.egress.clone(),
        );
        Metrics {
            registry,
            fidelity,
            manifests_built,
            manifest_entries,
            final_hint_links,
            early_hint_links,
            early_hints,
            connections_parked,
            connections_open,
            connection_limit_waits,
            connection_parks,
            parked_closed_for_room,
            http2_closed_for_room,
            streamed_page_scans,
            memory_trims,
            config_reloads,
            access_log,
            decode_memory,
            decode_memory_peak,
            decodes_unheld,
            root_scans,
            link_outcomes,
            link_pushes,
            requests,
            bytes_original,
            bytes_sent,
            cache_hit,
            cache,
            prepared,
            encoding_cache,
            origin_errors,
            origin_latency,
            response_latency,
            store_bytes,
            store_blobs,
            store_sendable_files,
            store_memory_lookups,
            store_shared_state,
            store_shared_changes,
            store_write_errors,
            totals: Totals::default(),
        }
    }

    /// Counts a page manifest built with `entries` entries.
    pub fn manifest_built(&self, entries: usize) {
        self.manifests_built.inc();
        self.manifest_entries.inc_by(entries as u64);
    }

    /// Counts `links` preload links sent in a final response.
    pub fn hinted_final(&self, links: usize) {
        count_links(&self.final_hint_links, links);
    }

    /// Counts `links` preload links sent in a 103 Early Hints response.
    pub fn hinted_early(&self, links: usize) {
        count_links(&self.early_hint_links, links);
    }

    /// Counts one body sent, its size before and after the encode stage: `family` is
    /// [`content_type_family`] of its media type.
    pub fn record_body(
        &self,
        mechanism: impl Into<Cow<'static, str>>,
        family: &'static str,
        original: u64,
        sent: u64,
    ) {
        self.record_body_with(&self.body_counters(mechanism, family), original, sent);
    }

    /// The byte counters of one kind of body, held by an answer sent again (a label
    /// lookup takes the family's lock, which every connection thread shares).
    pub fn body_counters(
        &self,
        mechanism: impl Into<Cow<'static, str>>,
        family: &'static str,
    ) -> BodyCounters {
        let labels = BytesLabels {
            mechanism: mechanism.into(),
            content_type: family,
        };
        BodyCounters {
            original: self.bytes_original.get_or_create(&labels).clone(),
            sent: self.bytes_sent.get_or_create(&labels).clone(),
        }
    }

    /// Counts one body with counters from [`Metrics::body_counters`].
    pub fn record_body_with(&self, counters: &BodyCounters, original: u64, sent: u64) {
        counters.original.inc_by(original);
        counters.sent.inc_by(sent);
        self.totals.original.fetch_add(original, Ordering::Relaxed);
        self.totals.sent.fetch_add(sent, Ordering::Relaxed);
    }

    pub fn record_request(
        &self,
        method: &http::Method,
        status: http::StatusCode,
        latency: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method_label(method),
                status: StatusLabel::of(status),
            })
            .inc();
        self.response_latency.observe(latency.as_secs_f64());
    }

    pub fn cache_result(&self, result: &'static str) {
        self.cache.get_or_create(&ResultLabels { result }).inc();
    }

    /// The counters the delta engine's derived bodies keep, registered here.
    pub fn derived_counters(&self) -> DerivedCounters {
        DerivedCounters::new(&self.encoding_cache, self.store_write_errors.clone())
    }

    /// Counts one promised subresource by how its push ended.
    pub fn link_push(&self, result: &'static str) {
        self.link_pushes
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    pub fn link_outcome(&self, outcome: &'static str) {
        self.link_outcomes
            .get_or_create(&ResultLabels { result: outcome })
            .inc();
    }

    pub fn config_reload(&self, result: &'static str) {
        self.config_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    pub fn origin_error(&self, kind: &'static str) {
        self.origin_errors
            .get_or_create(&ResultLabels { result: kind })
            .inc();
    }

    /// (bytes before encoding, bytes sent) since start.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.totals.original.load(Ordering::Relaxed),
            self.totals.sent.load(Ordering::Relaxed),
        )
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_fixed_sets() {
        let status = |code| StatusLabel::of(http::StatusCode::from_u16(code).unwrap());
        assert_eq!(status(404), StatusLabel::Registered(404));
        assert_eq!(status(599), StatusLabel::Class(5));
        assert_eq!(
            status(598),
            status(599),
            "one series per unregistered class"
        );
        assert_eq!(status(499), StatusLabel::Registered(499));
        assert_eq!(method_label(&http::Method::GET), "GET");
        assert_eq!(method_label(&http::Method::PATCH), "PATCH");
        let made_up = http::Method::from_bytes(b"MADEUP").unwrap();
        assert_eq!(method_label(&made_up), "other");
        for (content_type, family) in [
            ("text/html; charset=utf-8", "html"),
            ("TEXT/HTML", "html"),
            ("application/xhtml+xml", "html"),
            ("text/css", "css"),
            ("application/javascript", "javascript"),
            ("text/javascript", "javascript"),
            ("application/json", "json"),
            ("application/ld+json", "json"),
            ("application/rss+xml", "xml"),
            ("text/xml", "xml"),
            ("image/svg+xml", "image"),
            ("image/webp", "image"),
            ("text/plain", "text"),
            ("font/woff2", "font"),
            ("application/wasm", "wasm"),
            ("video/mp4", "media"),
            ("application/x-made-up-42", "other"),
            ("", "other"),
        ] {
            assert_eq!(content_type_family(content_type), family, "{content_type}");
            assert!(CONTENT_TYPE_FAMILIES.contains(&family), "{family}");
        }
    }
}
