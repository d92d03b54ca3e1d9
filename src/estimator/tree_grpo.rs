//! `tree_grpo`: group-relative advantages over trees of rollouts that share prefixes
//! (Tree-GRPO, Ji et al., arXiv 2509.21240).

use super::turns::{turn_estimator, TurnWorkspace};
use super::{check_steps_out, EstimatorInput};
use crate::error::{check_len, Error, Range, Result};
use crate::stats::{group_means, group_spreads, GroupStats, SingletonRule};

/// Which of the authors' tree estimators `tree_grpo` computes (see [`TreeGrpoConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum TreeGrpoVariant {
    /// Inter-tree plus intra-tree advantage (`"sum"`, the authors' `tree`; default).
    #[default]
    Sum,
    /// Intra-tree advantage only (`"intra"`, the authors' `tree_inner`).
    Intra,
    /// The intra-tree normalisation of the inter-tree advantages (`"nested"`, the authors'
    /// `tree_2norm`).
    Nested,
}

/// Parameters of `tree_grpo`, with the authors' defaults ([`Default`](Self::default)).
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, TreeGrpoConfig, TreeGrpoVariant};
/// let c = TreeGrpoConfig::default().with_variant(TreeGrpoVariant::Intra);
/// assert!(EstimatorConfig::TreeGrpo(c).build().is_ok());
/// assert!(EstimatorConfig::TreeGrpo(c.with_std_eps(-1.0)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct TreeGrpoConfig {
    /// ε added to σ (the authors' 1e-6); finite, > 0.
    pub std_eps: f64,
    /// What a group (prompt or tree) of one rollout gives (default: the authors' pass-through).
    pub singleton: SingletonRule,
    /// The estimator (default [`TreeGrpoVariant::Sum`], the authors' `tree`).
    pub variant: TreeGrpoVariant,
}

impl TreeGrpoConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless `std_eps` is finite and > 0.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("std_eps", self.std_eps)
    }
}

impl Default for TreeGrpoConfig {
    /// The authors' settings: ε = 1e-6, singletons pass through, inter- plus intra-tree.
    fn default() -> Self {
        Self {
            std_eps: 1e-6,
            singleton: SingletonRule::PassThrough,
            variant: TreeGrpoVariant::Sum,
        }
    }
}

crate::setters::with_setters! {
    TreeGrpoConfig, "use beacon_rl::estimator::*;", TreeGrpoConfig::default();
    /// Sets ε added to σ (default 1e-6; > 0).
    with_std_eps(std_eps: f64) = 1e-4;
    /// Sets what a group of one rollout gives (default pass-through).
    with_singleton(singleton: SingletonRule) = SingletonRule::Zero;
    /// Sets the variant (default [`TreeGrpoVariant::Sum`]).
    with_variant(variant: TreeGrpoVariant) = TreeGrpoVariant::Nested;
}

