//! Bodies derived from content — encodings and deltas — and the service that keeps
//! them in the store by (content hash, [`Variant`]), so a repeat costs no CPU and no
//! client waits for a slow level.
//!
//! Used by `encode` (plain compression) and the delta engine (dictionary codings and
//! VCDIFF), and named the same way by the root scanner that precomputes them.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use store::{Hash, Store};
use wirefold_http::fidelity::ImageFormat;
use wirefold_http::ContentCoding;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Runs work that outlives the request that started it (making and keeping a body at
/// its best level) where the server's shutdown waits for it.
pub trait Spawner: Send + Sync {
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>);
}

/// The counters derived bodies keep; the server registers them with its metrics.
#[derive(Clone)]
pub struct DerivedCounters {
    /// Lookups by result (`hit`, `quick_hit`: the quick level, the best one being
    /// made, `miss`), each resolved from its family once: every request that gets a
    /// stored encoding counts one, and a family's lookup takes its lock.
    hit: Counter,
    quick_hit: Counter,
    miss: Counter,
    /// Writes the store refused (full disk, writes suspended).
    store_write_errors: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupResult {
    pub result: &'static str,
}

impl DerivedCounters {
    /// Counts into `lookups` (by [`LookupResult`]) and `store_write_errors`.
    pub fn new(lookups: &Family<LookupResult, Counter>, store_write_errors: Counter) -> Self {
        let counter = |result| lookups.get_or_create(&LookupResult { result }).clone();
        DerivedCounters {
            hit: counter("hit"),
            quick_hit: counter("quick_hit"),
            miss: counter("miss"),
            store_write_errors,
        }
    }
}

impl Default for DerivedCounters {
    /// Counters no registry reads.
    fn default() -> Self {
        DerivedCounters::new(&Family::default(), Counter::default())
    }
}

/// One derived body of a content: what was done to it, against what, at which level.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Compressed with a content coding.
    Coded { coding: ContentCoding, level: u32 },
    /// Compressed against a dictionary (RFC 9842 `dcb`, `dcz`).
    DictionaryCoded {
        coding: DictionaryCoding,
        dictionary: Hash,
        level: u32,
    },
    /// A VCDIFF delta (RFC 3284) from a base instance; VCDIFF has no levels.
    Vcdiff { base: Hash },
    /// A lower-fidelity rendition of an image (adaptive fidelity): rung `step` of
    /// its ladder (1 is the largest below the original) in `format`.
    Image { format: ImageFormat, step: u8 },
    /// Minified text (HTML, CSS, JavaScript) that keeps the original's meaning.
    Minified,
}

impl Variant {
    /// The same variant at another level (a VCDIFF delta has one form).
    pub fn at_level(&self, level: u32) -> Variant {
        match self.clone() {
            Variant::Coded { coding, .. } => Variant::Coded { coding, level },
            Variant::DictionaryCoded {
                coding, dictionary, ..
            } => Variant::DictionaryCoded {
                coding,
                dictionary,
                level,
            },
            one_form @ (Variant::Vcdiff { .. } | Variant::Image { .. } | Variant::Minified) => {
                one_form
            }
        }
    }

    /// Its store name (see the `Display` impl), without formatting it for the coded
    /// variants a cached response looks up on every request.
    pub fn name(&self) -> Cow<'static, str> {
        match self {
            Variant::Coded { coding, level } if *level <= MAX_NAMED_LEVEL => {
                let coding = ContentCoding::ALL.iter().position(|c| c == coding);
                let index = coding.map(|c| c * (MAX_NAMED_LEVEL as usize + 1) + *level as usize);
                index.map_or_else(
                    || self.to_string().into(),
                    |i| CODED_NAMES[i].as_str().into(),
                )
            }
            _ => self.to_string().into(),
        }
    }

    /// The level it was made at, `None` for the variants with one form.
    pub fn level(&self) -> Option<u32> {
        match self {
            Variant::Coded { level, .. } | Variant::DictionaryCoded { level, .. } => Some(*level),
            Variant::Vcdiff { .. } | Variant::Image { .. } | Variant::Minified => None,
        }
    }
}

