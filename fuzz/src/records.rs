//! Oracle of the `records` fuzz target: the JSON Lines readers on arbitrary bytes.
//!
//! Oracles: no panic (every malformed line is a typed error); the records that read back
//! are valid, so `write_jsonl` accepts them, and `read → write → read` gives equal records
//! and a second write gives the same bytes; a `RecordBatch` over them has one row per step,
//! runs every preset detector and feeds the step-level estimators through the estimator
//! oracle; a row dump that groups also writes; the group-by-group reader (contiguous or
//! interleaved) yields valid groups of one `group_id`, and when it reads the whole input
//! without error its groups, concatenated, are exactly the records read line by line; a
//! short line limit is an error, never a panic.

use beacon_rl::estimator::EstimatorConfig;
use beacon_rl::milestone::{detect_milestones, DetectorPreset};
use beacon_rl::record::{
    read_row_dump, read_trajectories, write_jsonl, JsonlReader, RecordBatch, TrajectoryGroups,
    TrajectoryRecord,
};

/// Runs one fuzz input through the oracles; panics on a violation.
pub fn run(data: &[u8]) {
    // Errors are kept to format them: their messages quote the input.
    let (mut records, mut errors) = (Vec::new(), 0);
    for next in read_trajectories(data) {
        match next {
            Ok(rec) => records.push(rec),
            Err(e) => {
                errors += 1;
                drop(e.to_string());
            }
        }
    }

    let mut written = Vec::new();
    let n = write_jsonl(&mut written, &records).expect("records that were read are valid");
    assert_eq!(n, records.len());
    let back = read_trajectories(&written[..])
        .collect::<Result<Vec<_>, _>>()
        .expect("written records read back");
    assert_eq!(back, records, "read -> write -> read changed the records");
    let mut again = Vec::new();
    write_jsonl(&mut again, &back).expect("records that were read are valid");
    assert_eq!(again, written, "writing the re-read records gave other bytes");

    if let Ok(rb) = RecordBatch::new(&records) {
        let steps: usize = records.iter().map(|r| r.steps.len()).sum();
        assert_eq!(rb.batch().num_steps(), steps);
        let mut milestones = vec![false; steps];
        for preset in DetectorPreset::ALL {
            // The presets that need per-task input refuse to build without it.
            let Ok(mut detector) = preset.build() else {
                continue;
            };
            let flags = detect_milestones(rb.batch(), &mut detector, |row, _| rb.transition(row))
                .expect("records back every row");
            assert_eq!(flags.len(), steps, "{preset}");
            milestones.iter_mut().zip(&flags).for_each(|(m, &f)| *m |= f);
        }
        let input = rb.input(&milestones);
        for name in ["grpo", "gigpo", "beacon", "beacon_official"] {
            let est = name.parse::<EstimatorConfig>().and_then(|c| c.build());
            let est = est.expect("default configurations build");
            super::estimators::check_estimator(&*est, &input, 0);
        }
    }

    check_groups(TrajectoryGroups::new([read_trajectories(data)]), &records, errors);
    check_groups(
        TrajectoryGroups::new([read_trajectories(data)]).allow_interleaved(),
        &records,
        errors,
    );
    let limited = JsonlReader::<_, TrajectoryRecord>::new(data).with_max_line_bytes(64);
    limited.for_each(|r| drop(r.map_err(|e| e.to_string())));

    if let Ok(trajectories) = read_row_dump(data) {
        let mut out = Vec::new();
        write_jsonl(&mut out, &trajectories).expect("grouped rows are valid records");
    }
}

/// Every group the reader yields is valid and of one `group_id`; if it reaches the end
/// without an error, and every line was a valid record, the groups hold the same records in
/// the same order.
fn check_groups<R: std::io::BufRead>(
    groups: TrajectoryGroups<R>,
    records: &[TrajectoryRecord],
    errors: usize,
) {
    let mut flat = Vec::new();
    let mut failed = false;
    for group in groups {
        let Ok(group) = group else {
            failed = true;
            break;
        };
        assert!(!group.records.is_empty(), "an empty group");
        let id = group.records[0].group_id.clone();
        assert!(
            group.records.iter().all(|r| r.group_id == id),
            "a group mixes group_ids"
        );
        assert_eq!(group.lines.len(), group.records.len());
        RecordBatch::new(&group.records).expect("a group from the reader lays out as a batch");
        flat.extend(group.records);
    }
    if !failed && errors == 0 {
        assert_eq!(flat, records, "groups differ from the records read line by line");
    }
}
