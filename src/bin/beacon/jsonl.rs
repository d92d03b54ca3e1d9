//! `--format jsonl`: one JSON object per trajectory, written as groups are computed, and
//! the record of what has been written, to mark it invalid if its group reappears.

use std::collections::HashMap;
use std::io::Write;

use beacon_rl::record::{RecordBatch, TrajectoryRecord};
use serde::Serialize;
use serde_json::json;

use crate::run::Parts;
use crate::BoxError;

/// What has been written group by group: the trajectories (one JSON line each), and each
/// group's output lines, which a later line of the same group would invalidate (its
/// advantages were computed on part of the group).
#[derive(Default)]
pub(crate) struct Written {
    /// Whether the output is JSON Lines, written as groups are computed.
    pub(crate) jsonl: bool,
    pub(crate) trajectories: usize,
    /// group_id → (first output line, 1-based; number of lines), in JSON Lines output.
    pub(crate) groups: HashMap<String, (usize, usize)>,
}

impl Written {
    pub(crate) fn add(&mut self, records: &[TrajectoryRecord]) {
        if let (true, Some(first)) = (self.jsonl, records.first()) {
            let lines = (self.trajectories + 1, records.len());
            self.groups.insert(first.group_id.clone(), lines);
        }
        self.trajectories += records.len();
    }

    /// The error that ends the run. When a group reappears after its lines were written,
    /// a last JSON line marks them invalid: `{"error": ..., "invalid_lines": {"group_id": ..,
    /// "first": .., "count": ..}}` (the table is written only at the end: nothing to mark).
    pub(crate) fn refuse(&self, e: beacon_rl::Error, out: &mut impl Write) -> BoxError {
        let beacon_rl::Error::GroupNotContiguous { group_id, .. } = &e else {
            return e.into();
        };
        let hint = "Put each group's lines together, or pass --whole-input";
        let Some(&(first, count)) = self.groups.get(group_id) else {
            return format!("{e}. {hint}").into();
        };
        let lines = match count {
            1 => format!("output line {first}"),
            _ => format!("output lines {first}-{}", first + count - 1),
        };
        let message = format!(
            "{e}. The advantages already written for it ({lines}) were computed on part of the \
             group and are invalid; the last output line says so. {hint}"
        );
        let marker = json!({
            "error": message,
            "invalid_lines": { "group_id": group_id, "first": first, "count": count },
        });
        // The run fails either way: if the mark cannot be written, the exit status tells.
        let _ = writeln!(out, "{marker}").and_then(|()| out.flush());
        message.into()
    }
}

/// One output line. Keys in byte order: the output is what `serde_json::json!` (a sorted
/// map) gave before, written without building a `Value` per line.
#[derive(Serialize)]
pub(crate) struct Line<'a> {
    advantages: &'a [f64],
    #[serde(skip_serializing_if = "Option::is_none")]
    episode_advantage: Option<f64>,
    group_id: &'a str,
    milestones: &'a [bool],
    #[serde(skip_serializing_if = "Option::is_none")]
    segment_advantages: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments: Option<&'a [usize]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shaped_rewards: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_advantages: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_groups: Option<Vec<usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_returns: Option<&'a [f64]>,
    terminal_reward: f64,
    traj_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    trajectory_advantage: Option<f64>,
}

pub(crate) fn write_jsonl(
    out: &mut impl Write,
    rb: &RecordBatch<'_>,
    adv: &[f64],
    flags: &[bool],
    parts: &Parts,
    step_groups_before: usize,
) -> Result<(), BoxError> {
    // Rows are the records' steps in input order: record i's rows follow record i-1's.
    let mut first = 0;
    for rec in rb.records() {
        let rows = first..first + rec.steps.len();
        first = rows.end;
        let mut line = Line {
            advantages: &adv[rows.clone()],
            episode_advantage: None,
            group_id: &rec.group_id,
            milestones: &flags[rows.clone()],
            segment_advantages: None,
            segments: None,
            shaped_rewards: None,
            step_advantages: None,
            step_groups: None,
            step_returns: None,
            terminal_reward: rec.terminal_reward,
            traj_id: &rec.traj_id,
            trajectory_advantage: None,
        };
        match parts {
            Parts::Beacon(p) => {
                line.trajectory_advantage = Some(p.trajectory_advantages[rows.start]);
                line.segment_advantages = Some(&p.segment_advantages[rows.clone()]);
                line.shaped_rewards = Some(&p.shaped_rewards[rows.clone()]);
                line.segments = Some(&p.segments[rows.clone()]);
            }
            Parts::Gigpo(p) => {
                line.episode_advantage = Some(p.episode_advantages[rows.start]);
                line.step_advantages = Some(&p.step_advantages[rows.clone()]);
                line.step_returns = Some(&p.step_returns[rows.clone()]);
                let labels = p.step_groups[rows.clone()].iter();
                line.step_groups = Some(labels.map(|g| g + step_groups_before).collect());
            }
            Parts::None => {}
        }
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
