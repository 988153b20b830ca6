//! Configuration: one TOML document mirroring every command-line flag.
//!
//! Every field has a default, so an empty file is valid. `Config::check` validates
//! the whole document and names the offending key in every error.

// The `[log]` section is the access log's own.
use crate::destinations::Destinations;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

pub use crate::config_error::ConfigError;
use serde::{Deserialize, Serialize};
// The `[http2]` section is the HTTP/2 listener's own.
pub use crate::h2_server::Http2Config;
// The `[hints]` section is the hint stage's own.
pub use crate::pipeline::hint::HintConfig;
// The `[delta]` section is the delta engine's own.
pub use delta::config::{DeltaConfig, PatternRule};
// The `[fidelity]` section is adaptive fidelity's own.
pub use fidelity::FidelityConfig;
use wirefold_http::ContentCoding;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the accelerator's listener.
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`).
    pub admin: SocketAddr,
    /// Required as `Authorization: Bearer <token>` by admin requests that change the
    /// server (`POST /dictionaries/train`); without it, only a loopback admin
    /// listener accepts them.
    pub admin_token: Option<String>,
    /// Where the store lives (the embedded store, unless `store` names Redis).
    pub data_dir: PathBuf,
    /// The shared store of a fleet: `redis://HOST:PORT[/DB]` (one Redis),
    /// `redis+cluster://HOST:PORT[,HOST:PORT…]` or a comma-separated list of
    /// `redis://HOST:PORT` seed nodes (a Redis Cluster). Unset, the embedded store in
    /// `data_dir`.
    pub store: Option<String>,
    /// The time budget of one call to the shared store (connecting, or an answer),
    /// in milliseconds: a slower Redis counts as unreachable, and requests are served
    /// without it until it answers again.
    pub store_budget_ms: u64,
    /// Reverse-proxy mode: the origin's base URL (`http://` or `https://`).
    pub origin: Option<String>,
    /// File-server mode: the directory served.
    pub root: Option<PathBuf>,
    /// `human` or `json`.
    pub log_format: LogFormat,
    /// Threads serving client connections, each with an event loop of its own that
    /// keeps a connection for its life (0: one per CPU). Taken at start.
    pub connection_threads: usize,
    pub tls: TlsConfig,
    pub limits: Limits,
    pub http2: Http2Config,
    pub upstream: UpstreamConfig,
    pub cache: CacheConfig,
    pub compression: CompressionConfig,
    pub delta: DeltaConfig,
    pub fidelity: FidelityConfig,
    pub hints: HintConfig,
    pub files: FilesConfig,
    pub link: LinkConfig,
    pub log: LogConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            admin: SocketAddr::from((Ipv4Addr::LOCALHOST, 9180)),
            admin_token: None,
            data_dir: PathBuf::from("./wirefold-data"),
            store: None,
            store_budget_ms: DEFAULT_STORE_BUDGET_MS,
            origin: None,
            root: None,
            log_format: LogFormat::Human,
            connection_threads: 0,
            tls: TlsConfig::default(),
            limits: Limits::default(),
            http2: Http2Config::default(),
            upstream: UpstreamConfig::default(),
            cache: CacheConfig::default(),
            compression: CompressionConfig::default(),
            delta: DeltaConfig::default(),
            fidelity: FidelityConfig::default(),
            hints: HintConfig::default(),
            files: FilesConfig::default(),
            link: LinkConfig::default(),
            log: LogConfig::default(),
        }
    }
}

/// `store_budget_ms` by default: a loopback or same-zone Redis answers in well under a
/// millisecond, so this is reached only by a Redis in trouble.
pub const DEFAULT_STORE_BUDGET_MS: u64 = 100;
/// The largest `store_budget_ms`: every request may wait this long per store call.
pub const MAX_STORE_BUDGET_MS: u64 = 10_000;
/// The most `connection_threads`: more than any machine's cores is a typo.
pub const MAX_CONNECTION_THREADS: usize = 1024;

impl Config {
    /// Where the store lives: Redis when `store` is set, else `data_dir/store`.
    pub fn store_location(&self) -> Result<store::StoreLocation, store::TargetError> {
        store::StoreLocation::from_setting(
            self.store.as_deref(),
            self.data_dir.join("store"),
            std::time::Duration::from_millis(self.store_budget_ms),
        )
    }
}

