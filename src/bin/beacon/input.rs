//! The inputs of a run: the trajectories (files, stdin, the bundled sample), read and parsed on a
//! second thread group by group, and the expert-walkthrough file.

use std::io::{BufRead, Read};
use std::sync::mpsc;

use beacon_rl::milestone::WalkthroughMap;
use beacon_rl::record::{read_trajectories, RecordGroup, TrajectoryGroups};

use crate::BoxError;

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

/// The most bytes of a walkthrough file read: about ten times the expert walkthroughs of
/// every ALFWorld training task. A longer file (or an endless one, such as a named pipe) is
/// refused once this many bytes were read, instead of growing memory until the process aborts.
const MAX_WALKTHROUGH_BYTES: usize = 32 << 20;

/// Reads the expert-walkthrough JSON file at `path` (at most `MAX_WALKTHROUGH_BYTES`).
pub(crate) fn read_walkthroughs(path: &str) -> Result<WalkthroughMap, BoxError> {
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let text = read_capped(file, MAX_WALKTHROUGH_BYTES).map_err(|e| format!("{path}: {e}"))?;
    text.parse().map_err(|e| format!("{path}: {e}").into())
}

/// The whole of `reader` as text, or an error once more than `limit` bytes were read.
fn read_capped(reader: impl Read, limit: usize) -> Result<String, String> {
    let mut text = String::new();
    // One byte past the limit: reading it means the input is longer than the limit.
    let read = reader
        .take(limit as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if read > limit {
        return Err(format!(
            "longer than {limit} bytes, the most a walkthrough file may have"
        ));
    }
    Ok(text)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walkthrough_file_is_read_up_to_its_limit_and_no_further() {
        let doc = |len: usize| {
            let mut text = br#"{"t": ["x"]}"#.to_vec();
            text.resize(len, b' ');
            text
        };
        let text = read_capped(&doc(64)[..], 64).unwrap();
        assert_eq!(
            text.parse::<WalkthroughMap>().unwrap().get("t"),
            Some(&["x".to_string()][..])
        );
        let err = read_capped(&doc(65)[..], 64).unwrap_err();
        assert_eq!(err, "longer than 64 bytes, the most a walkthrough file may have");
        // An endless input (a JSON string that never closes) stops at the limit.
        let endless = (&br#"{"t": [""#[..]).chain(std::io::repeat(b'a'));
        assert!(read_capped(endless, MAX_WALKTHROUGH_BYTES).is_err());
        assert!(read_capped(&[0xff, 0xfe][..], 64).unwrap_err().contains("UTF-8"));
    }
}
