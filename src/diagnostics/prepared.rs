//! [`Diagnostics`]: a batch prepared once (keys interned, shared pairs found, samples
//! classified), then measured for any number of estimators' advantages.

use std::collections::HashMap;
use std::hash::Hash;

use super::config::DiagnosticsConfig;
use super::metrics::ccr_unchecked;
use super::metrics::effective;
use super::metrics::finite;
use super::metrics::ratio;
use super::metrics::row_advantages;
use super::metrics::zar_unchecked;
use super::report::CarReport;
use super::report::Comparison;
use super::report::DiagnosticsReport;
use super::report::EgrReport;
use super::report::SampleCategory;
use super::report::SampleSplit;
use super::report::UtilisationReport;
use crate::batch::RolloutBatch;
use crate::error::check_finite;
use crate::error::check_len;
use crate::error::Error;
use crate::error::Result;
use crate::estimator::AdvantageEstimator;
use crate::estimator::EstimatorInput;
use crate::milestone::check_flags;

/// One batch prepared for diagnostics: keys interned, shared pairs indexed and trajectories
/// classified once, so that any number of advantage vectors (one per estimator) can then be
/// measured without hashing.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
///
/// // Keys may be any Hash + Eq type: here (group, observation) tuples and action strings.
/// let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "b"], &[1.0, 0.0, 0.0])?;
/// let state = [("g", "kitchen"), ("g", "kitchen"), ("g", "hall")];
/// let action = ["take knife", "take knife", "look"];
/// let diag = Diagnostics::new(&batch, &state, &action, &[true, true, false], DiagnosticsConfig::default())?;
/// let car = diag.report(&[1.0, -1.0, 0.0])?.car;
/// assert_eq!((car.shared_pairs, car.distinct_pairs), (1, 2));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Diagnostics<'a> {
    batch: &'a RolloutBatch,
    milestones: &'a [bool],
    config: DiagnosticsConfig,
    has_milestone: Vec<bool>,
    categories: Vec<SampleCategory>,
    distinct_pairs: usize,
    /// CSR over shared pairs: occurrences of shared pair p are `pair_offsets[p]..[p + 1]`,
    /// in batch (trajectory-major) order.
    pair_offsets: Vec<usize>,
    occ_rows: Vec<usize>,
}

