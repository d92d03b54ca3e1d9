//! What the diagnostics measure: one report per metric (CAR, EGR, ZAR, CCR, utilisation) and
//! [`DiagnosticsReport`], all of them, with its plain-text form.

use super::sample::SampleSplit;
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
/// use beacon_rl::diagnostics::zero_advantage_ratio;
/// let r = zero_advantage_ratio(&[0.0, 0.5, 1e-9, -2.0], 1e-6)?;
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
/// use beacon_rl::diagnostics::credit_concentration;
/// // milestone |A| mean = 2, non-milestone mean = (1 + 3)/2 = 2, CCR = 1
/// let r = credit_concentration(&[2.0, -1.0, 3.0], &[true, false, false], 1e-6)?;
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
