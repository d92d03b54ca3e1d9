//! What a run computes for each chunk of the input: the estimator, its parts (BEACON's and
//! GiGPO's) and the diagnostics, handed to the chosen output.

use std::io::Write;

use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
use beacon_rl::estimator::{AdvantageEstimator, Beacon, EstimatorConfig, Gigpo};
use beacon_rl::record::{RecordBatch, TrajectoryRecord};
use serde_json::json;

use crate::args::Format;
use crate::detector::Detector;
use crate::jsonl::write_jsonl;
use crate::table::Table;
use crate::BoxError;

/// What the run computes and prints, for each chunk of the input (a group, or everything).
pub(crate) struct Run<'a> {
    pub(crate) config: &'a EstimatorConfig,
    pub(crate) estimator: &'a dyn AdvantageEstimator,
    pub(crate) beside: Option<&'a dyn AdvantageEstimator>,
    pub(crate) format: Format,
    pub(crate) diagnostics: bool,
    /// GiGPO step groups of the chunks before: its labels are numbered over the whole input.
    pub(crate) step_groups_before: std::cell::Cell<usize>,
}

impl Run<'_> {
    pub(crate) fn chunk(
        &self,
        records: &[TrajectoryRecord],
        detector: &mut Detector,
        out: &mut impl Write,
        table: &mut Table,
    ) -> Result<(), BoxError> {
        if records.is_empty() {
            return Ok(());
        }
        let rb = RecordBatch::new(records)?;
        let flags = detector.flags(&rb)?;
        let input = rb.input(&flags);
        // `RecordBatch::input` sets both columns.
        let (step_rewards, anchor_obs) = (
            input.step_rewards.unwrap_or_default(),
            input.anchor_obs.unwrap_or_default(),
        );
        // BEACON and GiGPO are run once, for their parts; their advantages are among them.
        let parts = parts(self.config, &rb, step_rewards, anchor_obs, &flags)?;
        let estimated;
        let adv: &[f64] = match &parts {
            Parts::Beacon(p) => &p.advantages,
            Parts::Gigpo(p) => &p.advantages,
            Parts::None => {
                estimated = self.estimator.estimate(&input)?.advantages.column(0).to_vec();
                &estimated
            }
        };
        match self.format {
            Format::Jsonl => write_jsonl(out, &rb, adv, &flags, &parts, self.step_groups_before.get())?,
            Format::Table => {
                let beside = match self.beside {
                    None => None,
                    Some(other) => Some(other.estimate(&input)?.advantages.column(0).to_vec()),
                };
                table.add(&rb, adv, &flags, beside.as_deref())?
            }
        }
        if self.diagnostics {
            // State key: (task, observation before the step); action key: the action text.
            let states: Vec<(&str, &str)> = (0..rb.batch().num_steps())
                .map(|row| (records[rb.row_location(row).0].group_id.as_str(), anchor_obs[row]))
                .collect();
            let actions: Vec<&str> = (0..rb.batch().num_steps())
                .map(|row| rb.transition(row).action)
                .collect();
            let diag = Diagnostics::new(
                rb.batch(),
                &states,
                &actions,
                &flags,
                DiagnosticsConfig::default(),
            )?;
            let report = diag.report(adv)?;
            if self.format == Format::Jsonl {
                writeln!(out, "{}", json!({ "diagnostics": report }))?;
            } else {
                table.diagnostics = Some(format!("\ndiagnostics ({}):\n{report}", self.estimator.name()));
            }
        }
        if let Parts::Gigpo(p) = &parts {
            self.step_groups_before
                .set(self.step_groups_before.get() + p.num_step_groups);
        }
        Ok(())
    }
}

/// The parts behind the advantage for the estimators that have them, per row.
pub(crate) enum Parts {
    None,
    Beacon(beacon_rl::estimator::BeaconOutput),
    Gigpo(beacon_rl::estimator::GigpoOutput),
}

pub(crate) fn parts(
    config: &EstimatorConfig,
    rb: &RecordBatch<'_>,
    step_rewards: &[f64],
    anchors: &[&str],
    flags: &[bool],
) -> Result<Parts, BoxError> {
    Ok(match config {
        EstimatorConfig::Beacon(c) => Parts::Beacon(Beacon::new(*c)?.compute(rb.batch(), flags)?),
        EstimatorConfig::Gigpo(c) => {
            Parts::Gigpo(Gigpo::new(*c)?.compute(rb.batch(), step_rewards, anchors)?)
        }
        _ => Parts::None,
    })
}