/// `tree_grpo`: group-relative advantages over trees of rollouts that share prefixes
/// (Tree-GRPO, Ji et al., arXiv 2509.21240).
///
/// Tree-GRPO samples, for each prompt, M trees: a first rollout per tree, then new rollouts
/// that branch off a turn of an earlier one (sharing its prefix). Every complete rollout (a
/// leaf) is one trajectory of the batch, scored by its terminal reward R. The authors' trainer
/// (AMAP-ML/Tree-GRPO, `verl/trainer/ppo/ray_trainer_ts.py`, `compute_advantage`) normalises R
/// over two groups, the prompt's rollouts (all trees: *inter-tree*) and the tree's rollouts
/// (*intra-tree*), with σ unbiased and ε = [`std_eps`](TreeGrpoConfig::std_eps) (their 1e-6):
///
/// ```text
/// z_S(x)  = (x − mean_S x) / (std_S x + ε)        S a set of rollouts with |S| ≥ 2
///         = x / (1 + ε)                           |S| = 1 (the authors' μ = 0, σ = 1;
///                                                 SingletonRule::Zero gives 0)
/// sum     (the authors' `tree`, default):   A_τ = z_prompt(R)_τ + z_tree(R)_τ
/// intra   (`tree_inner`):                  A_τ = z_tree(R)_τ
/// nested  (`tree_2norm`):                  A_τ = z_tree(z_prompt(R))_τ
/// ```
///
/// Every generated token of τ gets A_τ, every other token 0; the returns equal the
/// advantages, as the authors'.
///
/// # Batch layout
/// The prompt group is the batch's group (verl's `uid`). The trees come from one column,
/// `tree_parents` ([`EstimatorInput::with_tree_parents`]), one entry per row:
/// `tree_parents[r]` is a row of the rollout that row r's rollout branched from, or −1 when
/// row r's rollout is the first of its tree. Following parents from any rollout must end at a
/// first rollout; the rollouts that end at the same one form a tree (the authors'
/// `tree_uid`), so the branches of a tree are siblings in one intra-tree group. On verl's
/// multi-turn rows a row is a rollout; on step rows a rollout's rows must all name the same
/// parent rollout. R is the sum of the rollout's turn rewards:
/// every token reward of its rows (the authors' score sums the row's `token_level_rewards`),
/// or its `step_rewards`. Refused with [`Error::InvalidTree`]: an entry below −1 or past the
/// last row, a parent in the rollout itself, a parent in another group (a tree lies within
/// one prompt), rows of one rollout naming different parent rollouts, and a cycle (parents
/// that never reach a first rollout).
///
/// # Peer behaviour reproduced, and differences
/// - The authors compute in float32; the crate in float64 (parity within float32 rounding,
///   `tests/data/tree_grpo.json`).
/// - A group of one rollout divides by float32(1 + ε) (their σ is a float32 `tensor(1.0)`),
///   the `SingletonRule::PassThrough` default; a tree of one rollout is common (a tree whose
///   branches were all pruned), and then its intra-tree term is R itself.
/// - The authors' score is the sum of the row's nonzero token rewards, masked tokens
///   included; the crate's turn reading counts the same rewards.
/// - The authors' `tree_per_token` variant (token-level statistics) is not offered; their
///   `tree_diff` rewards (TreeRL's) are a reward mode, not an estimator.
/// - The authors derive `tree_uid` from their search; the crate derives it from
///   `tree_parents` and checks it.
///
/// Tree-GRPO (Ji et al., arXiv 2509.21240), as the authors' trainer computes it
/// (AMAP-ML/Tree-GRPO, `verl/trainer/ppo/ray_trainer_ts.py`, `compute_advantage`).
///
/// Reads `tree_parents` ([`EstimatorInput::with_tree_parents`]: per row, a row of the
/// rollout it branched from, or −1 for a tree's first rollout; the rollouts that lead to the
/// same first rollout form a tree, the batch's groups are the prompts), and `step_rewards`
/// (step rows) or `token_level_rewards` and `response_mask` (verl's multi-turn rows). A
/// rollout's R is the sum of its turn rewards (every token reward of its rows). With σ
/// unbiased and ε = [`std_eps`](TreeGrpoConfig::std_eps):
///
/// ```text
/// z_S(x)  = (x − mean_S x) / (std_S x + ε)     over a set S of ≥ 2 rollouts
///         = x / float32(1 + ε)                 over one rollout (the authors' μ = 0, σ = 1)
/// sum     (default, the authors' `tree`):   A = z_prompt(R) + z_tree(R)
/// intra   (`tree_inner`):                  A = z_tree(R)
/// nested  (`tree_2norm`):                  A = z_tree(z_prompt(R))
/// ```
///
/// Every generated token of the rollout gets A, every other token 0. A `tree_parents` that
/// names no row, a rollout itself, a parent in another group, or parents that form a cycle
/// is [`Error::InvalidTree`]. The guide's turn-level chapter lists the authors' quirks.
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, TreeGrpoConfig};
/// use beacon_rl::RolloutBatch;
///
/// // One prompt, two trees: rows 0 and 1 (row 1 branched off row 0), and row 2 alone.
/// let batch = RolloutBatch::from_group_keys(&["q", "q", "q"], &[0.0; 3])?;
/// let rewards = [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]];
/// let mask = [[true, true], [true, true], [true, false]];
/// let input = EstimatorInput::new(&batch)
///     .with_token_level_rewards(&rewards)
///     .with_response_mask(&mask)
///     .with_tree_parents(&[-1, 0, -1]);
/// let out = EstimatorConfig::TreeGrpo(TreeGrpoConfig::default()).build()?.estimate(&input)?;
/// // R = 1, 0, 1: prompt μ = 2/3, σ = √(1/3); tree {0, 1}: μ = ½, σ = √½; tree {2} alone.
/// let (sp, st, eps) = ((1.0f64 / 3.0).sqrt(), 0.5f64.sqrt(), 1e-6);
/// let a0 = (1.0 / 3.0) / (sp + eps) + 0.5 / (st + eps);
/// let a2 = (1.0 / 3.0) / (sp + eps) + 1.0 / f64::from(1.0f32 + 1e-6);
/// assert!((out.advantages[[0, 1]] - a0).abs() < 1e-12);
/// assert!((out.advantages[[2, 0]] - a2).abs() < 1e-12);
/// assert_eq!(out.advantages[[2, 1]], 0.0); // not generated
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TreeGrpo {
    config: TreeGrpoConfig,
}

