//! The batch's row index, built on first use for batches from offsets or blocks.

use super::RolloutBatch;
use crate::error::{Error, Result};

/// A batch's row index (`RolloutBatch::step_rows`). Batches from offsets or blocks are
/// already in step order: their index is the identity `0..len`, built on first use (8 bytes a
/// step) instead of by the constructor, so that a constructor's memory is bounded by the
/// arrays the caller passed, whatever number of steps the offsets claim.
#[derive(Clone, Default)]
pub(super) struct StepRows {
    rows: std::sync::OnceLock<Vec<usize>>,
    /// The length while `rows` is not built (then the index is `0..len`).
    len: usize,
}

impl StepRows {
    /// `0..len`, not built yet.
    pub(super) fn identity(len: usize) -> Self {
        Self {
            rows: std::sync::OnceLock::new(),
            len,
        }
    }

    /// Number of rows, without building the index.
    pub(super) fn len(&self) -> usize {
        self.rows.get().map_or(self.len, Vec::len)
    }

    /// The index as an empty vector, to be filled (a lazy identity is dropped, not built).
    pub(super) fn cleared(&mut self) -> &mut Vec<usize> {
        self.len = 0;
        match self.rows.get_mut() {
            // Keeps its allocation (a builder rebuilding in place allocates nothing).
            Some(rows) => rows.clear(),
            None => drop(self.rows.set(Vec::new())),
        }
        self.as_vec_mut()
    }

    /// The index, built here if it is not yet, fallibly (see `RolloutBatch::try_step_rows`).
    pub(super) fn try_built(&self) -> Result<&[usize]> {
        if let Some(rows) = self.rows.get() {
            return Ok(rows);
        }
        let mut rows = Vec::new();
        rows.try_reserve_exact(self.len)
            .map_err(|_| Error::CapacityExceeded {
                what: "row index (8 bytes a row)",
                requested: self.len,
                limit: RolloutBatch::MAX_STEPS,
            })?;
        rows.extend(0..self.len);
        // Another thread may have built it meanwhile: then either copy is the same identity.
        Ok(self.rows.get_or_init(|| rows))
    }

    pub(super) fn as_vec_mut(&mut self) -> &mut Vec<usize> {
        if self.rows.get().is_none() {
            let len = self.len;
            self.rows.get_or_init(|| (0..len).collect());
        }
        match self.rows.get_mut() {
            Some(rows) => rows,
            None => unreachable!("initialised above"),
        }
    }
}

impl std::ops::Deref for StepRows {
    type Target = Vec<usize>;
    fn deref(&self) -> &Vec<usize> {
        self.rows.get_or_init(|| (0..self.len).collect())
    }
}

impl std::ops::DerefMut for StepRows {
    fn deref_mut(&mut self) -> &mut Vec<usize> {
        self.as_vec_mut()
    }
}

impl PartialEq for StepRows {
    /// As the row lists: built or not, without building either.
    fn eq(&self, other: &Self) -> bool {
        match (self.rows.get(), other.rows.get()) {
            (Some(a), Some(b)) => a == b,
            (Some(v), None) | (None, Some(v)) => {
                let len = if self.rows.get().is_none() {
                    self.len
                } else {
                    other.len
                };
                v.len() == len && v.iter().copied().eq(0..len)
            }
            (None, None) => self.len == other.len,
        }
    }
}

impl std::fmt::Debug for StepRows {
    /// As the row list (`[0, 1, 2]`), without building it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.rows.get() {
            Some(rows) => rows.fmt(f),
            None => f.debug_list().entries(0..self.len).finish(),
        }
    }
}
