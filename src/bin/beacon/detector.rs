//! The milestone detector chosen on the command line.

use beacon_rl::milestone::{
    detect_milestones, DetectorPreset, DiscoveryConfig, ExpertWalkthrough, MilestoneDetector,
    MilestoneDiscovery, TextPatterns, WalkthroughMap,
};
use beacon_rl::record::{RecordBatch, TrajectoryRecord};

use crate::args::Args;
use crate::BoxError;

/// The milestone detector of the run, built once and applied to each chunk.
pub(crate) enum Detector {
    /// A detector over transitions (presets, text patterns).
    Transitions(Box<dyn MilestoneDetector>),
    /// Each task's own expert actions.
    Walkthrough { map: WalkthroughMap, threshold: f64 },
    /// Mined from the rollouts themselves, one task per group_id (milestone::discover). Its
    /// per-task memory carries over from group to group, as it would across training batches.
    /// (Boxed: the memory's tables are much larger than the other variants.)
    Discover(Box<MilestoneDiscovery>),
}

impl Detector {
    pub(crate) fn new(args: &Args) -> Result<Self, BoxError> {
        Ok(match args.detector.as_str() {
            "text" => {
                if args.pattern.is_empty() {
                    return Err("--detector text needs at least one --pattern REGEX".into());
                }
                let mut b = TextPatterns::builder();
                for p in &args.pattern {
                    b = b.response(p.clone());
                }
                Detector::Transitions(Box::new(b.build()?))
            }
            "walkthrough" => {
                let path = args
                    .walkthrough
                    .as_ref()
                    .ok_or("--detector walkthrough needs --walkthrough FILE")?;
                let map = crate::input::read_walkthroughs(path)?;
                // The threshold is checked here, before any task is looked up.
                ExpertWalkthrough::with_threshold(&[][..], args.threshold)?;
                Detector::Walkthrough {
                    map,
                    threshold: args.threshold,
                }
            }
            "discover" => Detector::Discover(Box::new(MilestoneDiscovery::new(DiscoveryConfig::default())?)),
            name => {
                let preset: DetectorPreset = name.parse()?;
                Detector::Transitions(Box::new(preset.build()?))
            }
        })
    }

    /// `--detector discover` works from actions, responses and outcomes only: every score,
    /// per-step reward, milestone flag and subgoal list is dropped before anything reads it.
    pub(crate) fn prepare(&self, records: &mut [TrajectoryRecord]) {
        if !matches!(self, Detector::Discover(_)) {
            return;
        }
        for r in records {
            r.initial_score = None;
            for s in &mut r.steps {
                s.score = None;
                s.reward = 0.0;
                s.milestone = None;
                s.new_subgoals = None;
            }
        }
    }

    /// One milestone flag per row of `rb`.
    pub(crate) fn flags(&mut self, rb: &RecordBatch<'_>) -> Result<Vec<bool>, BoxError> {
        match self {
            Detector::Transitions(d) => Ok(detect_milestones(rb.batch(), d, |row, _| rb.transition(row))?),
            Detector::Discover(d) => Ok(d.discover_records(rb)?),
            Detector::Walkthrough { map, threshold } => {
                // Each task's own expert actions; a task without a walkthrough gets no milestone.
                let batch = rb.batch();
                let mut flags = vec![false; rb.batch().num_steps()];
                for j in 0..batch.num_trajectories() {
                    let rows = batch.trajectory_rows(j);
                    let task = &rb.records()[rb.row_location(rows[0]).0].group_id;
                    if let Some(expert) = map.get(task) {
                        let mut d = ExpertWalkthrough::with_threshold(expert, *threshold)?;
                        d.reset();
                        for &row in rows {
                            flags[row] = d.detect(&rb.transition(row));
                        }
                    }
                }
                Ok(flags)
            }
        }
    }
}
