//! `turn_gae`: generalized advantage estimation over one critic value per turn, broadcast to
//! the turn's tokens.

use super::turns::{turn_estimator, TurnWorkspace};
use super::{check_steps_out, EstimatorInput};
use crate::error::{check_len, Error, Range, Result};
use crate::tensor::FloatView;

/// Parameters of `turn_gae`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, TurnGaeConfig};
/// assert_eq!(TurnGaeConfig::default().discount, 1.0);
/// assert!(EstimatorConfig::TurnGae(TurnGaeConfig::default().with_lam(1.5)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct TurnGaeConfig {
    /// γ per turn (verl `algorithm.gamma`, default 1.0), in [0, 1].
    pub discount: f64,
    /// λ per turn (verl `algorithm.lam`, default 1.0), in [0, 1].
    pub lam: f64,
    /// Whiten the token advantages over the batch (default false; verl's token-level GAE
    /// always whitens). Token path only.
    pub whiten: bool,
}

impl TurnGaeConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless `discount` and `lam` are in [0, 1].
    pub(crate) fn validate(&self) -> Result<()> {
        Range::UNIT.check("discount", self.discount)?;
        Range::UNIT.check("lam", self.lam)
    }
}

impl Default for TurnGaeConfig {
    /// verl's defaults for γ and λ (1.0 each), no whitening.
    fn default() -> Self {
        Self {
            discount: 1.0,
            lam: 1.0,
            whiten: false,
        }
    }
}

crate::setters::with_setters! {
    TurnGaeConfig, "use beacon_rl::estimator::TurnGaeConfig;", TurnGaeConfig::default();
    /// Sets γ per turn (default 1.0; in [0, 1]).
    with_discount(discount: f64) = 0.9;
    /// Sets λ per turn (default 1.0; in [0, 1]).
    with_lam(lam: f64) = 0.95;
    /// Sets the whitening of the token advantages (default false).
    with_whiten(whiten: bool) = true;
}

/// `turn_gae`: generalized advantage estimation over one critic value per turn, broadcast to
/// the turn's tokens.
///
/// Token-level GAE (`gae`) runs its recursion over every token, so the discount and the
/// trace decay act per token and a long turn is discounted more than a short one. Here the
/// recursion runs over turns: in trajectory τ with turns 1 … K, turn rewards r_k
/// and values V_k,
///
/// ```text
/// δ_k = r_k + γ · V_{k+1} − V_k          V_{K+1} = 0 (the episode ends)
/// A_k = δ_k + γ · λ · A_{k+1}            A_{K+1} = 0
/// R_k = A_k + V_k                        (the critic's target)
/// ```
///
/// γ = [`discount`](TurnGaeConfig::discount), λ = [`lam`](TurnGaeConfig::lam) (verl's
/// `gamma`, `lam`, default 1 each). A_k is written on every generated token of turn k, R_k
/// as the returns; other tokens get 0. With [`whiten`](TurnGaeConfig::whiten) the
/// advantages are whitened over the batch's generated tokens (each turn counted once per
/// token, ε = 1e-8 as verl's `masked_whiten`), the returns are not.
///
/// V_k is `turn_values[r]` on step rows when given, else `values` (rows × L) at the turn's
/// first generated token (a step row without one: its first column), the critic's value of
/// the state in which the turn begins.
///
/// No peer implements turn-level GAE; the tests are hand-computed, and one special case is
/// exact: with one token per turn (and the whole row generated), token-level GAE over a row
/// of turns is this recursion, so `turn_gae` with whitening equals the crate's `gae` (which
/// matches verl's `compute_gae_advantage_return`) there (`tests/it/turn_gae.rs`). The
/// whitening takes the token count `n + 1e-8` and the Bessel factor `n / (n − 1)` in float32,
/// as verl does (and the crate's `gae`); the sums are float64.
///
/// On step rows ([`estimate_steps_into`](super::AdvantageEstimator::estimate_steps_into))
/// each row gets A_k; whitening needs the tokens, so it is refused there.
///
/// Turn-level GAE (see the module docs (`src/estimator/turn_gae.rs`)). Reads the turn rewards (`step_rewards` or
/// `token_level_rewards`), the values (`turn_values` or `values`) and, on the token path,
/// `response_mask`. Has returns.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, TurnGaeConfig};
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, Workspace};
/// use beacon_rl::RolloutBatch;
///
/// // One trajectory of two turns: rewards 0, 1; values 0.5, 0.25; γ = λ = 1.
/// // δ = 0 + 0.25 − 0.5 = −0.25, 1 − 0.25 = 0.75; A = 0.5, 0.75.
/// let batch = RolloutBatch::from_row_keys(&["t", "t"], &["a", "a"], &[0.0, 0.0])?;
/// let input = EstimatorInput::new(&batch).with_step_rewards(&[0.0, 1.0]).with_turn_values(&[0.5, 0.25]);
/// let mut adv = [0.0; 2];
/// EstimatorConfig::TurnGae(TurnGaeConfig::default()).build()?.estimate_steps_into(&input, &mut adv, &mut Workspace::default())?;
/// assert_eq!(adv, [0.5, 0.75]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TurnGae {
    config: TurnGaeConfig,
}

