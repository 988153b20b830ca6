//! Grouping responses by URL and tallying what each method would have sent, under four
//! ways of keeping bases: at a shared proxy or per client, with query-URL clustering
//! off or on.

use std::collections::{BTreeMap, HashMap};

use super::method::{SavingsMethod, Sizer, Sizes, TraceInstance};
use crate::trace::Exchange;

/// Bins of the fraction of bytes saved per response: one for "grew", then tenths.
pub const BINS: usize = 11;

pub fn bin_label(i: usize) -> String {
    match i {
        0 => "<0".into(),
        _ => format!("{}-{}%", (i - 1) * 10, i * 10),
    }
}

fn bin_of(before: u64, after: u64) -> usize {
    if after > before {
        return 0;
    }
    if before == 0 {
        // Nothing to save from an empty body.
        return 1;
    }
    let saved = 1.0 - after as f64 / before as f64;
    1 + ((saved * 10.0) as usize).min(9)
}

/// Sums of one method over a set of responses.
#[derive(Clone, Copy, Debug, Default)]
pub struct MethodTally {
    pub responses_improved: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl MethodTally {
    fn add(&mut self, before: u64, after: u64) {
        self.responses_improved += u64::from(after < before);
        self.bytes_before += before;
        self.bytes_after += after;
    }
}

/// Counts and sums over the responses of a scenario (or of one content type in it).
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Every response read.
    pub responses: u64,
    pub status_200: u64,
    /// Status-200 responses to GET (or an unrecorded method) whose body is known.
    pub analysed: u64,
    /// An earlier, different instance of the URL (or cluster) was held.
    pub delta_eligible: u64,
    /// The held instance was identical.
    pub unchanged: u64,
    /// Over delta-eligible responses, per [`SavingsMethod::ALL`].
    pub eligible: [MethodTally; 7],
    /// Over all analysed responses (a delta method without a base sends the body as is).
    pub all: [MethodTally; 7],
    /// Delta-eligible responses per bin of fraction saved, per method.
    pub histogram: [[u64; BINS]; 7],
}

/// How a response relates to the instance held for its URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    First,
    Unchanged,
    Eligible,
}

impl Tally {
    fn add(&mut self, class: Class, sizes: &Sizes) {
        self.analysed += 1;
        match class {
            Class::First => {}
            Class::Unchanged => self.unchanged += 1,
            Class::Eligible => self.delta_eligible += 1,
        }
        for m in SavingsMethod::ALL {
            let after = sizes.after(m);
            self.all[m.index()].add(sizes.identity, after);
            if class == Class::Eligible {
                self.eligible[m.index()].add(sizes.identity, after);
                self.histogram[m.index()][bin_of(sizes.identity, after)] += 1;
            }
        }
    }
}

/// Where bases are kept and what counts as the same resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keeping {
    /// Bases per client (HAR page or client address) rather than one shared proxy.
    pub per_client: bool,
    /// All URLs with the same path (any query) are one resource.
    pub clustered: bool,
}

impl Keeping {
    pub const ALL: [Keeping; 4] = [
        Keeping {
            per_client: false,
            clustered: false,
        },
        Keeping {
            per_client: false,
            clustered: true,
        },
        Keeping {
            per_client: true,
            clustered: false,
        },
        Keeping {
            per_client: true,
            clustered: true,
        },
    ];

    pub fn name(self) -> &'static str {
        match (self.per_client, self.clustered) {
            (false, false) => "proxy",
            (false, true) => "proxy_clustered",
            (true, false) => "per_client",
            (true, true) => "per_client_clustered",
        }
    }

    fn key(self, url: &str, client: Option<&str>) -> String {
        let url = if self.clustered {
            cluster_of(url)
        } else {
            url_key(url)
        };
        if self.per_client {
            format!("{}\n{url}", client.unwrap_or(""))
        } else {
            url.to_string()
        }
    }
}

/// The URL as sent: without its fragment.
fn url_key(url: &str) -> &str {
    url.split('#').next().unwrap_or(url)
}

/// Same path, any query: the server's cluster (`pattern_for` in
/// crates/delta/src/dictionaries.rs without `cluster_params`).
pub fn cluster_of(url: &str) -> &str {
    let url = url_key(url);
    url.split('?').next().unwrap_or(url)
}

/// One way of keeping bases: the latest instance per key, and the tallies.
pub struct Scenario {
    pub keeping: Keeping,
    bases: HashMap<String, TraceInstance>,
    pub total: Tally,
    pub by_type: BTreeMap<String, Tally>,
}

/// Everything the command measures, fed one exchange at a time.
pub struct Analysis {
    sizer: Sizer,
    pub scenarios: Vec<Scenario>,
}

const UNKNOWN_TYPE: &str = "unknown";

impl Analysis {
    pub fn new() -> Self {
        Analysis {
            sizer: Sizer::default(),
            scenarios: Keeping::ALL
                .iter()
                .map(|&keeping| Scenario {
                    keeping,
                    bases: HashMap::new(),
                    total: Tally::default(),
                    by_type: BTreeMap::new(),
                })
                .collect(),
        }
    }

    /// The scenario named by [`Keeping::name`].
    #[allow(
        clippy::expect_used,
        reason = "`new` measures a scenario for every `Keeping`, and callers name one"
    )]
    pub fn scenario(&self, name: &str) -> &Scenario {
        self.scenarios
            .iter()
            .find(|s| s.keeping.name() == name)
            .expect("every scenario is measured")
    }

    pub fn add(&mut self, exchange: Exchange) {
        let content_type = exchange
            .content_type
            .clone()
            .unwrap_or_else(|| UNKNOWN_TYPE.into());
        let ok = exchange.status == 200;
        for s in &mut self.scenarios {
            for t in [
                &mut s.total,
                s.by_type.entry(content_type.clone()).or_default(),
            ] {
                t.responses += 1;
                t.status_200 += u64::from(ok);
            }
        }
        let get = exchange
            .method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case("GET"));
        if !ok || !get {
            return;
        }
        let instance = match (exchange.body, &exchange.revisit_of) {
            (Some(body), _) => TraceInstance::new(body),
            // An identical-payload revisit repeats the latest capture of its target.
            (None, Some(target)) => match self.scenarios[0].bases.get(url_key(target)) {
                Some(held) => held.clone(),
                None => return,
            },
            (None, None) => return,
        };
        for s in &mut self.scenarios {
            let key = s.keeping.key(&exchange.url, exchange.client.as_deref());
            let base = s.bases.get(&key);
            let class = match base {
                None => Class::First,
                Some(b) if b.hash == instance.hash => Class::Unchanged,
                Some(_) => Class::Eligible,
            };
            let sizes = self.sizer.sizes(&instance, base);
            s.total.add(class, &sizes);
            // Counted above, so present.
            s.by_type
                .entry(content_type.clone())
                .or_default()
                .add(class, &sizes);
            s.bases.insert(key, instance.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_of_the_fraction_saved() {
        assert_eq!(bin_of(100, 101), 0);
        assert_eq!(bin_of(0, 0), 1);
        assert_eq!(bin_of(100, 100), 1);
        assert_eq!(bin_of(100, 55), 5);
        assert_eq!(bin_of(100, 0), 10);
        assert_eq!(bin_label(0), "<0");
        assert_eq!(bin_label(10), "90-100%");
    }

    #[test]
    fn clusters_are_paths() {
        assert_eq!(cluster_of("http://a.test/p?x=1#top"), "http://a.test/p");
        assert_eq!(url_key("http://a.test/p?x=1#top"), "http://a.test/p?x=1");
    }
}
