//! A credit picture: per-step advantages of GRPO, GiGPO and BEACON on a few recorded
//! trajectories of one group, as an SVG (the paper's "Credit Assignment on Representative
//! Trajectories" figure, on real data).
//!
//! cargo run --release --example credit_picture [-- [FILE.jsonl] [--group ID]
//!     [--trajectories a,b,...] [--detector score] [--out target/credit.svg] [--width PX] [--values]]
//!
//! `docs/credit.svg` is `cargo run --release --example credit_picture -- --out docs/credit.svg`.
//!
//! All three estimators run over the whole file (so group statistics are those a trainer would
//! see); then the chosen group's chosen trajectories are drawn side by side, one panel per
//! estimator: bars are the step's advantage (green positive, red negative), stars mark the
//! milestone steps, and BEACON's panels shade its segments alternately. A fourth panel shows
//! BEACON's segment term λ·A_seg alone on its own scale: with the paper preset (R_ms = 1) it is
//! a tenth of the trajectory term, too small to read inside the combined bars. `--values`
//! also prints the drawn numbers (and each step's action) as a tab-separated table.
//!
//! - GRPO: verl's `grpo` on verl-agent's step rows (the episode reward on every step row,
//!   normalised over all rows of the group).
//! - GiGPO: [`GigpoConfig::default()`](GigpoConfig::default) (episode term + anchor-state step term).
//! - BEACON: `BeaconConfig::default()` (the paper), milestones from `--detector` (default `score`: the
//!   environment's score went up).
//!
//! Without `--trajectories`, a representative handful is drawn: the shortest success, the
//! longest success (detours), the failure with the most milestones (partial progress) and the
//! failure with the fewest (none, if there is one). Trajectory ids may be given in full or
//! without the `GROUP/` prefix.

use std::error::Error;
use std::path::PathBuf;

use beacon_rl::estimator::{AdvantageEstimator, Beacon, BeaconConfig, EstimatorConfig, Gigpo, GigpoConfig};
use beacon_rl::milestone::{detect_milestones, DetectorPreset};
use beacon_rl::record::{read_trajectories, RecordBatch, TrajectoryRecord};
use clap::Parser;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// Draw per-step advantages of GRPO, GiGPO and BEACON for trajectories of one group.
#[derive(Parser, Debug)]
#[command(name = "credit_picture")]
struct Args {
    /// Recorded trajectories (JSON Lines; `-` for standard input). Default: the bundled
    /// data/sample_trajectories.jsonl.
    file: Option<PathBuf>,
    /// The group to draw.
    #[arg(long, default_value = "tw/cook_r3_go1/s12")]
    group: String,
    /// Trajectory ids to draw, comma-separated (full ids or without the `GROUP/` prefix).
    /// Default: a representative handful.
    #[arg(long, value_delimiter = ',')]
    trajectories: Vec<String>,
    /// Milestone detector preset (score, flag, subgoals, textworld-score, alfworld).
    #[arg(long, default_value = "score")]
    detector: DetectorPreset,
    /// Output SVG path.
    #[arg(long, default_value = "target/credit.svg")]
    out: PathBuf,
    /// Picture width in pixels (the height follows).
    #[arg(long, default_value_t = 1500)]
    width: u32,
    /// Also print the drawn values as a tab-separated table on standard output.
    #[arg(long)]
    values: bool,
}

/// One drawn trajectory.
#[derive(Debug, Clone, PartialEq)]
struct Track {
    /// Short id (without the group prefix).
    id: String,
    /// Terminal reward > 0.
    success: bool,
    /// Milestone flag of each step.
    milestones: Vec<bool>,
    /// BEACON segment id of each step.
    segments: Vec<usize>,
    /// Action of each step (for `--values`).
    actions: Vec<String>,
}

/// One estimator's panel: an advantage per step of each track.
#[derive(Debug, Clone, PartialEq)]
struct Panel {
    /// Short name (the column header of `--values`).
    name: &'static str,
    /// Panel caption.
    title: String,
    /// `values[i][t]`: advantage of step t of track i.
    values: Vec<Vec<f64>>,
    /// Shade the tracks' segments in the background.
    shade_segments: bool,
}

