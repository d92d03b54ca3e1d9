//! The inputs of a run (files, stdin, the bundled sample), read and parsed on a second
//! thread group by group.

use std::io::BufRead;
use std::sync::mpsc;

use beacon_rl::record::{read_trajectories, RecordGroup, TrajectoryGroups};

/// The sample read when no file is given, built into the program so that an installed
/// `beacon` has it too.
pub(crate) const BUNDLED: &str = include_str!("../../../data/sample_trajectories.jsonl");
/// How errors name the bundled sample.
pub(crate) const BUNDLED_NAME: &str = "the bundled sample (data/sample_trajectories.jsonl)";

/// An input of the run: a file (`-` for stdin) or the sample built into the program.
#[derive(Clone, Debug)]
pub(crate) enum Input {
    Path(String),
    Bundled,
}

impl Input {
    pub(crate) fn name(&self) -> &str {
        match self {
            Input::Path(p) => p,
            Input::Bundled => BUNDLED_NAME,
        }
    }

    pub(crate) fn open(&self) -> beacon_rl::Result<Box<dyn BufRead>> {
        match self {
            Input::Path(p) => open_jsonl(p),
            Input::Bundled => Ok(Box::new(BUNDLED.as_bytes())),
        }
    }
}

/// Opens a JSON Lines input: a file path, or standard input for `-`.
fn open_jsonl(path: &str) -> beacon_rl::Result<Box<dyn BufRead>> {
    if path == "-" {
        return Ok(Box::new(std::io::stdin().lock()));
    }
    let file = std::fs::File::open(path).map_err(|e| beacon_rl::Error::Io {
        kind: e.kind(),
        message: format!("opening {path}: {e}"),
    })?;
    Ok(Box::new(std::io::BufReader::new(file)))
}

/// Groups read and parsed on a second thread while this one computes and writes: parsing
/// is most of the work. A few groups are in flight at most (bounded channel), so memory stays
/// that of a few groups; groups sent back on the second channel once written are recycled
/// (`TrajectoryGroups::recycle`), so that reading allocates almost nothing per line and this
/// thread frees nothing the other allocated. `interleaved`: yield runs without the
/// contiguity rule.
pub(crate) fn read_in_background(
    inputs: Vec<Input>,
    max_line_bytes: usize,
    interleaved: bool,
) -> (
    mpsc::Receiver<beacon_rl::Result<RecordGroup>>,
    mpsc::Sender<RecordGroup>,
) {
    let (tx, rx) = mpsc::sync_channel(4);
    let (done, back) = mpsc::channel::<RecordGroup>();
    std::thread::spawn(move || {
        let mut readers = Vec::with_capacity(inputs.len());
        // Every file is opened before any is read, so a missing file fails before output.
        for input in &inputs {
            match input.open() {
                Ok(reader) => readers.push(
                    read_trajectories(reader)
                        .with_source(input.name())
                        .with_max_line_bytes(max_line_bytes),
                ),
                Err(e) => {
                    // The receiver may be gone already: nothing left to tell.
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        let groups = TrajectoryGroups::new(readers);
        let mut groups = if interleaved {
            groups.allow_interleaved()
        } else {
            groups
        };
        loop {
            while let Ok(used) = back.try_recv() {
                groups.recycle(used);
            }
            let Some(group) = groups.next() else { return };
            if tx.send(group).is_err() {
                return;
            }
        }
    });
    (rx, done)
}
