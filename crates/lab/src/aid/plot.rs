//! The figure of `lab aid --plot DIR`: round trips per document, without and with AID.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::{DocumentRow, Tcp};
use crate::LabError;

/// Writes `DIR/aid-rtts-iw<IW>.svg` (one file per initial window, so runs with IW 1 and
/// IW 10 sit side by side). Documents are ordered by their round trips without AID,
/// which makes that series a staircase and shows AID's gain as the gap below it.
pub fn write(dir: &Path, tcp: &Tcp, rows: &[DocumentRow]) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(dir).map_err(|source| LabError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join(format!("aid-rtts-iw{}.svg", tcp.initial_window));
    draw(&path, tcp, rows).map_err(|e| LabError::BadInput {
        path: path.clone(),
        reason: format!("cannot draw the figure: {e}"),
    })?;
    Ok(path)
}

/// A plotted series: its legend, its colour, and the round trips it shows.
type Series = (&'static str, RGBColor, fn(&DocumentRow) -> u64);

fn draw(path: &Path, tcp: &Tcp, rows: &[DocumentRow]) -> Result<(), Box<dyn std::error::Error>> {
    let mut order: Vec<&DocumentRow> = rows.iter().collect();
    order.sort_by_key(|r| (r.rtts_without, r.rtts_with));
    let top = order
        .iter()
        .map(|r| r.rtts_without.max(r.rtts_with))
        .max()
        .unwrap_or(0)
        + 1;

    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let caption = format!(
        "Round trips per page, IW {} segments, MSS {} B, {} connections",
        tcp.initial_window, tcp.mss, tcp.connections
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0..order.len().max(1), 0..top)?;
    chart
        .configure_mesh()
        .x_desc("document (ordered by round trips without AID)")
        .y_desc("round trips")
        .draw()?;

    let series: [Series; 2] = [
        ("without inline download", RED, |r| r.rtts_without),
        ("with inline download", BLUE, |r| r.rtts_with),
    ];
    for (label, color, rtts) in series {
        let points = order
            .iter()
            .enumerate()
            .map(|(i, r)| (i, rtts(r)))
            .collect();
        crate::plot::marked_line(&mut chart, points, label, color)?;
    }
    crate::plot::finish(&mut chart, &root)
}