/// Everything the picture shows, independent of how it is drawn.
#[derive(Debug, Clone, PartialEq)]
struct Picture {
    title: String,
    subtitle: String,
    tracks: Vec<Track>,
    panels: Vec<Panel>,
}

fn main() -> BoxResult<()> {
    let args = Args::parse();
    let file = args.file.unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/data/sample_trajectories.jsonl"
        ))
    });
    let records = read_trajectories(std::io::BufReader::new(std::fs::File::open(&file)?))
        .collect::<Result<Vec<_>, _>>()?;
    let picture = build_picture(&records, &args.group, &args.trajectories, args.detector)?;
    let svg = render_svg(&picture, args.width)?;
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, &svg)?;
    let written = std::fs::metadata(&args.out)?.len();
    if written == 0 || written != svg.len() as u64 {
        return Err(format!(
            "{}: wrote {written} bytes, expected {}",
            args.out.display(),
            svg.len()
        )
        .into());
    }
    if args.values {
        print!("{}", values_table(&picture));
    }
    let ids: Vec<&str> = picture.tracks.iter().map(|t| t.id.as_str()).collect();
    println!(
        "wrote {} ({} bytes): group {}, trajectories {}",
        args.out.display(),
        written,
        args.group,
        ids.join(", ")
    );
    Ok(())
}

/// Runs the three estimators over all `records` and collects the picture of `group`'s
/// `wanted` trajectories (a representative handful when `wanted` is empty).
fn build_picture(
    records: &[TrajectoryRecord],
    group: &str,
    wanted: &[String],
    detector: DetectorPreset,
) -> BoxResult<Picture> {
    let rb = RecordBatch::new(records)?;
    let flags = detect_milestones(rb.batch(), &mut *detector.build()?, |row, _| rb.transition(row))?;
    let input = rb.input(&flags);

    let grpo = "grpo".parse::<EstimatorConfig>()?.build()?.estimate(&input)?;
    let gigpo = Gigpo::new(GigpoConfig::default())?.estimate(&input)?;
    let config = BeaconConfig::default();
    let segment_weight = config.segment_weight;
    let beacon = Beacon::new(config)?.compute(rb.batch(), &flags)?;

    // Rows are record-major in file order: record i owns rows first[i]..first[i + 1].
    let mut first = Vec::with_capacity(records.len() + 1);
    first.push(0);
    for rec in records {
        first.push(first[first.len() - 1] + rec.steps.len());
    }

    let members: Vec<usize> = (0..records.len())
        .filter(|&i| records[i].group_id == group)
        .collect();
    if members.is_empty() {
        let mut groups: Vec<&str> = records.iter().map(|r| r.group_id.as_str()).collect();
        groups.dedup();
        return Err(format!("no group `{group}`; groups: {}", groups.join(", ")).into());
    }
    let short = |i: usize| {
        let id = records[i].traj_id.as_str();
        id.strip_prefix(group)
            .and_then(|s| s.strip_prefix('/'))
            .unwrap_or(id)
    };
    let chosen: Vec<usize> = if wanted.is_empty() {
        let count = |i: usize| flags[first[i]..first[i + 1]].iter().filter(|&&f| f).count();
        representative(
            &members,
            |i| records[i].terminal_reward > 0.0,
            |i| records[i].steps.len(),
            count,
        )
    } else {
        wanted
            .iter()
            .map(|w| {
                members
                    .iter()
                    .copied()
                    .find(|&i| records[i].traj_id == *w || short(i) == w)
                    .ok_or_else(|| {
                        let ids: Vec<&str> = members.iter().map(|&i| short(i)).collect();
                        format!(
                            "no trajectory `{w}` in group `{group}`; it has: {}",
                            ids.join(", ")
                        )
                    })
            })
            .collect::<Result<_, _>>()?
    };

    let tracks = chosen
        .iter()
        .map(|&i| Track {
            id: short(i).to_owned(),
            success: records[i].terminal_reward > 0.0,
            milestones: flags[first[i]..first[i + 1]].to_vec(),
            segments: beacon.segments[first[i]..first[i + 1]].to_vec(),
            actions: records[i].steps.iter().map(|s| s.action.clone()).collect(),
        })
        .collect();
    let column = |adv: &dyn Fn(usize) -> f64| -> Vec<Vec<f64>> {
        chosen
            .iter()
            .map(|&i| (first[i]..first[i + 1]).map(adv).collect())
            .collect()
    };
    let panels = vec![
        Panel {
            name: "GRPO",
            title: "GRPO (verl): the episode's outcome advantage on every step".into(),
            values: column(&|r| grpo.advantages[[r, 0]]),
            shade_segments: false,
        },
        Panel {
            name: "GiGPO",
            title: "GiGPO (verl-agent): episode advantage + step advantage within anchor-state groups".into(),
            values: column(&|r| gigpo.advantages[[r, 0]]),
            shade_segments: false,
        },
        Panel {
            name: "BEACON",
            title:
                "BEACON (paper preset): trajectory advantage + segment advantage of milestone-shaped rewards"
                    .into(),
            values: column(&|r| beacon.advantages[r]),
            shade_segments: true,
        },
        Panel {
            name: "BEACON_segment_term",
            title: "BEACON's segment term λ·A_seg alone (included in the bars above; its own scale)".into(),
            values: column(&|r| segment_weight * beacon.segment_advantages[r]),
            shade_segments: true,
        },
    ];
    let n_success = members
        .iter()
        .filter(|&&i| records[i].terminal_reward > 0.0)
        .count();
    Ok(Picture {
        title: format!("Credit assignment on recorded trajectories of {group}"),
        subtitle: format!(
            "{} trajectories in the group ({} successes); milestones by the `{}` detector; statistics over all {} trajectories of the file",
            members.len(),
            n_success,
            detector,
            records.len()
        ),
        tracks,
        panels,
    })
}

