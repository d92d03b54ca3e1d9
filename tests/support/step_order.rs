//! Whether a batch's rows are already in step order, as the crate's public API shows it
//! (shared by the batch-builder tests and bench, included with `#[path]`).

use beacon_rl::RolloutBatch;

/// Whether the batch's rows are already in step order (its row index is the identity).
pub fn in_step_order(batch: &RolloutBatch) -> bool {
    batch
        .try_step_rows()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(s, &row)| s == row)
}
