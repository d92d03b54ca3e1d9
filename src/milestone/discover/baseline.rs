//! The naive baseline discovery is measured against: action frequency over successes.

use super::text::{action_keys, KeyMap, KeySet};
use crate::batch::RolloutBatch;
use crate::error::Result;
use crate::milestone::Transition;

/// The naive discovery baseline: per group, the (normalised) actions done by more than half
/// of the successful rollouts (R(τ) > `success_threshold`) are milestones, flagged at their
/// first occurrence in every rollout of the group. A group without success gets none. One
/// flag per caller row; only `action` of each transition is read.
///
/// # Errors
/// [`Error::CapacityExceeded`](crate::Error::CapacityExceeded) when the flags or the batch's
/// row index cannot be allocated (a [`RolloutBatch::from_offsets`] batch's row count is a
/// claim no column backs here).
///
/// ```
/// use beacon_rl::milestone::frequency_baseline;
/// use beacon_rl::milestone::Transition;
/// use beacon_rl::RolloutBatch;
///
/// let acts = ["look", "take key", "look", "take key", "sing"];
/// // Rollouts of 2 (success), 2 (success) and 1 (failure) steps.
/// let batch = RolloutBatch::from_blocks(3, &[2, 2, 1], vec![1.0, 1.0, 0.0])?;
/// let flags = frequency_baseline(&batch, 0.0, |row, _| Transition { action: acts[row], ..Transition::default() })?;
/// assert_eq!(flags, [true, true, true, true, false]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn frequency_baseline<'a, F>(
    batch: &RolloutBatch,
    success_threshold: f64,
    mut step: F,
) -> Result<Vec<bool>>
where
    F: FnMut(usize, usize) -> Transition<'a>,
{
    batch.try_step_rows()?;
    let mut flags = batch.try_row_flags()?;
    let mut counts: KeyMap<usize> = KeyMap::default();
    let mut seen = KeySet::default();
    let mut keys = Vec::new();
    let mut normalised = Vec::new();
    for g in 0..batch.num_groups() {
        counts.clear();
        let mut successes = 0;
        for j in batch.group_trajectories(g) {
            seen.clear();
            let success = batch.terminal_rewards()[j] > success_threshold;
            successes += usize::from(success);
            for (t, &row) in batch.trajectory_rows(j).iter().enumerate() {
                let key = action_keys(step(row, t).action, &mut normalised).0;
                keys.push(key);
                if success && seen.insert(key) {
                    *counts.entry(key).or_insert(0) += 1;
                }
            }
        }
        // Second pass over the keys just read (same order): first occurrences of frequent actions.
        let mut k = keys.iter();
        for j in batch.group_trajectories(g) {
            seen.clear();
            for &row in batch.trajectory_rows(j) {
                let key = k.next().copied().unwrap_or_default();
                let frequent = counts.get(&key).is_some_and(|&c| 2 * c > successes);
                flags[row] = seen.insert(key) && frequent;
            }
        }
        keys.clear();
    }
    Ok(flags)
}
