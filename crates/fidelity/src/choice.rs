//! Which representation a client gets: the paper's transfer-time estimate against a
//! target time, under the user's `Save-Data` wish and the server's egress limit.

use std::time::Duration;

use wirefold_http::client_hints::{ClientHints, Ect};

/// A maximum segment size typical of Ethernet paths (1500-byte MTU).
pub const MSS: u64 = 1_460;

/// What is known of a client's path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkEstimate {
    pub rtt: Duration,
    pub bytes_per_second: f64,
}

impl LinkEstimate {
    /// The link the request's hints describe: `Downlink` and `RTT` when both are
    /// there (`RTT` alone says nothing of bandwidth), else the `ECT` class's
    /// thresholds (netinfo: 3g is RTT ≥ 270 ms or downlink ≤ 700 kbit/s); `None`
    /// for `4g`, a zero downlink, or no hint at all.
    pub fn from_hints(hints: &ClientHints) -> Option<LinkEstimate> {
        let from_ect = |ect| match ect {
            Ect::Slow2G => Some((2_000, 50)),
            Ect::TwoG => Some((1_400, 70)),
            Ect::ThreeG => Some((270, 700)),
            Ect::FourG => None,
        };
        let (rtt_ms, kbps) = match (hints.rtt_ms, hints.downlink_kbps) {
            (Some(rtt), Some(kbps)) if kbps > 0 => (rtt, kbps),
            (None, Some(kbps)) if kbps > 0 => {
                let rtt = hints.ect.and_then(from_ect).map_or(0, |(rtt, _)| rtt);
                (rtt, kbps)
            }
            _ => hints.ect.and_then(from_ect)?,
        };
        Some(LinkEstimate {
            rtt: Duration::from_millis(rtt_ms),
            bytes_per_second: kbps as f64 * 1000.0 / 8.0,
        })
    }

    /// Seshan, Stemm & Katz's estimate of the time `size` bytes take: slow start's
    /// round trips, (3/2 + log2(⌈size/mss⌉ + 1))·rtt, plus size/bandwidth.
    pub fn transfer_time(&self, size: u64) -> Duration {
        let segments = size.div_ceil(MSS) as f64;
        let round_trips = 1.5 + (segments + 1.0).log2();
        let seconds =
            round_trips * self.rtt.as_secs_f64() + size as f64 / self.bytes_per_second.max(1.0);
        Duration::from_secs_f64(seconds.min(1e9))
    }
}

/// Why a representation was chosen; a metrics label each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Nothing argued for less than the original.
    Original,
    /// The link would miss the target time with anything larger.
    SlowLink,
    /// The user asked to save data.
    SaveData,
    /// The server's egress controller capped the fidelity.
    Egress,
}

impl Reason {
    pub const ALL: [Reason; 4] = [
        Reason::Original,
        Reason::SlowLink,
        Reason::SaveData,
        Reason::Egress,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Reason::Original => "original",
            Reason::SlowLink => "slow_link",
            Reason::SaveData => "save_data",
            Reason::Egress => "egress",
        }
    }
}

/// What else the client fetches with a response: the other parts of its page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageWeight {
    /// Bytes that keep their size whatever is chosen: the page itself and its
    /// subresources without variants.
    pub fixed_bytes: u64,
    /// Original bytes of the page's other subresources with variants. They are
    /// assumed to be chosen alike, so each candidate is weighed as the page at that
    /// candidate's share of the original: the whole page meets the target or not.
    pub negotiable_bytes: u64,
}

impl PageWeight {
    /// The page's bytes when this response is `candidate` bytes of its `original`.
    fn with(&self, candidate: u64, original: u64) -> u64 {
        let share = candidate as f64 / original.max(1) as f64;
        candidate + self.fixed_bytes + (self.negotiable_bytes as f64 * share) as u64
    }
}

/// Everything a choice weighs.
#[derive(Clone, Copy, Debug)]
pub struct Inputs {
    pub save_data: bool,
    /// The client's path, from its hints or the passive estimate of its network.
    pub link: Option<LinkEstimate>,
    /// The rest of the page this response belongs to, for the paper's estimate of
    /// a page with its subresources; all zero (the object alone) when unknown.
    pub page: PageWeight,
    pub target_time: Duration,
    /// The egress controller's largest share of the original now (0..=1].
    pub max_fraction: f64,
    pub save_data_fraction: f64,
}

/// The choice among the original (index 0) and the variants after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub chosen: usize,
    pub reason: Reason,
}

