//! Building a [`RolloutBatch`] from per-row group and trajectory keys ([`BatchBuilder`]):
//! keys interned by first appearance in open-addressing tables kept across builds, rows
//! counted into CSR offsets, and the batch rebuilt in place, so a trainer's per-iteration
//! build allocates nothing after warm-up.

use std::hash::Hash;

use super::{RolloutBatch, StepRows};
use crate::error::{check_finite, check_len, Error, Result};
use crate::hash::KeyHasher;

/// Reusable scratch for building [`RolloutBatch`]es from per-row keys, for a trainer that builds
/// one batch per iteration.
///
/// [`BatchBuilder::rebuild_from_row_keys`] rebuilds a batch in place: after the first batches
/// (once buffers reached the batch size) it allocates nothing. Keys are interned in
/// open-addressing tables of ids kept here (keys are compared through the first row that
/// carried them, so the tables hold no borrowed keys; a table is sized for the distinct keys,
/// not the rows), and a row whose key equals the previous row's is not hashed at all: for
/// trajectory-major rows (verl-agent's layout) only the first row of each trajectory and of
/// each group is hashed. Any `Hash + Eq` key works: `&str`, `String`, or the `u64` ids a
/// trainer holds.
///
/// Row keys and group keys ([`BatchBuilder::rebuild_from_group_keys`], where each row is its
/// own trajectory, numbered by its row, with no trajectory table) go through one builder.
/// While interning, it notes whether every row's group id and trajectory id is the previous
/// row's or a new one. When so (each trajectory's rows adjacent, each group's trajectories
/// adjacent: verl-agent's trajectory-major rows, verl's `uid` column with a prompt's responses
/// adjacent), the rows are already in step order and the batch is written in place, with no
/// sort; otherwise trajectories are ordered by group and rows scattered into step order
/// (counting sorts, stable). Both give the batch [`RolloutBatch::from_row_keys`] describes.
///
/// ```
/// use beacon_rl::BatchBuilder;
/// use beacon_rl::RolloutBatch;
///
/// let mut builder = BatchBuilder::default();
/// let mut batch = RolloutBatch::from_row_keys(&[7u64, 7], &[1u64, 2], &[1.0, 0.0])?;
/// for iteration in 0..3u64 {
///     // New rollouts each iteration: integer uid / traj_uid columns, terminal rewards.
///     let uid = [iteration, iteration, iteration, iteration];
///     let traj = [10, 10, 11, 11];
///     let reward = [1.0, 1.0, 0.0, 0.0];
///     builder.rebuild_from_row_keys(&mut batch, &uid, &traj, &reward)?;
///     assert_eq!(batch, RolloutBatch::from_row_keys(&uid, &traj, &reward)?);
///     assert_eq!(batch.try_step_rows()?, &[0, 1, 2, 3]); // trajectory-major rows: no sort
/// }
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    groups: KeyTable,
    /// Row-key builds only (group-key builds number trajectories by row).
    trajs: KeyTable,
    /// Each trajectory's group. Group-key builds fill it (each row's group) only when the rows
    /// need sorting.
    traj_group: Vec<usize>,
    /// Row-key builds: each trajectory's reward and step count, each row's trajectory.
    traj_reward: Vec<f64>,
    traj_len: Vec<usize>,
    row_traj: Vec<usize>,
    slot_of_traj: Vec<usize>,
    cursor: Vec<usize>,
    /// The batch being built; swapped with the caller's on success.
    spare: RolloutBatch,
}

impl Default for BatchBuilder {
    /// An empty builder (its tables grow on the first build).
    fn default() -> Self {
        Self {
            groups: KeyTable::default(),
            trajs: KeyTable::default(),
            traj_group: Vec::new(),
            traj_reward: Vec::new(),
            traj_len: Vec::new(),
            row_traj: Vec::new(),
            slot_of_traj: Vec::new(),
            cursor: Vec::new(),
            // Never seen by a caller before a successful build fills it.
            spare: RolloutBatch {
                group_offsets: Vec::new(),
                traj_offsets: Vec::new(),
                step_rows: StepRows::default(),
                identity_rows: true,
                terminal_rewards: Vec::new(),
            },
        }
    }
}

