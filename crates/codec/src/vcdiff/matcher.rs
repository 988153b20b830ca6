//! Match finding: hash chains over the source segment and the target window, searched with a
//! bounded chain length, scoring each candidate by the bytes it would save.

/// The shortest COPY worth considering (and the shortest the default code table sizes).
pub(crate) const MIN_MATCH: usize = 4;
/// Key length of the source's second index. Markup repeats short strings (`<li>item `)
/// thousands of times, burying a 4-byte chain's good candidates beyond any sane walk; 12
/// bytes usually pin down one place.
const LONG_KEY: usize = 12;
/// The long index samples every few positions: a search runs at every literal position, so a
/// long match is still met at a sampled position within its first bytes, and the encoder
/// then extends it backwards.
const LONG_STEP: usize = 4;
const NO_POSITION: u32 = u32::MAX;
const MIN_HASH_BITS: u32 = 8;
const MAX_HASH_BITS: u32 = 20;

/// Positions of `bytes` indexed by the hash of their first `KEY` bytes; a chain lists
/// positions newest first. Positions are `u32` because windows and segments are capped well
/// below 4 GiB. Only multiples of `step` can be indexed, which shrinks `prev` by `step`.
pub(crate) struct HashChains<const KEY: usize> {
    head: Vec<u32>,
    prev: Vec<u32>,
    shift: u32,
    step: usize,
}

pub(crate) type ShortChains = HashChains<MIN_MATCH>;

impl<const KEY: usize> HashChains<KEY> {
    /// An empty index for `len` bytes, to be filled position by position.
    pub(crate) fn new(len: usize) -> Self {
        Self::with_step(len, 1)
    }

    fn with_step(len: usize, step: usize) -> Self {
        let positions = len.div_ceil(step);
        let bits = (usize::BITS - positions.leading_zeros()).clamp(MIN_HASH_BITS, MAX_HASH_BITS);
        Self {
            head: vec![NO_POSITION; 1 << bits],
            prev: vec![NO_POSITION; positions],
            shift: 32 - bits,
            step,
        }
    }

    /// Indexes every `step`-th position of `bytes` at once.
    fn build(bytes: &[u8], step: usize) -> Self {
        let mut chains = Self::with_step(bytes.len(), step);
        for pos in (0..bytes.len().saturating_sub(KEY - 1)).step_by(step) {
            chains.insert(bytes, pos);
        }
        chains
    }

    /// Folds the key four bytes at a time; `KEY` is a multiple of 4.
    fn hash(&self, bytes: &[u8]) -> usize {
        let mut h = 0u32;
        for word in bytes[..KEY].chunks_exact(4) {
            h = (h ^ u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
                .wrapping_mul(0x9E37_79B1);
        }
        (h >> self.shift) as usize
    }

    /// Indexes `pos`; positions must be inserted in increasing order.
    pub(crate) fn insert(&mut self, bytes: &[u8], pos: usize) {
        if pos + KEY <= bytes.len() {
            let h = self.hash(&bytes[pos..]);
            self.prev[pos / self.step] = self.head[h];
            self.head[h] = pos as u32;
        }
    }

    /// Positions whose first bytes may equal `key[..KEY]`, newest first.
    fn chain<'a>(&'a self, key: &[u8]) -> impl Iterator<Item = usize> + 'a {
        let first = if key.len() >= KEY {
            self.head[self.hash(key)]
        } else {
            NO_POSITION
        };
        std::iter::successors((first != NO_POSITION).then_some(first), move |&p| {
            let next = self.prev[p as usize / self.step];
            (next != NO_POSITION).then_some(next)
        })
        .map(|p| p as usize)
    }
}

/// Both indexes of a source segment, built once and reused while the segment stays put.
pub(crate) struct SourceIndex {
    short: ShortChains,
    long: HashChains<LONG_KEY>,
}

impl SourceIndex {
    pub(crate) fn build(segment: &[u8]) -> Self {
        Self {
            short: HashChains::build(segment, 1),
            long: HashChains::build(segment, LONG_STEP),
        }
    }
}

/// How hard to look for matches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SearchLimits {
    /// Candidates examined per chain.
    pub max_chain: usize,
    /// A match this long ends the search at once.
    pub good_enough: usize,
}

/// A candidate COPY: `address` in the superstring U = segment ++ target window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Match {
    pub address: usize,
    pub len: usize,
    /// Bytes saved against sending the matched bytes as literals, net of the COPY's own cost.
    pub gain: isize,
}

/// What the search looks at for one window.
pub(crate) struct SearchSpace<'a> {
    pub segment: &'a [u8],
    pub segment_index: &'a SourceIndex,
    pub window: &'a [u8],
    /// `None` when target self-copies are disabled.
    pub window_chains: Option<&'a ShortChains>,
}

