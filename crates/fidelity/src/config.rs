//! The `[fidelity]` section of the server's configuration, owned here with its bounds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::image::{ImageLimits, WEBP_MAX_SIDE};

/// Adaptive fidelity: variants, their choice by the client's link and by the
/// server's egress.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FidelityConfig {
    pub enabled: bool,
    /// The time a page should take to arrive; a client whose link would take longer
    /// gets the largest variants that meet it (the paper's transfer-time estimate).
    pub target_time_ms: u64,
    /// Rungs below the original in each image ladder, each about 70% of the bytes of
    /// the one above (1..=8).
    pub steps: u8,
    /// Images smaller than this many bytes keep their original only.
    pub min_image_bytes: usize,
    /// Images larger than this many bytes are not decoded.
    pub max_image_bytes: usize,
    /// Largest image width or height decoded, in pixels (at most 16,383, libwebp's).
    pub max_image_side: u32,
    /// Largest image area decoded, in pixels; checked from the header first.
    pub max_image_pixels: u64,
    /// Share of one core the background variant maker may use on average (0 < x ≤ 1).
    pub cpu_share: f64,
    /// Makes AVIF rungs too, in a pass after the others, for clients whose `Accept`
    /// names `image/avif` (in a build with the `avif` feature; ignored without).
    pub avif: bool,
    /// Larger images get no AVIF rungs: a ladder costs ~10 s of CPU per megapixel,
    /// and the maker makes one pass at a time.
    pub avif_max_pixels: u64,
    /// Originals waiting for their variants, at most; more are skipped until a
    /// later request.
    pub queue: usize,
    /// A minified text variant is kept only when it saves at least this share of
    /// the original's bytes after compression (what a client pays).
    pub text_min_saving: f64,
    /// `Save-Data: on` gets the largest variant at most this share of the original.
    pub save_data_fraction: f64,
    /// Egress the server should not exceed, in bits per second; 0 turns the egress
    /// controller off.
    pub egress_limit_bps: u64,
    /// The controller raises the maximum fidelity below this share of the limit…
    pub egress_low: f64,
    /// …and lowers it above this share.
    pub egress_high: f64,
}

impl Default for FidelityConfig {
    fn default() -> Self {
        FidelityConfig {
            enabled: true,
            target_time_ms: 3_000,
            steps: 6,
            min_image_bytes: 2_048,
            max_image_bytes: 16 << 20,
            max_image_side: WEBP_MAX_SIDE,
            max_image_pixels: 40_000_000,
            cpu_share: 0.5,
            avif: true,
            avif_max_pixels: 4_000_000,
            queue: 64,
            text_min_saving: 0.03,
            save_data_fraction: 0.35,
            egress_limit_bps: 0,
            egress_low: 0.5,
            egress_high: 0.9,
        }
    }
}

impl FidelityConfig {
    pub fn target_time(&self) -> Duration {
        Duration::from_millis(self.target_time_ms)
    }

    pub fn image_limits(&self) -> ImageLimits {
        ImageLimits {
            max_side: self.max_image_side,
            max_pixels: self.max_image_pixels,
            max_input_bytes: self.max_image_bytes,
        }
    }

    /// Every problem in the section, each with its key.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let share = |x: f64| x > 0.0 && x <= 1.0;
        if self.target_time_ms == 0 || self.target_time_ms > 600_000 {
            problems.push((
                "fidelity.target_time_ms",
                format!("{} is outside 1..=600000", self.target_time_ms),
            ));
        }
        if !(1..=8).contains(&self.steps) {
            problems.push(("fidelity.steps", format!("{} is outside 1..=8", self.steps)));
        }
        if self.max_image_side == 0 || self.max_image_side > WEBP_MAX_SIDE {
            problems.push((
                "fidelity.max_image_side",
                format!("{} is outside 1..={WEBP_MAX_SIDE}", self.max_image_side),
            ));
        }
        if self.max_image_pixels == 0 || self.max_image_pixels > 268_435_456 {
            problems.push((
                "fidelity.max_image_pixels",
                format!("{} is outside 1..=268435456", self.max_image_pixels),
            ));
        }
        if self.avif_max_pixels == 0 || self.avif_max_pixels > self.max_image_pixels {
            problems.push((
                "fidelity.avif_max_pixels",
                format!(
                    "{} is outside 1..=fidelity.max_image_pixels ({})",
                    self.avif_max_pixels, self.max_image_pixels
                ),
            ));
        }
        if self.max_image_bytes < self.min_image_bytes {
            problems.push((
                "fidelity.max_image_bytes",
                format!(
                    "{} is below fidelity.min_image_bytes ({})",
                    self.max_image_bytes, self.min_image_bytes
                ),
            ));
        }
        if !share(self.cpu_share) {
            problems.push((
                "fidelity.cpu_share",
                format!("{} is outside (0, 1]", self.cpu_share),
            ));
        }
        if self.queue == 0 || self.queue > 65_536 {
            problems.push((
                "fidelity.queue",
                format!("{} is outside 1..=65536", self.queue),
            ));
        }
        if !(0.0..1.0).contains(&self.text_min_saving) {
            problems.push((
                "fidelity.text_min_saving",
                format!("{} is outside [0, 1)", self.text_min_saving),
            ));
        }
        if !share(self.save_data_fraction) {
            problems.push((
                "fidelity.save_data_fraction",
                format!("{} is outside (0, 1]", self.save_data_fraction),
            ));
        }
        if !share(self.egress_low)
            || !share(self.egress_high)
            || self.egress_low >= self.egress_high
        {
            problems.push((
                "fidelity.egress_low",
                format!(
                    "egress_low {} and egress_high {} must satisfy 0 < low < high <= 1",
                    self.egress_low, self.egress_high
                ),
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_bound_names_its_key() {
        assert!(FidelityConfig::default().problems().is_empty());
        let bad = FidelityConfig {
            steps: 0,
            cpu_share: 0.0,
            egress_low: 0.9,
            egress_high: 0.5,
            max_image_side: 20_000,
            avif_max_pixels: 50_000_000,
            ..FidelityConfig::default()
        };
        let keys: Vec<_> = bad.problems().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "fidelity.steps",
                "fidelity.max_image_side",
                "fidelity.avif_max_pixels",
                "fidelity.cpu_share",
                "fidelity.egress_low"
            ]
        );
    }
}