impl BatchBuilder {
    /// Rebuilds `batch` in place from new per-row keys, reusing its buffers and the builder's:
    /// no allocation once both have grown to the batch size. On error `batch` is unchanged.
    ///
    /// # Errors
    /// As [`RolloutBatch::from_row_keys`].
    ///
    /// ```
    /// use beacon_rl::{BatchBuilder, RolloutBatch};
    /// let mut builder = BatchBuilder::default();
    /// let mut batch = RolloutBatch::from_row_keys(&["q"], &["a"], &[1.0])?;
    /// builder.rebuild_from_row_keys(&mut batch, &["p", "p", "q"], &["x", "y", "x"], &[0.0, 1.0, 0.0]).unwrap_err();
    /// assert_eq!(batch.num_steps(), 1); // the failed rebuild left it as it was
    /// builder.rebuild_from_row_keys(&mut batch, &["p", "p"], &["x", "y"], &[0.0, 1.0])?;
    /// assert_eq!(batch.terminal_rewards(), &[0.0, 1.0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn rebuild_from_row_keys<G, T>(
        &mut self,
        batch: &mut RolloutBatch,
        group_keys: &[G],
        traj_keys: &[T],
        terminal_rewards: &[f64],
    ) -> Result<()>
    where
        G: Hash + Eq,
        T: Hash + Eq,
    {
        self.build(group_keys, TrajKeys(traj_keys), terminal_rewards)?;
        std::mem::swap(&mut self.spare, batch);
        Ok(())
    }

    /// Rebuilds `batch` in place with every row its own one-step trajectory, as
    /// [`RolloutBatch::from_group_keys`]: no allocation once both have grown to the batch size.
    /// On error `batch` is unchanged.
    ///
    /// A row's trajectory is numbered by its row (nothing is hashed for it), and a group key is
    /// hashed only where it differs from the previous row's: one lookup per run of equal
    /// adjacent keys. When each group's rows form one contiguous run (no key recurs after a
    /// different one), the rows are already in step order and the batch is written without
    /// sorting them; otherwise rows are ordered by group (stably). Both give the batch
    /// [`RolloutBatch::from_group_keys`] describes.
    ///
    /// # Errors
    /// As [`RolloutBatch::from_row_keys`] (a trajectory cannot span groups here, nor disagree
    /// on its reward).
    ///
    /// ```
    /// use beacon_rl::{BatchBuilder, RolloutBatch};
    /// let mut builder = BatchBuilder::default();
    /// let mut batch = RolloutBatch::from_row_keys(&[0u64], &[0u64], &[0.0])?;
    /// // Group 3 recurs after group 4: its rows are gathered.
    /// builder.rebuild_from_group_keys(&mut batch, &[3u64, 4, 3], &[1.0, 0.0, 0.0])?;
    /// assert_eq!(batch.try_step_rows()?, &[0, 2, 1]);
    /// // verl's layout, a prompt's rows adjacent: group offsets at the runs, rows in order.
    /// builder.rebuild_from_group_keys(&mut batch, &["p", "p", "q", "r", "r"], &[1.0, 0.0, 1.0, 0.5, 0.0])?;
    /// assert_eq!((batch.group_trajectories(0), batch.group_trajectories(2)), (0..2, 3..5));
    /// assert_eq!(batch.try_step_rows()?, &[0, 1, 2, 3, 4]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn rebuild_from_group_keys<G: Hash + Eq>(
        &mut self,
        batch: &mut RolloutBatch,
        group_keys: &[G],
        rewards: &[f64],
    ) -> Result<()> {
        self.build(group_keys, RowPerTraj, rewards)?;
        std::mem::swap(&mut self.spare, batch);
        Ok(())
    }

    /// [`RolloutBatch::from_row_keys`]: a fresh builder's batch, moved out (no copy).
    pub(super) fn into_row_key_batch<G: Hash + Eq, T: Hash + Eq>(
        mut self,
        group_keys: &[G],
        traj_keys: &[T],
        terminal_rewards: &[f64],
    ) -> Result<RolloutBatch> {
        self.build(group_keys, TrajKeys(traj_keys), terminal_rewards)?;
        Ok(self.spare)
    }

    /// [`RolloutBatch::from_group_keys`]: a fresh builder's batch, moved out (no copy).
    pub(super) fn into_group_key_batch<G: Hash + Eq>(
        mut self,
        group_keys: &[G],
        rewards: &[f64],
    ) -> Result<RolloutBatch> {
        self.build(group_keys, RowPerTraj, rewards)?;
        Ok(self.spare)
    }

    /// The checks every key constructor makes first, in this order (their errors are the
    /// same built or rebuilt, with or without trajectory keys; `traj_keys` is checked before).
    fn check_rows(rows: usize, terminal_rewards: &[f64]) -> Result<()> {
        check_len("terminal_rewards", rows, terminal_rewards.len())?;
        if rows == 0 {
            return Err(Error::EmptyBatch);
        }
        check_finite("terminal_rewards", terminal_rewards)
    }

    /// The one builder behind every key constructor, into `self.spare`.
    ///
    /// Groups and trajectories are numbered by first appearance, so along the rows an id is
    /// the previous row's, a new one (above every earlier id), or a recurring one (below the
    /// previous). `in_order` records that no id recurred. Then each trajectory's rows are
    /// adjacent and in row order, and trajectory t's group id never decreases with t: the
    /// layout is the identity (slot of trajectory t = t, step s = row s), written directly.
    /// Otherwise trajectories are ordered by group and rows scattered into step order.
    fn build<G: Hash + Eq, S: TrajSource>(
        &mut self,
        group_keys: &[G],
        trajs: S,
        terminal_rewards: &[f64],
    ) -> Result<()> {
        let rows = group_keys.len();
        trajs.check(rows)?;
        Self::check_rows(rows, terminal_rewards)?;
        if self.intern(group_keys, &trajs, terminal_rewards)? {
            self.write_in_order::<S>(rows, terminal_rewards);
        } else {
            self.write_sorted::<S>(rows, terminal_rewards);
        }
        Ok(())
    }

    /// Numbers groups and trajectories by first appearance (`groups`, `trajs`, and per
    /// trajectory its group, reward and length), checking that a trajectory stays in one group
    /// with one reward. True when no id recurred (the identity layout).
    #[inline]
    fn intern<G: Hash + Eq, S: TrajSource>(
        &mut self,
        group_keys: &[G],
        trajs: &S,
        terminal_rewards: &[f64],
    ) -> Result<bool> {
        let rows = group_keys.len();
        self.groups.reset(rows);
        if !S::PER_ROW {
            self.trajs.reset(rows);
            self.traj_group.clear();
            self.traj_reward.clear();
            self.traj_len.clear();
            self.row_traj.clear();
        }
        let mut in_order = true;
        let (mut g, mut t) = (0, 0);
        for row in 0..rows {
            // A row with the previous row's key needs no lookup.
            if row == 0 || group_keys[row] != group_keys[row - 1] {
                if S::PER_ROW && !in_order {
                    // Rows since the last key change are group g's.
                    self.traj_group.resize(row, g);
                }
                let id = self.groups.id(row, |r| &group_keys[r]);
                if id < g {
                    if S::PER_ROW && in_order {
                        self.groups.runs_into(&mut self.traj_group, row);
                    }
                    in_order = false;
                }
                g = id;
            }
            if S::PER_ROW {
                // Trajectory = row: nothing to intern or check. Its group (`traj_group`, for
                // the sort) is recorded only once the rows are known to need one, and then a
                // run at a time.
                continue;
            }
            if row == 0 || trajs.key(row) != trajs.key(row - 1) {
                let id = self.trajs.id(row, |r| trajs.key(r));
                in_order &= id >= t;
                t = id;
            }
            if t == self.traj_group.len() {
                self.traj_group.push(g);
                self.traj_reward.push(terminal_rewards[row]);
                self.traj_len.push(0);
            } else if self.traj_group[t] != g {
                return Err(Error::TrajectoryAcrossGroups { row });
            } else if self.traj_reward[t] != terminal_rewards[row] {
                return Err(Error::InconsistentTerminalReward {
                    row,
                    expected: self.traj_reward[t],
                    value: terminal_rewards[row],
                });
            }
            self.traj_len[t] += 1;
            self.row_traj.push(t);
        }

        if S::PER_ROW && !in_order {
            self.traj_group.resize(rows, g);
        }
        Ok(in_order)
    }

    /// The identity layout (no id recurred): offsets from each group's and trajectory's first
    /// row, rewards as interned, step s = row s.
    #[inline]
    fn write_in_order<S: TrajSource>(&mut self, rows: usize, terminal_rewards: &[f64]) {
        let num_traj = if S::PER_ROW { rows } else { self.traj_group.len() };
        let b = &mut self.spare;
        // Group g starts at its first row's trajectory; trajectory t at its first row.
        b.group_offsets.clear();
        if S::PER_ROW {
            b.group_offsets.extend_from_slice(self.groups.first_rows());
        } else {
            let first = self.groups.first_rows().iter();
            b.group_offsets.extend(first.map(|&r| self.row_traj[r]));
        }
        b.group_offsets.push(num_traj);
        b.traj_offsets.clear();
        if S::PER_ROW {
            b.traj_offsets.extend(0..rows);
        } else {
            b.traj_offsets.extend_from_slice(self.trajs.first_rows());
        }
        b.traj_offsets.push(rows);
        b.terminal_rewards.clear();
        b.terminal_rewards.extend_from_slice(if S::PER_ROW {
            terminal_rewards
        } else {
            &self.traj_reward
        });
        // Written, not a lazy identity: that would drop the index's allocation, and the
        // next rebuild that sorts would allocate it again.
        b.step_rows.cleared().extend(0..rows);
        b.identity_rows = true;
    }

    /// The general layout: trajectories ordered by group (stable), rows scattered into
    /// trajectory-major step order.
    #[inline]
    fn write_sorted<S: TrajSource>(&mut self, rows: usize, terminal_rewards: &[f64]) {
        let num_groups = self.groups.len();
        let num_traj = if S::PER_ROW { rows } else { self.traj_group.len() };
        let b = &mut self.spare;
        // Order trajectories by group (stable: first appearance within the group).
        fill(&mut b.group_offsets, num_groups + 1, 0);
        for &g in &self.traj_group {
            b.group_offsets[g + 1] += 1;
        }
        prefix_sum(&mut b.group_offsets);
        self.cursor.clear();
        self.cursor.extend_from_slice(&b.group_offsets[..num_groups]);
        self.slot_of_traj.clear();
        for &g in &self.traj_group {
            self.slot_of_traj.push(self.cursor[g]);
            self.cursor[g] += 1;
        }
        fill(&mut b.traj_offsets, num_traj + 1, 0);
        fill(&mut b.terminal_rewards, num_traj, 0.0);
        for (t, &slot) in self.slot_of_traj.iter().enumerate() {
            let (len, reward) = if S::PER_ROW {
                (1, terminal_rewards[t])
            } else {
                (self.traj_len[t], self.traj_reward[t])
            };
            b.traj_offsets[slot + 1] = len;
            b.terminal_rewards[slot] = reward;
        }
        prefix_sum(&mut b.traj_offsets);

        // Scatter rows into trajectory-major step order (`cursor` = next step of each traj).
        self.cursor.clear();
        self.cursor
            .extend(self.slot_of_traj.iter().map(|&s| b.traj_offsets[s]));
        // Overwritten: a lazy identity index of an earlier batch is not built first.
        fill(b.step_rows.cleared(), rows, 0);
        for row in 0..rows {
            let t = if S::PER_ROW { row } else { self.row_traj[row] };
            b.step_rows[self.cursor[t]] = row;
            self.cursor[t] += 1;
        }
        // Never the identity here: were it, rows would run through the slots in order, each
        // trajectory's rows adjacent, so first-appearance ids would equal slot ranks (groups
        // in slot order too): no id would recur, and `in_order` would have held.
        debug_assert!(b.step_rows.iter().enumerate().any(|(s, &r)| s != r));
        b.identity_rows = false;
    }
}

