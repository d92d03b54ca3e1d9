//! What the diagnostics measure: one report per metric (CAR, EGR, ZAR, CCR, utilisation), the
//! sample split (paper §2, Figure 2a: each trajectory's outcome class), [`DiagnosticsReport`]
//! holding all of them, and [`Comparison`], several estimators' reports side by side; the
//! last two with their plain-text forms.

use std::fmt;

/// CAR with the counts behind it.
///
/// ```
/// use beacon_rl::diagnostics::CarReport;
/// let r = CarReport::default();
/// assert_eq!(r.value, None); // no shared pair
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CarReport {
    /// Numerator: shared pairs with A⁺ > 0 and A⁻ > 0.
    pub contradictory_pairs: usize,
    /// Denominator: |S_shared|, pairs occurring in ≥ 2 trajectories.
    pub shared_pairs: usize,
    /// Shared pairs with A⁺ > 0.
    pub pairs_with_positive: usize,
    /// Shared pairs with A⁻ > 0.
    pub pairs_with_negative: usize,
    /// Steps (occurrences) belonging to shared pairs.
    pub shared_steps: usize,
    /// Distinct pairs in the batch, shared or not.
    pub distinct_pairs: usize,
    /// contradictory / shared; `None` when no pair is shared.
    pub value: Option<f64>,
}

/// EGR with the sums behind it.
///
/// ```
/// use beacon_rl::diagnostics::EgrReport;
/// assert_eq!(EgrReport::default().value, None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct EgrReport {
    /// Numerator: Σ |g⁺ − g⁻| over shared pairs.
    pub surviving: f64,
    /// Denominator: Σ (g⁺ + g⁻) over shared pairs.
    pub total: f64,
    /// surviving / total; `None` when no pair is shared or `total` = 0.
    pub value: Option<f64>,
}

/// ZAR with the counts behind it.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(1, &[4], vec![1.0])?;
/// let diag = Diagnostics::new(&batch, &[0; 4], &[0; 4], &[false; 4], DiagnosticsConfig::default())?;
/// let r = diag.report(&[0.0, 0.5, 1e-9, -2.0])?.zar;
/// assert_eq!((r.zero_steps, r.steps, r.value), (2, 4, 0.5));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ZarReport {
    /// Numerator: steps with |A| < τ.
    pub zero_steps: usize,
    /// Denominator: all steps.
    pub steps: usize,
    /// The threshold τ used.
    pub threshold: f64,
    /// zero_steps / steps.
    pub value: f64,
}

/// CCR with the sums behind it. Magnitudes below τ count as 0.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(1, &[3], vec![1.0])?;
/// let flags = [true, false, false];
/// let diag = Diagnostics::new(&batch, &[0; 3], &[0; 3], &flags, DiagnosticsConfig::default())?;
/// // milestone |A| mean = 2, non-milestone mean = (1 + 3)/2 = 2, CCR = 1
/// let r = diag.report(&[2.0, -1.0, 3.0])?.ccr;
/// assert_eq!(r.value, Some(1.0));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CcrReport {
    /// Milestone steps.
    pub milestone_steps: usize,
    /// Σ |A| over milestone steps.
    pub milestone_abs_sum: f64,
    /// Non-milestone steps.
    pub non_milestone_steps: usize,
    /// Σ |A| over non-milestone steps.
    pub non_milestone_abs_sum: f64,
    /// Numerator: mean |A| over milestone steps (`None` without milestone steps).
    pub milestone_mean: Option<f64>,
    /// Denominator: mean |A| over non-milestone steps (`None` without such steps).
    pub non_milestone_mean: Option<f64>,
    /// milestone_mean / non_milestone_mean; `None` when either is missing or the denominator
    /// is 0.
    pub value: Option<f64>,
}

/// Effective sample utilisation with the counts behind it, also broken down by category.
///
/// ```
/// use beacon_rl::diagnostics::UtilisationReport;
/// assert_eq!(UtilisationReport::default().effective, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct UtilisationReport {
    /// Numerator: trajectories with at least one step with |A| ≥ τ.
    pub effective: usize,
    /// Denominator: all trajectories.
    pub trajectories: usize,
    /// Effective full successes.
    pub effective_full_success: usize,
    /// Effective partial successes.
    pub effective_partial_success: usize,
    /// Effective complete failures.
    pub effective_complete_failure: usize,
    /// effective / trajectories.
    pub value: f64,
}