/// How the file source (`--root`) labels what it serves.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesConfig {
    /// `Cache-Control` for files whose name carries a version or content hash
    /// (`app.3f9a2c1b.js`, `jquery-3.7.1.js`): such a URL never changes content.
    pub versioned_cache_control: String,
    /// `Cache-Control` for every other file: revalidate (cheap, with the strong ETag).
    pub cache_control: String,
    /// Serve files and directories whose name starts with `.` (`.git/`, `.env`). Off,
    /// they are 404 and never scanned; `/.well-known/` is served either way.
    pub serve_dotfiles: bool,
    /// How long a file's size and modification time, once read, are trusted before a
    /// request reads them again (one `stat`). 0, the default, reads them for every
    /// request, so a rewritten file is served at once; at most
    /// [`MAX_FILE_CHECK_INTERVAL_MS`] (nginx's `open_file_cache_valid` is this trade).
    pub check_interval_ms: u64,
}

/// The longest `files.check_interval_ms`: a resolved path is walked again after a
/// second anyway.
pub const MAX_FILE_CHECK_INTERVAL_MS: u64 = 1000;

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            versioned_cache_control: "public, max-age=31536000, immutable".into(),
            cache_control: "no-cache".into(),
            serve_dotfiles: false,
            check_interval_ms: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Generate a certificate for `localhost` and `127.0.0.1` at start-up, published
    /// as `<data_dir>/self-signed-cert.pem`.
    pub self_signed: bool,
    /// PEM certificate chain.
    pub cert: Option<PathBuf>,
    /// PEM private key.
    pub key: Option<PathBuf>,
}

impl TlsConfig {
    pub fn enabled(&self) -> bool {
        self.self_signed || self.cert.is_some()
    }
}

/// Bounds on what a client may make the server hold or wait for.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request head (HTTP/1.1 buffer, HTTP/2 header list); larger gets 431.
    pub max_header_bytes: usize,
    /// A client must send a complete request head within this time (slowloris), and an
    /// idle keep-alive connection is closed after it.
    pub header_timeout_ms: u64,
    /// Responses up to this size are read whole, so they can be stored and compressed
    /// once; larger ones stream through uncached. Also the largest body stored.
    pub max_buffered_body: usize,
    /// Largest body wirefold will decode from an origin's content coding, buffered or
    /// streamed (decompression bombs). Memory does not depend on it (decodes run in
    /// windows); it bounds the work and the bytes one coded body can make.
    pub max_decoded_body: usize,
    /// Decoded bytes all buffered bodies together may hold in memory. A body that
    /// finds no room is streamed instead of buffered (and not stored).
    pub max_decoding_memory: usize,
    /// How long in-flight requests may run after SIGTERM/SIGINT.
    pub shutdown_grace_ms: u64,
    /// Client connections the main listener holds open at once; at the limit a new
    /// one makes idle parked HTTP/1.1 connections close (an eighth, 1 to 32; with
    /// none parked, HTTP/2 ones answering nothing) and waits, nothing more accepted,
    /// until one has closed. 0: three quarters of the
    /// open-file limit
    /// (raised to its hard limit at start). Read at start.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 * 1024,
            header_timeout_ms: 10_000,
            max_buffered_body: 8 * 1024 * 1024,
            // Far above real coded content (pages and scripts decode to a few MiB);
            // each bomb costs at most this much decoding work.
            max_decoded_body: 64 * 1024 * 1024,
            // bench/bombs.sh: 16 concurrent bombs peak 52 MB above idle with 16 MiB
            // (65 MB with 32 MiB: freed windows linger in the allocator's per-thread
            // arenas). A held body costs twice its size while its windows are joined,
            // so this holds one 8 MiB body, or many small ones; others stream.
            max_decoding_memory: 16 * 1024 * 1024,
            shutdown_grace_ms: 30_000,
            max_connections: 0,
        }
    }
}

/// How requests are forwarded to the origin.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    pub connect_timeout_ms: u64,
    /// Time allowed for the origin's response head.
    pub header_timeout_ms: u64,
    /// Longest pause allowed between two pieces of an origin's response body.
    pub body_idle_timeout_ms: u64,
    /// The `Host` sent upstream: `origin` (the origin URL's authority), `client`
    /// (preserve the client's), or a literal host name.
    pub host: String,
    /// Extra PEM root certificates trusted for `https://` origins.
    pub ca_file: Option<PathBuf>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout_ms: 5_000,
            header_timeout_ms: 30_000,
            body_idle_timeout_ms: 30_000,
            host: "origin".into(),
            ca_file: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub enabled: bool,
    /// Bytes of bodies kept on disk; least recently used are evicted beyond it.
    pub max_bytes: u64,
    /// Bytes of hot bodies and encodings kept in memory.
    pub memory_bytes: u64,
    /// Path prefixes whose responses are the same whatever cookie a request sends
    /// (static assets): there a request's `Cookie` does not make the response
    /// personal. Elsewhere an answer to a request with `Cookie` is shared (cached,
    /// kept as a delta base or dictionary) only when the origin marks it `public`
    /// or gives `s-maxage`, as Varnish does by default.
    pub public_paths: Vec<String>,
    /// Bytes of prepared responses kept in memory (answers sent again to the same
    /// request while nothing they were made from changed; docs/architecture.md); 0
    /// turns them off. Taken at start.
    pub prepared_bytes: u64,
    /// Also run the stages for every request a prepared response answers, send their
    /// answer, and count (`prepared_responses{result="mismatch"}`) and log any
    /// difference: a check for an operator, at the full cost.
    pub prepared_verify: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_bytes: 1 << 30,
            memory_bytes: 128 << 20,
            public_paths: Vec::new(),
            prepared_bytes: 32 << 20,
            prepared_verify: false,
        }
    }
}

