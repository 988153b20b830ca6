//! The truth: the body of every instance, a pure function of (resource, version), so
//! the origin serves it and the driver regenerates it to check what wirefold sent.
//!
//! Consecutive versions share most of their lines, as a real page's do: each line
//! changes on its own schedule (a few every version, more every few versions, most
//! never), and a few lines come and go, so deltas and dictionaries have work to do.

use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use store::memo::Bounded;

use crate::catalogue::{self, InstanceId, Kind};

/// An instance's body and its SHA-256.
pub struct Truth {
    pub body: Bytes,
    pub sha256: [u8; 32],
}

/// Expected bodies, made once and shared: workers ask for the same few instances.
pub struct Truths {
    made: Bounded<InstanceId, Arc<Truth>>,
}

/// Bytes of bodies the memo keeps; older instances are made again if asked for.
const MEMO_BYTES: u64 = 64 << 20;

impl Default for Truths {
    fn default() -> Self {
        Truths {
            made: Bounded::with_weight(MEMO_BYTES, 512, |t: &Arc<Truth>| t.body.len() as u64),
        }
    }
}

impl Truths {
    /// The body of `id`; `None` for a resource the catalogue does not have.
    pub fn get(&self, id: InstanceId) -> Option<Arc<Truth>> {
        if let Some(truth) = self.made.get(&id) {
            return Some(truth);
        }
        let body = Bytes::from(body(id)?);
        let truth = Arc::new(Truth {
            sha256: Sha256::digest(&body).into(),
            body,
        });
        self.made.insert(id, truth.clone());
        Some(truth)
    }
}

/// Words the text bodies are made of: real words compress like real text.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "request",
    "response",
    "header",
    "field",
    "cache",
    "origin",
    "server",
    "client",
    "proxy",
    "delta",
    "version",
    "instance",
    "dictionary",
    "encoding",
    "compression",
    "window",
    "stream",
    "frame",
    "link",
    "browser",
    "page",
    "script",
    "style",
    "image",
    "network",
    "bandwidth",
    "latency",
    "round",
    "trip",
    "connection",
    "socket",
    "buffer",
    "memory",
    "budget",
    "limit",
    "timeout",
    "error",
    "status",
    "content",
    "length",
    "range",
    "byte",
    "validator",
    "entity",
    "tag",
    "match",
    "pattern",
    "history",
    "store",
    "blob",
    "hash",
    "digest",
    "verify",
    "chunk",
    "body",
    "weather",
    "market",
    "river",
    "mountain",
    "garden",
    "library",
    "archive",
    "science",
    "music",
    "theatre",
    "harbour",
    "railway",
    "festival",
    "election",
    "council",
    "museum",
    "forecast",
    "season",
    "morning",
    "evening",
    "northern",
    "southern",
    "eastern",
    "western",
];

/// SplitMix64: a small, well-mixed deterministic generator.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn mix3(a: u64, b: u64, c: u64) -> u64 {
    mix(mix(mix(a) ^ b) ^ c)
}

/// Average bytes per line, to size documents.
const LINE_BYTES: usize = 72;

/// The body of `id`; `None` for a resource the catalogue does not have.
pub fn body(id: InstanceId) -> Option<Vec<u8>> {
    let resource = catalogue::get(id.resource)?;
    let r = u64::from(id.resource);
    let v = id.version;
    let lines = (resource.size / LINE_BYTES).max(1);
    let mut out = Vec::with_capacity(resource.size + resource.size / 8);
    let head = match resource.kind {
        Kind::Html => format!(
            "<!doctype html><html><head><meta charset=utf-8><title>{} version {v}</title></head><body>\n",
            resource.target
        ),
        Kind::Script => format!("// {} build {v}\n\"use strict\";\n", resource.target),
        Kind::Css => format!("/* {} version {v} */\n", resource.target),
        Kind::Json => format!("{{\"resource\":{:?},\"version\":{v},\"items\":[\n", resource.target),
        Kind::Binary => format!("SOAK {r} {v}\n"),
    };
    out.extend_from_slice(head.as_bytes());
    for k in 0..lines as u64 {
        let schedule = mix3(r, k, 0x5C4E_D01E);
        // Lines that come and go: present in alternate stretches of 7 versions.
        if schedule % 100 < 4 && ((v + schedule / 100) / 7) % 2 == 1 {
            continue;
        }
        // How often this line changes: every version (3%), every 5 (7%), every 40
        // (15%), never (75%).
        let span = match (schedule >> 8) % 100 {
            0..=2 => 1,
            3..=9 => 5,
            10..=24 => 40,
            _ => u64::MAX,
        };
        let phase = (schedule >> 16) % 64;
        let epoch = v.saturating_add(phase) / span;
        let seed = mix3(r, k, epoch);
        line(resource.kind, k, seed, &mut out);
    }
    let tail: &[u8] = match resource.kind {
        Kind::Html => b"</body></html>\n",
        Kind::Json => b"{\"end\":true}]}\n",
        Kind::Script | Kind::Css | Kind::Binary => b"",
    };
    out.extend_from_slice(tail);
    Some(out)
}