/// All diagnostics of one estimator's advantages on one batch.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let diag = Diagnostics::new(&batch, &["s", "s"], &["a", "a"], &[false, false], DiagnosticsConfig::default())?;
/// let report = diag.report(&[1.0, 1.0])?; // same sign everywhere
/// assert_eq!((report.car.value, report.egr.value), (Some(0.0), Some(1.0)));
/// println!("{report}");
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct DiagnosticsReport {
    /// Contradictory Action Ratio.
    pub car: CarReport,
    /// Effective Gradient Ratio.
    pub egr: EgrReport,
    /// Zero-Advantage Ratio.
    pub zar: ZarReport,
    /// Credit Concentration Ratio.
    pub ccr: CcrReport,
    /// Full / partial success / complete failure counts.
    pub samples: SampleSplit,
    /// Effective sample utilisation.
    pub utilisation: UtilisationReport,
}

pub(super) fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.3}"))
}

pub(super) fn with_counts(v: Option<f64>, num: usize, den: usize) -> String {
    format!("{} ({num}/{den})", opt(v))
}

impl fmt::Display for DiagnosticsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, e, z, k, s, u) = (
            &self.car,
            &self.egr,
            &self.zar,
            &self.ccr,
            &self.samples,
            &self.utilisation,
        );
        writeln!(
            f,
            "CAR {} ({} contradictory of {} shared pairs)",
            opt(c.value),
            c.contradictory_pairs,
            c.shared_pairs
        )?;
        writeln!(
            f,
            "EGR {} ({:.4} of {:.4} surviving)",
            opt(e.value),
            e.surviving,
            e.total
        )?;
        writeln!(
            f,
            "ZAR {:.3} ({} of {} steps with |A| < {:e})",
            z.value, z.zero_steps, z.steps, z.threshold
        )?;
        writeln!(
            f,
            "CCR {} (milestone mean |A| {} over {} steps, other {} over {} steps)",
            opt(k.value),
            opt(k.milestone_mean),
            k.milestone_steps,
            opt(k.non_milestone_mean),
            k.non_milestone_steps
        )?;
        writeln!(
            f,
            "samples: {} full success, {} partial success, {} complete failure",
            s.full_success, s.partial_success, s.complete_failure
        )?;
        write!(
            f,
            "utilisation {:.3} ({} of {} trajectories carry signal)",
            u.value, u.effective, u.trajectories
        )
    }
}

/// The outcome class of a trajectory (paper §2, Figure 2a; §5.3, Figure 4).
///
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum SampleCategory {
    /// The task was completed.
    FullSuccess,
    /// The task failed after completing at least one milestone.
    PartialSuccess,
    /// The task failed without any milestone.
    CompleteFailure,
}

impl SampleCategory {
    /// Classifies a trajectory from its success and whether it has any milestone step.
    pub(crate) fn classify(success: bool, has_milestone: bool) -> Self {
        match (success, has_milestone) {
            (true, _) => Self::FullSuccess,
            (false, true) => Self::PartialSuccess,
            (false, false) => Self::CompleteFailure,
        }
    }
}

/// How the trajectories split into full successes, partial successes and complete failures.
/// Independent of the advantages.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// // Four one-step trajectories: the first succeeds (R = 1), the next two fail after a milestone.
/// let batch = RolloutBatch::from_row_keys(&[0; 4], &[0, 1, 2, 3], &[1.0, 0.0, 0.0, 0.0])?;
/// let milestones = [false, true, true, false];
/// let d = Diagnostics::new(&batch, &[0; 4], &[0; 4], &milestones, DiagnosticsConfig::default())?;
/// let s = d.report(&[0.0; 4])?.samples;
/// assert_eq!((s.full_success, s.partial_success, s.complete_failure), (1, 2, 1));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct SampleSplit {
    /// Trajectories that completed the task.
    pub full_success: usize,
    /// Failed trajectories with at least one milestone.
    pub partial_success: usize,
    /// Failed trajectories without milestones.
    pub complete_failure: usize,
    /// All trajectories (the sum of the three).
    pub trajectories: usize,
}

/// Diagnostics of several estimators on the same batch. `Display` prints a plain-text table.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?;
/// let cmp = diag.compare(&[("GRPO", [0.7, -0.7])])?;
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
    /// One `(estimator name, report)` per estimator, in the order given.
    pub entries: Vec<(String, DiagnosticsReport)>,
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
            .map(|(name, r)| {
                [
                    name.clone(),
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