impl<'a> Diagnostics<'a> {
    /// Prepares `batch` for diagnostics.
    ///
    /// `state_keys[r]` and `action_keys[r]` identify the state and action of caller row `r`
    /// (for example (group, observation text) and the action text); two rows are the same
    /// state–action pair when both keys are equal. Include the group in the state key unless
    /// identical states of different tasks should count as shared. `milestones[r]` flags
    /// milestone rows. Keys are interned once here.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an invalid `config`; [`Error::LengthMismatch`](crate::Error::LengthMismatch) when a
    /// column's length differs from `batch.num_steps()`.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::{Error, RolloutBatch};
    /// let batch = RolloutBatch::from_blocks(1, &[2], vec![0.0])?;
    /// let err = Diagnostics::new(&batch, &[0, 1], &[0], &[false, false], DiagnosticsConfig::default()).unwrap_err();
    /// assert!(matches!(err, Error::LengthMismatch { what: "action_keys", .. }));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new<S, A>(
        batch: &'a RolloutBatch,
        state_keys: &[S],
        action_keys: &[A],
        milestones: &'a [bool],
        config: DiagnosticsConfig,
    ) -> Result<Self>
    where
        S: Hash + Eq,
        A: Hash + Eq,
    {
        config.validate()?;
        let n = batch.num_steps();
        check_len("state_keys", n, state_keys.len())?;
        check_len("action_keys", n, action_keys.len())?;
        check_flags(batch, milestones)?;

        // Intern (state, action) once, visiting steps trajectory by trajectory so that "seen in
        // a new trajectory" is a comparison with the last trajectory seen.
        let mut ids: HashMap<(&S, &A), usize> = HashMap::with_capacity(n);
        let mut pair_of_step: Vec<usize> = Vec::with_capacity(n);
        let mut traj_count: Vec<usize> = Vec::new();
        let mut last_traj: Vec<usize> = Vec::new();
        let num_traj = batch.num_trajectories();
        let mut has_milestone = vec![false; num_traj];
        for (j, has) in has_milestone.iter_mut().enumerate() {
            for &r in batch.trajectory_rows(j) {
                let next = ids.len();
                let id = *ids.entry((&state_keys[r], &action_keys[r])).or_insert(next);
                if id == traj_count.len() {
                    traj_count.push(1);
                    last_traj.push(j);
                } else if last_traj[id] != j {
                    traj_count[id] += 1;
                    last_traj[id] = j;
                }
                pair_of_step.push(id);
                *has |= milestones[r];
            }
        }
        let distinct_pairs = traj_count.len();

        let (pair_offsets, occ_rows) = shared_pair_index(&pair_of_step, &traj_count, batch.step_rows());

        let categories = batch
            .terminal_rewards()
            .iter()
            .zip(&has_milestone)
            .map(|(&reward, &has)| SampleCategory::classify(reward > config.success_threshold, has))
            .collect();
        Ok(Self {
            batch,
            milestones,
            config,
            has_milestone,
            categories,
            distinct_pairs,
            pair_offsets,
            occ_rows,
        })
    }

    /// Replaces the reward-threshold success rule by explicit flags, one per trajectory in
    /// batch order (for environments whose success is not `R > threshold`).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless `success.len() == batch.num_trajectories()`.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig, SampleCategory};
    /// use beacon_rl::RolloutBatch;
    /// // Rewards 0.4 and 0.9 (partial credit); only the second is a success.
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![0.4, 0.9])?;
    /// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?
    ///     .with_success_flags(&[false, true])?;
    /// assert_eq!(diag.categories(), [SampleCategory::CompleteFailure, SampleCategory::FullSuccess]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn with_success_flags(mut self, success: &[bool]) -> Result<Self> {
        check_len("success flags", self.batch.num_trajectories(), success.len())?;
        for ((c, &ok), &has) in self.categories.iter_mut().zip(success).zip(&self.has_milestone) {
            *c = SampleCategory::classify(ok, has);
        }
        Ok(self)
    }

    /// The category of each trajectory, in batch order.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig, SampleCategory};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0; 4], &[0; 4], &[false, false, true, false], DiagnosticsConfig::default())?;
    /// assert_eq!(diag.categories(), [SampleCategory::FullSuccess, SampleCategory::PartialSuccess]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn categories(&self) -> &[SampleCategory] {
        &self.categories
    }

    /// |S_shared|: pairs occurring in at least two trajectories.
    fn shared_pairs(&self) -> usize {
        self.pair_offsets.len() - 1
    }

    /// The sample split (does not depend on advantages).
    fn sample_split(&self) -> SampleSplit {
        let mut s = SampleSplit {
            trajectories: self.categories.len(),
            ..SampleSplit::default()
        };
        for c in &self.categories {
            match c {
                SampleCategory::FullSuccess => s.full_success += 1,
                SampleCategory::PartialSuccess => s.partial_success += 1,
                SampleCategory::CompleteFailure => s.complete_failure += 1,
            }
        }
        s
    }

    /// Measures one estimator's advantages (`advantages[r]` for caller row `r`).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) unless there is one advantage per row; [`Error::NonFinite`](crate::Error::NonFinite)
    /// for a NaN or infinite advantage, or for an EGR or CCR sum or ratio that overflows (see
    /// the module's edge cases).
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::{Error, RolloutBatch};
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?;
    /// assert!(matches!(diag.report(&[1.0, f64::NAN]), Err(Error::NonFinite { index: 1, .. })));
    /// // Both trajectories take the shared pair, one with +1, one with 0 (no signal).
    /// let r = diag.report(&[1.0, 0.0])?;
    /// assert_eq!((r.car.value, r.zar.value, r.utilisation.value), (Some(0.0), 0.5, 0.5));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn report(&self, advantages: &[f64]) -> Result<DiagnosticsReport> {
        check_len("advantages", self.batch.num_steps(), advantages.len())?;
        check_finite("advantages", advantages)?;
        let tau = self.config.zero_threshold;
        let (car, egr) = self.car_egr(advantages)?;
        Ok(DiagnosticsReport {
            car,
            egr,
            zar: zar_unchecked(advantages, tau),
            ccr: ccr_unchecked(advantages, self.milestones, tau)?,
            samples: self.sample_split(),
            utilisation: self.utilisation(advantages),
        })
    }

    /// Measures several estimators' advantages on this batch, in the given order. `estimators`
    /// pairs a display name with per-row advantages (`&[(&str, &[f64])]`, `Vec<(String,
    /// Vec<f64>)>`, ...).
    ///
    /// # Errors
    /// [`Error::Estimator`](crate::Error::Estimator) naming the first estimator (in list order) whose advantages are
    /// invalid, with [`report`](Self::report)'s error as its `source`.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?;
    /// let table = diag.compare(&[("grpo", &[0.7, -0.7][..]), ("flat", &[0.5, 0.5][..])])?;
    /// assert_eq!(table.entries[0].1.car.value, Some(1.0));
    /// assert_eq!(table.entries[1].1.car.value, Some(0.0));
    /// println!("{table}");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compare<N, V>(&self, estimators: &[(N, V)]) -> Result<Comparison>
    where
        N: AsRef<str>,
        V: AsRef<[f64]>,
    {
        let entries = estimators
            .iter()
            .map(|(name, adv)| {
                let name = name.as_ref();
                Ok((
                    name.to_owned(),
                    self.report(adv.as_ref()).map_err(|e| named(name, e))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.comparison(entries))
    }

    /// Runs each estimator on `input` and measures its per-row advantages on this batch, in
    /// the given order: GRPO, GiGPO and BEACON side by side through the
    /// [`AdvantageEstimator`](crate::estimator::AdvantageEstimator) trait. `estimators` pairs a display name with an estimator.
    ///
    /// **Per-row advantage.** Each estimator returns a rows × L matrix, reduced to one advantage
    /// per row: with a response mask in `input`, the value on the row's
    /// *first masked token*; without one, column 0. Every step-level or outcome estimator of
    /// the crate (GRPO and its variants, RLOO, OPO, GPG, REINFORCE++-baseline, ReMax, GiGPO,
    /// BEACON) writes one value on all masked tokens of a row, so the first one *is* the row's
    /// advantage. Token-level estimators (`reinforce_plus_plus`, `gae`, the optimal token
    /// baselines) vary along the row; for them this measures the first generated token only.
    /// A row without masked tokens receives no gradient and counts as advantage 0.
    ///
    /// `input.batch` must be this diagnostics' batch (the same value): the advantages are
    /// matched to state–action keys and milestones by row. `input.milestones`, when given,
    /// must be the flags this diagnostics was prepared with (equal values): BEACON reads the
    /// input's flags and the CCR these, and one report describes one set. Without them an
    /// estimator that needs flags reports them missing; they are not filled in from here, so
    /// that an input behaves the same inside a comparison as in `estimate`.
    ///
    /// Call it as `diag.compare_estimators(..)` or `Diagnostics::compare_estimators(&diag, ..)`.
    ///
    /// # Errors
    /// [`Error::BatchMismatch`](crate::Error::BatchMismatch) when `input.batch` differs from the diagnosed batch;
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) for `input.milestones` of another length than the batch's
    /// rows and [`Error::MilestoneMismatch`](crate::Error::MilestoneMismatch) naming the first row whose flag differs
    /// from the diagnosed one (both before any estimator runs);
    /// [`Error::Estimator`](crate::Error::Estimator) naming the first estimator (in list order) that fails, with its
    /// error as `source`: the estimator's own error (a missing input column, NaN rewards,
    /// ...), [`Error::OutputShape`](crate::Error::OutputShape) for an output whose shape is not the mask's (without a
    /// mask: rows × L with L ≥ 1), or [`report`](Self::report)'s error (NaN advantages).
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::estimator::{AdvantageEstimator, Beacon, BeaconConfig, EstimatorConfig, EstimatorInput};
    /// use beacon_rl::{Error, RolloutBatch};
    ///
    /// // One task, a success "w" and a failure "l" that both open with "go" in state "s".
    /// let batch = RolloutBatch::from_row_keys(&["t"; 4], &["w", "w", "l", "l"], &[1.0, 1.0, 0.0, 0.0])?;
    /// let (state, action) = (["s", "hall", "s", "yard"], ["go", "take", "go", "dig"]);
    /// let milestones = [true, false, true, false];
    /// let diag = Diagnostics::new(&batch, &state, &action, &milestones, DiagnosticsConfig::default())?;
    ///
    /// let rewards = [[1.0], [1.0], [0.0], [0.0]]; // terminal reward on every step row
    /// let mask = [[true]; 4];
    /// let input = EstimatorInput::new(&batch)
    ///     .with_token_level_rewards(&rewards)
    ///     .with_response_mask(&mask)
    ///     .with_milestones(&milestones);
    /// let grpo = "grpo".parse::<EstimatorConfig>()?.build()?;
    /// let beacon = Beacon::new(BeaconConfig::default())?;
    /// let table = diag.compare_estimators(&[("grpo", &*grpo), ("beacon", &beacon)], &input)?;
    /// // verl's GRPO scores the group's 4 rows [1, 1, 0, 0]: μ = 0.5, σ = √(1/3) (unbiased),
    /// // A = ±0.5/σ = ±0.866 on the success's / the failure's rows: "go" at "s" is pushed
    /// // both ways.
    /// let grpo_report = &table.entries[0].1;
    /// assert_eq!(grpo_report.car.value, Some(1.0));
    /// assert!((grpo_report.ccr.milestone_mean.unwrap() - 0.866).abs() < 1e-3);
    /// println!("{table}");
    ///
    /// // GiGPO needs step rewards and anchors this input lacks: the error names it.
    /// let gigpo = "gigpo".parse::<EstimatorConfig>()?.build()?;
    /// let err = diag.compare_estimators(&[("grpo", &*grpo), ("GiGPO", &*gigpo)], &input).unwrap_err();
    /// assert!(matches!(&err, Error::Estimator { name, source }
    ///     if name == "GiGPO" && **source == Error::MissingInput("step_rewards")));
    /// assert_eq!(err.to_string(), "estimator GiGPO: missing input: step_rewards");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compare_estimators(
        &self,
        estimators: &[(&str, &dyn AdvantageEstimator)],
        input: &EstimatorInput<'_>,
    ) -> Result<Comparison> {
        if !std::ptr::eq(input.batch, self.batch) && input.batch != self.batch {
            return Err(Error::BatchMismatch(
                "the estimator input's batch is not the batch being diagnosed",
            ));
        }
        if let Some(flags) = input.milestones {
            self.check_same_milestones(flags)?;
        }
        let entries = estimators
            .iter()
            .map(|&(name, estimator)| {
                let report = estimator
                    .estimate(input)
                    .and_then(|out| row_advantages(out.advantages.view(), input.response_mask))
                    .and_then(|adv| self.report(&adv))
                    .map_err(|e| named(name, e))?;
                Ok((name.to_owned(), report))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.comparison(entries))
    }

    /// The input's milestone flags must be the diagnosed ones: BEACON reads the input's, the
    /// CCR and the sample split these.
    fn check_same_milestones(&self, flags: &[bool]) -> Result<()> {
        check_flags(self.batch, flags)?;
        match flags.iter().zip(self.milestones).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(row) => Err(Error::MilestoneMismatch {
                row,
                input: flags[row],
                diagnosed: self.milestones[row],
            }),
        }
    }

    fn comparison(&self, entries: Vec<(String, DiagnosticsReport)>) -> Comparison {
        Comparison {
            distinct_pairs: self.distinct_pairs,
            shared_pairs: self.shared_pairs(),
            zero_threshold: self.config.zero_threshold,
            samples: self.sample_split(),
            entries,
        }
    }

    fn car_egr(&self, advantages: &[f64]) -> Result<(CarReport, EgrReport)> {
        let tau = self.config.zero_threshold;
        let mut car = CarReport {
            shared_pairs: self.shared_pairs(),
            shared_steps: self.occ_rows.len(),
            distinct_pairs: self.distinct_pairs,
            ..CarReport::default()
        };
        let (mut surviving, mut total) = (0.0, 0.0);
        for w in self.pair_offsets.windows(2) {
            let (mut g_plus, mut g_minus) = (0.0f64, 0.0f64);
            let (mut pos, mut neg) = (false, false);
            for &r in &self.occ_rows[w[0]..w[1]] {
                let a = effective(advantages[r], tau);
                if a > 0.0 {
                    pos = true;
                    g_plus += a;
                } else if a < 0.0 {
                    neg = true;
                    g_minus -= a;
                }
            }
            // With the "any occurrence" convention, A⁺ > 0 ⟺ some occurrence is positive.
            car.pairs_with_positive += usize::from(pos);
            car.pairs_with_negative += usize::from(neg);
            car.contradictory_pairs += usize::from(pos && neg);
            surviving += (g_plus - g_minus).abs();
            total += g_plus + g_minus;
        }
        car.value = ratio(car.contradictory_pairs as f64, car.shared_pairs as f64);
        let egr = EgrReport {
            surviving,
            total,
            value: if car.shared_pairs == 0 {
                None
            } else {
                ratio(surviving, total)
            },
        };
        // Finite advantages near f64::MAX can overflow the sums: an error, never a report
        // holding ∞ or NaN.
        finite("EGR surviving (Σ|g⁺ − g⁻| overflows)", egr.surviving)?;
        finite("EGR total (Σ(g⁺ + g⁻) overflows)", egr.total)?;
        Ok((car, egr))
    }

    fn utilisation(&self, advantages: &[f64]) -> UtilisationReport {
        let tau = self.config.zero_threshold;
        let mut u = UtilisationReport {
            trajectories: self.categories.len(),
            ..UtilisationReport::default()
        };
        for (j, c) in self.categories.iter().enumerate() {
            let effective = self
                .batch
                .trajectory_rows(j)
                .iter()
                .any(|&r| advantages[r].abs() >= tau);
            if effective {
                u.effective += 1;
                match c {
                    SampleCategory::FullSuccess => u.effective_full_success += 1,
                    SampleCategory::PartialSuccess => u.effective_partial_success += 1,
                    SampleCategory::CompleteFailure => u.effective_complete_failure += 1,
                }
            }
        }
        u.value = u.effective as f64 / u.trajectories as f64;
        u
    }
}

