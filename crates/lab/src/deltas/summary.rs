//! Aggregates over a group of pairs (a corpus folder and content type, or a series):
//! totals, medians, savings against br-11, VCDIFF against xdelta3, speed ratios, and
//! the delta issue's targets.

use std::collections::BTreeMap;

use serde::Serialize;

use super::external::{ChildTime, Startup};
use super::method::DeltaMethod;
use super::PairRow;

/// Targets of the delta issue, as served by wirefold.
pub const TARGET_MEDIAN_PCT: f64 = 95.0;
pub const TARGET_TOTAL_PCT: f64 = 90.0;
/// Our VCDIFF at most this much larger than `xdelta3 -9` (total bytes).
pub const TARGET_VCDIFF_SIZE_RATIO: f64 = 1.10;

/// How much smaller than br-11 a method's bodies are, in percent.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Saving {
    /// Median over pairs of 100 × (1 − bytes / br_11 bytes).
    pub median_pair: f64,
    /// 100 × (1 − total bytes / total br_11 bytes).
    pub total: f64,
}

/// Ours against a peer on time: peer time / our time per pair (above 1: ours is faster).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Speed {
    /// Median over pairs of peer CPU time / our CPU time.
    pub median_ratio: f64,
    /// The same with the peer's startup CPU time (its command on a one-byte pair)
    /// taken off each run first: a lower bound of the peer's own work.
    pub median_ratio_excluding_startup: Option<f64>,
    /// Median over pairs of our in-process CPU time (calling thread), ms.
    pub ours_median_ms: f64,
    /// Median over pairs of the peer process's user+sys CPU time, ms.
    pub peer_cpu_median_ms: f64,
    /// Its user and system parts (medians over pairs, so they need not add up).
    pub peer_user_median_ms: f64,
    pub peer_sys_median_ms: f64,
    /// Median over pairs of the peer process's wall time, ms (not used for the ratio).
    pub peer_wall_median_ms: f64,
}

/// Our VCDIFF's size against `xdelta3 -9 -S none -A -n`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SizeRatio {
    /// Median over pairs of vcdiff bytes / xdelta3 bytes.
    pub median_pair: f64,
    /// Total vcdiff bytes / total xdelta3 bytes.
    pub total: f64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub corpus: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
    pub content_type: String,
    pub pairs: usize,
    /// Sum of body sizes per method (only methods measured on every pair of the group).
    pub total_bytes: BTreeMap<&'static str, u64>,
    /// Median body size per method.
    pub median_bytes: BTreeMap<&'static str, f64>,
    /// Per method other than br_11.
    pub smaller_than_br_11_pct: BTreeMap<&'static str, Saving>,
    pub vcdiff_vs_xdelta3_size: Option<SizeRatio>,
    /// `vcdiff_vs_xdelta3_encode`, `vcdiff_vs_xdelta3_decode`,
    /// `dcz_vs_zstd_patch_encode`, `dcz_vs_zstd_patch_decode`.
    pub speed: BTreeMap<&'static str, Speed>,
    /// Target name → met.
    pub targets: BTreeMap<&'static str, bool>,
}

pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The peers' startup CPU times.
#[derive(Clone, Copy, Debug, Default)]
pub struct Startups {
    pub xdelta3: Option<Startup>,
    pub zstd: Option<Startup>,
}