impl TurnGae {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, TurnGaeConfig};
    /// assert!(EstimatorConfig::TurnGae(TurnGaeConfig::default().with_discount(2.0)).build().is_err());
    /// ```
    pub(crate) fn new(config: TurnGaeConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The recursion over every trajectory: advantages into `ws.values`, returns into `ws.b`;
    /// the values V_k are in `ws.a`.
    fn recursion(&self, ws: &mut TurnWorkspace) -> Result<()> {
        let (gamma, lam) = (self.config.discount, self.config.lam);
        let TurnWorkspace {
            turns: t,
            a: v,
            b: returns,
            values: adv,
            ..
        } = ws;
        adv.clear();
        adv.resize(t.len(), 0.0);
        returns.clear();
        returns.resize(t.len(), 0.0);
        for j in 0..t.num_trajectories() {
            let (mut next_v, mut next_a) = (0.0, 0.0);
            for &k in t.trajectory(j).iter().rev() {
                let delta = t.reward[k] + gamma * next_v - v[k];
                next_a = delta + gamma * lam * next_a;
                next_v = v[k];
                adv[k] = next_a;
                returns[k] = next_a + v[k];
            }
        }
        crate::error::check_finite("turn advantages", adv)?;
        crate::error::check_finite("turn returns", returns)
    }

    /// The token path: turns, values, recursion, whitening.
    fn prepare(&self, input: &EstimatorInput<'_>, ws: &mut TurnWorkspace) -> Result<()> {
        if input.turn_values.is_some() && input.step_rewards.is_none() {
            return Err(Error::ConflictingInputs {
                first: "turn_values",
                second: "token_level_rewards (multi-turn rows: one value per turn is read from values)",
            });
        }
        // Presence first, so that a refused input costs no pass and no allocation.
        if input.step_rewards.is_none() && input.token_level_rewards.is_none() {
            return Err(Error::MissingInput("token_level_rewards"));
        }
        if input.turn_values.is_none() && input.values.is_none() {
            return Err(Error::MissingInput("values"));
        }
        ws.turns.read_tokens(input, input.output_dim())?;
        match input.turn_values {
            Some(tv) => {
                check_len("turn_values", input.batch.num_steps(), tv.len())?;
                crate::error::check_finite("turn_values", tv)?;
                ws.a.clear();
                ws.a.extend_from_slice(tv);
            }
            None => {
                let values = input.values.ok_or(Error::MissingInput("values"))?;
                let dim = input.output_dim();
                crate::estimator::check_matrix_shape("values", values.dim(), dim)?;
                ws.a.clear();
                let (rows, firsts) = (&ws.turns.row_of, &ws.turns.first);
                // A step row without a generated token: its first column.
                let col = |first: usize| if first == usize::MAX { 0 } else { first };
                for (k, (&row, &first)) in rows.iter().zip(firsts).enumerate() {
                    // One value per turn, a line apart: each read is a wait on memory unless
                    // it was requested some turns before.
                    if let (Some(&r), Some(&f)) = (rows.get(k + AHEAD), firsts.get(k + AHEAD)) {
                        if let Some(line) = value_addr(&values, r, col(f)) {
                            crate::estimator::prefetch_line(line);
                        }
                    }
                    let t = col(first);
                    let x = values.get(row, t).unwrap_or(0.0);
                    if !x.is_finite() {
                        return Err(Error::NonFinite {
                            what: "values",
                            index: row * dim.1 + t,
                            value: x,
                        });
                    }
                    ws.a.push(x);
                }
            }
        }
        self.recursion(ws)?;
        if self.config.whiten {
            whiten_turns(&ws.turns.tokens, &mut ws.values);
        }
        Ok(())
    }

    /// `estimate_steps_into`: one value per step row.
    fn steps(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut TurnWorkspace,
    ) -> Result<()> {
        check_steps_out(input, advantages)?;
        if self.config.whiten {
            return Err(Error::InvalidConfig {
                name: "whiten",
                value: 1.0,
                expected: "false on step rows (the whitening needs the response mask)",
            });
        }
        // Own columns first (present, one per row), then the step path's shared checks.
        if input.step_rewards.is_some() {
            let tv = input.turn_values.ok_or(Error::MissingInput("turn_values"))?;
            check_len("turn_values", input.batch.num_steps(), tv.len())?;
        }
        ws.turns.read_steps(input)?;
        let tv = input.turn_values.ok_or(Error::MissingInput("turn_values"))?;
        crate::error::check_finite("turn_values", tv)?;
        ws.a.clear();
        ws.a.extend_from_slice(tv);
        self.recursion(ws)?;
        advantages.copy_from_slice(&ws.values);
        Ok(())
    }
}

/// Turns between the value read and the value requested.
const AHEAD: usize = 16;