/// The drawn values, one line per step: trajectory, step, milestone, segment, one column per
/// panel, action.
fn values_table(picture: &Picture) -> String {
    let mut out = String::from("trajectory\tstep\tmilestone\tsegment");
    for panel in &picture.panels {
        out.push('\t');
        out.push_str(panel.name);
    }
    out.push_str("\taction\n");
    for (i, track) in picture.tracks.iter().enumerate() {
        for t in 0..track.milestones.len() {
            out.push_str(&format!(
                "{}\t{t}\t{}\t{}",
                track.id,
                u8::from(track.milestones[t]),
                track.segments[t]
            ));
            for panel in &picture.panels {
                out.push_str(&format!("\t{:.3}", panel.values[i][t]));
            }
            out.push_str(&format!(
                "\t{}\n",
                track.actions.get(t).map_or("", String::as_str)
            ));
        }
    }
    out
}

/// The default selection among `members`: the shortest success, the longest success, the
/// failure with the most milestones and the failure with the fewest; first in file order on
/// ties, each at most once.
fn representative(
    members: &[usize],
    success: impl Fn(usize) -> bool,
    len: impl Fn(usize) -> usize,
    milestones: impl Fn(usize) -> usize,
) -> Vec<usize> {
    let wins: Vec<usize> = members.iter().copied().filter(|&i| success(i)).collect();
    let losses: Vec<usize> = members.iter().copied().filter(|&i| !success(i)).collect();
    // min_by_key / max_by_key keep the first / last of equals: reverse for max so the first wins.
    let picks = [
        wins.iter().copied().min_by_key(|&i| len(i)),
        wins.iter().rev().copied().max_by_key(|&i| len(i)),
        losses.iter().rev().copied().max_by_key(|&i| milestones(i)),
        losses.iter().copied().min_by_key(|&i| milestones(i)),
    ];
    let mut chosen = Vec::new();
    for i in picks.into_iter().flatten() {
        if !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    chosen
}

/// Steps of blank space between two tracks.
const GAP: f64 = 2.5;
/// Narrowest slot of a track, in steps.
const MIN_SLOT: f64 = 12.0;
const POSITIVE: RGBColor = RGBColor(46, 125, 50);
const NEGATIVE: RGBColor = RGBColor(198, 40, 40);
const STAR: RGBColor = RGBColor(245, 166, 35);
const SHADE: [RGBColor; 2] = [RGBColor(222, 232, 246), RGBColor(246, 236, 218)];
const GREY: RGBColor = RGBColor(90, 90, 90);
const FONT: &str = "sans-serif";

/// Draws `picture` as an SVG document `width` pixels wide.
///
/// # Errors
/// When a panel's values do not match the tracks' step counts, a value is not finite, there is
/// nothing to draw, or plotters fails.
fn render_svg(picture: &Picture, width: u32) -> BoxResult<String> {
    check_picture(picture)?;
    let header = 100;
    let panel_height = 250;
    // The top panel also carries the trajectory labels.
    let labels = 48;
    let footer = 34;
    let body_height = labels + panel_height * picture.panels.len() as u32;
    let height = header + body_height + footer;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (head, rest) = root.split_vertically(header);
        let (body, foot) = rest.split_vertically(body_height);
        draw_header(&head, picture)?;
        let breaks: Vec<u32> = (1..picture.panels.len() as u32)
            .map(|k| labels + k * panel_height)
            .collect();
        let areas = body.split_by_breakpoints::<u32, u32, _, _>([], breaks);
        for (k, (panel, area)) in picture.panels.iter().zip(&areas).enumerate() {
            draw_panel(area, picture, panel, k == 0, k + 1 == picture.panels.len())?;
        }
        foot.draw(&Text::new(
            "bar: the step's advantage; BEACON segment k = the steps up to and including the k-th milestone, compared with segment k of the group's other trajectories",
            (70, 10),
            (FONT, 17).into_font().color(&GREY),
        ))?;
        root.present()?;
    }
    Ok(round_font_sizes(&svg))
}