/// Picks among `lengths` (the original's first, the rest its variants, any order):
/// the largest one within the caps (egress, `Save-Data`) whose estimated transfer
/// time meets the target; if none meets it, the smallest within the caps; if none is
/// within the caps, the smallest of all.
pub fn choose(lengths: &[u64], inputs: &Inputs) -> Decision {
    let original = lengths.first().copied().unwrap_or(0) as f64;
    let egress_cap = original * inputs.max_fraction.clamp(0.0, 1.0);
    let save_cap = if inputs.save_data {
        original * inputs.save_data_fraction.clamp(0.0, 1.0)
    } else {
        f64::INFINITY
    };
    let cap = egress_cap.min(save_cap);
    let mut by_size: Vec<usize> = (0..lengths.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let within: Vec<usize> = by_size
        .iter()
        .copied()
        .filter(|&i| lengths[i] as f64 <= cap)
        .collect();
    let meets = |i: usize| {
        inputs.link.is_none_or(|link| {
            let page = inputs.page.with(lengths[i], lengths[0]);
            link.transfer_time(page) <= inputs.target_time
        })
    };
    let chosen = within
        .iter()
        .copied()
        .find(|&i| meets(i))
        .or_else(|| within.last().copied())
        .or_else(|| by_size.last().copied())
        .unwrap_or(0);
    let reason = if chosen == 0 {
        Reason::Original
    } else if lengths[0] as f64 > cap && within.first() == Some(&chosen) {
        if save_cap < egress_cap {
            Reason::SaveData
        } else {
            Reason::Egress
        }
    } else if !within.is_empty() || inputs.link.is_some() {
        Reason::SlowLink
    } else if save_cap < egress_cap {
        Reason::SaveData
    } else {
        Reason::Egress
    };
    Decision { chosen, reason }
}

/// An exponentially weighted moving average (RFC 6298's smoothing of RTT samples).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Smoothed {
    value: Option<f64>,
    weight: f64,
}

impl Smoothed {
    /// `weight` is the share of a new sample (1/8 for RFC 6298's SRTT).
    pub const fn new(weight: f64) -> Smoothed {
        Smoothed {
            value: None,
            weight,
        }
    }

    pub fn add(&mut self, sample: f64) -> f64 {
        let next = match self.value {
            Some(v) => v + self.weight * (sample - v),
            None => sample,
        };
        self.value = Some(next);
        next
    }

    pub fn get(&self) -> Option<f64> {
        self.value
    }
}

/// Keeps smoothed egress between two watermarks by moving the largest share of an
/// original any response may carry (the paper's "maximum size fraction"): down by
/// a step above the high mark, up by a step below the low one.
#[derive(Clone, Debug)]
pub struct EgressController {
    limit_bytes_per_second: f64,
    low: f64,
    high: f64,
    smoothed: Smoothed,
    fraction: f64,
}

/// The smallest fraction the controller goes down to: below it every negotiable
/// response is at its smallest variant anyway.
pub const MIN_FRACTION: f64 = 0.05;

impl EgressController {
    pub fn new(limit_bits_per_second: u64, low: f64, high: f64) -> EgressController {
        EgressController {
            limit_bytes_per_second: limit_bits_per_second as f64 / 8.0,
            low,
            high,
            smoothed: Smoothed::new(0.3),
            fraction: 1.0,
        }
    }

