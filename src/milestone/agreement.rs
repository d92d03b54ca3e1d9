//! Agreement of discovered milestones with reference milestones (the environment's own,
//! where it reports them): precision, recall, F1 and position error in steps.
//!
//! Per row, a discovered flag that is also a reference flag is a true positive (TP), a
//! discovered flag alone a false positive (FP), a reference flag alone a false negative (FN):
//!
//! ```text
//! P = TP / (TP + FP)     R = TP / (TP + FN)     F1 = 2·P·R / (P + R)
//! ```
//!
//! Conventions for empty denominators: nothing discovered and nothing to find is perfect
//! agreement (P = R = F1 = 1); otherwise an empty denominator gives 0.
//!
//! **Position error.** For every reference milestone at step t of a trajectory that has at
//! least one discovered milestone, the error is min |t − t′| over the discovered steps t′ of
//! that trajectory. The report keeps the count, sum and maximum, so reports add up exactly
//! (`+=`); references in trajectories with nothing discovered are
//! counted apart (`unplaced`).

use crate::batch::RolloutBatch;
use crate::error::{check_len, Result};

/// Counts comparing discovered milestone flags with reference flags (module docs).
///
/// ```
/// use beacon_rl::milestone::MilestoneAgreement;
/// use beacon_rl::RolloutBatch;
///
/// // One trajectory of 5 steps. Reference milestones at steps 1 and 4, discovered at 1 and 2.
/// let batch = RolloutBatch::from_blocks(1, &[5], vec![1.0])?;
/// let reference = [false, true, false, false, true];
/// let discovered = [false, true, true, false, false];
/// let a = MilestoneAgreement::compare(&batch, &discovered, &reference)?;
/// assert_eq!((a.true_positives, a.false_positives, a.false_negatives), (1, 1, 1));
/// assert_eq!((a.precision(), a.recall(), a.f1()), (0.5, 0.5, 0.5));
/// // Step 1 is found exactly (0); step 4's nearest discovery is step 2 (2 steps away).
/// assert_eq!((a.position_error_sum, a.placed, a.max_position_error), (2, 2, 2));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MilestoneAgreement {
    /// Rows flagged by both.
    pub true_positives: usize,
    /// Rows flagged by discovery only.
    pub false_positives: usize,
    /// Rows flagged by the reference only.
    pub false_negatives: usize,
    /// Reference milestones whose trajectory has a discovered milestone (the position errors
    /// counted).
    pub placed: usize,
    /// Reference milestones whose trajectory has no discovered milestone.
    pub unplaced: usize,
    /// Sum of the position errors, in steps.
    pub position_error_sum: usize,
    /// Largest position error, in steps (0 when none is counted).
    pub max_position_error: usize,
}

impl MilestoneAgreement {
    /// Compares per-row flags (caller's row order, one per row of `batch`).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) when either flag column's
    /// length differs from `batch.num_steps()`;
    /// [`Error::CapacityExceeded`](crate::Error::CapacityExceeded) when the batch's row index
    /// (8 bytes a row, 8 times the flags) cannot be allocated.
    ///
    /// ```
    /// # use beacon_rl::milestone::MilestoneAgreement;
    /// # use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(1, &[2], vec![0.0])?;
    /// assert!(MilestoneAgreement::compare(&batch, &[true], &[true, false]).is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compare(batch: &RolloutBatch, discovered: &[bool], reference: &[bool]) -> Result<Self> {
        check_len("discovered", batch.num_steps(), discovered.len())?;
        check_len("reference", batch.num_steps(), reference.len())?;
        batch.try_step_rows()?;
        let mut a = Self::default();
        for j in 0..batch.num_trajectories() {
            let rows = batch.trajectory_rows(j);
            let any_discovered = rows.iter().any(|&r| discovered[r]);
            for (t, &r) in rows.iter().enumerate() {
                match (discovered[r], reference[r]) {
                    (true, true) => a.true_positives += 1,
                    (true, false) => a.false_positives += 1,
                    (false, true) => a.false_negatives += 1,
                    (false, false) => {}
                }
                if !reference[r] {
                    continue;
                }
                if !any_discovered {
                    a.unplaced += 1;
                    continue;
                }
                let error = rows
                    .iter()
                    .enumerate()
                    .filter(|&(_, &r2)| discovered[r2])
                    .map(|(t2, _)| t.abs_diff(t2))
                    .min()
                    .unwrap_or(0);
                a.placed += 1;
                a.position_error_sum += error;
                a.max_position_error = a.max_position_error.max(error);
            }
        }
        Ok(a)
    }

    /// TP / (TP + FP); 1 when nothing was discovered and nothing was to be found, 0 when
    /// nothing was discovered but something was to be found.
    pub fn precision(&self) -> f64 {
        ratio(self.true_positives, self.false_positives, self.false_negatives)
    }

    /// TP / (TP + FN); 1 when there was nothing to find and nothing was discovered, 0 when
    /// there was nothing to find but something was discovered.
    pub fn recall(&self) -> f64 {
        ratio(self.true_positives, self.false_negatives, self.false_positives)
    }

    /// 2·P·R / (P + R); 0 when P + R = 0.
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r > 0.0 {
            2.0 * p * r / (p + r)
        } else {
            0.0
        }
    }
}

