//! The report of one `wirefold get`: what was delivered and how, and the bytes on the
//! wire against the bytes delivered, as a line for humans or as JSON.

use bytes::Bytes;
use serde::Serialize;

/// Bytes received for one or more exchanges. Header bytes are approximate: the
/// response head as HTTP/1.1 text (status line, fields, blank line), whatever the
/// protocol. Body bytes are counted after transfer framing (chunking) is removed.
#[derive(Serialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wire {
    pub body_bytes: u64,
    pub header_bytes: u64,
}

impl Wire {
    pub fn total(&self) -> u64 {
        self.body_bytes + self.header_bytes
    }
    pub(crate) fn add(&mut self, other: Wire) {
        self.body_bytes += other.body_bytes;
        self.header_bytes += other.header_bytes;
    }
}

#[derive(Serialize)]
pub struct Report {
    pub url: String,
    /// The status of the response that delivered the instance.
    pub status: u16,
    /// How: `br`, `identity`, `dcz against 1a2b3c4d`, `vcdiff against "tag"`, `cached`.
    pub delivery: String,
    /// The instance matched the response's `Wirefold-Digest`.
    pub verified: bool,
    /// The request's exchanges, a plain refetch included; dictionary fetches apart.
    pub wire: Wire,
    pub delivered_bytes: u64,
    /// `1 - wire.total() / delivered_bytes`, in percent.
    pub saved_percent: f64,
    /// Why the first answer was discarded and the URL fetched plain, if it was.
    pub refetched_after: Option<String>,
    pub dictionary_fetches: Vec<DictionaryFetch>,
    #[serde(skip)]
    pub body: Bytes,
}

#[derive(Serialize, Debug)]
pub struct DictionaryFetch {
    pub url: String,
    pub status: u16,
    pub wire: Wire,
    /// Kept as a dictionary (it carried `Use-As-Dictionary` and decoded cleanly).
    pub stored: bool,
}

impl Report {
    /// The report without the body, for `--json`.
    #[allow(
        clippy::expect_used,
        reason = "a struct of strings, numbers and booleans serializes: serde_json fails \
                  only on maps with non-string keys and on failing `Serialize` impls"
    )]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("reports serialize")
    }

    /// One line for humans: status, delivery, bytes, savings, verification.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{} {} · wire {} B (body {} + headers ~{}) · delivered {} B · saved {:.1}% · {}",
            self.status,
            self.delivery,
            self.wire.total(),
            self.wire.body_bytes,
            self.wire.header_bytes,
            self.delivered_bytes,
            self.saved_percent,
            if self.verified {
                "sha-256 verified"
            } else {
                "unverified (no Wirefold-Digest)"
            },
        );
        if let Some(reason) = &self.refetched_after {
            line.push_str(&format!(
                " · first answer discarded ({reason}), refetched plain"
            ));
        }
        for fetch in &self.dictionary_fetches {
            let kept = if fetch.stored { "kept" } else { "not kept" };
            line.push_str(&format!(
                " · dictionary {} {kept}: {} B on the wire",
                fetch.url,
                fetch.wire.total()
            ));
        }
        line
    }
}
