//! Trajectory partitioning at milestones: the one implementation BEACON runs on.
//!
//! Milestone steps t_1 < … < t_K split a trajectory of T steps (0-indexed) into K + 1 segments
//! (paper §3.2, with t_0 = −1):
//!
//! Seg_k = { t : t_{k−1} < t ≤ t_k },  k = 1..K,    Seg_{K+1} = { t : t > t_K } (may be empty).
//!
//! A milestone step closes (belongs to) the segment it completes. Segment K + 1 is the
//! *unfinished* segment. In code, segment ids are 0-based: the id of step t is the number of
//! milestone steps strictly before t, so ids run 0..=K and id K is the unfinished segment.
//!
//! Crate-private: callers see the partition through
//! [`BeaconOutput::segments`](crate::estimator::BeaconOutput::segments).

/// Walks one trajectory backwards and calls `step(t, id, distance)` for every step t, where
/// `id` is its 0-based segment id and `distance` is `Some(t_k − t)`, the distance to the
/// milestone closing its segment, or `None` in the unfinished segment. Returns K. No allocation.
///
/// Backwards because the distance to the *next* milestone is what temporal shaping needs.
pub(crate) fn for_each_step_rev(flags: &[bool], mut step: impl FnMut(usize, usize, Option<usize>)) -> usize {
    let k_total = flags.iter().filter(|&&f| f).count();
    let mut next_ms: Option<usize> = None;
    let mut k = k_total;
    for (t, &f) in flags.iter().enumerate().rev() {
        if f {
            next_ms = Some(t);
            k -= 1;
        }
        step(t, k, next_ms.map(|m| m - t));
    }
    k_total
}

/// Lengths |Seg_k| of the completed segments k = 1..K, in order. No allocation.
pub(crate) fn completed_lengths(flags: &[bool]) -> impl Iterator<Item = usize> + '_ {
    let mut start = 0usize;
    flags.iter().enumerate().filter(|&(_, &f)| f).map(move |(t, _)| {
        let len = t + 1 - start;
        start = t + 1;
        len
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ids, distances) in step order, and K.
    fn walk(flags: &[bool]) -> (Vec<usize>, Vec<Option<usize>>, usize) {
        let mut ids = vec![usize::MAX; flags.len()];
        let mut dist = vec![Some(usize::MAX); flags.len()];
        let k = for_each_step_rev(flags, |t, id, d| {
            ids[t] = id;
            dist[t] = d;
        });
        (ids, dist, k)
    }

    #[test]
    fn hand_computed_partition() {
        // Milestones at steps 1 and 4 of 6: Seg_1 = {0, 1}, Seg_2 = {2, 3, 4}, unfinished {5}.
        let f = [false, true, false, false, true, false];
        let (ids, dist, k) = walk(&f);
        assert_eq!(k, 2);
        assert_eq!(ids, [0, 0, 1, 1, 1, 2]);
        // Distance to the closing milestone: 1 − 0, 1 − 1, 4 − 2, 4 − 3, 4 − 4; none for 5.
        assert_eq!(dist, [Some(1), Some(0), Some(2), Some(1), Some(0), None]);
        assert_eq!(completed_lengths(&f).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn every_step_a_milestone_and_none() {
        let (ids, dist, k) = walk(&[true; 4]);
        assert_eq!((ids, k), (vec![0, 1, 2, 3], 4));
        assert_eq!(dist, [Some(0); 4]);
        assert_eq!(completed_lengths(&[true; 4]).collect::<Vec<_>>(), [1, 1, 1, 1]);

        let (ids, dist, k) = walk(&[false, false]);
        assert_eq!((ids, dist, k), (vec![0, 0], vec![None, None], 0));
        assert_eq!(completed_lengths(&[false, false]).count(), 0);
        assert_eq!(walk(&[]).2, 0);
    }

    #[test]
    fn lengths_cover_the_completed_steps() {
        let f = [true, false, false, true, false, false];
        // Seg_1 = {0}, Seg_2 = {1, 2, 3}; 2 unfinished steps.
        assert_eq!(completed_lengths(&f).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(completed_lengths(&f).sum::<usize>() + 2, f.len());
    }
}