impl CacheConfig {
    /// Whether the operator declared `path`'s responses the same for every cookie.
    /// Only a path in plain form qualifies: one an origin could resolve elsewhere
    /// (`/static/..%2Faccount`, `/static/;/account`, `\`) would let a personal page
    /// pass as a static one (web cache deception).
    pub fn is_public_path(&self, path: &str) -> bool {
        // Prefixes first: with none configured (the default) this costs nothing.
        self.public_paths
            .iter()
            .any(|prefix| path.starts_with(prefix.as_str()))
            && plain_path(path)
    }
}

/// No dot segment, no path parameter, no backslash, and no percent-encoded
/// separator, dot or percent that an origin might decode into one.
fn plain_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let encoded_special = ["%2f", "%2e", "%5c", "%25", "%3b"]
        .iter()
        .any(|e| lower.contains(e));
    !encoded_special
        && !path.contains(['\\', ';'])
        && !path
            .split('/')
            .any(|segment| segment == "." || segment == "..")
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompressionConfig {
    pub enabled: bool,
    /// Bodies smaller than this are sent as they are: the saving cannot pay for the
    /// coding overhead and the extra `Vary`.
    pub min_size: usize,
    /// Per media type, the codings to offer in server-preference order with levels.
    /// The first profile whose `types` matches a response's media type applies.
    pub profile: Vec<CompressionProfile>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CompressionProfile {
    /// Media types: exact (`text/html`), or a type wildcard (`text/*`).
    pub types: Vec<String>,
    /// For bodies compressed once and cached: `"br:11, zstd:19, gzip:9"`.
    pub cached: CodingList,
    /// For bodies compressed on every request.
    pub on_the_fly: CodingList,
}

/// A preference-ordered list of (coding, level), written as `"br:11, zstd:19, gzip:9"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodingList(pub Vec<(ContentCoding, u32)>);

impl std::str::FromStr for CodingList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut list = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, level) = item
                .split_once(':')
                .ok_or_else(|| format!("`{item}` should be CODING:LEVEL, e.g. `br:5`"))?;
            let coding = ContentCoding::from_token(name).ok_or_else(|| {
                format!("unknown coding `{name}` (valid: br, zstd, gzip, deflate)")
            })?;
            let level: u32 = level
                .trim()
                .parse()
                .map_err(|_| format!("level `{level}` is not a number"))?;
            if !coding.levels().contains(&level) {
                let r = coding.levels();
                return Err(format!(
                    "{name} level {level} is outside {}..={}",
                    r.start(),
                    r.end()
                ));
            }
            list.push((coding, level));
        }
        Ok(CodingList(list))
    }
}

impl std::fmt::Display for CodingList {
    /// The form it is parsed from: `br:11, zstd:19, gzip:9`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (coding, level)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}:{level}", coding.token())?;
        }
        Ok(())
    }
}

impl Serialize for CodingList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CodingList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Default for CompressionConfig {
    fn default() -> Self {
        // Chosen from `wirefold lab codecs` on the shared corpus: see docs/compression.md.
        CompressionConfig {
            enabled: true,
            min_size: 1024,
            profile: vec![CompressionProfile {
                types: COMPRESSIBLE_TYPES.iter().map(|t| t.to_string()).collect(),
                cached: CodingList(vec![
                    (ContentCoding::Br, 11),
                    (ContentCoding::Zstd, 19),
                    (ContentCoding::Gzip, 9),
                ]),
                on_the_fly: CodingList(vec![
                    (ContentCoding::Br, 5),
                    (ContentCoding::Zstd, 9),
                    (ContentCoding::Gzip, 6),
                ]),
            }],
        }
    }
}

