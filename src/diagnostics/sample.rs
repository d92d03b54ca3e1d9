//! The sample split (paper §2, Figure 2a): each trajectory's outcome class and their shares.

/// The outcome class of a trajectory (paper §2, Figure 2a; §5.3, Figure 4).
///
/// ```
/// use beacon_rl::diagnostics::SampleCategory;
/// assert_eq!(SampleCategory::classify(false, true), SampleCategory::PartialSuccess);
/// ```
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
    ///
    /// ```
    /// use beacon_rl::diagnostics::SampleCategory;
    /// assert_eq!(SampleCategory::classify(true, false), SampleCategory::FullSuccess);
    /// assert_eq!(SampleCategory::classify(false, false), SampleCategory::CompleteFailure);
    /// ```
    pub fn classify(success: bool, has_milestone: bool) -> Self {
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
/// let s = d.sample_split();
/// assert_eq!((s.full_success, s.partial_success, s.complete_failure), (1, 2, 1));
/// assert_eq!(s.fractions(), [0.25, 0.5, 0.25]);
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

impl SampleSplit {
    /// [full, partial, failure] as fractions of all trajectories (zeros when there are none).
    ///
    /// ```
    /// use beacon_rl::diagnostics::SampleSplit;
    /// assert_eq!(SampleSplit::default().fractions(), [0.0; 3]);
    /// ```
    pub fn fractions(&self) -> [f64; 3] {
        if self.trajectories == 0 {
            return [0.0; 3];
        }
        let n = self.trajectories as f64;
        [
            self.full_success as f64 / n,
            self.partial_success as f64 / n,
            self.complete_failure as f64 / n,
        ]
    }
}