/// Where a build's trajectory ids come from. Monomorphised, so the group-key build's row
/// loop carries no test of the mode.
trait TrajSource {
    /// Every row is its own one-step trajectory, numbered by its row (group-key builds): no
    /// key is read, no table kept.
    const PER_ROW: bool;
    type Key: Hash + Eq;
    /// The trajectory-key column's length check (before the common checks: error order).
    fn check(&self, rows: usize) -> Result<()>;
    /// Row `row`'s trajectory key (row-key builds).
    fn key(&self, row: usize) -> Self::Key;
}

/// Row-key builds: the caller's `traj_keys`.
struct TrajKeys<'a, T>(&'a [T]);

impl<'a, T: Hash + Eq> TrajSource for TrajKeys<'a, T> {
    const PER_ROW: bool = false;
    type Key = &'a T;
    fn check(&self, rows: usize) -> Result<()> {
        check_len("traj_keys", rows, self.0.len())
    }
    fn key(&self, row: usize) -> &'a T {
        &self.0[row]
    }
}

/// Group-key builds.
struct RowPerTraj;

impl TrajSource for RowPerTraj {
    const PER_ROW: bool = true;
    type Key = ();
    fn check(&self, _rows: usize) -> Result<()> {
        Ok(())
    }
    fn key(&self, _row: usize) {}
}