/// Appends line `k` made from `seed`.
fn line(kind: Kind, k: u64, seed: u64, out: &mut Vec<u8>) {
    let mut x = seed;
    let words = |mut x: u64| {
        let mut words = String::with_capacity(LINE_BYTES);
        for i in 0..5 + seed % 8 {
            x = mix(x);
            if i > 0 {
                words.push(' ');
            }
            words.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        }
        words
    };
    let text = match kind {
        Kind::Binary => {
            for _ in 0..LINE_BYTES / 8 {
                x = mix(x);
                out.extend_from_slice(&x.to_le_bytes());
            }
            return;
        }
        Kind::Html => format!("<p id=p{k}>{}.</p>\n", words(x)),
        Kind::Script => format!("function f{k}() {{ return \"{}\"; }}\n", words(x)),
        Kind::Css => format!(
            ".c{k} {{ margin: {}px; content: \"{}\"; }}\n",
            seed % 40,
            words(x)
        ),
        Kind::Json => format!(
            "{{\"id\":{k},\"n\":{},\"text\":\"{}\"}},\n",
            seed % 1000,
            words(x)
        ),
    };
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{lookup, CATALOGUE};

    fn id(target: &str, version: u64) -> InstanceId {
        InstanceId {
            resource: lookup(target).unwrap().0,
            version,
        }
    }

    #[test]
    fn bodies_are_pure_functions_of_the_instance() {
        for (i, _) in CATALOGUE.iter().enumerate() {
            let id = InstanceId {
                resource: i as u16,
                version: 123_456,
            };
            assert_eq!(body(id), body(id));
        }
        assert_eq!(
            body(InstanceId {
                resource: CATALOGUE.len() as u16,
                version: 0
            }),
            None
        );
    }

    #[test]
    fn every_version_differs_but_shares_most_of_its_lines() {
        let a = body(id("/news/2.html", 1000)).unwrap();
        let b = body(id("/news/2.html", 1001)).unwrap();
        assert_ne!(a, b);
        let lines_a: std::collections::HashSet<&[u8]> = a.split(|&c| c == b'\n').collect();
        let shared = b
            .split(|&c| c == b'\n')
            .filter(|l| lines_a.contains(l))
            .count();
        let total = b.split(|&c| c == b'\n').count();
        assert!(
            shared * 100 > total * 85,
            "{shared} of {total} lines shared"
        );
    }

    #[test]
    fn sizes_follow_the_catalogue() {
        for (i, r) in CATALOGUE.iter().enumerate() {
            let len = body(InstanceId {
                resource: i as u16,
                version: 77,
            })
            .unwrap()
            .len();
            assert!(
                len > r.size * 7 / 10 && len < r.size * 14 / 10,
                "{}: {len} bytes for {}",
                r.target,
                r.size
            );
        }
    }

    #[test]
    fn the_memo_gives_the_body_and_its_hash() {
        let truths = Truths::default();
        let id = id("/js/app0.js", 5);
        let t = truths.get(id).unwrap();
        assert_eq!(t.body, body(id).unwrap());
        assert_eq!(t.sha256, <[u8; 32]>::from(Sha256::digest(&t.body)));
        assert!(Arc::ptr_eq(&t, &truths.get(id).unwrap()));
    }
}
