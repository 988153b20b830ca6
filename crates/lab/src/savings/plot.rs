//! The figure of `lab savings --plot DIR`: Figure 5-5 of Mogul et al. 1997, the share of
//! delta-eligible responses by fraction of bytes saved, one line per method.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::analysis::{bin_label, Tally, BINS};
use super::method::SavingsMethod;
use crate::LabError;

/// Writes `DIR/savings-histogram.svg` for the shared-proxy scenario.
pub fn write(dir: &Path, tally: &Tally) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(dir).map_err(|source| LabError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join("savings-histogram.svg");
    draw(&path, tally).map_err(|e| LabError::BadInput {
        path: path.clone(),
        reason: format!("cannot draw the figure: {e}"),
    })?;
    Ok(path)
}

const COLORS: [RGBColor; 7] = [
    RGBColor(150, 150, 150),
    RGBColor(230, 120, 0),
    RGBColor(120, 60, 180),
    RGBColor(0, 110, 200),
    RGBColor(0, 160, 100),
    RGBColor(200, 30, 30),
    RGBColor(0, 0, 0),
];

fn draw(path: &Path, tally: &Tally) -> Result<(), Box<dyn std::error::Error>> {
    let eligible = tally.delta_eligible.max(1) as f64;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Delta-eligible responses by fraction of bytes saved ({} responses)",
                tally.delta_eligible
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0..BINS - 1, 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_labels(BINS)
        .x_label_formatter(&|&b| bin_label(b))
        .x_desc("bytes saved (<0: grew)")
        .y_desc("% of delta-eligible responses")
        .draw()?;
    for (m, color) in SavingsMethod::ALL.into_iter().zip(COLORS) {
        let points: Vec<(usize, f64)> = tally.histogram[m.index()]
            .iter()
            .enumerate()
            .map(|(b, &n)| (b, 100.0 * n as f64 / eligible))
            .collect();
        crate::plot::marked_line(&mut chart, points, m.name(), color)?;
    }
    crate::plot::finish(&mut chart, &root)
}