/// The highest level of any coding (zstd's).
const MAX_NAMED_LEVEL: u32 = 22;

/// The names of coded variants at every level (`br-0` … `zstd-22`), by coding (in
/// `ContentCoding::ALL`'s order), then level.
static CODED_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    ContentCoding::ALL
        .into_iter()
        .flat_map(|coding| {
            (0..=MAX_NAMED_LEVEL).map(move |level| Variant::Coded { coding, level }.to_string())
        })
        .collect()
});

/// The store's name of a variant: `br-11`, `dcz:<dictionary hex>-19`,
/// `vcdiff:<base hex>`, `image:webp-2`, `minified`. Stores written by earlier
/// versions use the same names.
impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Coded { coding, level } => write!(f, "{}-{level}", coding.token()),
            Variant::DictionaryCoded {
                coding,
                dictionary,
                level,
            } => write!(f, "{}:{}-{level}", coding.token(), dictionary.to_hex()),
            Variant::Vcdiff { base } => write!(f, "vcdiff:{}", base.to_hex()),
            Variant::Image { format, step } => write!(f, "image:{}-{step}", format.extension()),
            Variant::Minified => f.write_str("minified"),
        }
    }
}

/// Makes a derived body at a level.
pub type Produce = Arc<dyn Fn(u32) -> Vec<u8> + Send + Sync>;

/// Work on inputs below this size runs on the reactor thread: handing it to the
/// blocking pool costs more than the work.
const INLINE_WORK_MAX: usize = 16 * 1024;

/// The derived bodies of the store, made on demand and kept.
pub struct DerivedBodies {
    /// Absent when caching is disabled: every body is made when asked for.
    store: Option<Store>,
    counters: DerivedCounters,
    background: Arc<dyn Spawner>,
    /// Background productions under way, so concurrent misses start one job.
    running: Arc<Mutex<HashSet<(Hash, Variant)>>>,
}

impl DerivedBodies {
    pub fn new(
        store: Option<Store>,
        counters: DerivedCounters,
        background: Arc<dyn Spawner>,
    ) -> Self {
        DerivedBodies {
            store,
            counters,
            background,
            running: Arc::default(),
        }
    }

    /// Whether the body of `variant` is in memory now (it costs nothing to send).
    pub fn in_memory(&self, hash: &Hash, variant: &Variant) -> bool {
        self.store
            .as_ref()
            .is_some_and(|s| s.get_encoding_in_memory(hash, &variant.name()).is_some())
    }

    /// The body derived from the content `hash` as `variant` at level `best`: kept
    /// when stored; otherwise the `quick` level (stored, or made now and kept) while
    /// `best` is made in the background, so no client waits for a slow level and
    /// repeats cost no CPU. Without a `quick` level, `best` is made now. `producer`
    /// is called only when something is to be made: a hit costs no closure.
    pub async fn get_or_make(
        &self,
        hash: Hash,
        input_len: usize,
        variant: &Variant,
        quick: Option<u32>,
        best: u32,
        producer: impl FnOnce() -> Produce,
    ) -> Bytes {
        let Some(store) = &self.store else {
            let produce = producer();
            return produce_off_reactor(&produce, quick.unwrap_or(best), input_len).await;
        };
        let wanted = variant.at_level(best);
        let wanted_name = wanted.name();
        if let Some(hit) = store.get_encoding_in_memory(&hash, &wanted_name) {
            self.counters.hit.inc();
            return hit;
        }
        let quick = quick
            .filter(|q| *q != best)
            .map(|q| (q, variant.at_level(q)));
        let (wanted_hit, quick_hit) = tokio::task::spawn_blocking({
            let store = store.clone();
            let quick_name = quick.as_ref().map(|(_, v)| v.name());
            move || {
                let wanted_hit = store.get_encoding(&hash, &wanted_name).ok().flatten();
                let quick_hit = match (&wanted_hit, quick_name) {
                    (None, Some(q)) => store.get_encoding(&hash, &q).ok().flatten(),
                    _ => None,
                };
                (wanted_hit, quick_hit)
            }
        })
        .await
        .unwrap_or_default();
        if let Some(hit) = wanted_hit {
            self.counters.hit.inc();
            return hit;
        }
        let produce = producer();
        let Some((quick_level, quick_variant)) = quick else {
            self.counters.miss.inc();
            let made = produce_off_reactor(&produce, best, input_len).await;
            self.keep(store.clone(), hash, wanted, made.clone());
            return made;
        };
        self.start_background(store.clone(), hash, wanted, best, produce.clone());
        if let Some(hit) = quick_hit {
            self.counters.quick_hit.inc();
            return hit;
        }
        self.counters.miss.inc();
        let made = produce_off_reactor(&produce, quick_level, input_len).await;
        self.keep(store.clone(), hash, quick_variant, made.clone());
        made
    }