/// Media types that compress well; images, audio, video, archives and woff2 fonts
/// are already compressed and are not listed.
const COMPRESSIBLE_TYPES: &[&str] = &[
    "text/*",
    "application/javascript",
    "application/json",
    "application/ld+json",
    "application/manifest+json",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/wasm",
    "application/x-javascript",
    "image/svg+xml",
    "image/x-icon",
    "image/vnd.microsoft.icon",
    "image/bmp",
    "font/ttf",
    "font/otf",
    "application/vnd.ms-fontobject",
];

impl CompressionConfig {
    /// The profile for a media type (`text/html; charset=utf-8` is matched on `text/html`).
    pub fn profile_for(&self, content_type: &str) -> Option<&CompressionProfile> {
        let essence = wirefold_http::media_type_essence(content_type);
        self.profile
            .iter()
            .find(|p| p.types.iter().any(|t| media_type_matches(t, &essence)))
    }
}

fn media_type_matches(pattern: &str, essence: &str) -> bool {
    match pattern.strip_suffix("/*") {
        Some(major) => essence.split('/').next() == Some(major) && essence.contains('/'),
        None => pattern.eq_ignore_ascii_case(essence),
    }
}

/// The server proxy's end of the proxy pair (`docs/link-protocol.md`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkConfig {
    /// Accept link requests from client proxies. Without `origin` or `root`, a link
    /// server fetches from whatever origin each link request names.
    pub enabled: bool,
    /// When set, link requests must carry it in `wirefold-link` (a server that fetches
    /// any URL must not be open to anyone who reaches it).
    pub token: Option<String>,
    /// Stream a held instance the client lacks while the origin is consulted.
    pub optimistic: bool,
    /// Skip the optimistic send when the host's origin wait so far averages less than
    /// this: the stale bytes could not get far before the answer, and cannot pay.
    pub min_origin_wait_ms: u64,
    /// Decoded bytes per STALE_DATA frame: the granularity at which a stale stream
    /// can stop.
    pub stale_chunk_bytes: usize,
    /// The link bandwidth the cost model assumes until the connection's own
    /// delivery rate is known, in bits per second.
    pub assumed_bandwidth_bps: u64,
    /// Where a forward server may fetch from: `private` (default: not loopback or
    /// link-local), `public`, or `any`.
    pub destinations: Destinations,
    /// A client proxy that takes no frame of a response for this long is dropped
    /// from that exchange, which frees what it holds.
    pub idle_client_timeout_ms: u64,
    /// Push a page's subresources into a client proxy that accepts them
    /// (`wirefold-push`), with the answer to the page (`docs/link-protocol.md`).
    pub push: bool,
    /// Subresources pushed with one page, at most: the best-ranked of its manifest.
    pub push_max_resources: usize,
    /// Decoded bytes pushed with one page, at most; a resource that would pass it
    /// is not pushed (a smaller one further down may be).
    pub push_max_bytes: u64,
}

/// The most subresources one page may push (`link.push_max_resources`): what one
/// PROMISE frame can name.
pub const MAX_PUSH_RESOURCES: usize = link_protocol::frame::MAX_PROMISED;
/// The most decoded bytes one page may push (`link.push_max_bytes`).
pub const MAX_PUSH_BYTES: u64 = 64 << 20;

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            enabled: false,
            token: None,
            optimistic: true,
            min_origin_wait_ms: 100,
            stale_chunk_bytes: 16 * 1024,
            assumed_bandwidth_bps: 10_000_000,
            destinations: Destinations::default(),
            idle_client_timeout_ms: 60_000,
            push: true,
            push_max_resources: 16,
            push_max_bytes: 2 << 20,
        }
    }
}

impl LinkConfig {
    /// Every problem in the section alone, each naming its key (the rules that
    /// involve other sections, the token a forward server needs and TLS, are
    /// `Config::problems`').
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        let mut invalid =
            |key, message: String| problems.push(ConfigError::Invalid { key, message });
        if let Some(token) = &self.token {
            if token.is_empty() || token == "1" || http::HeaderValue::from_str(token).is_err() {
                invalid(
                    "link.token",
                    "must be a non-empty header-safe string other than `1`".into(),
                );
            }
        }
        if !(1024..=frame_limit()).contains(&self.stale_chunk_bytes) {
            invalid(
                "link.stale_chunk_bytes",
                format!("must be between 1024 and {}", frame_limit()),
            );
        }
        if self.idle_client_timeout_ms == 0 {
            invalid(
                "link.idle_client_timeout_ms",
                "must be greater than 0".into(),
            );
        }
        if self.assumed_bandwidth_bps == 0 {
            invalid(
                "link.assumed_bandwidth_bps",
                "must be greater than 0".into(),
            );
        }
        if !(1..=MAX_PUSH_RESOURCES).contains(&self.push_max_resources) {
            invalid(
                "link.push_max_resources",
                format!("must be between 1 and {MAX_PUSH_RESOURCES}"),
            );
        }
        if !(1024..=MAX_PUSH_BYTES).contains(&self.push_max_bytes) {
            invalid(
                "link.push_max_bytes",
                format!("must be between 1024 and {MAX_PUSH_BYTES}"),
            );
        }
        problems
    }
}