impl TreeGrpo {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, TreeGrpoConfig};
    /// assert!(EstimatorConfig::TreeGrpo(TreeGrpoConfig::default().with_std_eps(0.0)).build().is_err());
    /// ```
    pub(crate) fn new(config: TreeGrpoConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// Every turn's advantage into `ws.values`, after the trees were read into `ws.tree`.
    fn turn_values(&self, ws: &mut TurnWorkspace) -> Result<()> {
        let TurnWorkspace {
            turns: t,
            a: score,
            b: inter,
            values,
            tree,
            group_stats,
            tree_stats,
            ..
        } = ws;
        let trajs = t.num_trajectories();
        score.clear();
        score.extend((0..trajs).map(|j| t.trajectory(j).iter().map(|&k| t.reward[k]).sum::<f64>()));
        crate::error::check_finite("rollout rewards (overflow)", score)?;
        let c = &self.config;
        let z = |x: f64, s: &GroupStats| match (s.count, c.singleton) {
            (1, SingletonRule::PassThrough) => x / f64::from(1.0f32 + c.std_eps as f32),
            (1, SingletonRule::Zero) => 0.0,
            _ => (x - s.mean) / (s.std + c.std_eps),
        };
        let stats = |v: &[f64], labels: &[usize], n: usize, out: &mut Vec<GroupStats>| {
            group_means(v, labels, n, out);
            group_spreads(v, labels, out);
        };
        inter.clear();
        if c.variant != TreeGrpoVariant::Intra {
            stats(score, &t.traj_group, t.num_groups, group_stats);
            inter.extend((0..trajs).map(|j| z(score[j], &group_stats[t.traj_group[j]])));
        }
        // The values the intra-tree groups normalise: R, or the inter-tree advantages.
        let within: &[f64] = if c.variant == TreeGrpoVariant::Nested {
            inter
        } else {
            score
        };
        stats(within, tree, trajs, tree_stats);
        values.clear();
        values.resize(t.len(), 0.0);
        for j in 0..trajs {
            let intra = z(within[j], &tree_stats[tree[j]]);
            let a = match c.variant {
                TreeGrpoVariant::Sum => inter[j] + intra,
                TreeGrpoVariant::Intra | TreeGrpoVariant::Nested => intra,
            };
            for &k in t.trajectory(j) {
                values[k] = a;
            }
        }
        crate::error::check_finite("turn advantages", values)
    }

    fn prepare(&self, input: &EstimatorInput<'_>, ws: &mut TurnWorkspace) -> Result<()> {
        // The column's presence and length first: a refused input allocates nothing.
        tree_column(input)?;
        ws.turns.read_tokens(input, input.output_dim())?;
        read_trees(input, ws)?;
        self.turn_values(ws)
    }

    /// `estimate_steps_into`: one value per step row.
    fn steps(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut TurnWorkspace,
    ) -> Result<()> {
        check_steps_out(input, advantages)?;
        ws.turns.read_steps(input)?;
        read_trees(input, ws)?;
        self.turn_values(ws)?;
        advantages.copy_from_slice(&ws.values);
        Ok(())
    }
}