/// Marks an empty table slot.
const NIL: usize = usize::MAX;

/// log2 of the table size for `n` keys: a power of two ≥ 4n, at least 8 slots. At load ≤ 1/4 a
/// lookup of a present key probes about 1.2 slots (1.5 at 1/2).
fn table_bits(n: usize) -> u32 {
    (4 * n).next_power_of_two().max(8).trailing_zeros()
}

fn fill<T: Copy>(v: &mut Vec<T>, len: usize, value: T) {
    v.clear();
    v.resize(len, value);
}

/// The distinct keys of a build's rows, numbered by first appearance, in an open-addressing
/// table of ids (`first_row[id]` is the row that introduced key `id`, through which keys are
/// compared: no borrowed key is kept). The table doubles when more than a quarter full, and a
/// build starts at the size the previous one needed (at most its own row count's): it costs
/// the distinct keys, not the rows (a group-key build of 3,840 rows in 16 groups clears 64
/// slots, not 2¹³), and rebuilds of one shape never grow it. Keys are hashed with this
/// table's own random key ([`KeyHasher`]), so keys chosen to collide under a known hash do
/// not make interning quadratic; ids do not depend on it.
#[derive(Debug, Clone, Default)]
struct KeyTable {
    /// `NIL` or an id; a power of two ≥ 4 × ids.
    slots: Vec<usize>,
    first_row: Vec<usize>,
    hasher: KeyHasher,
    /// Slots inspected by lookups and inserts since the table was made (tests bound it).
    #[cfg(test)]
    probes: usize,
}

impl KeyTable {
    fn reset(&mut self, rows: usize) {
        let bits = table_bits(self.first_row.len().min(rows));
        self.first_row.clear();
        fill(&mut self.slots, 1 << bits, NIL);
    }

    fn len(&self) -> usize {
        self.first_row.len()
    }

    fn first_rows(&self) -> &[usize] {
        &self.first_row
    }

    /// Writes the id of each of the first `end` rows into `ids`, for rows whose ids never
    /// decreased so far: key `id`'s rows are then the run from its first row to the next key's.
    fn runs_into(&self, ids: &mut Vec<usize>, end: usize) {
        ids.clear();
        for (id, &next) in self.first_row.iter().enumerate().skip(1) {
            ids.resize(next, id - 1);
        }
        ids.resize(end, self.first_row.len() - 1);
    }

    /// The slot where a probe for `key` starts.
    fn home<K: Hash>(&self, key: &K) -> usize {
        (self.hasher.hash(key) >> (64 - self.slots.len().trailing_zeros())) as usize
    }

    /// The id of row `row`'s key `key(row)`, a new one if the key was not seen.
    fn id<K, F>(&mut self, row: usize, key: F) -> usize
    where
        K: Hash + Eq,
        F: Fn(usize) -> K,
    {
        let k = key(row);
        let mask = self.slots.len() - 1;
        let mut slot = self.home(&k);
        loop {
            #[cfg(test)]
            {
                self.probes += 1;
            }
            match self.slots[slot] {
                NIL => break,
                id if key(self.first_row[id]) == k => return id,
                _ => slot = (slot + 1) & mask,
            }
        }
        let id = self.first_row.len();
        self.first_row.push(row);
        if 4 * self.first_row.len() > self.slots.len() {
            self.grow(key);
        } else {
            self.slots[slot] = id;
        }
        id
    }

    /// Doubles the table and re-inserts every id (the new one included).
    fn grow<K, F>(&mut self, key: F)
    where
        K: Hash,
        F: Fn(usize) -> K,
    {
        let len = 2 * self.slots.len();
        fill(&mut self.slots, len, NIL);
        let mask = self.slots.len() - 1;
        for (id, &row) in self.first_row.iter().enumerate() {
            let mut slot = self.home(&key(row));
            while self.slots[slot] != NIL {
                slot = (slot + 1) & mask;
                #[cfg(test)]
                {
                    self.probes += 1;
                }
            }
            self.slots[slot] = id;
        }
    }
}

