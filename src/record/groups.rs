//! Reading trajectory files group by group, so that memory is bounded by the largest group.

use std::io::BufRead;

use super::ids::{IdSet, Location};
use super::jsonl::{in_file, JsonlReader};
use super::schema::name;
use super::{record_error, TrajectoryRecord};
use crate::error::{Error, Result};

/// One group's trajectory records, read from contiguous lines, with where each came from.
///
/// ```
/// use beacon_rl::record::{read_trajectories, RecordBatch, TrajectoryGroups};
/// let line = |g: &str, t: &str| format!(
///     r#"{{"group_id": "{g}", "traj_id": "{t}", "terminal_reward": 1, "steps": [{{"action": "a", "observation": "o", "reward": 0, "done": true}}]}}"#
/// );
/// let text = [line("g1", "a"), line("g1", "b"), line("g2", "c")].join("\n");
/// let group = TrajectoryGroups::new([read_trajectories(text.as_bytes())]).next().unwrap()?;
/// assert_eq!((group.records[0].group_id.as_str(), group.records.len(), group.lines[1]), ("g1", 2, 2));
/// assert_eq!(RecordBatch::new(&group.records)?.batch().num_trajectories(), 2);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordGroup {
    /// The records, in input order (all with the same `group_id`).
    pub records: Vec<TrajectoryRecord>,
    /// Each record's 1-based line in its input.
    pub lines: Vec<usize>,
    /// Each record's input: an index into the readers given to [`TrajectoryGroups::new`].
    pub sources: Vec<usize>,
}

impl RecordGroup {
    /// The group's `group_id` (`""` for an empty group, which the reader never yields).
    pub(crate) fn group_id(&self) -> &str {
        self.records.first().map_or("", |r| r.group_id.as_str())
    }
}

/// Reads trajectory JSON Lines inputs (one or several, in order) and yields one
/// [`RecordGroup`] at a time: memory holds one group, not the file.
///
/// **Contiguity rule**: a group's trajectories are on contiguous lines (over the inputs taken
/// in order, so a group may continue from the end of one file into the next). A `group_id`
/// that reappears after another group's line is an [`Error::GroupNotContiguous`] naming the
/// input and line. [`allow_interleaved`](Self::allow_interleaved) lifts the rule: each run of
/// lines with one `group_id` is then yielded as it comes, and a caller that needs whole groups
/// must gather runs itself (holding the input).
///
/// `traj_id`s must be unique over all inputs: a repeat is an [`Error::Record`] (field
/// `traj_id`) naming the input and line of both occurrences. Memory beyond the largest group:
/// the ids seen, which an exact check has to keep (every `traj_id`, and the `group_id` of each
/// closed group), stored compactly: about 40 bytes plus the id's length per id.
///
/// The first error ends the iteration (a group cannot be trusted past a bad line).
///
/// ```
/// use beacon_rl::record::{read_trajectories, TrajectoryGroups};
/// use beacon_rl::Error;
/// let line = |g: &str, t: &str| format!(
///     r#"{{"group_id": "{g}", "traj_id": "{t}", "terminal_reward": 1, "steps": [{{"action": "a", "observation": "o", "reward": 0, "done": true}}]}}"#
/// );
/// let a = [line("g1", "a"), line("g2", "b")].join("\n");
/// let b = [line("g2", "c"), line("g1", "d")].join("\n");
/// let mut groups = TrajectoryGroups::new([
///     read_trajectories(a.as_bytes()).with_source("a.jsonl"),
///     read_trajectories(b.as_bytes()).with_source("b.jsonl"),
/// ]);
/// assert_eq!(groups.next().unwrap()?.records[0].group_id, "g1");
/// let g2 = groups.next().unwrap()?; // continues from a.jsonl into b.jsonl
/// assert_eq!((g2.records.len(), g2.sources.clone()), (2, vec![0, 1]));
/// let err = groups.next().unwrap().unwrap_err();
/// assert!(matches!(err, Error::GroupNotContiguous { line: 2, file: Some(f), .. } if f == "b.jsonl"));
/// assert!(groups.next().is_none());
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub struct TrajectoryGroups<R> {
    readers: Vec<JsonlReader<R, TrajectoryRecord>>,
    sources: Vec<Option<String>>,
    /// Index of the reader being read.
    current: usize,
    /// The first record of the next group, read while closing the previous one.
    lookahead: Option<(Location, TrajectoryRecord)>,
    /// Closed groups: where the line after each one's run was.
    closed: IdSet,
    traj_ids: IdSet,
    contiguous: bool,
    finished: bool,
    /// Records handed back by [`recycle`](Self::recycle), read into again.
    spare: Vec<TrajectoryRecord>,
}

/// At most this many recycled records are kept (a few groups' worth).
const MAX_SPARE: usize = 1024;

impl<R: BufRead> TrajectoryGroups<R> {
    /// Reads the given inputs in order (name them with
    /// [`JsonlReader::with_source`] so that errors say which file; set their line limit with
    /// [`JsonlReader::with_max_line_bytes`]).
    ///
    /// ```
    /// use beacon_rl::record::{read_trajectories, TrajectoryGroups};
    /// let groups = TrajectoryGroups::new([read_trajectories(&b"\n"[..]).with_source("empty.jsonl")]);
    /// assert_eq!(groups.count(), 0);
    /// ```
    pub fn new(readers: impl IntoIterator<Item = JsonlReader<R, TrajectoryRecord>>) -> Self {
        let readers: Vec<_> = readers.into_iter().collect();
        let sources = readers.iter().map(|r| r.source().map(str::to_string)).collect();
        Self {
            readers,
            sources,
            current: 0,
            lookahead: None,
            closed: IdSet::default(),
            traj_ids: IdSet::default(),
            contiguous: true,
            finished: false,
            spare: Vec::new(),
        }
    }

