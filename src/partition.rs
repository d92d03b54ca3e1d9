//! Trajectory partitioning at milestones.
//!
//! Milestone steps t_1 < … < t_K split a trajectory of T steps (0-indexed) into K + 1 segments
//! (paper §3.2, with t_0 = −1):
//!
//! Seg_k = { t : t_{k−1} < t ≤ t_k },  k = 1..K,    Seg_{K+1} = { t : t > t_K } (may be empty).
//!
//! A milestone step closes (belongs to) the segment it completes. Segment K + 1 is the
//! *unfinished* segment. In code, segment ids are 0-based: the id of step t is the number of
//! milestone steps strictly before t, so ids run 0..=K and id K is the unfinished segment.

/// One trajectory's segments, derived from its milestone flags.
///
/// ```
/// use beacon_rl::partition::Segments;
/// // milestones at steps 1 and 4 of a 6-step trajectory
/// let flags = [false, true, false, false, true, false];
/// let seg = Segments::from_flags(&flags);
/// assert_eq!(seg.num_milestones(), 2);
/// assert_eq!(seg.ids().collect::<Vec<_>>(), vec![0, 0, 1, 1, 1, 2]);
/// assert_eq!(seg.completed_lengths().collect::<Vec<_>>(), vec![2, 3]);
/// assert_eq!(seg.unfinished_len(), 1);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Segments<'a> {
    flags: &'a [bool],
    milestones: usize,
}

impl<'a> Segments<'a> {
    /// Partitions a trajectory given one milestone flag per step.
    ///
    /// ```
    /// use beacon_rl::partition::Segments;
    /// assert_eq!(Segments::from_flags(&[false, false]).num_milestones(), 0);
    /// ```
    pub fn from_flags(flags: &'a [bool]) -> Self {
        let milestones = flags.iter().filter(|&&f| f).count();
        Self { flags, milestones }
    }

    /// K, the number of milestones (completed segments).
    ///
    /// ```
    /// use beacon_rl::partition::Segments;
    /// assert_eq!(Segments::from_flags(&[true, true, false]).num_milestones(), 2);
    /// ```
    pub fn num_milestones(&self) -> usize {
        self.milestones
    }

    /// The 0-based segment id of each step: the number of milestones strictly before it.
    ///
    /// ```
    /// use beacon_rl::partition::Segments;
    /// let ids: Vec<_> = Segments::from_flags(&[true, false, true]).ids().collect();
    /// assert_eq!(ids, vec![0, 1, 1]);
    /// ```
    pub fn ids(&self) -> impl Iterator<Item = usize> + 'a {
        self.flags.iter().scan(0usize, |k, &f| {
            let id = *k;
            *k += usize::from(f);
            Some(id)
        })
    }

    /// Lengths |Seg_k| of the completed segments k = 1..K, in order.
    ///
    /// ```
    /// use beacon_rl::partition::Segments;
    /// let lens: Vec<_> = Segments::from_flags(&[true, false, false, true]).completed_lengths().collect();
    /// assert_eq!(lens, vec![1, 3]);
    /// ```
    pub fn completed_lengths(&self) -> impl Iterator<Item = usize> + 'a {
        let mut start = 0usize;
        self.flags
            .iter()
            .enumerate()
            .filter(|&(_, &f)| f)
            .map(move |(t, _)| {
                let len = t + 1 - start;
                start = t + 1;
                len
            })
    }

    /// Length of the unfinished segment (steps after the last milestone).
    ///
    /// ```
    /// use beacon_rl::partition::Segments;
    /// assert_eq!(Segments::from_flags(&[false, true, false, false]).unfinished_len(), 2);
    /// assert_eq!(Segments::from_flags(&[false, false]).unfinished_len(), 2);
    /// ```
    pub fn unfinished_len(&self) -> usize {
        self.flags.iter().rev().take_while(|&&f| !f).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_a_milestone() {
        let s = Segments::from_flags(&[true; 4]);
        assert_eq!(s.ids().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert_eq!(s.completed_lengths().collect::<Vec<_>>(), vec![1, 1, 1, 1]);
        assert_eq!(s.unfinished_len(), 0);
    }

    #[test]
    fn lengths_cover_the_trajectory() {
        let f = [false, true, false, true, false, false];
        let s = Segments::from_flags(&f);
        let total: usize = s.completed_lengths().sum::<usize>() + s.unfinished_len();
        assert_eq!(total, f.len());
    }
}