fn prefix_sum(v: &mut [usize]) {
    for i in 1..v.len() {
        v[i] += v[i - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys that an unkeyed multiplicative hash sends to one slot: the rustc "Fx" hash of a
    /// `u64` is k · 0x517cc1b727220a95 mod 2⁶⁴, so key i · (that constant)⁻¹ hashes to i, and
    /// every small i has the same high bits (the table index).
    fn fx_colliding_keys(n: u64) -> Vec<u64> {
        const FX: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut inverse = FX;
        for _ in 0..6 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(FX.wrapping_mul(inverse)));
        }
        assert_eq!(inverse.wrapping_mul(FX), 1);
        (1..=n).map(|i| i.wrapping_mul(inverse)).collect()
    }

    #[test]
    fn crafted_keys_probe_as_few_slots_as_random_ones() {
        // 4,000 distinct group keys: at load ≤ 1/4 interning inspects ~1.2 slots a key, plus
        // the re-inserts of each doubling. Under the unkeyed hash every key probed the whole
        // run before it: n²/2 = 8 million slots.
        let n = 4_000;
        let rewards = vec![0.0; n as usize];
        for keys in [fx_colliding_keys(n), (0..n).map(|i| i << 32).collect()] {
            let mut builder = BatchBuilder::default();
            let mut batch = RolloutBatch::from_group_keys(&[0u64], &[0.0]).unwrap();
            builder
                .rebuild_from_group_keys(&mut batch, &keys, &rewards)
                .unwrap();
            assert_eq!(batch.num_groups(), n as usize);
            let probes = builder.groups.probes;
            assert!(probes <= 4 * n as usize, "{probes} slots probed for {n} keys");
        }
    }

    #[test]
    fn builders_hash_keys_their_own_way_and_build_the_same_batch() {
        let (a, b) = (BatchBuilder::default(), BatchBuilder::default());
        let keys = fx_colliding_keys(64);
        let same = keys
            .iter()
            .filter(|k| a.groups.hasher.hash(k) == b.groups.hasher.hash(k))
            .count();
        assert!(same <= 1, "{same} of 64 keys hash alike in two builders");
        // Ids (and so the batch) follow first appearance, not the hash.
        let rows: Vec<u64> = (0..300).map(|i| keys[(299 - i) % keys.len()]).collect();
        let rewards: Vec<f64> = (0..300).map(|r| f64::from(r % 3)).collect();
        let traj: Vec<u64> = (0..300).collect();
        let by_traj = RolloutBatch::from_row_keys(&rows, &traj, &rewards).unwrap();
        let by_group = RolloutBatch::from_group_keys(&rows, &rewards).unwrap();
        // The first key seen is group 0, whatever its hash.
        assert_eq!(
            by_group.trajectory_rows(by_group.group_trajectories(0).start),
            &[0]
        );
        for _ in 0..4 {
            assert_eq!(
                RolloutBatch::from_row_keys(&rows, &traj, &rewards).unwrap(),
                by_traj
            );
            let mut rebuilt = by_traj.clone();
            BatchBuilder::default()
                .rebuild_from_group_keys(&mut rebuilt, &rows, &rewards)
                .unwrap();
            assert_eq!(rebuilt, by_group);
        }
    }

    #[test]
    fn row_keys_groups_in_first_appearance_order_and_interleaving() {
        // rows: g1/a, g0/b, g1/a, g0/c, g0/b
        let g = ["g1", "g0", "g1", "g0", "g0"];
        let t = ["a", "b", "a", "c", "b"];
        let r = [1.0, 0.0, 1.0, 0.5, 0.0];
        let b = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
        assert_eq!(b.group_offsets(), &[0, 1, 3]);
        assert_eq!(b.trajectory_offsets(), &[0, 2, 4, 5]);
        assert_eq!(b.step_rows(), &[0, 2, 1, 4, 3]);
        assert_eq!(b.terminal_rewards(), &[1.0, 0.0, 0.5]);
        assert!(!b.rows_in_step_order());
    }

    #[test]
    fn row_keys_errors() {
        assert_eq!(
            RolloutBatch::from_row_keys::<&str, &str>(&[], &[], &[]),
            Err(Error::EmptyBatch)
        );
        assert!(matches!(
            RolloutBatch::from_row_keys(&["g"], &["t"], &[f64::NAN]),
            Err(Error::NonFinite { index: 0, .. })
        ));
        assert_eq!(
            RolloutBatch::from_row_keys(&["g", "g"], &["t", "t"], &[1.0, 0.0]),
            Err(Error::InconsistentTerminalReward {
                row: 1,
                expected: 1.0,
                value: 0.0
            })
        );
        assert!(matches!(
            RolloutBatch::from_row_keys(&["g"], &["t", "u"], &[1.0]),
            Err(Error::LengthMismatch {
                what: "traj_keys",
                ..
            })
        ));
    }

    #[test]
    fn group_keys_errors_are_the_same_built_or_rebuilt() {
        // 2 keys, 1 reward: the reward column is the short one, whether the batch is new or
        // rebuilt in place (the rebuild once named `traj_keys`, a column it is not given).
        let want = Err(Error::LengthMismatch {
            what: "terminal_rewards",
            expected: 2,
            actual: 1,
        });
        assert_eq!(RolloutBatch::from_group_keys(&[1u64, 2], &[0.0]), want);
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&[1u64], &[0.0]).unwrap();
        assert_eq!(
            builder.rebuild_from_group_keys(&mut batch, &[1u64, 2], &[0.0]),
            want.map(|_: RolloutBatch| ())
        );
    }

    #[test]
    fn contiguous_group_keys_are_the_offsets_batch() {
        // Runs 7 7 7 | 2 2 | 9: three groups, each one run, rows already in step order.
        // Group offsets at the run starts 0, 3, 5 and the end 6; one step per trajectory.
        let r = [1.0, 0.0, 0.5, 1.0, 1.0, 0.25];
        let want = RolloutBatch::from_offsets(vec![0, 3, 5, 6], (0..=6).collect(), r.to_vec()).unwrap();
        let fresh = RolloutBatch::from_group_keys(&[7u64, 7, 7, 2, 2, 9], &r).unwrap();
        assert_eq!(fresh, want);
        assert_eq!(fresh.step_rows(), &[0, 1, 2, 3, 4, 5]);
        assert!(fresh.rows_in_step_order());
        // Rebuilt in place over a batch of another shape (more groups, rows out of order).
        let mut builder = BatchBuilder::default();
        let mut batch =
            RolloutBatch::from_group_keys(&["a", "b", "a", "c", "d", "e", "f"], &[0.0; 7]).unwrap();
        builder
            .rebuild_from_group_keys(&mut batch, &["x", "x", "x", "y", "y", "z"], &r)
            .unwrap();
        assert_eq!(batch, want);
        // One run; every row its own run.
        assert_eq!(
            RolloutBatch::from_group_keys(&[5; 3], &[0.0, 1.0, 0.0]).unwrap(),
            RolloutBatch::from_offsets(vec![0, 3], vec![0, 1, 2, 3], vec![0.0, 1.0, 0.0]).unwrap()
        );
        assert_eq!(
            RolloutBatch::from_group_keys(&[3, 1, 2], &[0.0, 1.0, 0.0]).unwrap(),
            RolloutBatch::from_offsets(vec![0, 1, 2, 3], vec![0, 1, 2, 3], vec![0.0, 1.0, 0.0]).unwrap()
        );
    }

    #[test]
    fn recurring_group_keys_are_gathered_by_group() {
        // rows:    0  1  2  3  4  5
        // keys:    a  a  b  a  c  b   (a recurs at row 3, b at row 5)
        // reward: .1 .2 .3 .4 .5 .6
        // Groups by first appearance: a = rows 0 1 3, b = rows 2 5, c = row 4.
        // group_offsets [0, 3, 5, 6]; steps in group order: rows 0 1 3 | 2 5 | 4, each its
        // own trajectory, so terminal rewards are the rows' rewards in that order.
        let r = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
        let keys = ["a", "a", "b", "a", "c", "b"];
        let fresh = RolloutBatch::from_group_keys(&keys, &r).unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 3, 5, 6]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(fresh.step_rows(), &[0, 1, 3, 2, 5, 4]);
        assert_eq!(fresh.terminal_rewards(), &[0.1, 0.2, 0.4, 0.3, 0.6, 0.5]);
        assert!(!fresh.rows_in_step_order());
        // A builder that just took the contiguous path, and one that just built row keys.
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&["p"; 9], &[1.0; 9]).unwrap();
        builder
            .rebuild_from_group_keys(&mut batch, &["q", "q", "r"], &[0.0; 3])
            .unwrap();
        builder.rebuild_from_group_keys(&mut batch, &keys, &r).unwrap();
        assert_eq!(batch, fresh);
        builder
            .rebuild_from_row_keys(&mut batch, &[0, 0], &[1, 2], &[0.0, 1.0])
            .unwrap();
        builder.rebuild_from_group_keys(&mut batch, &keys, &r).unwrap();
        assert_eq!(batch, fresh);
        // x y x: one recurrence, in the last run. Groups x = rows 0 2, y = row 1.
        let xyx = RolloutBatch::from_group_keys(&["x", "y", "x"], &[0.0, 0.5, 1.0]).unwrap();
        assert_eq!(xyx.group_offsets(), &[0, 2, 3]);
        assert_eq!(xyx.step_rows(), &[0, 2, 1]);
        assert_eq!(xyx.terminal_rewards(), &[0.0, 1.0, 0.5]);
        // a b a b: the last two runs both recur. Groups a = rows 0 2, b = rows 1 3.
        let ab = RolloutBatch::from_group_keys(&[1, 2, 1, 2], &[0.0; 4]).unwrap();
        assert_eq!(ab.group_offsets(), &[0, 2, 4]);
        assert_eq!(ab.step_rows(), &[0, 2, 1, 3]);
    }

    #[test]
    fn group_key_errors_in_order_on_either_path() {
        // Contiguous (a a b) or recurring (a b a) keys: the checks come before the layout,
        // in the order length, emptiness, finiteness; a failed rebuild changes nothing.
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&[9, 9], &[0.5, 0.5]).unwrap();
        let before = batch.clone();
        for keys in [[1, 1, 2], [1, 2, 1]] {
            let short = Error::LengthMismatch {
                what: "terminal_rewards",
                expected: 3,
                actual: 2,
            };
            // Short and non-finite: the length is named.
            assert_eq!(
                RolloutBatch::from_group_keys(&keys, &[f64::NAN, 0.0]),
                Err(short.clone())
            );
            assert_eq!(
                builder.rebuild_from_group_keys(&mut batch, &keys, &[f64::NAN, 0.0]),
                Err(short)
            );
            let nan = builder.rebuild_from_group_keys(&mut batch, &keys, &[0.0, f64::INFINITY, f64::NAN]);
            assert!(matches!(nan, Err(Error::NonFinite { index: 1, .. })), "{nan:?}");
            assert_eq!(
                RolloutBatch::from_group_keys(&keys, &[0.0, f64::INFINITY, f64::NAN]),
                nan.map(|()| before.clone())
            );
            assert_eq!(batch, before);
        }
        assert_eq!(
            builder.rebuild_from_group_keys::<u64>(&mut batch, &[], &[]),
            Err(Error::EmptyBatch)
        );
        assert_eq!(
            builder.rebuild_from_group_keys::<u64>(&mut batch, &[], &[1.0]),
            Err(Error::LengthMismatch {
                what: "terminal_rewards",
                expected: 0,
                actual: 1
            })
        );
        assert_eq!(batch, before);
    }

    #[test]
    fn trajectory_major_row_keys_are_written_in_place() {
        // rows:   0  1  2  3  4  5
        // group:  u  u  u  v  v  w
        // traj:   a  a  b  c  c  d
        // Group ids 0 0 0 1 1 2 and trajectory ids 0 0 1 2 2 3 never decrease: identity.
        // Groups u = {a, b}, v = {c}, w = {d}: group_offsets [0, 2, 3, 4]. Trajectories start
        // at rows 0, 2, 3, 5: traj_offsets [0, 2, 3, 5, 6]. Rewards a 1, b 0, c 0.5, d 0.25.
        let g = ["u", "u", "u", "v", "v", "w"];
        let t = ["a", "a", "b", "c", "c", "d"];
        let r = [1.0, 1.0, 0.0, 0.5, 0.5, 0.25];
        let fresh = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 2, 3, 4]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 2, 3, 5, 6]);
        assert_eq!(fresh.step_rows(), &[0, 1, 2, 3, 4, 5]);
        assert_eq!(fresh.terminal_rewards(), &[1.0, 0.0, 0.5, 0.25]);
        assert!(fresh.rows_in_step_order());
        let want =
            RolloutBatch::from_offsets(vec![0, 2, 3, 4], vec![0, 2, 3, 5, 6], vec![1.0, 0.0, 0.5, 0.25])
                .unwrap();
        assert_eq!(fresh, want);
        // Rebuilt in place after a batch that needed sorting, and the reverse.
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_row_keys(&[1, 2, 1], &[5, 6, 7], &[0.0; 3]).unwrap();
        builder.rebuild_from_row_keys(&mut batch, &g, &t, &r).unwrap();
        assert_eq!(batch, want);
        assert!(batch.rows_in_step_order());
        builder
            .rebuild_from_row_keys(&mut batch, &[1, 2, 1], &[5, 6, 7], &[0.0; 3])
            .unwrap();
        assert_eq!(batch.step_rows(), &[0, 2, 1]);
        assert!(!batch.rows_in_step_order());
    }

    #[test]
    fn a_recurring_trajectory_within_in_order_groups_is_sorted() {
        // rows:   0  1  2  3
        // group:  u  u  u  v    ids 0 0 0 1 (never decrease)
        // traj:   a  b  a  c    ids 0 1 0 2 (a recurs at row 2: not the identity)
        // u = {a: rows 0 2, b: row 1}, v = {c: row 3}. Steps a0 a2 | b1 | c3.
        let fresh = RolloutBatch::from_row_keys(
            &["u", "u", "u", "v"],
            &["a", "b", "a", "c"],
            &[1.0, 0.0, 1.0, 0.5],
        )
        .unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 2, 3]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 2, 3, 4]);
        assert_eq!(fresh.step_rows(), &[0, 2, 1, 3]);
        assert_eq!(fresh.terminal_rewards(), &[1.0, 0.0, 0.5]);
        assert!(!fresh.rows_in_step_order());
    }

    #[test]
    fn a_recurring_group_with_in_order_trajectories_is_sorted() {
        // rows:   0  1  2  3
        // group:  p  p  q  p    ids 0 0 1 0 (p recurs at row 3: not the identity)
        // traj:   a  a  b  c    ids 0 0 1 2 (never decrease)
        // p = {a: rows 0 1, c: row 3}, q = {b: row 2}: slots a, c, b.
        // traj_offsets: lengths 2, 1, 1 -> [0, 2, 3, 4]; steps 0 1 | 3 | 2.
        let (g, t, r) = (["p", "p", "q", "p"], ["a", "a", "b", "c"], [1.0, 1.0, 0.0, 0.5]);
        let fresh = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 2, 3]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 2, 3, 4]);
        assert_eq!(fresh.step_rows(), &[0, 1, 3, 2]);
        assert_eq!(fresh.terminal_rewards(), &[1.0, 0.5, 0.0]);
        assert!(!fresh.rows_in_step_order());
        // g0 g1 g0, one step each: p = {a, c}, q = {b}.
        let one = RolloutBatch::from_row_keys(&[0, 1, 0], &["a", "b", "c"], &[1.0, 0.0, 0.5]).unwrap();
        assert_eq!(one.group_offsets(), &[0, 2, 3]);
        assert_eq!(one.trajectory_offsets(), &[0, 1, 2, 3]);
        assert_eq!(one.step_rows(), &[0, 2, 1]);
        assert_eq!(one.terminal_rewards(), &[1.0, 0.5, 0.0]);
    }

    #[test]
    fn row_key_errors_at_the_same_row_in_either_layout() {
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_row_keys(&[9], &[9], &[0.0]).unwrap();
        let before = batch.clone();
        let across = Err(Error::TrajectoryAcrossGroups { row: 3 });
        let reward = |row| {
            Err(Error::InconsistentTerminalReward {
                row,
                expected: 1.0,
                value: 0.5,
            })
        };
        // Group keys, trajectory keys, rewards, the error.
        type Case = (
            &'static [&'static str],
            &'static [&'static str],
            &'static [f64],
            Result<()>,
        );
        let cases: [Case; 5] = [
            // Rows 0..3 in order (ids 0 0 1 | 0 0 1), then trajectory a under group q.
            (
                &["p", "p", "q", "q"],
                &["a", "a", "b", "a"],
                &[0.0; 4],
                across.clone(),
            ),
            // Rows 0..3 out of order (groups 0 1 0), then the same.
            (&["p", "q", "p", "q"], &["a", "b", "a", "a"], &[0.0; 4], across),
            // Adjacent rows with one trajectory key and two group keys (no lookup of a).
            (
                &["p", "q"],
                &["a", "a"],
                &[0.0; 2],
                Err(Error::TrajectoryAcrossGroups { row: 1 }),
            ),
            // Trajectory a's second row, in order (a a b) and out of order (a b a).
            (&["p", "p", "p"], &["a", "a", "b"], &[1.0, 0.5, 0.0], reward(1)),
            (&["p", "p", "p"], &["a", "b", "a"], &[1.0, 0.0, 0.5], reward(2)),
        ];
        for (g, t, r, want) in cases {
            assert_eq!(
                RolloutBatch::from_row_keys(g, t, r).map(|_| ()),
                want,
                "{g:?} {t:?}"
            );
            assert_eq!(builder.rebuild_from_row_keys(&mut batch, g, t, r), want);
            assert_eq!(batch, before);
        }
    }

    #[test]
    fn key_tables_grow_past_their_first_size() {
        // 300 groups (a fresh table has 8 slots and doubles whenever a quarter full), each at
        // rows k and k + 300: group k = rows k, k + 300. Offsets step by 2; steps 0 300 1 301 ...
        let keys: Vec<u64> = (0..600).map(|row| (row % 300) * 1_000_003).collect();
        let r: Vec<f64> = (0..600).map(|row| row as f64).collect();
        let offsets: Vec<usize> = (0..=300).map(|k| 2 * k).collect();
        let steps: Vec<usize> = (0..300).flat_map(|k| [k, k + 300]).collect();
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        for _ in 0..2 {
            builder.rebuild_from_group_keys(&mut batch, &keys, &r).unwrap();
            assert_eq!(batch.group_offsets(), &offsets[..]);
            assert_eq!(batch.step_rows(), &steps[..]);
            // The same keys as trajectories (one per row pair) under one group each.
            builder
                .rebuild_from_row_keys(&mut batch, &keys, &keys, &r)
                .unwrap_err();
            let traj: Vec<u64> = (0..600).map(|row| row * 7).collect();
            builder
                .rebuild_from_row_keys(&mut batch, &keys, &traj, &r)
                .unwrap();
            assert_eq!(batch.group_offsets(), &offsets[..]);
            assert_eq!(batch.step_rows(), &steps[..]);
            // A small batch in between: the tables shrink back.
            builder
                .rebuild_from_group_keys(&mut batch, &[1, 1, 2], &[0.0; 3])
                .unwrap();
            assert_eq!(batch.group_offsets(), &[0, 2, 3]);
        }
    }

    #[test]
    fn the_in_order_flag_is_exactly_an_identity_row_index() {
        // Row and group keys, fresh and rebuilt, in order and not: the flag that lets the
        // estimators skip the gather is true exactly when the row index is the identity.
        let layouts: [(&[u64], &[u64]); 5] = [
            (&[0, 0, 1, 1], &[0, 0, 1, 2]),
            (&[0, 1, 0, 1], &[0, 1, 2, 3]),
            (&[0, 0, 0, 0], &[0, 1, 0, 1]),
            (&[5, 5, 2, 2], &[9, 9, 8, 7]),
            (&[1, 2, 2, 1], &[1, 2, 3, 4]),
        ];
        let identity = |b: &RolloutBatch| b.step_rows().iter().enumerate().all(|(s, &r)| s == r);
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let mut seen = [false; 2];
        for (g, t) in layouts {
            let r = [0.0; 4];
            for fresh in [
                RolloutBatch::from_row_keys(g, t, &r).unwrap(),
                RolloutBatch::from_group_keys(g, &r).unwrap(),
            ] {
                assert_eq!(fresh.rows_in_step_order(), identity(&fresh), "{g:?} {t:?}");
                seen[usize::from(identity(&fresh))] = true;
            }
            builder.rebuild_from_row_keys(&mut batch, g, t, &r).unwrap();
            assert_eq!(batch.rows_in_step_order(), identity(&batch), "{g:?} {t:?}");
            builder.rebuild_from_group_keys(&mut batch, g, &r).unwrap();
            assert_eq!(batch.rows_in_step_order(), identity(&batch), "{g:?}");
        }
        assert_eq!(seen, [true, true], "both kinds of layout");
    }
}
