//! The sweep's SVG: one panel per (environment, budget) row and K column, the mean success
//! curve over the seeds of each drawn method.

use std::path::PathBuf;

use beacon_rl_testbed::{mean, Method};
use plotters::prelude::*;

use crate::{BoxResult, Cell};

/// Methods drawn in the picture, with their colours (the ablations are in the tables).
const DRAWN: [(Method, RGBColor); 8] = [
    (Method::Grpo, RGBColor(120, 120, 120)),
    (Method::GrpoTrajectory, RGBColor(180, 180, 180)),
    (Method::Gigpo, RGBColor(31, 119, 180)),
    (Method::Beacon, RGBColor(214, 39, 40)),
    (Method::BeaconOfficial, RGBColor(255, 127, 14)),
    (Method::BeaconCompletion, RGBColor(140, 86, 75)),
    (Method::GigpoMilestoneRewards, RGBColor(44, 160, 44)),
    (Method::GrpoProgress, RGBColor(148, 103, 189)),
];
const FONT: &str = "sans-serif";

/// Mean success curve over seeds, averaged over blocks of 5 iterations (keeps the SVG small).
fn drawn_curve(c: &Cell) -> Vec<(f64, f64)> {
    let n = c.curves.iter().map(Vec::len).min().unwrap_or(0);
    (0..n.div_ceil(5))
        .map(|b| {
            let (lo, hi) = (b * 5, (b * 5 + 5).min(n));
            let v = mean(&c.curves.iter().map(|cv| mean(&cv[lo..hi])).collect::<Vec<_>>());
            ((lo + hi) as f64 / 2.0, (v * 1000.0).round() / 1000.0)
        })
        .collect()
}

/// One row of panels per (environment, budget), one column per K.
pub(crate) fn draw(
    path: &PathBuf,
    cells: &[Cell],
    panel_rows: &[(&str, usize)],
    horizons: &[usize],
) -> BoxResult<()> {
    let (cols, rows) = (horizons.len().max(1), panel_rows.len().max(1));
    let (w, h) = (300 * cols as u32, 260 * rows as u32 + 60);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE)?;
        let (legend, body) = root.split_vertically(60);
        for (i, (m, colour)) in DRAWN.iter().enumerate() {
            let (x, y) = (10 + (i as i32 % 4) * 200, 12 + (i as i32 / 4) * 24);
            legend.draw(&PathElement::new(
                vec![(x, y + 8), (x + 24, y + 8)],
                colour.stroke_width(3),
            ))?;
            legend.draw(&Text::new(m.to_string(), (x + 30, y), (FONT, 15)))?;
        }
        let panels = body.split_evenly((rows, cols));
        for (p, area) in panels.iter().enumerate() {
            let ((env, b), k) = (panel_rows[p / cols], horizons[p % cols]);
            let at = |c: &&Cell| c.env == env && c.budget == b && c.k == k;
            let iters = cells
                .iter()
                .find(at)
                .map_or(1, |c| c.curves.first().map_or(1, Vec::len));
            let mut chart = ChartBuilder::on(area)
                .caption(format!("{env}, {b}/room, K = {k}"), (FONT, 17))
                .margin(6)
                .x_label_area_size(30)
                .y_label_area_size(36)
                .build_cartesian_2d(0.0..iters as f64, 0.0..1.02)?;
            chart
                .configure_mesh()
                .x_labels(4)
                .y_labels(3)
                .x_desc("iteration")
                .label_style((FONT, 12))
                .axis_desc_style((FONT, 12))
                .light_line_style(WHITE.mix(0.0))
                .draw()?;
            for (m, colour) in DRAWN {
                if let Some(c) = cells.iter().filter(at).find(|c| c.method == m) {
                    chart.draw_series(LineSeries::new(drawn_curve(c), colour.stroke_width(2)))?;
                }
            }
        }
        root.present()?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, svg)?;
    Ok(())
}
