//! How a link answer ends and what its HEADERS carry, shared by the page's own answer
//! (`serve.rs`) and the resources pushed after it (`push.rs`): the cheapest ending
//! (a delta against an instance the client holds or the stale stream, or the whole
//! instance) and the end-to-end fields.

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use http::header::{self, HeaderMap, HeaderValue};
use store::Hash;
use wirefold_http::ContentCoding;

use crate::levels::Levels;
use proxy::model::{Instance, Provenance};

/// One way to end the answer, and what it costs on the link.
pub(crate) struct Candidate {
    /// Coded bytes this choice sends from now on.
    pub(crate) cost: u64,
    pub(crate) ending: Ending,
}

pub(crate) enum Ending {
    /// Finish the stale stream, then a delta against all of it.
    ContinueStale {
        delta: Vec<u8>,
    },
    /// Stop the stale stream; a delta against the prefix the client holds.
    PrefixOfStale {
        delta: Vec<u8>,
        base_len: u64,
    },
    /// A delta against an instance the client named.
    Held {
        base: Hash,
        base_len: u64,
        delta: Vec<u8>,
    },
    Full {
        coding: ContentCoding,
        coded: Bytes,
    },
}

/// The cheapest way to give the client `target`, in coded bytes from now on: a delta
/// against an instance it holds, finishing the stale stream then a delta against it,
/// a delta against the stale prefix already sent, or the whole instance. Deltas are
/// tried first; once one is below [`SMALL_SHARE`] of the target, dearer candidates
/// are not computed (each costs a full compression of the target).
pub(crate) fn best_ending(
    target: &[u8],
    origin_coded: Option<(ContentCoding, Bytes)>,
    held: Option<(Hash, Bytes)>,
    stale: Option<(Bytes, usize, u64, bool)>,
    levels: Levels,
) -> Candidate {
    let small = (target.len() as f64 * SMALL_SHARE) as u64;
    let dcz =
        |base: &[u8]| codec::dictionary::encode(DictionaryCoding::Dcz, levels.delta, base, target);
    let mut best: Option<Candidate> = None;
    let consider = |candidate: Candidate, best: &mut Option<Candidate>| {
        if best.as_ref().is_none_or(|b| candidate.cost < b.cost) {
            *best = Some(candidate);
        }
    };
    let good_enough = |best: &Option<Candidate>| best.as_ref().is_some_and(|b| b.cost <= small);
    if let Some((base, bytes)) = held {
        let delta = dcz(&bytes);
        let base_len = bytes.len() as u64;
        let ending = Ending::Held {
            base,
            base_len,
            delta,
        };
        consider(
            Candidate {
                cost: ending_len(&ending),
                ending,
            },
            &mut best,
        );
    }
    if let Some((bytes, sent, remaining, complete)) = stale.filter(|_| !good_enough(&best)) {
        let delta = dcz(&bytes);
        let cost = remaining + delta.len() as u64;
        consider(
            Candidate {
                cost,
                ending: Ending::ContinueStale { delta },
            },
            &mut best,
        );
        if !complete && sent > 0 && !good_enough(&best) {
            let delta = dcz(&bytes[..sent]);
            let ending = Ending::PrefixOfStale {
                delta,
                base_len: sent as u64,
            };
            consider(
                Candidate {
                    cost: ending_len(&ending),
                    ending,
                },
                &mut best,
            );
        }
    }
    if let Some(good) = best.take_if(|b| b.cost <= small) {
        return good;
    }
    let full = |coding: ContentCoding, coded: Bytes| Candidate {
        cost: coded.len() as u64,
        ending: Ending::Full { coding, coded },
    };
    let full = match origin_coded {
        // The origin's own br or zstd costs no work and is as good as ours.
        Some((coding, coded)) if matches!(coding, ContentCoding::Br | ContentCoding::Zstd) => {
            full(coding, coded)
        }
        origin => {
            let (coding, level) = levels.stream;
            let ours = full(coding, codec::compress(coding, level, target).into());
            match origin {
                Some((coding, coded)) if (coded.len() as u64) < ours.cost => full(coding, coded),
                _ => ours,
            }
        }
    };
    // As `consider` would: the full instance only if it is cheaper.
    match best {
        Some(b) if b.cost <= full.cost => b,
        _ => full,
    }
}

/// Below this share of the target's size a delta is taken without computing the
/// alternatives: no compression of text gets close.
const SMALL_SHARE: f64 = 0.02;

fn ending_len(ending: &Ending) -> u64 {
    match ending {
        Ending::Held { delta, .. } | Ending::PrefixOfStale { delta, .. } => delta.len() as u64,
        Ending::ContinueStale { delta } => delta.len() as u64,
        Ending::Full { coded, .. } => coded.len() as u64,
    }
}

/// The end-to-end fields a link answer's HEADERS carries for `instance`: its own,
/// with `Age` when it came from the cache, so the client proxy's freshness is right.
pub(crate) fn link_fields(instance: &Instance) -> HeaderMap {
    let mut fields = instance.headers.clone();
    if let Provenance::Hit { age } | Provenance::Revalidated { age } | Provenance::Stale { age } =
        instance.provenance
    {
        fields.insert(header::AGE, HeaderValue::from(age.as_secs()));
    }
    fields
}

/// The metrics' family of the response's media type.
pub(crate) fn content_type(fields: &HeaderMap) -> &'static str {
    proxy::metrics::content_type_family(
        fields
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(version: u32) -> Vec<u8> {
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!(
                "<p>paragraph {i} of a long page, revision {}</p>\n",
                if i == 1500 { version } else { 0 }
            ));
        }
        text.into_bytes()
    }

    const LEVELS: Levels = Levels {
        stream: (ContentCoding::Zstd, 9),
        delta: 9,
    };

    #[test]
    fn a_held_older_version_gives_a_delta() {
        let (old, new) = (page(1), page(2));
        let best = best_ending(
            &new,
            None,
            Some((Hash::of(&old), old.clone().into())),
            None,
            LEVELS,
        );
        assert!(matches!(best.ending, Ending::Held { .. }));
        assert!(best.cost < 300, "{}", best.cost);
    }

    /// The ending for `new` while `stale` is streaming, `sent` of it gone and
    /// `remaining` coded bytes to go.
    fn against_stale(
        new: &[u8],
        stale: impl Into<Bytes>,
        sent: usize,
        remaining: u64,
    ) -> Candidate {
        best_ending(
            new,
            None,
            None,
            Some((stale.into(), sent, remaining, false)),
            LEVELS,
        )
    }

    #[test]
    fn a_stale_stream_well_along_is_finished_and_patched() {
        let (old, new) = (page(1), page(2));
        let sent = old.len() - 1000;
        let best = against_stale(&new, old.clone(), sent, 50);
        assert!(
            matches!(best.ending, Ending::ContinueStale { .. }),
            "cost {}",
            best.cost
        );
    }

    #[test]
    fn a_stale_stream_just_begun_stops_and_the_prefix_serves_as_base() {
        let (old, new) = (page(1), page(2));
        let remaining = 20_000; // most of the stale instance still to go
        let best = against_stale(&new, old.clone(), old.len() / 2, remaining);
        assert!(
            matches!(best.ending, Ending::PrefixOfStale { .. }),
            "cost {}",
            best.cost
        );
    }

    #[test]
    fn unrelated_stale_content_is_abandoned_for_the_full_instance() {
        let new = page(2);
        let unrelated: Vec<u8> = (0..new.len() as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let best = against_stale(&new, unrelated, 0, 60_000);
        assert!(
            matches!(best.ending, Ending::Full { .. }),
            "cost {}",
            best.cost
        );
    }
}
