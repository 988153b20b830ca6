//! The ways a response can be sent, and what each costs in bytes, through the codec
//! crate (the server's own implementations), cached by content hash so a body or a
//! (base, body) pair seen again is not encoded again.

use std::collections::HashMap;
use std::sync::Arc;

use codec::dictionary::{self, DictionaryCoding};
use wirefold_http::ContentCoding;

/// A way to send a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavingsMethod {
    Gzip,
    Br,
    Zstd,
    Dcb,
    Dcz,
    Vcdiff,
    /// The smallest of the above and the body as it is, per response.
    Best,
}

impl SavingsMethod {
    pub const ALL: [SavingsMethod; 7] = [
        SavingsMethod::Gzip,
        SavingsMethod::Br,
        SavingsMethod::Zstd,
        SavingsMethod::Dcb,
        SavingsMethod::Dcz,
        SavingsMethod::Vcdiff,
        SavingsMethod::Best,
    ];

    /// The JSON key and column: the `Content-Encoding` token.
    pub fn name(self) -> &'static str {
        match self {
            SavingsMethod::Gzip => "gzip",
            SavingsMethod::Br => "br",
            SavingsMethod::Zstd => "zstd",
            SavingsMethod::Dcb => "dcb",
            SavingsMethod::Dcz => "dcz",
            SavingsMethod::Vcdiff => "vcdiff",
            SavingsMethod::Best => "best",
        }
    }

    /// gzip at the common `-6`; br and zstd at the levels the proxy caches; dcb and
    /// dcz at the levels it produces in the background (as `lab deltas`).
    pub fn level(self) -> Option<u32> {
        match self {
            SavingsMethod::Gzip => Some(6),
            SavingsMethod::Br | SavingsMethod::Dcb => Some(11),
            SavingsMethod::Zstd | SavingsMethod::Dcz => Some(19),
            SavingsMethod::Vcdiff | SavingsMethod::Best => None,
        }
    }

    /// The position in [`Self::ALL`], which lists the methods in declaration order.
    pub fn index(self) -> usize {
        self as usize
    }
}

const COMPRESSIONS: [(SavingsMethod, ContentCoding); 3] = [
    (SavingsMethod::Gzip, ContentCoding::Gzip),
    (SavingsMethod::Br, ContentCoding::Br),
    (SavingsMethod::Zstd, ContentCoding::Zstd),
];

/// One instance of a resource: its body and the body's SHA-256.
#[derive(Clone, Debug)]
pub struct TraceInstance {
    pub hash: [u8; 32],
    pub body: Arc<Vec<u8>>,
}

impl TraceInstance {
    pub fn new(body: Vec<u8>) -> Self {
        TraceInstance {
            hash: dictionary::sha256(&body),
            body: Arc::new(body),
        }
    }
}

/// What one response costs under each method.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub identity: u64,
    /// gzip, br, zstd.
    pub compressed: [u64; 3],
    /// dcb, dcz, vcdiff against the base; `None` without a base.
    pub delta: Option<[u64; 3]>,
}

impl Sizes {
    /// Bytes sent with `method`; without a base a delta method sends the body as it is.
    pub fn after(&self, method: SavingsMethod) -> u64 {
        match method {
            SavingsMethod::Gzip => self.compressed[0],
            SavingsMethod::Br => self.compressed[1],
            SavingsMethod::Zstd => self.compressed[2],
            SavingsMethod::Dcb => self.delta.map_or(self.identity, |d| d[0]),
            SavingsMethod::Dcz => self.delta.map_or(self.identity, |d| d[1]),
            SavingsMethod::Vcdiff => self.delta.map_or(self.identity, |d| d[2]),
            SavingsMethod::Best => self
                .compressed
                .iter()
                .chain(self.delta.iter().flatten())
                .fold(self.identity, |best, &b| best.min(b)),
        }
    }
}

/// Encodes and remembers sizes by content hash.
#[derive(Default)]
pub struct Sizer {
    compressed: HashMap<[u8; 32], [u64; 3]>,
    deltas: HashMap<([u8; 32], [u8; 32]), [u64; 3]>,
}

impl Sizer {
    #[allow(
        clippy::expect_used,
        reason = "`level` gives every compression method a level"
    )]
    pub fn sizes(&mut self, body: &TraceInstance, base: Option<&TraceInstance>) -> Sizes {
        let compressed = *self.compressed.entry(body.hash).or_insert_with(|| {
            COMPRESSIONS.map(|(m, coding)| {
                let level = m.level().expect("compression levels are set");
                codec::compress(coding, level, &body.body).len() as u64
            })
        });
        let delta = base.map(|base| {
            *self
                .deltas
                .entry((base.hash, body.hash))
                .or_insert_with(|| delta_sizes(&base.body, &body.body))
        });
        Sizes {
            identity: body.body.len() as u64,
            compressed,
            delta,
        }
    }
}

#[allow(
    clippy::expect_used,
    reason = "`level` gives every dictionary method a level"
)]
fn delta_sizes(base: &[u8], body: &[u8]) -> [u64; 3] {
    let dictionary_size = |m: SavingsMethod, coding| {
        let level = m.level().expect("dictionary levels are set");
        dictionary::encode(coding, level, base, body).len() as u64
    };
    [
        dictionary_size(SavingsMethod::Dcb, DictionaryCoding::Dcb),
        dictionary_size(SavingsMethod::Dcz, DictionaryCoding::Dcz),
        codec::vcdiff::encode(base, body).len() as u64,
    ]
}

#[test]
fn all_lists_the_methods_in_declaration_order() {
    let indexes = SavingsMethod::ALL.map(SavingsMethod::index);
    assert!(indexes.into_iter().eq(0..SavingsMethod::ALL.len()));
}