/// Reads and parses a TOML document (the server's or the client proxy's).
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.into(),
        message: e.to_string(),
    })
}

/// Names the file and line where each invalid key is set, when the file sets it (a
/// value from the command line or a default has no line).
pub fn locate(problems: Vec<ConfigError>, path: &std::path::Path) -> Vec<ConfigError> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    problems
        .into_iter()
        .map(|problem| match problem {
            ConfigError::Invalid { key, message } => match line_of(&text, key) {
                Some(line) => ConfigError::InvalidAt {
                    path: path.into(),
                    line,
                    key,
                    message,
                },
                None => ConfigError::Invalid { key, message },
            },
            other => other,
        })
        .collect()
}

/// The 1-based line where a dotted key (`limits.header_timeout_ms`) is set; within an
/// array of tables (`compression.profile.types`), the first table's.
fn line_of(text: &str, key: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let document = DeTable::parse(text).ok()?;
    let line_at = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut table = document.get_ref();
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let (name, value) = table.iter().find(|(name, _)| name.get_ref() == part)?;
        let here = Some(line_at(name.span().start));
        if parts.peek().is_none() {
            return here;
        }
        table = match value.get_ref() {
            DeValue::Table(inner) => inner,
            DeValue::Array(items) => match items.first().map(|item| item.get_ref()) {
                Some(DeValue::Table(inner)) => inner,
                _ => return here,
            },
            _ => return here,
        };
    }
    None
}