pub fn summarize(
    startups: Startups,
    corpus: &str,
    series: Option<&str>,
    content_type: &str,
    pairs: &[&PairRow],
) -> Summary {
    let mut s = Summary {
        corpus: corpus.to_string(),
        series: series.map(str::to_string),
        content_type: content_type.to_string(),
        pairs: pairs.len(),
        total_bytes: BTreeMap::new(),
        median_bytes: BTreeMap::new(),
        smaller_than_br_11_pct: BTreeMap::new(),
        vcdiff_vs_xdelta3_size: None,
        speed: BTreeMap::new(),
        targets: BTreeMap::new(),
    };
    // A method's per-pair sizes, if every pair has one.
    let sizes = |m: DeltaMethod| -> Option<Vec<u64>> {
        pairs.iter().map(|p| p.m.bytes[m.index()]).collect()
    };
    for m in DeltaMethod::ALL {
        if let Some(v) = sizes(m).filter(|v| !v.is_empty()) {
            s.total_bytes.insert(m.name(), v.iter().sum());
            s.median_bytes.insert(
                m.name(),
                median(v.iter().map(|&x| x as f64).collect()).unwrap(),
            );
        }
    }
    if let Some(br) = sizes(DeltaMethod::Br).filter(|v| !v.is_empty()) {
        let br_total: u64 = br.iter().sum();
        for m in DeltaMethod::ALL
            .into_iter()
            .filter(|&m| m != DeltaMethod::Br)
        {
            let Some(v) = sizes(m) else { continue };
            let per_pair = v
                .iter()
                .zip(&br)
                .map(|(&x, &b)| 100.0 * (1.0 - x as f64 / b as f64))
                .collect();
            let total: u64 = v.iter().sum();
            s.smaller_than_br_11_pct.insert(
                m.name(),
                Saving {
                    median_pair: median(per_pair).unwrap(),
                    total: 100.0 * (1.0 - total as f64 / br_total as f64),
                },
            );
        }
    }
    if let (Some(ours), Some(theirs)) = (sizes(DeltaMethod::Vcdiff), sizes(DeltaMethod::Xdelta3)) {
        if !ours.is_empty() {
            s.vcdiff_vs_xdelta3_size = Some(SizeRatio {
                median_pair: median(
                    ours.iter()
                        .zip(&theirs)
                        .map(|(&a, &b)| a as f64 / b as f64)
                        .collect(),
                )
                .unwrap(),
                total: ours.iter().sum::<u64>() as f64 / theirs.iter().sum::<u64>() as f64,
            });
        }
    }

    type Get = fn(&PairRow) -> Option<(std::time::Duration, ChildTime)>;
    let speeds: [(&'static str, Get, Option<std::time::Duration>); 4] = [
        (
            "vcdiff_vs_xdelta3_encode",
            |p| p.m.xdelta3.map(|t| (p.m.vcdiff.encode, t.encode)),
            startups.xdelta3.map(|s| s.encode),
        ),
        (
            "vcdiff_vs_xdelta3_decode",
            |p| p.m.xdelta3.map(|t| (p.m.vcdiff.decode, t.decode)),
            startups.xdelta3.map(|s| s.decode),
        ),
        (
            "dcz_vs_zstd_patch_encode",
            |p| p.m.zstd_patch.map(|t| (p.m.dcz.encode, t.encode)),
            startups.zstd.map(|s| s.encode),
        ),
        (
            "dcz_vs_zstd_patch_decode",
            |p| p.m.zstd_patch.map(|t| (p.m.dcz.decode, t.decode)),
            startups.zstd.map(|s| s.decode),
        ),
    ];
    for (name, get, startup) in speeds {
        let Some(times): Option<Vec<_>> = pairs.iter().map(|p| get(p)).collect() else {
            continue;
        };
        if times.is_empty() {
            continue;
        }
        let ratios: Vec<f64> = times
            .iter()
            .filter(|(ours, _)| !ours.is_zero())
            .map(|(ours, peer)| peer.cpu.as_secs_f64() / ours.as_secs_f64())
            .collect();
        let Some(median_ratio) = median(ratios) else {
            continue;
        };
        let median_ratio_excluding_startup = startup.and_then(|startup| {
            median(
                times
                    .iter()
                    .filter(|(ours, _)| !ours.is_zero())
                    .map(|(ours, peer)| {
                        peer.cpu.saturating_sub(startup).as_secs_f64() / ours.as_secs_f64()
                    })
                    .collect(),
            )
        });
        let med = |f: fn(&ChildTime) -> std::time::Duration| {
            median(times.iter().map(|(_, p)| ms(f(p))).collect()).unwrap()
        };
        s.speed.insert(
            name,
            Speed {
                median_ratio,
                median_ratio_excluding_startup,
                ours_median_ms: median(times.iter().map(|(o, _)| ms(*o)).collect()).unwrap(),
                peer_cpu_median_ms: med(|p| p.cpu),
                peer_user_median_ms: med(|p| p.user),
                peer_sys_median_ms: med(|p| p.sys),
                peer_wall_median_ms: med(|p| p.wall),
            },
        );
    }

    for (m, median_key, total_key) in [
        (
            DeltaMethod::Dcz,
            "dcz_19_median_pair_ge_95pct",
            "dcz_19_total_ge_90pct",
        ),
        (
            DeltaMethod::Dcb,
            "dcb_11_median_pair_ge_95pct",
            "dcb_11_total_ge_90pct",
        ),
    ] {
        if let Some(saving) = s.smaller_than_br_11_pct.get(m.name()) {
            s.targets
                .insert(median_key, saving.median_pair >= TARGET_MEDIAN_PCT);
            s.targets
                .insert(total_key, saving.total >= TARGET_TOTAL_PCT);
        }
    }
    if let Some(r) = s.vcdiff_vs_xdelta3_size {
        s.targets.insert(
            "vcdiff_total_within_10pct_of_xdelta3_9",
            r.total <= TARGET_VCDIFF_SIZE_RATIO,
        );
    }
    if let Some(speed) = s.speed.get("vcdiff_vs_xdelta3_encode") {
        s.targets.insert(
            "vcdiff_encode_at_least_xdelta3_9_speed",
            speed.median_ratio >= 1.0,
        );
    }
    s
}

impl Summary {
    /// The targets missed, in words; empty when all were met.
    pub fn misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (m, short) in [(DeltaMethod::Dcz, "dcz"), (DeltaMethod::Dcb, "dcb")] {
            if let Some(sv) = self.smaller_than_br_11_pct.get(m.name()) {
                if sv.median_pair < TARGET_MEDIAN_PCT {
                    out.push(format!("{short} median {:.1}<95", sv.median_pair));
                }
                if sv.total < TARGET_TOTAL_PCT {
                    out.push(format!("{short} total {:.1}<90", sv.total));
                }
            }
        }
        if let Some(r) = self.vcdiff_vs_xdelta3_size {
            if r.total > TARGET_VCDIFF_SIZE_RATIO {
                out.push(format!("vcdiff size x{:.2}>1.10", r.total));
            }
        }
        if let Some(sp) = self.speed.get("vcdiff_vs_xdelta3_encode") {
            if sp.median_ratio < 1.0 {
                out.push(format!("vcdiff encode x{:.2}<1", sp.median_ratio));
            }
        }
        out
    }
}