    /// Yields runs of lines with one `group_id` without requiring a group's lines to be
    /// contiguous (see the type's docs); `traj_id`s must still be unique.
    ///
    /// ```
    /// use beacon_rl::record::{read_trajectories, TrajectoryGroups};
    /// let line = |g: &str, t: &str| format!(
    ///     r#"{{"group_id": "{g}", "traj_id": "{t}", "terminal_reward": 1, "steps": [{{"action": "a", "observation": "o", "reward": 0, "done": true}}]}}"#
    /// );
    /// let text = [line("g1", "a"), line("g2", "b"), line("g1", "c")].join("\n");
    /// let runs = TrajectoryGroups::new([read_trajectories(text.as_bytes())]).allow_interleaved().collect::<Result<Vec<_>, _>>()?;
    /// let ids: Vec<&str> = runs.iter().map(|g| g.records[0].group_id.as_str()).collect();
    /// assert_eq!(ids, ["g1", "g2", "g1"]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn allow_interleaved(mut self) -> Self {
        self.contiguous = false;
        self
    }

    /// Hands a group's records back for reuse: the next lines are read into their
    /// allocations (strings, step lists), so a reader whose caller recycles each group it is
    /// done with allocates almost nothing per line. Optional; at most 1,024 records are kept.
    ///
    /// ```
    /// use beacon_rl::record::{read_trajectories, TrajectoryGroups};
    /// let line = |g: &str, t: &str| format!(
    ///     r#"{{"group_id": "{g}", "traj_id": "{t}", "terminal_reward": 1, "steps": [{{"action": "a", "observation": "o", "reward": 0, "done": true}}]}}"#
    /// );
    /// let text = [line("g1", "a"), line("g2", "b")].join("\n");
    /// let mut groups = TrajectoryGroups::new([read_trajectories(text.as_bytes())]);
    /// let first = groups.next().unwrap()?;
    /// groups.recycle(first);
    /// assert_eq!(groups.next().unwrap()?.records[0].traj_id, "b");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn recycle(&mut self, group: RecordGroup) {
        let room = MAX_SPARE.saturating_sub(self.spare.len());
        self.spare.extend(group.records.into_iter().take(room));
    }

    /// The next record over all inputs with its location.
    fn next_record(&mut self) -> Option<Result<(Location, TrajectoryRecord)>> {
        while let Some(reader) = self.readers.get_mut(self.current) {
            match reader.next_reusing(self.spare.pop()) {
                Some(Ok((line, rec))) => {
                    let at = Location {
                        source: self.current,
                        line,
                    };
                    return Some(Ok((at, rec)));
                }
                Some(Err(e)) => return Some(Err(e)),
                None => self.current += 1,
            }
        }
        None
    }

    fn name(&self, source: usize) -> Option<String> {
        self.sources.get(source).cloned().flatten()
    }

    /// Records the record's `traj_id`, refusing a repeat.
    fn check_unique(&mut self, at: Location, rec: &TrajectoryRecord) -> Result<()> {
        if let Some(first) = self.traj_ids.insert(&rec.traj_id, at) {
            let first_at = match self.name(first.source) {
                Some(f) => format!("line {} of {f}", first.line),
                None => format!("line {}", first.line),
            };
            let e = record_error(
                at.line,
                Some(name::TRAJ_ID.into()),
                format!("trajectory `{}` appears twice (first at {first_at})", rec.traj_id),
            );
            return Err(in_file(e, &self.name(at.source)));
        }
        Ok(())
    }

    /// Refuses a group that reappears after it was closed.
    fn check_open(&self, at: Location, group_id: &str) -> Result<()> {
        match self.closed.get(group_id) {
            Some(closed) if self.contiguous => Err(Error::GroupNotContiguous {
                group_id: group_id.to_string(),
                file: self.name(at.source),
                line: at.line,
                closed_file: self.name(closed.source),
                closed_line: closed.line,
            }),
            _ => Ok(()),
        }
    }

    fn next_group(&mut self) -> Result<Option<RecordGroup>> {
        let (at, first) = match self.lookahead.take() {
            Some(next) => next,
            None => match self.next_record() {
                None => return Ok(None),
                Some(next) => {
                    let (at, rec) = next?;
                    self.check_unique(at, &rec)?;
                    (at, rec)
                }
            },
        };
        // Checked here, not when the record ended the previous group: that group is complete
        // and was yielded first.
        self.check_open(at, &first.group_id)?;
        let mut group = RecordGroup {
            records: vec![first],
            lines: vec![at.line],
            sources: vec![at.source],
        };
        while let Some(next) = self.next_record() {
            let (at, rec) = next?;
            self.check_unique(at, &rec)?;
            if rec.group_id == group.group_id() {
                group.records.push(rec);
                group.lines.push(at.line);
                group.sources.push(at.source);
            } else {
                if self.contiguous {
                    self.closed.insert(group.group_id(), at);
                }
                self.lookahead = Some((at, rec));
                break;
            }
        }
        Ok(Some(group))
    }
}

impl<R: BufRead> Iterator for TrajectoryGroups<R> {
    type Item = Result<RecordGroup>;

    fn next(&mut self) -> Option<Result<RecordGroup>> {
        if self.finished {
            return None;
        }
        match self.next_group() {
            Ok(Some(group)) => Some(Ok(group)),
            Ok(None) => {
                self.finished = true;
                None
            }
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}