impl Config {
    /// Reads and parses a TOML file; unknown keys are errors (a typo must not be ignored).
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        read_toml(path)
    }

    /// Validates the whole document; the first problem found is reported with its key.
    pub fn check(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem in the document, each naming its key.
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        let mut invalid =
            |key, message: String| problems.push(ConfigError::Invalid { key, message });
        if let Err(e) = self.store_location() {
            invalid("store", e.to_string());
        }
        if !(1..=MAX_STORE_BUDGET_MS).contains(&self.store_budget_ms) {
            invalid(
                "store_budget_ms",
                format!("must be 1 to {MAX_STORE_BUDGET_MS} (milliseconds)"),
            );
        }
        if self.connection_threads > MAX_CONNECTION_THREADS {
            invalid(
                "connection_threads",
                format!("must be 0 (one per CPU) to {MAX_CONNECTION_THREADS}"),
            );
        }
        match (&self.origin, &self.root) {
            (None, None) if self.link.enabled => {}
            (None, None) => {
                invalid(
                    "origin",
                    "set `origin` (reverse proxy), `root` (file server) or `link.enabled` (server proxy)"
                        .into(),
                )
            }
            (Some(_), Some(_)) => {
                invalid(
                    "root",
                    "`origin` and `root` are exclusive: choose one".into(),
                )
            }
            (Some(origin), None) => match origin.parse::<http::Uri>() {
                Err(e) => invalid("origin", format!("`{origin}` is not a URL: {e}")),
                Ok(uri)
                    if !matches!(uri.scheme_str(), Some("http") | Some("https"))
                        || uri.authority().is_none() =>
                {
                    invalid(
                        "origin",
                        format!("`{origin}` must be an absolute http:// or https:// URL"),
                    )
                }
                Ok(_) => {}
            },
            (None, Some(root)) => {
                if !root.is_dir() {
                    invalid("root", format!("{} is not a directory", root.display()));
                }
            }
        }
        if let Some(prefix) = self.cache.public_paths.iter().find(|p| !p.starts_with('/')) {
            invalid(
                "cache.public_paths",
                format!("`{prefix}` is not a path prefix: it must start with /"),
            );
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            invalid("tls.key", "`tls.cert` and `tls.key` go together".into());
        }
        if self.tls.self_signed && self.tls.cert.is_some() {
            invalid(
                "tls.self_signed",
                "choose a self-signed certificate or `tls.cert`, not both".into(),
            );
        }
        for (key, value) in [
            ("files.cache_control", &self.files.cache_control),
            (
                "files.versioned_cache_control",
                &self.files.versioned_cache_control,
            ),
        ] {
            if http::HeaderValue::from_str(value).is_err() {
                invalid(key, format!("`{value}` is not a valid header value"));
            }
        }
        if self.files.check_interval_ms > MAX_FILE_CHECK_INTERVAL_MS {
            invalid(
                "files.check_interval_ms",
                format!("must be at most {MAX_FILE_CHECK_INTERVAL_MS}"),
            );
        }
        if self.limits.max_header_bytes < 8192 {
            invalid("limits.max_header_bytes", "must be at least 8192".into());
        }
        if self.limits.header_timeout_ms == 0 {
            invalid("limits.header_timeout_ms", "must be greater than 0".into());
        }
        for (key, timeout) in [
            (
                "upstream.connect_timeout_ms",
                self.upstream.connect_timeout_ms,
            ),
            (
                "upstream.header_timeout_ms",
                self.upstream.header_timeout_ms,
            ),
            // 0 would fail every origin body at its first pause.
            (
                "upstream.body_idle_timeout_ms",
                self.upstream.body_idle_timeout_ms,
            ),
        ] {
            if timeout == 0 {
                invalid(key, "must be greater than 0".into());
            }
        }
        let host = self.upstream.host.as_str();
        if host != "origin" && host != "client" && http::HeaderValue::from_str(host).is_err() {
            invalid(
                "upstream.host",
                format!("`{host}` is not `origin`, `client` or a valid host"),
            );
        }
        for token in self
            .delta
            .dictionary_codings
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            if codec::dictionary::DictionaryCoding::from_token(token).is_none() {
                invalid(
                    "delta.dictionary_codings",
                    format!("unknown coding `{token}` (valid: dcz, dcb)"),
                );
            }
        }
        if self.delta.subresource_dictionaries > delta::subresources::MAX_PER_PAGE {
            invalid(
                "delta.subresource_dictionaries",
                format!(
                    "at most {} (the subresources kept per page)",
                    delta::subresources::MAX_PER_PAGE
                ),
            );
        }
        if self.delta.history == 0 {
            invalid("delta.history", "must be at least 1".into());
        }
        let forward = self.link.enabled && self.origin.is_none() && self.root.is_none();
        if forward && self.link.token.is_none() && !self.listen.ip().is_loopback() {
            invalid(
                "link.token",
                format!(
                    "a server proxy fetching any origin on {} would be an open proxy: set a token (--link-token)",
                    self.listen
                ),
            );
        }
        if self.link.enabled && !self.listen.ip().is_loopback() && !self.tls.enabled() {
            invalid(
                "tls",
                format!(
                    "a server proxy on {} without TLS would send its link token and every exchange across the network in clear: add --tls-cert/--tls-key (`tls.cert`, `tls.key`) or --tls-self-signed, or listen on loopback",
                    self.listen
                ),
            );
        }
        if let Some(token) = &self.admin_token {
            if token.is_empty() || http::HeaderValue::from_str(token).is_err() {
                invalid(
                    "admin_token",
                    "must be a non-empty header-safe string".into(),
                );
            }
        }
        for rule in &self.delta.pattern {
            if !rule.prefix.starts_with('/') || !rule.pattern.starts_with('/') {
                invalid(
                    "delta.pattern",
                    format!(
                        "prefix `{}` and match `{}` must be absolute paths",
                        rule.prefix, rule.pattern
                    ),
                );
            }
        }
        for p in &self.compression.profile {
            for t in &p.types {
                if !t.contains('/') {
                    invalid(
                        "compression.profile.types",
                        format!("`{t}` is not a media type like `text/html` or `text/*`"),
                    );
                }
            }
        }
        problems.extend(self.log.check().err());
        problems.extend(
            self.fidelity
                .problems()
                .into_iter()
                .map(|(key, message)| ConfigError::Invalid { key, message }),
        );
        problems.extend(self.http2.problems());
        problems.extend(self.hints.problems());
        problems.extend(self.link.problems());
        problems
    }
}

/// A stale chunk's zstd output must fit one frame even when incompressible.
fn frame_limit() -> usize {
    link_protocol::frame::MAX_PAYLOAD / 2
}

/// The `[log]` section.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Where the access log goes: a file (appended to, created if missing), or `-` /
    /// `stderr`. Unset, no access log is kept.
    pub access: Option<PathBuf>,
    pub access_format: AccessFormat,
    /// Records waiting for the writer; a request finding the queue full drops its
    /// line (counted) rather than wait.
    pub access_buffer: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            access: None,
            access_format: AccessFormat::Combined,
            access_buffer: 4096,
        }
    }
}

/// The largest `access_buffer`: a million records queued is already far behind.
const MAX_BUFFER: usize = 1 << 20;

