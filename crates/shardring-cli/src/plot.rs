//! `--plot FILE.svg`: each node's load against the mean, one line per algorithm.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use shardring::analysis::Report;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// `--plot`'s file: its name must end in `.svg`, since SVG is what is written (SVG bytes in a
/// `x.png` would open as a broken image); refused at parsing, before a long analysis.
pub fn svg_path(text: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(text);
    let is_svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if is_svg {
        Ok(path)
    } else {
        Err(format!(
            "--plot writes SVG, so the name must end in .svg, not {:?} (for a PNG, convert the \
             SVG: rsvg-convert -o plot.png plot.svg)",
            path.extension().unwrap_or_default()
        ))
    }
}

/// Draws the load of each node (keys / expected keys) for every report, with the mean at 1.0.
pub fn loads(path: &Path, reports: &[Report]) -> Result<()> {
    draw(path, reports)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

fn draw(path: &Path, reports: &[Report]) -> Result<(), Box<dyn std::error::Error>> {
    let nodes = reports.iter().map(|r| r.nodes).max().unwrap_or(1);
    let ratios: Vec<Vec<f64>> = reports
        .iter()
        .map(|r| {
            r.spread
                .counts
                .iter()
                .map(|(_, c)| {
                    if r.spread.mean > 0.0 {
                        *c as f64 / r.spread.mean
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    let hi = ratios.iter().flatten().copied().fold(1.0, f64::max);
    let lo = ratios.iter().flatten().copied().fold(1.0, f64::min);
    let pad = ((hi - lo) * 0.1).max(0.01);

    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("load per node (keys / mean), {nodes} nodes"),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(
            0usize..nodes.saturating_sub(1).max(1),
            (lo - pad)..(hi + pad),
        )?;
    chart
        .configure_mesh()
        .x_desc("node")
        .y_desc("load / mean")
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            [(0, 1.0), (nodes.saturating_sub(1).max(1), 1.0)],
            BLACK.stroke_width(1),
        ))?
        .label("mean")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
    for (i, (report, ys)) in reports.iter().zip(&ratios).enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                ys.iter().enumerate().map(|(x, &y)| (x, y)),
                color.stroke_width(2),
            ))?
            .label(report.algorithm)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
