//! Several estimators side by side: [`compare`], [`Comparison`] and its plain-text table.

use std::fmt;
use std::hash::Hash;

use super::config::DiagnosticsConfig;
use super::prepared::Diagnostics;
use super::report::opt;
use super::report::with_counts;
use super::report::DiagnosticsReport;
use super::sample::SampleSplit;
use crate::batch::RolloutBatch;
use crate::error::Result;

/// Side-by-side diagnostics of several estimators on one batch (keys interned once).
///
/// # Errors
/// As [`Diagnostics::new`] and [`Diagnostics::compare`].
///
/// ```
/// use beacon_rl::diagnostics::{compare, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let grpo = vec![0.7, -0.7];
/// let other = vec![0.0, -0.3];
/// let cmp = compare(&batch, &["s", "s"], &["a", "a"], &[false, false],
///                   &[("GRPO", &grpo), ("other", &other)], DiagnosticsConfig::default())?;
/// assert_eq!(cmp.entries.len(), 2);
/// assert!(cmp.to_string().contains("GRPO"));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn compare<S, A, N, V>(
    batch: &RolloutBatch,
    state_keys: &[S],
    action_keys: &[A],
    milestones: &[bool],
    estimators: &[(N, V)],
    config: DiagnosticsConfig,
) -> Result<Comparison>
where
    S: Hash + Eq,
    A: Hash + Eq,
    N: AsRef<str>,
    V: AsRef<[f64]>,
{
    Diagnostics::new(batch, state_keys, action_keys, milestones, config)?.compare(estimators)
}

/// One row of a [`Comparison`].
///
/// ```
/// use beacon_rl::diagnostics::{DiagnosticsReport, NamedReport};
/// let row = NamedReport::default(); // rows come from `Diagnostics::compare`
/// assert_eq!((row.name.as_str(), row.report), ("", DiagnosticsReport::default()));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct NamedReport {
    /// The estimator's display name.
    pub name: String,
    /// Its diagnostics.
    pub report: DiagnosticsReport,
}

/// Diagnostics of several estimators on the same batch. `Display` prints a plain-text table.
///
/// ```
/// use beacon_rl::diagnostics::{compare, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let cmp = compare(&batch, &[0, 0], &[0, 0], &[false, false], &[("GRPO", [0.7, -0.7])], DiagnosticsConfig::default())?;
/// let text = cmp.to_string();
/// assert!(text.lines().next().unwrap().starts_with("estimator"));
/// assert!(text.contains("1.000 (1/1)")); // CAR: the one shared pair is contradictory
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Comparison {
    /// Distinct state–action pairs in the batch.
    pub distinct_pairs: usize,
    /// |S_shared|: pairs occurring in at least two trajectories (the same for every
    /// estimator; kept here so that a comparison without entries still says it).
    #[cfg_attr(feature = "serde", serde(default))]
    pub shared_pairs: usize,
    /// The zero threshold τ used.
    pub zero_threshold: f64,
    /// The batch's sample split (the same for every estimator).
    pub samples: SampleSplit,
    /// One report per estimator, in the order given.
    pub entries: Vec<NamedReport>,
}

/// One table line: the first cell left-aligned, the others right-aligned, two spaces apart.
pub(super) fn table_line<S: AsRef<str>>(
    f: &mut fmt::Formatter<'_>,
    cells: &[S; 6],
    width: &[usize; 6],
) -> fmt::Result {
    write!(f, "{:<w$}", cells[0].as_ref(), w = width[0])?;
    for (cell, &w) in cells.iter().zip(width).skip(1) {
        write!(f, "  {:>w$}", cell.as_ref())?;
    }
    writeln!(f)
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEADER: [&str; 6] = ["estimator", "CAR", "EGR", "ZAR", "CCR", "utilisation"];
        let rows: Vec<[String; 6]> = self
            .entries
            .iter()
            .map(|e| {
                let r = &e.report;
                [
                    e.name.clone(),
                    with_counts(r.car.value, r.car.contradictory_pairs, r.car.shared_pairs),
                    opt(r.egr.value),
                    with_counts(Some(r.zar.value), r.zar.zero_steps, r.zar.steps),
                    opt(r.ccr.value),
                    with_counts(
                        Some(r.utilisation.value),
                        r.utilisation.effective,
                        r.utilisation.trajectories,
                    ),
                ]
            })
            .collect();
        // Column widths in characters (names may hold non-ASCII such as λ or γ).
        let mut width = HEADER.map(|h| h.chars().count());
        for row in &rows {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        table_line(f, &HEADER, &width)?;
        for row in &rows {
            table_line(f, row, &width)?;
        }
        let s = &self.samples;
        writeln!(
            f,
            "trajectories: {} = {} full success + {} partial success + {} complete failure; \
             shared (s, a) pairs: {} of {} distinct; zero threshold {:e}",
            s.trajectories,
            s.full_success,
            s.partial_success,
            s.complete_failure,
            self.shared_pairs,
            self.distinct_pairs,
            self.zero_threshold
        )
    }
}