impl std::ops::AddAssign for MilestoneAgreement {
    /// Adds another report's counts (e.g. per environment into overall); the largest position
    /// error is the larger of the two.
    ///
    /// ```
    /// # use beacon_rl::milestone::MilestoneAgreement;
    /// let a = MilestoneAgreement { true_positives: 2, false_positives: 1, ..Default::default() };
    /// let b = MilestoneAgreement { true_positives: 1, false_negatives: 3, ..Default::default() };
    /// let mut all = a;
    /// all += b;
    /// assert_eq!((all.true_positives, all.false_positives, all.false_negatives), (3, 1, 3));
    /// ```
    fn add_assign(&mut self, other: Self) {
        self.true_positives += other.true_positives;
        self.false_positives += other.false_positives;
        self.false_negatives += other.false_negatives;
        self.placed += other.placed;
        self.unplaced += other.unplaced;
        self.position_error_sum += other.position_error_sum;
        self.max_position_error = self.max_position_error.max(other.max_position_error);
    }
}

/// tp / (tp + miss), with the empty-denominator conventions of the module docs.
fn ratio(tp: usize, miss: usize, other: usize) -> f64 {
    match (tp + miss, other) {
        (0, 0) => 1.0,
        (0, _) => 0.0,
        (d, _) => tp as f64 / d as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_position_errors_over_two_interleaved_trajectories() {
        // Rows alternate between trajectories a (rows 0, 2, 4, 6) and b (rows 1, 3, 5).
        let batch =
            RolloutBatch::from_row_keys(&[0; 7], &["a", "b", "a", "b", "a", "b", "a"], &[1.0; 7]).unwrap();
        // a: steps 0..4 = rows 0, 2, 4, 6; reference at steps 0 and 3, discovered at step 1.
        // b: steps 0..3 = rows 1, 3, 5; reference at step 2, nothing discovered.
        let reference = [true, false, false, false, false, true, true];
        let discovered = [false, false, true, false, false, false, false];
        let a = MilestoneAgreement::compare(&batch, &discovered, &reference).unwrap();
        // TP 0; FP 1 (a step 1); FN 3 (a steps 0 and 3, b step 2).
        assert_eq!(
            (a.true_positives, a.false_positives, a.false_negatives),
            (0, 1, 3)
        );
        // a: |0 − 1| = 1, |3 − 1| = 2 → placed 2, sum 3, max 2; b: unplaced 1.
        assert_eq!(
            (a.placed, a.unplaced, a.position_error_sum, a.max_position_error),
            (2, 1, 3, 2)
        );
        assert_eq!((a.precision(), a.recall(), a.f1()), (0.0, 0.0, 0.0));
    }

    #[test]
    fn precision_recall_f1_by_hand() {
        // TP 3, FP 1, FN 2: P = 3/4, R = 3/5, F1 = 2·0.75·0.6 / 1.35 = 0.9/1.35 = 2/3.
        let a = MilestoneAgreement {
            true_positives: 3,
            false_positives: 1,
            false_negatives: 2,
            ..Default::default()
        };
        assert_eq!(a.precision(), 0.75);
        assert_eq!(a.recall(), 0.6);
        assert!((a.f1() - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn empty_denominators() {
        let none = MilestoneAgreement::default();
        assert_eq!((none.precision(), none.recall(), none.f1()), (1.0, 1.0, 1.0));
        let only_fp = MilestoneAgreement {
            false_positives: 2,
            ..Default::default()
        };
        assert_eq!(
            (only_fp.precision(), only_fp.recall(), only_fp.f1()),
            (0.0, 0.0, 0.0)
        );
        let only_fn = MilestoneAgreement {
            false_negatives: 2,
            ..Default::default()
        };
        assert_eq!(
            (only_fn.precision(), only_fn.recall(), only_fn.f1()),
            (0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn adding_sums_counts_and_keeps_the_larger_maximum() {
        let mut a = MilestoneAgreement {
            placed: 1,
            position_error_sum: 4,
            max_position_error: 4,
            ..Default::default()
        };
        let b = MilestoneAgreement {
            placed: 2,
            position_error_sum: 2,
            max_position_error: 1,
            unplaced: 1,
            ..Default::default()
        };
        a += b;
        assert_eq!((a.placed, a.position_error_sum), (3, 6));
        assert_eq!((a.max_position_error, a.unplaced), (4, 1));
    }
}