impl SearchSpace<'_> {
    /// The best match for the window bytes at `pos`, scored with `address_cost` (bytes the
    /// address would take in the address section). `hints` are segment positions where the
    /// match probably is (continuations of the previous COPY); they are tried first.
    pub(crate) fn best_match(
        &self,
        pos: usize,
        hints: impl Iterator<Item = usize>,
        limits: SearchLimits,
        address_cost: impl Fn(usize) -> usize,
    ) -> Option<Match> {
        let key = &self.window[pos..];
        if key.len() < MIN_MATCH {
            return None;
        }
        let mut best: Option<Match> = None;
        // Records a candidate; true when it is long enough to stop searching.
        let consider = |best: &mut Option<Match>, address: usize, len: usize| {
            let gain = copy_gain(len, address_cost(address));
            if best.is_none_or(|b| gain > b.gain) {
                *best = Some(Match { address, len, gain });
            }
            len >= limits.good_enough
        };
        let try_source = |best: &mut Option<Match>, candidate: usize| {
            if could_match_best(*best, self.segment, candidate, key) {
                let len = common_prefix_len(&self.segment[candidate..], key);
                return len >= MIN_MATCH && consider(best, candidate, len);
            }
            false
        };

        let hinted = hints.filter(|&h| h < self.segment.len());
        let long_walk = (limits.max_chain / 4).max(2);
        let source_candidates = hinted
            .chain(self.segment_index.long.chain(key).take(long_walk))
            .chain(self.segment_index.short.chain(key).take(limits.max_chain));
        for candidate in source_candidates {
            if try_source(&mut best, candidate) {
                return best;
            }
        }
        if let Some(window_chains) = self.window_chains {
            for candidate in window_chains.chain(key).take(limits.max_chain) {
                // The copy may overlap the bytes it produces, so compare against the window
                // from `candidate` onwards: those are the bytes the decoder will read.
                if could_match_best(best, self.window, candidate, key) {
                    let len = common_prefix_len(&self.window[candidate..], key);
                    if len >= MIN_MATCH && consider(&mut best, self.segment.len() + candidate, len)
                    {
                        return best;
                    }
                }
            }
        }
        best
    }
}

/// Literal bytes replaced minus the COPY's opcode share, address and explicit size.
fn copy_gain(len: usize, address_cost: usize) -> isize {
    const OPCODE: usize = 1;
    const LARGEST_IMPLICIT_COPY_SIZE: usize = 18;
    let size_cost = if len > LARGEST_IMPLICIT_COPY_SIZE {
        super::varint::varint_len(len as u64)
    } else {
        0
    };
    len as isize - (OPCODE + address_cost + size_cost) as isize
}

/// Cheap pre-check (the zlib trick): a candidate can only be at least as long as the best so
/// far if it agrees at the best's last byte. Equal lengths still count: their address may be
/// cheaper.
fn could_match_best(best: Option<Match>, haystack: &[u8], candidate: usize, key: &[u8]) -> bool {
    match best {
        None => true,
        Some(b) => haystack.get(candidate + b.len - 1) == Some(&key[b.len - 1]),
    }
}

/// Length of the common prefix, eight bytes at a time.
pub(crate) fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let max = a.len().min(b.len());
    let mut n = 0;
    while n + 8 <= max {
        let x = u64::from_le_bytes(a[n..n + 8].try_into().unwrap());
        let y = u64::from_le_bytes(b[n..n + 8].try_into().unwrap());
        let diff = x ^ y;
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while n < max && a[n] == b[n] {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix() {
        assert_eq!(common_prefix_len(b"abcdefghijk", b"abcdefghijX"), 10);
        assert_eq!(common_prefix_len(b"abc", b"abcdef"), 3);
        assert_eq!(common_prefix_len(b"", b"a"), 0);
    }

    #[test]
    fn finds_source_and_self_matches() {
        let segment = b"the quick brown fox";
        let window = b"quick brown: quick brown";
        let segment_index = SourceIndex::build(segment);
        let mut window_chains = ShortChains::new(window.len());
        let limits = SearchLimits {
            max_chain: 16,
            good_enough: 1000,
        };
        let space = SearchSpace {
            segment,
            segment_index: &segment_index,
            window,
            window_chains: Some(&window_chains),
        };
        let m = space
            .best_match(0, std::iter::empty(), limits, |_| 1)
            .unwrap();
        assert_eq!((m.address, m.len), (4, 11));
        // Only positions before the search position are indexed.
        for p in 0..13 {
            window_chains.insert(window, p);
        }
        let space = SearchSpace {
            segment,
            segment_index: &segment_index,
            window,
            window_chains: Some(&window_chains),
        };
        // At 13 the source match is 11 bytes ("quick brown") and so is the self-copy; the
        // cheaper address wins.
        let m = space
            .best_match(13, std::iter::empty(), limits, |a| {
                if a >= segment.len() {
                    1
                } else {
                    3
                }
            })
            .unwrap();
        assert_eq!((m.address, m.len), (segment.len(), 11));
    }
}