/// Rounds the `font-size` attributes to 0.1 px (plotters writes them with 17 digits).
fn round_font_sizes(svg: &str) -> String {
    const KEY: &str = "font-size=\"";
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find(KEY) {
        let (head, tail) = rest.split_at(at + KEY.len());
        out.push_str(head);
        let end = tail.find('"').unwrap_or(tail.len());
        match tail[..end].parse::<f64>() {
            Ok(size) => out.push_str(&format!("{}", (size * 10.0).round() / 10.0)),
            Err(_) => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn check_picture(picture: &Picture) -> BoxResult<()> {
    if picture.tracks.is_empty() || picture.panels.is_empty() {
        return Err("nothing to draw: no trajectory or no panel".into());
    }
    for track in &picture.tracks {
        if track.milestones.is_empty() || track.milestones.len() != track.segments.len() {
            return Err(format!(
                "trajectory {}: no steps, or flags and segments disagree",
                track.id
            )
            .into());
        }
    }
    for panel in &picture.panels {
        if panel.values.len() != picture.tracks.len() {
            return Err(format!(
                "panel `{}`: {} tracks, expected {}",
                panel.title,
                panel.values.len(),
                picture.tracks.len()
            )
            .into());
        }
        for (values, track) in panel.values.iter().zip(&picture.tracks) {
            if values.len() != track.milestones.len() {
                return Err(format!(
                    "panel `{}`, trajectory {}: {} values for {} steps",
                    panel.title,
                    track.id,
                    values.len(),
                    track.milestones.len()
                )
                .into());
            }
            if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                return Err(format!(
                    "panel `{}`, trajectory {}: non-finite advantage {v}",
                    panel.title, track.id
                )
                .into());
            }
        }
    }
    Ok(())
}

/// The x position of each track's step 0, and the x where the last track's slot ends. Each
/// track gets a slot of at least [`MIN_SLOT`] steps (room for its label) with its bars centred
/// in it; slots are [`GAP`] steps apart.
fn offsets(tracks: &[Track]) -> (Vec<f64>, f64) {
    let mut x = 0.0;
    let starts = tracks
        .iter()
        .map(|t| {
            let len = t.milestones.len() as f64;
            let slot = len.max(MIN_SLOT);
            let start = x + ((slot - len) / 2.0).floor();
            x += slot + GAP;
            start
        })
        .collect();
    (starts, x - GAP)
}

fn draw_header(area: &DrawingArea<SVGBackend<'_>, Shift>, picture: &Picture) -> BoxResult<()> {
    let (w, _) = area.dim_in_pixel();
    let centre = Pos::new(HPos::Center, VPos::Top);
    area.draw(&Text::new(
        picture.title.clone(),
        (w as i32 / 2, 10),
        TextStyle::from((FONT, 30).into_font().style(FontStyle::Bold)).pos(centre),
    ))?;
    area.draw(&Text::new(
        picture.subtitle.clone(),
        (w as i32 / 2, 44),
        (FONT, 18).into_font().color(&GREY).pos(centre),
    ))?;
    // Legend: positive bar, negative bar, milestone star, two segment shades.
    let y = 76;
    let label = TextStyle::from((FONT, 18).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    // The naive font metrics plotters has without system fonts: about 0.55 em per character.
    let advance = |text: &str| 18 + (text.chars().count() as f64 * 18.0 * 0.55) as i32 + 28;
    let items = [
        "positive advantage",
        "negative advantage",
        "milestone step",
        "BEACON segments",
    ];
    let mut x = (w as i32 - items.iter().map(|t| advance(t)).sum::<i32>()) / 2;
    for (color, text) in [(POSITIVE, items[0]), (NEGATIVE, items[1])] {
        area.draw(&Rectangle::new([(x, y - 7), (x + 12, y + 7)], color.filled()))?;
        area.draw(&Text::new(text, (x + 18, y), label.clone()))?;
        x += advance(text);
    }
    area.draw(&star((x + 6, y), 8))?;
    area.draw(&Text::new(items[2], (x + 18, y), label.clone()))?;
    x += advance(items[2]);
    area.draw(&Rectangle::new(
        [(x - 6, y - 8), (x + 3, y + 8)],
        SHADE[0].filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(x + 3, y - 8), (x + 12, y + 8)],
        SHADE[1].filled(),
    ))?;
    area.draw(&Text::new(items[3], (x + 18, y), label))?;
    Ok(())
}

/// A five-pointed star of outer radius `r` pixels centred on `c`.
fn star(c: (i32, i32), r: i32) -> Polygon<(i32, i32)> {
    let points = (0..10)
        .map(|k| {
            let radius = if k % 2 == 0 { r as f64 } else { r as f64 * 0.45 };
            let angle = std::f64::consts::PI * (k as f64 / 5.0 - 0.5);
            (
                c.0 + (radius * angle.cos()).round() as i32,
                c.1 + (radius * angle.sin()).round() as i32,
            )
        })
        .collect::<Vec<_>>();
    Polygon::new(points, ShapeStyle::from(&STAR).filled())
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    picture: &Picture,
    panel: &Panel,
    top: bool,
    bottom: bool,
) -> BoxResult<()> {
    let (offs, x_end) = offsets(&picture.tracks);
    let (mut neg, mut pos) = (0.0_f64, 0.0_f64);
    for &v in panel.values.iter().flatten() {
        (neg, pos) = (neg.max(-v), pos.max(v));
    }
    let m = neg.max(pos).max(1e-9);
    // At least a quarter of the scale on either side of zero, and headroom above the bars
    // for the stars (about 14% of the plot's height).
    let (neg, pos) = (neg.max(0.25 * m), pos.max(0.25 * m));
    let span = neg + pos;
    let (lo, hi) = (-neg - 0.06 * span, pos + 0.14 * span);
    // Enough decimals for ticks about m / 4 apart.
    let decimals = (-(m / 4.0).log10().floor()).clamp(0.0, 4.0) as usize;
    let caption_height = 30;
    let labels_height = if top { 48 } else { 0 };
    let (w, _) = area.dim_in_pixel();
    area.draw(&Text::new(
        panel.title.clone(),
        (w as i32 / 2, 6),
        TextStyle::from((FONT, 22).into_font().style(FontStyle::Bold)).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    let mut chart = ChartBuilder::on(area)
        .margin_left(8)
        .margin_right(16)
        .margin_top(caption_height + labels_height)
        .margin_bottom(2)
        .x_label_area_size(if bottom { 44 } else { 22 })
        .y_label_area_size(62)
        .build_cartesian_2d(-1.0..x_end, lo..hi)?;
    let y_label = |v: &f64| format!("{:.*}", decimals, if v.abs() < 1e-12 { 0.0 } else { *v });
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .x_labels(0)
        .y_labels(5)
        .y_desc("advantage")
        .y_label_formatter(&y_label)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12));
    if bottom {
        mesh.x_desc("step within trajectory");
    }
    mesh.draw()?;

    if panel.shade_segments {
        for (track, &o) in picture.tracks.iter().zip(&offs) {
            let mut start = 0;
            for t in 1..=track.segments.len() {
                if t == track.segments.len() || track.segments[t] != track.segments[start] {
                    let color = SHADE[track.segments[start] % 2];
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(o + start as f64 - 0.5, lo), (o + t as f64 - 0.5, hi)],
                        color.filled(),
                    )))?;
                    start = t;
                }
            }
        }
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(-1.0, 0.0), (x_end, 0.0)],
        BLACK.stroke_width(1),
    )))?;
    for ((track, values), &o) in picture.tracks.iter().zip(&panel.values).zip(&offs) {
        chart.draw_series(values.iter().enumerate().map(|(t, &v)| {
            let x = o + t as f64;
            let color = if v >= 0.0 { POSITIVE } else { NEGATIVE };
            Rectangle::new([(x - 0.36, 0.0), (x + 0.36, v)], color.filled())
        }))?;
        chart.draw_series(
            values
                .iter()
                .zip(&track.milestones)
                .enumerate()
                .filter(|&(_, (_, &flag))| flag)
                .map(|(t, (&v, _))| EmptyElement::at((o + t as f64, v.max(0.0))) + star((0, -10), 7)),
        )?;
    }

    // Step ticks every 5 steps of each track, under the plotting area.
    let tick = (FONT, 15)
        .into_font()
        .color(&GREY)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (track, &o) in picture.tracks.iter().zip(&offs) {
        for t in (0..track.milestones.len()).step_by(5) {
            let (px, py) = chart.backend_coord(&(o + t as f64, lo));
            let (bx, by) = area.get_base_pixel();
            area.draw(&PathElement::new(
                vec![(px - bx, py - by), (px - bx, py - by + 4)],
                GREY.stroke_width(1),
            ))?;
            area.draw(&Text::new(t.to_string(), (px - bx, py - by + 5), tick.clone()))?;
        }
    }
    if top {
        let bold = TextStyle::from((FONT, 18).into_font().style(FontStyle::Bold))
            .pos(Pos::new(HPos::Center, VPos::Top));
        let plain = TextStyle::from((FONT, 16).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        let (bx, _) = area.get_base_pixel();
        for (track, &o) in picture.tracks.iter().zip(&offs) {
            let centre = o + (track.milestones.len() as f64 - 1.0) / 2.0;
            let (px, _) = chart.backend_coord(&(centre, hi));
            let n = track.milestones.iter().filter(|&&f| f).count();
            let color = if track.success { POSITIVE } else { NEGATIVE };
            let outcome = if track.success { "success" } else { "failure" };
            let title = format!("{} · {outcome}", track.id);
            let steps = track.milestones.len();
            let plural = |k: usize| if k == 1 { "" } else { "s" };
            let counts = format!("{steps} step{}, {n} milestone{}", plural(steps), plural(n));
            // Keep the label inside the picture (naive font metrics: about 0.55 em a character).
            let half =
                (title.chars().count().max(counts.chars().count()) as f64 * 18.0 * 0.55 / 2.0) as i32 + 4;
            let x = (px - bx).clamp(half, (w as i32 - half).max(half));
            let y = caption_height + 2;
            area.draw(&Text::new(title, (x, y), bold.clone().color(&color)))?;
            area.draw(&Text::new(counts, (x, y + 22), plain.clone().color(&GREY)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<TrajectoryRecord> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
        read_trajectories(std::io::BufReader::new(std::fs::File::open(path).unwrap()))
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    #[test]
    fn default_selection_on_the_cooking_group() {
        let records = sample();
        let p = build_picture(&records, "tw/cook_r3_go1/s12", &[], DetectorPreset::Score).unwrap();
        let ids: Vec<&str> = p.tracks.iter().map(|t| t.id.as_str()).collect();
        // Successes: 0_gold (21 steps) is the shortest, 1_noisy (27) the longest. Failures:
        // 4_noisy and 6_truncated both reach score 8 (8 milestones), the first wins; 7_random
        // scores once (1 milestone), fewer than 5_truncated's 5.
        assert_eq!(ids, ["0_gold", "1_noisy", "4_noisy", "7_random"]);
        assert_eq!(p.panels.len(), 4);
        // GRPO gives every step of a trajectory the same advantage, positive for successes.
        for (values, track) in p.panels[0].values.iter().zip(&p.tracks) {
            assert!(values.iter().all(|&v| v == values[0]));
            assert_eq!(values[0] > 0.0, track.success);
        }
        // Segment ids count the milestones strictly before each step.
        for track in &p.tracks {
            let mut seen = 0;
            for (s, &m) in track.segments.iter().zip(&track.milestones) {
                assert_eq!(*s, seen);
                seen += usize::from(m);
            }
        }
    }

    #[test]
    fn renders_every_bar_and_star() {
        let records = sample();
        let wanted = ["0_gold".to_owned(), "tw/cook_r3_go1/s12/5_truncated".to_owned()];
        let p = build_picture(&records, "tw/cook_r3_go1/s12", &wanted, DetectorPreset::Score).unwrap();
        let svg = render_svg(&p, 1200).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // 0_gold: 21 steps, score 0 → 11 in 11 increments; 5_truncated: 9 steps, 5 increments.
        let stars = p
            .tracks
            .iter()
            .flat_map(|t| &t.milestones)
            .filter(|&&m| m)
            .count();
        assert_eq!(stars, 16);
        // Polygons: one star per milestone in each of the 4 panels, plus the legend's.
        assert_eq!(svg.matches("<polygon").count(), 4 * 16 + 1);
        // Bars: one green or red rect per step in each panel (30 steps × 4 panels, zero
        // advantages included as empty bars), plus the legend's two swatches.
        let bars = svg
            .lines()
            .filter(|l| l.starts_with("<rect") && (l.contains("#2E7D32") || l.contains("#C62828")))
            .count();
        assert_eq!(bars, 4 * 30 + 2);
        assert!(!svg.contains("font-size=\"20.96"), "font sizes are rounded");
    }

    #[test]
    fn bad_input_is_an_error() {
        let records = sample();
        assert!(build_picture(&records, "no/such/group", &[], DetectorPreset::Score).is_err());
        let bogus = ["9_nothing".to_owned()];
        assert!(build_picture(&records, "tw/cook_r3_go1/s12", &bogus, DetectorPreset::Score).is_err());
        let mut p = build_picture(&records, "tw/cook_r3_go1/s12", &[], DetectorPreset::Score).unwrap();
        p.panels[1].values[0].pop();
        assert!(render_svg(&p, 1200).is_err());
        p.panels[1].values[0].push(f64::NAN);
        assert!(render_svg(&p, 1200).is_err());
    }
}