/// The shared pairs (those in ≥ 2 trajectories, `traj_count`) compacted, and their occurrences
/// bucketed (CSR): occurrences of shared pair p are `occ_rows[pair_offsets[p]..[p + 1]]`, in
/// step order. `pair_of_step[s]` is the pair id of step s, `step_rows[s]` its caller row.
fn shared_pair_index(
    pair_of_step: &[usize],
    traj_count: &[usize],
    step_rows: &[usize],
) -> (Vec<usize>, Vec<usize>) {
    let distinct_pairs = traj_count.len();
    let mut shared_id = vec![usize::MAX; distinct_pairs];
    let mut shared = 0usize;
    for (sid, &c) in shared_id.iter_mut().zip(traj_count) {
        if c >= 2 {
            *sid = shared;
            shared += 1;
        }
    }
    let mut pair_offsets = vec![0usize; shared + 1];
    for &id in pair_of_step {
        if let Some(&s) = shared_id.get(id).filter(|&&s| s != usize::MAX) {
            pair_offsets[s + 1] += 1;
        }
    }
    for i in 1..pair_offsets.len() {
        pair_offsets[i] += pair_offsets[i - 1];
    }
    let mut cursor = pair_offsets.clone();
    let mut occ_rows = vec![0usize; pair_offsets[shared]];
    for (&id, &r) in pair_of_step.iter().zip(step_rows) {
        let s = shared_id[id];
        if s != usize::MAX {
            occ_rows[cursor[s]] = r;
            cursor[s] += 1;
        }
    }
    (pair_offsets, occ_rows)
}

/// Wraps an error of one compared estimator with its display name.
pub(super) fn named(name: &str, source: Error) -> Error {
    Error::Estimator {
        name: name.to_owned(),
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::DiagnosticsConfig;

    #[test]
    fn csr_groups_occurrences_by_pair_in_batch_order() {
        // rows: traj x = rows 0, 2; traj y = rows 1, 3 (interleaved)
        let batch =
            RolloutBatch::from_row_keys(&[0; 4], &["x", "y", "x", "y"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
        let s = ["p", "p", "q", "r"];
        let a = [0; 4];
        let d = Diagnostics::new(&batch, &s, &a, &[false; 4], DiagnosticsConfig::default()).unwrap();
        // pairs: p (rows 0, 1: both trajectories) shared; q, r single.
        assert_eq!(d.pair_offsets, vec![0, 2]);
        assert_eq!(d.occ_rows, vec![0, 1]);
        assert_eq!(d.distinct_pairs, 3);
    }
}
