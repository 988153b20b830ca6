//! The `[delta]` section of the server's configuration.

use serde::{Deserialize, Serialize};

/// Delta encoding: version histories, RFC 9842 dictionaries, RFC 3229 deltas.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeltaConfig {
    pub enabled: bool,
    /// Distinct instances kept per resource, newest first.
    pub history: usize,
    /// Bytes of instances kept per resource; the oldest go first.
    pub history_bytes: u64,
    /// Query parameters that tell cluster members apart. Empty: every query of one
    /// path is one cluster (their instances are dictionaries for each other).
    pub cluster_params: Vec<String>,
    /// Announce reusable text responses with `Use-As-Dictionary` and answer `dcb`/`dcz`.
    pub dictionaries: bool,
    /// Dictionary codings in server preference order.
    pub dictionary_codings: String,
    /// Publish a derived dictionary for pages a browser may not keep as one
    /// (instantly stale), announced with `Link: rel="compression-dictionary"`.
    pub derived_dictionaries: bool,
    /// Links per page to the derived dictionaries of the instantly stale scripts and
    /// stylesheets it references (0: none); at most
    /// [`MAX_PER_PAGE`](crate::subresources::MAX_PER_PAGE).
    pub subresource_dictionaries: usize,
    /// Answer RFC 3229 `A-IM: vcdiff` requests with `226 IM Used`.
    pub vcdiff: bool,
    /// `match` patterns that override the inferred ones: the first rule whose
    /// `prefix` starts the path applies.
    pub pattern: Vec<PatternRule>,
    /// The client bandwidth the cost model assumes, in bits per second.
    pub assumed_bandwidth_bps: u64,
    /// In `--root` mode, how often the tree is scanned for changed files, whose
    /// deltas are then computed before anyone asks (0 turns scanning off).
    pub scan_interval_ms: u64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PatternRule {
    pub prefix: String,
    #[serde(rename = "match")]
    pub pattern: String,
}

impl Default for DeltaConfig {
    fn default() -> Self {
        DeltaConfig {
            enabled: true,
            history: 8,
            history_bytes: 32 << 20,
            cluster_params: Vec::new(),
            dictionaries: true,
            dictionary_codings: "dcz, dcb".into(),
            derived_dictionaries: true,
            subresource_dictionaries: 8,
            vcdiff: true,
            pattern: Vec::new(),
            assumed_bandwidth_bps: 10_000_000,
            scan_interval_ms: 2_000,
        }
    }
}

impl DeltaConfig {
    /// The dictionary codings in preference order (validated by `Config::check`).
    pub fn dictionary_preference(&self) -> Vec<codec::dictionary::DictionaryCoding> {
        self.dictionary_codings
            .split(',')
            .filter_map(|t| codec::dictionary::DictionaryCoding::from_token(t.trim()))
            .collect()
    }
}