    fn keep(&self, store: Store, hash: Hash, variant: Variant, made: Bytes) {
        let errors = self.counters.store_write_errors.clone();
        self.background.spawn_blocking(Box::new(move || {
            if let Err(e) = store.put_encoding(&hash, &variant.to_string(), &made) {
                errors.inc();
                if !e.is_quiet() {
                    tracing::warn!(error = %e, %variant, "derived body not kept");
                }
            }
        }));
    }

    fn start_background(
        &self,
        store: Store,
        hash: Hash,
        variant: Variant,
        level: u32,
        produce: Produce,
    ) {
        let job = (hash, variant);
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        if !running.insert(job.clone()) {
            return;
        }
        drop(running);
        let errors = self.counters.store_write_errors.clone();
        let running = Arc::clone(&self.running);
        self.background.spawn_blocking(Box::new(move || {
            let made = produce(level);
            let (hash, variant) = &job;
            if let Err(e) = store.put_encoding(hash, &variant.to_string(), &made) {
                errors.inc();
                if !e.is_quiet() {
                    tracing::warn!(error = %e, %variant, "background encoding not kept");
                }
            }
            if let Ok(mut running) = running.lock() {
                running.remove(&job);
            }
        }));
    }
}

/// Makes a body at `level`, on the blocking pool unless the input is small.
pub async fn produce_off_reactor(produce: &Produce, level: u32, input_len: usize) -> Bytes {
    if input_len <= INLINE_WORK_MAX {
        return Bytes::from(produce(level));
    }
    let produce = produce.clone();
    crate::blocking::run(move || Bytes::from(produce(level))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_names_are_those_earlier_versions_wrote() {
        let hash = Hash([7; 32]);
        let hex = hash.to_hex();
        let coded = Variant::Coded {
            coding: ContentCoding::Br,
            level: 11,
        };
        assert_eq!(coded.to_string(), "br-11");
        for coding in ContentCoding::ALL {
            for level in [0, 9, 22, 23] {
                let variant = Variant::Coded { coding, level };
                assert_eq!(variant.name(), variant.to_string());
            }
        }
        assert_eq!(coded.at_level(5).to_string(), "br-5");
        let dictionary = Variant::DictionaryCoded {
            coding: DictionaryCoding::Dcz,
            dictionary: hash,
            level: 19,
        };
        assert_eq!(dictionary.to_string(), format!("dcz:{hex}-19"));
        assert_eq!(dictionary.at_level(3).level(), Some(3));
        let vcdiff = Variant::Vcdiff { base: hash };
        assert_eq!(vcdiff.to_string(), format!("vcdiff:{hex}"));
        assert_eq!(vcdiff.at_level(9), vcdiff);
        let image = Variant::Image {
            format: ImageFormat::Webp,
            step: 2,
        };
        assert_eq!(image.to_string(), "image:webp-2");
        assert_eq!(image.at_level(9).level(), None);
        assert_eq!(Variant::Minified.to_string(), "minified");
    }
}