impl LogConfig {
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_BUFFER).contains(&self.access_buffer) {
            return Err(ConfigError::Invalid {
                key: "log.access_buffer",
                message: format!("must be between 1 and {MAX_BUFFER}"),
            });
        }
        if self
            .access
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(ConfigError::Invalid {
                key: "log.access",
                message: "is empty: give a file, `-` or `stderr`, or leave it unset".into(),
            });
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AccessFormat {
    /// The combined log format (Apache, nginx), then wirefold's fields as `key=value`.
    Combined,
    /// One JSON object per line.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_section_checks_its_own_bounds() {
        assert!(LinkConfig::default().problems().is_empty());
        let keys = |link: LinkConfig| -> Vec<&'static str> {
            link.problems()
                .into_iter()
                .map(|problem| match problem {
                    ConfigError::Invalid { key, .. } => key,
                    other => panic!("{other}"),
                })
                .collect()
        };
        let bad = LinkConfig {
            push_max_resources: MAX_PUSH_RESOURCES + 1,
            push_max_bytes: 10,
            stale_chunk_bytes: 10,
            ..LinkConfig::default()
        };
        assert_eq!(
            keys(bad),
            [
                "link.stale_chunk_bytes",
                "link.push_max_resources",
                "link.push_max_bytes"
            ]
        );
        let none = LinkConfig {
            push_max_resources: 0,
            ..LinkConfig::default()
        };
        assert_eq!(keys(none), ["link.push_max_resources"]);
        let config = Config {
            link: LinkConfig {
                push_max_bytes: MAX_PUSH_BYTES + 1,
                ..LinkConfig::default()
            },
            ..Config::default()
        };
        assert!(
            config
                .problems()
                .iter()
                .any(|p| p.to_string().contains("link.push_max_bytes")),
            "the whole document's check includes the section's"
        );
    }

    #[test]
    fn public_paths_lift_only_paths_in_plain_form() {
        let cache = CacheConfig {
            public_paths: vec!["/static/".into()],
            ..CacheConfig::default()
        };
        assert!(cache.is_public_path("/static/app.1a2b.css"));
        assert!(cache.is_public_path("/static/img/a%20b.png"));
        for deceptive in [
            "/account",
            "/static/../account",
            "/static/..%2Faccount",
            "/static/%2e%2e/account",
            "/static/%252e%252e/account",
            "/static/..\\account",
            "/static/;/account",
            "/static/./x",
        ] {
            assert!(!cache.is_public_path(deceptive), "{deceptive}");
        }
    }

    #[test]
    fn default_coding_lists_are_valid() {
        for profile in CompressionConfig::default().profile {
            for list in [profile.cached, profile.on_the_fly] {
                assert_eq!(list.to_string().parse::<CodingList>(), Ok(list));
            }
        }
    }

    #[test]
    fn empty_file_gives_defaults_and_needs_a_mode() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c.listen.port(), 8080);
        let err = c.check().unwrap_err().to_string();
        assert!(err.contains("`origin`"), "{err}");
    }

    #[test]
    fn a_zero_upstream_timeout_is_an_error_naming_its_key() {
        for key in [
            "connect_timeout_ms",
            "header_timeout_ms",
            "body_idle_timeout_ms",
        ] {
            let text = format!("origin = \"http://a\"\n[upstream]\n{key} = 0");
            let c: Config = toml::from_str(&text).unwrap();
            let err = c.check().unwrap_err().to_string();
            assert!(err.contains(&format!("upstream.{key}")), "{err}");
        }
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let err = toml::from_str::<Config>("origin = \"http://a\"\nlisten_port = 3").unwrap_err();
        assert!(err.to_string().contains("listen_port"), "{err}");
    }

    #[test]
    fn coding_list_parses_and_rejects() {
        let l: CodingList = "br:11, zstd:3".parse().unwrap();
        assert_eq!(l.0, vec![(ContentCoding::Br, 11), (ContentCoding::Zstd, 3)]);
        assert!("br:12"
            .parse::<CodingList>()
            .unwrap_err()
            .contains("outside"));
        assert!("lzma:3"
            .parse::<CodingList>()
            .unwrap_err()
            .contains("unknown coding"));
        assert!("br"
            .parse::<CodingList>()
            .unwrap_err()
            .contains("CODING:LEVEL"));
    }

    /// `Serialize` writes the keys and value forms `Deserialize` reads (the docs test
    /// compares serialized keys with docs/configuration.md).
    #[test]
    fn serialized_configs_read_back() {
        let text = "br:11, zstd:19, gzip:9";
        let list: CodingList = text.parse().unwrap();
        assert_eq!(list.to_string(), text);
        let mut config = Config::default();
        config.delta.pattern = vec![PatternRule {
            prefix: "/blog/".into(),
            pattern: "/blog/*".into(),
        }];
        let written = toml::to_string(&config).unwrap();
        let read: Config = toml::from_str(&written).unwrap();
        assert_eq!(toml::to_string(&read).unwrap(), written);
    }

    #[test]
    fn a_server_proxy_open_to_the_network_needs_a_token() {
        let mut c = Config::default();
        c.link.enabled = true;
        assert!(c.check().is_ok(), "loopback only: no token needed");
        c.listen = "0.0.0.0:8443".parse().unwrap();
        assert!(c.check().unwrap_err().to_string().contains("link.token"));
        c.link.token = Some("s3cret".into());
        c.tls.self_signed = true;
        assert!(c.check().is_ok());
    }

    #[test]
    fn a_server_proxy_on_the_network_needs_tls() {
        let mut c = Config {
            origin: Some("http://127.0.0.1:1".into()),
            ..Config::default()
        };
        c.link.enabled = true;
        c.link.token = Some("s3cret".into());
        assert!(c.check().is_ok(), "loopback only: no TLS needed");
        c.listen = "192.0.2.7:8443".parse().unwrap();
        let err = c.check().unwrap_err().to_string();
        assert!(
            err.contains("192.0.2.7:8443")
                && err.contains("--tls-cert/--tls-key")
                && err.contains("--tls-self-signed"),
            "{err}"
        );
        c.tls.self_signed = true;
        assert!(c.check().is_ok());
        c.link.enabled = false;
        c.tls.self_signed = false;
        assert!(
            c.check().is_ok(),
            "no link: plain HTTP on the network is fine"
        );
    }

    #[test]
    fn an_unknown_access_log_format_names_the_key_and_the_choices() {
        let err = toml::from_str::<Config>("[log]\naccess_format = \"xml\"").unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains("access_format") && err.contains("combined") && err.contains("json"),
            "{err}"
        );
        let err = toml::from_str::<Config>("[log]\naccess_file = \"a.log\"").unwrap_err();
        assert!(err.to_string().contains("access_file"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = Config {
            origin: Some("ftp://x".into()),
            ..Config::default()
        };
        assert!(c.check().unwrap_err().to_string().contains("`origin`"));
        c.origin = Some("http://127.0.0.1:1".into());
        c.upstream.host = "bad\nhost".into();
        assert!(c.check().unwrap_err().to_string().contains("upstream.host"));
        let names_interval = |c: &Config| {
            c.problems()
                .iter()
                .any(|p| p.to_string().contains("files.check_interval_ms"))
        };
        let mut c = Config::default();
        c.files.check_interval_ms = MAX_FILE_CHECK_INTERVAL_MS;
        assert!(!names_interval(&c));
        c.files.check_interval_ms = MAX_FILE_CHECK_INTERVAL_MS + 1;
        assert!(names_interval(&c));
        let names_threads = |c: &Config| {
            c.problems()
                .iter()
                .any(|p| p.to_string().contains("`connection_threads`"))
        };
        c.connection_threads = MAX_CONNECTION_THREADS;
        assert!(!names_threads(&c));
        c.connection_threads = MAX_CONNECTION_THREADS + 1;
        assert!(names_threads(&c));
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wirefold.toml");
        let text = "origin = \"http://127.0.0.1:1\"\n\n[limits]\nheader_timeout_ms = 0\n\n[delta]\nhistory = 0\n\n[[compression.profile]]\ntypes = [\"html\"]\ncached = \"br:11\"\non_the_fly = \"br:5\"\n";
        std::fs::write(&path, text).unwrap();
        let mut config = Config::from_file(&path).unwrap();
        config.upstream.host = "bad\nhost".into(); // as from the command line: no line
        let problems: Vec<String> = locate(config.problems(), &path)
            .iter()
            .map(ToString::to_string)
            .collect();
        let file = path.display();
        assert_eq!(
            problems,
            [
                format!("config file {file}, line 4: `limits.header_timeout_ms`: must be greater than 0"),
                "`upstream.host`: `bad\nhost` is not `origin`, `client` or a valid host".to_string(),
                format!("config file {file}, line 7: `delta.history`: must be at least 1"),
                format!("config file {file}, line 10: `compression.profile.types`: `html` is not a media type like `text/html` or `text/*`"),
            ]
        );
    }

    #[test]
    fn profiles_match_media_types() {
        let c = CompressionConfig::default();
        assert!(c.profile_for("text/html; charset=utf-8").is_some());
        assert!(c.profile_for("application/javascript").is_some());
        assert!(c.profile_for("image/jpeg").is_none());
        assert!(c.profile_for("font/woff2").is_none());
        assert!(c.profile_for("textual").is_none());
    }
}