const DONE: usize = usize::MAX;

/// `tree_parents`, present and one per row.
fn tree_column<'a>(input: &EstimatorInput<'a>) -> Result<&'a [i64]> {
    let parents = input.tree_parents.ok_or(Error::MissingInput("tree_parents"))?;
    check_len("tree_parents", input.batch.num_steps(), parents.len())?;
    Ok(parents)
}

/// Reads `tree_parents` into `ws.tree`: each trajectory's tree, named by the trajectory of
/// its first rollout (see the module's batch layout). Needs `ws.turns` read (the groups).
fn read_trees(input: &EstimatorInput<'_>, ws: &mut TurnWorkspace) -> Result<()> {
    let batch = input.batch;
    let rows = batch.num_steps();
    let parents = tree_column(input)?;
    let trajs = batch.num_trajectories();
    let TurnWorkspace {
        turns,
        row_traj,
        parent,
        tree: root,
        n: stamp,
        ..
    } = ws;
    let group = &turns.traj_group;
    row_traj.clear();
    row_traj.resize(rows, 0);
    for j in 0..trajs {
        for &r in batch.trajectory_rows(j) {
            row_traj[r] = j;
        }
    }
    let bad = |row: usize, problem: &'static str| Error::InvalidTree {
        row,
        parent: parents[row],
        problem,
    };
    // The parent trajectory of each trajectory (DONE: a first rollout).
    parent.clear();
    parent.resize(trajs, DONE);
    for j in 0..trajs {
        for (i, &r) in batch.trajectory_rows(j).iter().enumerate() {
            let p = match parents[r] {
                -1 => DONE,
                p if p < -1 || p as u64 >= rows as u64 => {
                    return Err(bad(r, "names no row of the batch (-1 or a row index)"))
                }
                p => row_traj[p as usize],
            };
            if i > 0 && p != parent[j] {
                return Err(bad(r, "the rows of one rollout name different parent rollouts"));
            }
            if p == j {
                return Err(bad(r, "a rollout cannot branch off itself"));
            }
            if p != DONE && group[p] != group[j] {
                return Err(bad(
                    r,
                    "the parent is in another group (a tree lies within one prompt)",
                ));
            }
            parent[j] = p;
        }
    }
    if let Some(k) = roots(parent, stamp, root) {
        return Err(bad(
            batch.trajectory_rows(k)[0],
            "the parents form a cycle (no first rollout is reached)",
        ));
    }
    Ok(())
}

/// Each trajectory's root (`root[j]`, the first rollout its parents lead to), or the
/// trajectory at which a walk met itself (a cycle). Each walk is stamped with its start;
/// meeting the walk's own stamp is a cycle. A walk stops at the first trajectory whose root
/// is known, and then every trajectory it passed gets that root, so each is passed once:
/// linear.
fn roots(parent: &[usize], stamp: &mut Vec<usize>, root: &mut Vec<usize>) -> Option<usize> {
    let n = parent.len();
    stamp.clear();
    stamp.resize(n, 0);
    root.clear();
    root.resize(n, DONE);
    for j in 0..n {
        let mut k = j;
        let top = loop {
            if root[k] != DONE {
                break root[k];
            }
            if stamp[k] == j + 1 {
                return Some(k);
            }
            stamp[k] = j + 1;
            if parent[k] == DONE {
                break k;
            }
            k = parent[k];
        };
        let mut k = j;
        while root[k] == DONE {
            root[k] = top;
            if parent[k] == DONE {
                break;
            }
            k = parent[k];
        }
    }
    None
}

