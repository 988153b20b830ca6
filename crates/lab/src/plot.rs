//! Drawing shared by the lab's figures: each series a line with a dot per point and a
//! legend entry, the legend in the upper left.

use plotters::coord::types::RangedCoordusize;
use plotters::coord::Shift;
use plotters::prelude::*;

/// A figure whose x axis counts items (documents, histogram bins).
pub(crate) type Chart<'a, 'b, Y> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordusize, Y>>;

/// Draws `points` as a line with a dot at each point, named `label` in the legend.
pub(crate) fn marked_line<Y>(
    chart: &mut Chart<'_, '_, Y>,
    points: Vec<(usize, Y::ValueType)>,
    label: &str,
    color: RGBColor,
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: Ranged,
    Y::ValueType: Clone + 'static,
{
    chart
        .draw_series(LineSeries::new(points.clone(), color))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    chart.draw_series(
        points
            .into_iter()
            .map(|p| Circle::new(p, 3, color.filled())),
    )?;
    Ok(())
}

/// Draws the legend and writes the figure.
pub(crate) fn finish<'a, 'b: 'a, Y: Ranged>(
    chart: &mut Chart<'a, 'b, Y>,
    root: &DrawingArea<SVGBackend<'b>, Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
