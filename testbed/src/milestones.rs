use beacon_rl::{Error, Result};

/// One step as text: the observation the agent acted on, its action, and the observation it
/// got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepText<'a> {
    /// The observation before the action (s_t).
    pub observation: &'a str,
    /// The action (a_t).
    pub action: &'a str,
    /// The observation after the action (s_{t+1}).
    pub next_observation: &'a str,
}

/// One episode as text plus its success: everything a detector may read.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeText<'a> {
    /// The steps in order.
    pub steps: Vec<StepText<'a>>,
    /// Whether the episode reached the goal (terminal reward 1).
    pub success: bool,
}

/// A milestone detector over one task group: returns, for each episode of `group` in order, one
/// flag per step (true = that step completes a milestone).
pub trait MilestoneLabeler {
    /// Flags for every step of every episode of the group.
    fn label(&mut self, group: &[EpisodeText<'_>]) -> Vec<Vec<bool>>;
}

impl<F: FnMut(&[EpisodeText<'_>]) -> Vec<Vec<bool>>> MilestoneLabeler for F {
    fn label(&mut self, group: &[EpisodeText<'_>]) -> Vec<Vec<bool>> {
        self(group)
    }
}

/// The milestone flags the trainer hands to the estimators that read them (the BEACON family
/// and the GiGPO-with-milestone-rewards control).
///
/// Where the trainer's milestone flags come from: the environment's true signal, nothing, or
/// a caller's detector that reads only what an LLM trainer would have (text and success).
///
/// A detector plugs in as a [`MilestoneLabeler`]: it receives one task group at a time (the G
/// episodes of one task, as [`EpisodeText`]s) and returns one flag per step of each episode.
/// Any `FnMut(&[EpisodeText<'_>]) -> Vec<Vec<bool>>` is a labeler:
///
/// ```
/// use beacon_rl_testbed::{EpisodeText, MilestoneSource};
/// // Flag every step whose action text starts with "open door".
/// let source = MilestoneSource::custom(|group: &[EpisodeText<'_>]| {
///     group
///         .iter()
///         .map(|ep| ep.steps.iter().map(|s| s.action.starts_with("open door")).collect())
///         .collect()
/// });
/// assert_eq!(source.name(), "custom");
/// ```
pub enum MilestoneSource {
    /// The environment's own signal: a door passed for the first time (and the decoy).
    Env,
    /// The environment's signal for the real doors only: on the decoy variant the trapdoor is
    /// not a milestone (on the key chain this is [`Env`](Self::Env)).
    EnvDoors,
    /// No milestones at all (BEACON then reduces to its trajectory term).
    None,
    /// A caller's detector over text and success.
    Custom(Box<dyn MilestoneLabeler>),
}

impl std::fmt::Debug for MilestoneSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl MilestoneSource {
    /// Wraps a detector.
    pub fn custom(labeler: impl MilestoneLabeler + 'static) -> Self {
        Self::Custom(Box::new(labeler))
    }

    /// `env`, `env_doors`, `none` or `custom`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Env => "env",
            Self::EnvDoors => "env_doors",
            Self::None => "none",
            Self::Custom(_) => "custom",
        }
    }
}

/// Runs a labeler on one group and writes its flags into `out` (the group's steps, episode after
/// episode, `lens[j]` steps each).
///
/// # Errors
/// [`Error::LengthMismatch`] when the labeler returns the wrong
/// number of episodes or of flags for an episode.
pub(crate) fn label_group(
    labeler: &mut dyn MilestoneLabeler,
    group: &[EpisodeText<'_>],
    out: &mut [bool],
) -> Result<()> {
    let flags = labeler.label(group);
    check_len("milestone labeler episodes", group.len(), flags.len())?;
    let mut at = 0;
    for (ep, f) in group.iter().zip(&flags) {
        check_len("milestone labeler flags of an episode", ep.steps.len(), f.len())?;
        out[at..at + f.len()].copy_from_slice(f);
        at += f.len();
    }
    Ok(())
}

/// [`Error::LengthMismatch`] unless `actual` is `expected`.
fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(action: &str) -> StepText<'_> {
        StepText {
            observation: "o",
            action,
            next_observation: "o'",
        }
    }

    #[test]
    fn closure_labels_and_wrong_lengths_are_errors() {
        let group = [
            EpisodeText {
                steps: vec![step("wander"), step("open door 0")],
                success: false,
            },
            EpisodeText {
                steps: vec![step("open door 0")],
                success: true,
            },
        ];
        let mut by_text = |g: &[EpisodeText<'_>]| -> Vec<Vec<bool>> {
            g.iter()
                .map(|e| e.steps.iter().map(|s| s.action.starts_with("open")).collect())
                .collect()
        };
        let mut out = [false; 3];
        label_group(&mut by_text, &group, &mut out).unwrap();
        assert_eq!(out, [false, true, true]);
        let mut short = |_: &[EpisodeText<'_>]| vec![vec![true]];
        assert!(label_group(&mut short, &group, &mut out).is_err());
        let mut ragged = |_: &[EpisodeText<'_>]| vec![vec![true], vec![true]];
        assert!(label_group(&mut ragged, &group, &mut out).is_err());
    }
}