    /// Takes one sample of egress (bytes per second over the last period) and
    /// returns the fraction in force from now on.
    pub fn observe(&mut self, bytes_per_second: f64) -> f64 {
        let egress = self.smoothed.add(bytes_per_second);
        let load = egress / self.limit_bytes_per_second.max(1.0);
        if load > self.high {
            // Multiplicative decrease reacts to overload within a few periods…
            self.fraction = (self.fraction * 0.8).max(MIN_FRACTION);
        } else if load < self.low {
            // …additive increase probes back up gently.
            self.fraction = (self.fraction + 0.05).min(1.0);
        }
        self.fraction
    }

    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// The smoothed egress, bytes per second.
    pub fn egress(&self) -> f64 {
        self.smoothed.get().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            save_data: false,
            link: None,
            page: PageWeight::default(),
            target_time: Duration::from_secs(3),
            max_fraction: 1.0,
            save_data_fraction: 0.35,
        }
    }

    const LADDER: [u64; 4] = [1_000_000, 700_000, 490_000, 343_000];

    #[test]
    fn the_estimate_is_the_papers() {
        let link = LinkEstimate {
            rtt: Duration::from_millis(100),
            bytes_per_second: 100_000.0,
        };
        // 14,600 bytes: 10 segments, 1.5 + log2(11) round trips, plus 0.146 s.
        let expected = (1.5 + 11f64.log2()) * 0.1 + 0.146;
        let got = link.transfer_time(14_600).as_secs_f64();
        assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
    }

    #[test]
    fn without_reasons_the_original_is_served() {
        assert_eq!(
            choose(&LADDER, &inputs()),
            Decision {
                chosen: 0,
                reason: Reason::Original
            }
        );
    }

    #[test]
    fn a_slow_link_gets_the_largest_variant_that_meets_the_target() {
        // 1.6 Mbit/s, 150 ms: 490 KB takes ~3.9 s, 700 KB ~5.1 s.
        let link = LinkEstimate {
            rtt: Duration::from_millis(150),
            bytes_per_second: 200_000.0,
        };
        let d = choose(
            &LADDER,
            &Inputs {
                link: Some(link),
                target_time: Duration::from_secs(4),
                ..inputs()
            },
        );
        assert_eq!(
            d,
            Decision {
                chosen: 2,
                reason: Reason::SlowLink
            }
        );
        // A link too slow for any: the smallest.
        let modem = LinkEstimate {
            rtt: Duration::from_millis(300),
            bytes_per_second: 7_000.0,
        };
        let d = choose(
            &LADDER,
            &Inputs {
                link: Some(modem),
                ..inputs()
            },
        );
        assert_eq!(d.chosen, 3);
    }

    #[test]
    fn the_whole_page_must_meet_the_target_not_the_object_alone() {
        // 1.6 Mbit/s, 150 ms: alone, the 700 KB variant meets 6 s (~5.1 s).
        let link = LinkEstimate {
            rtt: Duration::from_millis(150),
            bytes_per_second: 200_000.0,
        };
        let alone = Inputs {
            link: Some(link),
            target_time: Duration::from_secs(6),
            ..inputs()
        };
        assert_eq!(choose(&LADDER, &alone).chosen, 1);
        // With a 50 KB page around it and another 1 MB image scaled alike, only the
        // smallest share keeps the page within 6 s: 2 × 343 KB + 50 KB take ~5.3 s,
        // 2 × 490 KB + 50 KB ~6.8 s.
        let page = Inputs {
            page: PageWeight {
                fixed_bytes: 50_000,
                negotiable_bytes: 1_000_000,
            },
            ..alone
        };
        assert_eq!(
            choose(&LADDER, &page),
            Decision {
                chosen: 3,
                reason: Reason::SlowLink
            }
        );
        // A fast link takes the whole page as it is.
        let fast = Inputs {
            link: Some(LinkEstimate {
                rtt: Duration::from_millis(20),
                bytes_per_second: 10_000_000.0,
            }),
            ..page
        };
        assert_eq!(choose(&LADDER, &fast).chosen, 0);
    }

    #[test]
    fn save_data_and_egress_cap_the_share() {
        let d = choose(
            &LADDER,
            &Inputs {
                save_data: true,
                ..inputs()
            },
        );
        assert_eq!(
            d,
            Decision {
                chosen: 3,
                reason: Reason::SaveData
            }
        );
        let d = choose(
            &LADDER,
            &Inputs {
                max_fraction: 0.6,
                ..inputs()
            },
        );
        assert_eq!(
            d,
            Decision {
                chosen: 2,
                reason: Reason::Egress
            }
        );
        // Below the smallest variant: still the smallest, never nothing.
        let d = choose(
            &LADDER,
            &Inputs {
                max_fraction: 0.05,
                ..inputs()
            },
        );
        assert_eq!(d.chosen, 3);
    }

    #[test]
    fn hints_describe_links_and_garbage_describes_none() {
        let hints = ClientHints {
            rtt_ms: Some(150),
            downlink_kbps: Some(1_600),
            ..ClientHints::default()
        };
        assert_eq!(
            LinkEstimate::from_hints(&hints),
            Some(LinkEstimate {
                rtt: Duration::from_millis(150),
                bytes_per_second: 200_000.0
            })
        );
        let ect = ClientHints {
            ect: Some(Ect::TwoG),
            ..ClientHints::default()
        };
        assert_eq!(
            LinkEstimate::from_hints(&ect).map(|l| l.rtt),
            Some(Duration::from_millis(1_400))
        );
        let zero = ClientHints {
            downlink_kbps: Some(0),
            ect: Some(Ect::FourG),
            ..ClientHints::default()
        };
        assert_eq!(LinkEstimate::from_hints(&zero), None);
        assert_eq!(LinkEstimate::from_hints(&ClientHints::default()), None);
    }

    #[test]
    fn the_controller_moves_the_fraction_between_the_watermarks() {
        // 1.5 Mbit/s: 187,500 bytes/s; high mark 168,750, low 93,750.
        let mut c = EgressController::new(1_500_000, 0.5, 0.9);
        for _ in 0..20 {
            c.observe(250_000.0);
        }
        assert!(c.fraction() < 0.2, "{}", c.fraction());
        let low = c.fraction();
        for _ in 0..5 {
            c.observe(150_000.0);
        }
        assert!(c.fraction() <= low + 1e-9, "between the marks it holds");
        for _ in 0..40 {
            c.observe(10_000.0);
        }
        assert_eq!(c.fraction(), 1.0);
    }
}