turn_estimator!(TreeGrpo, "tree_grpo");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{AdvantageEstimator, Workspace};
    use crate::RolloutBatch;

    /// Step rows: `groups[r]`, `trajs[r]` keys, `steps[r]` rewards, `parents[r]`.
    fn run(
        cfg: TreeGrpoConfig,
        groups: &[u32],
        trajs: &[u32],
        steps: &[f64],
        parents: &[i64],
    ) -> Result<Vec<f64>> {
        let batch = RolloutBatch::from_row_keys(groups, trajs, &vec![0.0; steps.len()])?;
        let mut out = vec![f64::NAN; steps.len()];
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(steps)
            .with_tree_parents(parents);
        TreeGrpo::new(cfg)?.estimate_steps_into(&input, &mut out, &mut Workspace::default())?;
        Ok(out)
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    /// One prompt, four one-turn rollouts: tree A = rows 0, 1 (off 0), 2 (off 1); tree B =
    /// row 3 alone. R = 1, 0, 0, 1.
    const PARENTS: [i64; 4] = [-1, 0, 1, -1];
    const R: [f64; 4] = [1.0, 0.0, 0.0, 1.0];

    fn authors(variant: TreeGrpoVariant) -> Vec<f64> {
        run(
            TreeGrpoConfig::default().with_variant(variant),
            &[0; 4],
            &[0, 1, 2, 3],
            &R,
            &PARENTS,
        )
        .unwrap()
    }

    #[test]
    fn sum_hand_computed() {
        // Prompt: μ = ½, σ = √(1/3) (Σ d² = 4 · ¼ = 1, / 3). Tree A {1, 0, 0}: μ = 1/3,
        // Σ d² = 4/9 + 1/9 + 1/9 = 2/3, σ = √(1/3) again. Tree B: one rollout, R / f32(1 + ε).
        let (s, e) = ((1.0f64 / 3.0).sqrt(), 1e-6);
        let lone = 1.0 / f64::from(1.0f32 + 1e-6f32);
        let want = [
            0.5 / (s + e) + (2.0 / 3.0) / (s + e),
            -0.5 / (s + e) - (1.0 / 3.0) / (s + e),
            -0.5 / (s + e) - (1.0 / 3.0) / (s + e),
            0.5 / (s + e) + lone,
        ];
        close(&authors(TreeGrpoVariant::Sum), &want);
    }

    #[test]
    fn intra_and_nested_hand_computed() {
        let (s, e) = ((1.0f64 / 3.0).sqrt(), 1e-6);
        let lone = 1.0 / f64::from(1.0f32 + 1e-6f32);
        close(
            &authors(TreeGrpoVariant::Intra),
            &[
                (2.0 / 3.0) / (s + e),
                (-1.0 / 3.0) / (s + e),
                (-1.0 / 3.0) / (s + e),
                lone,
            ],
        );
        // Inter-tree advantages u, −u, −u, u with u = ½ / (σ + ε). Tree A over {u, −u, −u}:
        // μ = −u/3, Σ d² = 16u²/9 + 4u²/9 + 4u²/9 = 8u²/3, σ = 2u/√3.
        let u = 0.5 / (s + e);
        let sa = 2.0 * u / 3f64.sqrt();
        close(
            &authors(TreeGrpoVariant::Nested),
            &[
                (4.0 * u / 3.0) / (sa + e),
                (-2.0 * u / 3.0) / (sa + e),
                (-2.0 * u / 3.0) / (sa + e),
                u * lone,
            ],
        );
    }

    #[test]
    fn zero_singletons_and_multi_row_rollouts() {
        let (s, e) = ((1.0f64 / 3.0).sqrt(), 1e-6);
        let cfg = TreeGrpoConfig::default().with_singleton(SingletonRule::Zero);
        let got = run(cfg, &[0; 4], &[0, 1, 2, 3], &R, &PARENTS).unwrap();
        assert_eq!(got[3], 0.5 / (s + e));
        // Rollout 0 on rows 0 and 2 (turn rewards 0.25 + 0.75 = 1), rollout 1 on rows 1 and 3
        // branched off rollout 0 (both rows name a row of it): R = 1, 0. Prompt and tree
        // are the same pair: z = ±½ / (√½ + ε) twice.
        let got = run(
            TreeGrpoConfig::default(),
            &[0; 4],
            &[0, 1, 0, 1],
            &[0.25, 0.0, 0.75, 0.0],
            &[-1, 2, -1, 0],
        )
        .unwrap();
        let a = 2.0 * 0.5 / (0.5f64.sqrt() + e);
        close(&got, &[a, -a, a, -a]);
    }

    #[test]
    fn bad_layouts_are_typed_errors() {
        let cfg = TreeGrpoConfig::default();
        let err = |groups: &[u32], trajs: &[u32], parents: &[i64]| {
            run(cfg, groups, trajs, &vec![0.0; parents.len()], parents).unwrap_err()
        };
        let tree = |e: Error| match e {
            Error::InvalidTree { row, parent, problem } => (row, parent, problem),
            other => panic!("{other}"),
        };
        assert_eq!(tree(err(&[0; 3], &[0, 1, 2], &[-1, 3, 0])).0, 1); // past the last row
        assert_eq!(tree(err(&[0; 3], &[0, 1, 2], &[-1, -2, 0])).1, -2); // below −1
        assert_eq!(tree(err(&[0; 2], &[0, 1], &[-1, 1])).0, 1); // itself
        let (row, _, p) = tree(err(&[0, 1], &[0, 1], &[-1, 0]));
        assert!(row == 1 && p.contains("another group"), "{p}");
        let (row, _, p) = tree(err(&[0; 3], &[0, 1, 2], &[1, 2, 0]));
        assert!(row == 0 && p.contains("cycle"), "{p}");
        // A cycle above a rollout that is not on it: the walk from row 0 finds it.
        let (_, _, p) = tree(err(&[0; 3], &[0, 1, 2], &[1, 2, 1]));
        assert!(p.contains("cycle"), "{p}");
        let (row, _, p) = tree(err(&[0; 3], &[0, 1, 1], &[-1, 0, -1]));
        assert!(row == 2 && p.contains("different parent"), "{p}");
        assert_eq!(
            run(cfg, &[0], &[0], &[0.0], &[]).unwrap_err(),
            Error::LengthMismatch {
                what: "tree_parents",
                expected: 1,
                actual: 0
            }
        );
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let input = EstimatorInput::new(&batch).with_step_rewards(&[1.0]);
        assert_eq!(
            TreeGrpo::new(cfg)
                .unwrap()
                .estimate_steps_into(&input, &mut [0.0], &mut Workspace::default()),
            Err(Error::MissingInput("tree_parents"))
        );
    }

    #[test]
    fn deep_chains_are_linear_and_share_one_root() {
        // 10,000 rollouts each branched off the previous: one tree, walked once.
        let n = 10_000;
        let parents: Vec<i64> = (0..n as i64).map(|r| r - 1).collect();
        let trajs: Vec<u32> = (0..n as u32).collect();
        let steps: Vec<f64> = (0..n).map(|r| (r % 2) as f64).collect();
        let got = run(
            TreeGrpoConfig::default().with_variant(TreeGrpoVariant::Intra),
            &vec![0; n],
            &trajs,
            &steps,
            &parents,
        )
        .unwrap();
        // Prompt = tree: half 1, half 0, so ±½ / (σ + ε) with σ² = n/4 / (n − 1).
        let s = (n as f64 / 4.0 / (n - 1) as f64).sqrt();
        assert!((got[1] - 0.5 / (s + 1e-6)).abs() < 1e-12 && (got[0] + 0.5 / (s + 1e-6)).abs() < 1e-12);
    }
}
