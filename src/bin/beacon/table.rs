//! `--format table`: the credit per trajectory for reading, fitted to the terminal.

use std::borrow::Cow;
use std::io::{self, Write};

use beacon_rl::record::RecordBatch;
use beacon_rl::Escaped;

use crate::args::Args;
use crate::BoxError;

/// The width the table fits in.
pub(crate) const TABLE_WIDTH: usize = 100;

/// The table: its totals line and the columns' legend come first, so group sections are kept
/// until the end (text, much smaller than the records they summarise). Every line fits
/// [`TABLE_WIDTH`] columns: long ids are shortened from the left (`…`), and the per-step
/// advantages (`--steps`) are wrapped.
pub(crate) struct Table {
    /// Estimator, second estimator (`--beside`) and detector names.
    name: &'static str,
    beside: Option<&'static str>,
    detector: String,
    steps_per_line: bool,
    groups: usize,
    trajectories: usize,
    steps: usize,
    milestones: usize,
    body: Vec<u8>,
    pub(crate) diagnostics: Option<String>,
}

impl Table {
    pub(crate) fn new(args: &Args, name: &'static str, beside: Option<&'static str>) -> Self {
        Self {
            name,
            beside,
            detector: args.detector.clone(),
            steps_per_line: args.steps,
            groups: 0,
            trajectories: 0,
            steps: 0,
            milestones: 0,
            body: Vec::new(),
            diagnostics: None,
        }
    }

    pub(crate) fn add(
        &mut self,
        rb: &RecordBatch<'_>,
        adv: &[f64],
        flags: &[bool],
        beside: Option<&[f64]>,
    ) -> Result<(), BoxError> {
        let batch = rb.batch();
        self.groups += batch.num_groups();
        self.trajectories += batch.num_trajectories();
        self.steps += batch.num_steps();
        self.milestones += flags.iter().filter(|&&f| f).count();
        self.write_groups(rb, adv, flags, beside)?;
        Ok(())
    }

    pub(crate) fn finish(&self, out: &mut impl Write) -> io::Result<()> {
        let name = self.name;
        writeln!(
            out,
            "{name}: {} groups, {} trajectories, {} steps, {} milestones (detector: {})",
            self.groups,
            self.trajectories,
            self.steps,
            self.milestones,
            printable(&self.detector)
        )?;
        writeln!(
            out,
            "  R: terminal reward. steps: steps taken. milestones: steps flagged as such."
        )?;
        let short = fit(name, 8);
        let by = if short == name {
            String::new()
        } else {
            format!(" ({name})")
        };
        writeln!(out, "  {short}: the trajectory's mean advantage per step{by}.")?;
        writeln!(out, "  min, max: its lowest and highest step advantage.")?;
        if let Some(other) = self.beside {
            let short = fit(other, 8);
            writeln!(
                out,
                "  {short}: the same by {other}, for comparison (--beside NAME, or none)."
            )?;
        }
        writeln!(
            out,
            "  Each step's advantage: --steps, or --format jsonl for every value in full."
        )?;
        out.write_all(&self.body)?;
        if let Some(d) = &self.diagnostics {
            writeln!(out, "{d}")?;
        }
        Ok(())
    }

    pub(crate) fn write_groups(
        &mut self,
        rb: &RecordBatch<'_>,
        adv: &[f64],
        flags: &[bool],
        beside: Option<&[f64]>,
    ) -> io::Result<()> {
        let batch = rb.batch();
        let record = |rows: &[usize]| &rb.records()[rb.row_location(rows[0]).0];
        let mean = |v: &[f64], rows: &[usize]| rows.iter().map(|&r| v[r]).sum::<f64>() / rows.len() as f64;
        let out = &mut self.body;
        for g in 0..batch.num_groups() {
            let first = batch.group_trajectories(g).start;
            let group_id = &record(batch.trajectory_rows(first)).group_id;
            writeln!(out, "\ngroup {}", fit(&printable(group_id), TABLE_WIDTH - 6))?;
            let other = self
                .beside
                .map_or(String::new(), |n| format!(" {:>8}", fit(n, 8)));
            writeln!(
                out,
                "  {:<38} {:>6} {:>5} {:>10} {:>8} {:>8} {:>8}{other}",
                "trajectory",
                "R",
                "steps",
                "milestones",
                fit(self.name, 8),
                "min",
                "max"
            )?;
            for j in batch.group_trajectories(g) {
                let rows = batch.trajectory_rows(j);
                let rec = record(rows);
                let (lo, hi) = rows
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &r| {
                        (l.min(adv[r]), h.max(adv[r]))
                    });
                let other = beside.map_or(String::new(), |v| format!(" {:>+8.3}", mean(v, rows)));
                writeln!(
                    out,
                    "  {:<38} {:>6} {:>5} {:>10} {:>+8.3} {:>+8.3} {:>+8.3}{other}",
                    fit(&printable(&rec.traj_id), 38),
                    reward_cell(rec.terminal_reward),
                    rows.len(),
                    rows.iter().filter(|&&r| flags[r]).count(),
                    mean(adv, rows),
                    lo,
                    hi,
                )?;
                if self.steps_per_line {
                    let cells = rows
                        .iter()
                        .map(|&r| format!("{:+.2}{}", adv[r], if flags[r] { "*" } else { "" }));
                    write_wrapped(out, cells, 6)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes `cells` separated by spaces on lines of at most [`TABLE_WIDTH`] columns, each
/// indented by `indent`.
pub(crate) fn write_wrapped(
    out: &mut impl Write,
    cells: impl Iterator<Item = String>,
    indent: usize,
) -> io::Result<()> {
    let mut line = String::new();
    for cell in cells {
        if !line.is_empty() && indent + line.chars().count() + 1 + cell.chars().count() > TABLE_WIDTH {
            writeln!(out, "{:indent$}{line}", "")?;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&cell);
    }
    if !line.is_empty() {
        writeln!(out, "{:indent$}{line}", "")?;
    }
    Ok(())
}

/// A terminal reward in at most 6 columns: as written when short (`1`, `0.5`, `-100`), else
/// rounded.
pub(crate) fn reward_cell(r: f64) -> String {
    let plain = r.to_string();
    if plain.len() <= 6 {
        return plain;
    }
    let rounded = format!("{r:.3}");
    if rounded.len() <= 6 {
        rounded
    } else {
        format!("{r:.0e}")
    }
}

/// `s` in at most `width` characters: a longer `s` keeps its end (where ids differ) after `…`.
pub(crate) fn fit(s: &str, width: usize) -> Cow<'_, str> {
    let n = s.chars().count();
    if n <= width {
        return Cow::Borrowed(s);
    }
    let (cut, _) = s.char_indices().nth(n - (width - 1)).unwrap_or((0, ' '));
    Cow::Owned(format!("…{}", &s[cut..]))
}

/// `s` safe to print on a terminal, as the library's error messages print caller text: see
/// [`Escaped`]. Borrowed when nothing needs escaping.
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    let shown = Escaped(s).to_string();
    if shown == s {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(shown)
    }
}