/// The address of `values[row, t]`, to request it ahead of its read.
fn value_addr(values: &FloatView<'_>, row: usize, t: usize) -> Option<usize> {
    match values {
        FloatView::F32(m) => m.get((row, t)).map(|x| x as *const f32 as usize),
        FloatView::F64(m) => m.get((row, t)).map(|x| x as *const f64 as usize),
    }
}

/// verl's `masked_whiten` of a token matrix whose generated tokens hold per-turn values:
/// μ = Σ x / (n + 1e-8), σ² = Σ (x − μ)² / (n + 1e-8) · n / (n − 1), x' = (x − μ)/√(σ² + 1e-8),
/// each turn counted once per token. Fewer than 2 tokens: unchanged.
///
/// `n + 1e-8` and `n / (n − 1)` are float32, as in verl (its mask is an int64 tensor) and in
/// the crate's token whitening: a float64 `n + 1e-8` shifts μ by |μ|·1e-8/n, which the scale
/// 1/√(σ² + 1e-8) (up to 1e4) turns into a visible error when the advantages nearly agree.
fn whiten_turns(tokens: &[usize], values: &mut [f64]) {
    let n: usize = tokens.iter().sum();
    if n < 2 {
        return;
    }
    let denom = f64::from(n as f32 + 1e-8f32);
    let bessel = f64::from(n as f32 / (n - 1) as f32);
    let sum: f64 = values.iter().zip(tokens).map(|(v, &m)| v * m as f64).sum();
    let mean = sum / denom;
    let ss: f64 = values
        .iter()
        .zip(tokens)
        .map(|(v, &m)| (v - mean) * (v - mean) * m as f64)
        .sum();
    let var = ss / denom * bessel;
    let scale = 1.0 / (var + 1e-8).sqrt();
    values.iter_mut().for_each(|v| *v = (*v - mean) * scale);
}

// Its returns are the turns' λ-returns, kept in `b` by `prepare`.
turn_estimator!(TurnGae, "turn_gae", returns = b);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{AdvantageEstimator, Workspace};
    use crate::RolloutBatch;
    use ndarray::array;

    #[test]
    fn recursion_hand_computed() {
        // Trajectory a = rows 0, 2, 3 (r = 1, 0, 2; V = 0.5, 1, 1.5); b = row 1 (r = 3, V = 1).
        // γ = 0.5, λ = 0.5: a: δ3 = 2 − 1.5 = 0.5, A3 = 0.5;
        // δ2 = 0 + 0.5·1.5 − 1 = −0.25, A2 = −0.25 + 0.25·0.5 = −0.125;
        // δ0 = 1 + 0.5·1 − 0.5 = 1, A0 = 1 + 0.25·(−0.125) = 0.96875. b: A = 3 − 1 = 2.
        let batch = RolloutBatch::from_row_keys(&["u"; 4], &["a", "b", "a", "a"], &[0.0; 4]).unwrap();
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&[1.0, 3.0, 0.0, 2.0])
            .with_turn_values(&[0.5, 1.0, 1.0, 1.5]);
        let est = TurnGae::new(TurnGaeConfig::default().with_discount(0.5).with_lam(0.5)).unwrap();
        let mut adv = [f64::NAN; 4];
        est.estimate_steps_into(&input, &mut adv, &mut Workspace::default())
            .unwrap();
        assert_eq!(adv, [0.96875, 2.0, -0.125, 0.5]);
    }

    #[test]
    fn multi_turn_rows_read_values_at_each_turns_first_token() {
        // One dialogue: turn 0 = tokens 0..2 (reward 0.5), obs, turn 1 = token 3 (reward 1).
        // V = values[0] = 0.2 and values[3] = 0.4. γ = λ = 1: A1 = 1 − 0.4 = 0.6,
        // A0 = 0.5 + 0.4 − 0.2 + 0.6 = 1.3; returns 1.5 and 1.0.
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let rewards = array![[0.0, 0.5, 0.0, 1.0]];
        let values = array![[0.2, 9.0, 9.0, 0.4]];
        let mask = array![[true, true, false, true]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_values(&values)
            .with_response_mask(&mask);
        let out = TurnGae::new(TurnGaeConfig::default())
            .unwrap()
            .estimate(&input)
            .unwrap();
        let a = &out.advantages;
        assert!((a[[0, 0]] - 1.3).abs() < 1e-15 && a[[0, 1]] == a[[0, 0]] && a[[0, 2]] == 0.0);
        assert!((a[[0, 3]] - 0.6).abs() < 1e-15);
        let r = out.returns();
        assert!((r[[0, 0]] - 1.5).abs() < 1e-15 && (r[[0, 3]] - 1.0).abs() < 1e-15);
        // turn_values on multi-turn rows: refused.
        assert!(matches!(
            TurnGae::new(TurnGaeConfig::default())
                .unwrap()
                .estimate(&input.with_turn_values(&[0.0])),
            Err(Error::ConflictingInputs { .. })
        ));
    }
}
