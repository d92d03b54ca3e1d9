//! JSON Lines reading and writing, with errors located on a line and a field.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::marker::PhantomData;
use std::path::Path;

use serde_json::error::Category;

use super::sealed::{locate, Sealed};
use super::{record_error, JsonlRecord, RowRecord, TrajectoryRecord, Value};
use crate::error::{Error, Result};

/// A streaming JSON Lines reader: yields one parsed and validated record per non-blank line.
///
/// Reads line by line through one reused buffer, so memory stays constant in the file size
/// (it grows to the longest line only). Blank lines (spaces, tabs, `\r` only) are skipped but
/// counted, `\r\n` endings and a UTF-8 byte-order mark on the first line are accepted.
///
/// A malformed line yields an [`Error::Record`] naming the line and reading continues with the
/// next line; collect into `Result<Vec<_>>` to stop at the first error. An I/O error yields
/// [`Error::Io`] and ends the iteration.
///
/// ```
/// use beacon_rl::record::{JsonlReader, TrajectoryRecord};
/// use beacon_rl::Error;
///
/// let text = "\n{\"group_id\": \"g\"}\n";
/// let mut reader = JsonlReader::<_, TrajectoryRecord>::new(text.as_bytes());
/// let err = reader.next().unwrap().unwrap_err();
/// assert!(matches!(err, Error::Record { line: 2, field: Some(f), .. } if f == "traj_id"));
/// assert!(reader.next().is_none());
/// ```
#[derive(Debug)]
pub struct JsonlReader<R, T> {
    reader: R,
    buf: Vec<u8>,
    line: usize,
    finished: bool,
    record: PhantomData<fn() -> T>,
}

impl<R: BufRead, T: JsonlRecord> JsonlReader<R, T> {
    /// Wraps a buffered reader (a `BufReader<File>`, `&[u8]`, `stdin().lock()`).
    ///
    /// ```
    /// use beacon_rl::record::{JsonlReader, RowRecord};
    /// let rows = JsonlReader::<_, RowRecord>::new(&b""[..]);
    /// assert_eq!(rows.count(), 0);
    /// ```
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            buf: Vec::new(),
            line: 0,
            finished: false,
            record: PhantomData,
        }
    }

    /// Number of lines consumed so far: after a record is yielded, its 1-based line.
    ///
    /// ```
    /// use beacon_rl::record::read_trajectories;
    /// let text = "\n\n{\"group_id\": \"g\", \"traj_id\": \"a\", \"terminal_reward\": 0, \
    ///             \"steps\": [{\"action\": \"a\", \"observation\": \"o\", \"reward\": 0, \"done\": true}]}\n";
    /// let mut reader = read_trajectories(text.as_bytes());
    /// assert!(reader.next().unwrap().is_ok());
    /// assert_eq!(reader.line(), 3);
    /// ```
    pub fn line(&self) -> usize {
        self.line
    }

    /// The next record with its 1-based line number (for errors reported later, e.g. by
    /// [`group_rows`](super::group_rows)).
    ///
    /// ```
    /// use beacon_rl::record::read_rows;
    /// let text = "\n{\"uid\": \"g\", \"traj_uid\": \"a\", \"rewards\": 0, \"episode_rewards\": 1}\n";
    /// let (line, row) = read_rows(text.as_bytes()).next_numbered().unwrap()?;
    /// assert_eq!((line, row.episode_reward), (2, 1.0));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn next_numbered(&mut self) -> Option<Result<(usize, T)>> {
        while !self.finished {
            self.buf.clear();
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.finished = true,
                Ok(_) => {
                    self.line += 1;
                    let mut text = trim_ascii_whitespace(&self.buf);
                    if self.line == 1 {
                        text = text.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(text);
                    }
                    if !text.is_empty() {
                        return Some(parse_line(text, self.line).map(|r| (self.line, r)));
                    }
                }
                Err(e) => {
                    // A failing stream usually keeps failing: stop rather than loop.
                    self.finished = true;
                    let context = format!("reading line {}", self.line + 1);
                    return Some(Err(io_error(&e, &context)));
                }
            }
        }
        None
    }
}

impl<R: BufRead, T: JsonlRecord> Iterator for JsonlReader<R, T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        self.next_numbered().map(|r| r.map(|(_, rec)| rec))
    }
}

/// Streams [`TrajectoryRecord`]s from a JSON Lines reader (see [`JsonlReader`]).
///
/// ```
/// use beacon_rl::record::read_trajectories;
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
/// let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
/// let records = read_trajectories(file).collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(records.len(), 32);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn read_trajectories<R: BufRead>(reader: R) -> JsonlReader<R, TrajectoryRecord> {
    JsonlReader::new(reader)
}

/// Streams verl-agent style [`RowRecord`]s from a JSON Lines reader (see [`JsonlReader`]);
/// [`read_row_dump`](super::read_row_dump) also groups them into trajectories.
///
/// ```
/// use beacon_rl::record::read_rows;
/// let text = r#"{"uid": "g", "traj_uid": "a", "rewards": 0, "episode_rewards": 1, "anchor_obs": "s0"}"#;
/// let rows = read_rows(text.as_bytes()).collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(rows[0].anchor_obs.as_deref(), Some("s0"));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn read_rows<R: BufRead>(reader: R) -> JsonlReader<R, RowRecord> {
    JsonlReader::new(reader)
}

/// Opens a JSON Lines input: a file path, or standard input for `-`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened (the message names the path).
///
/// ```
/// use beacon_rl::record::{open_jsonl, read_trajectories};
/// use beacon_rl::Error;
///
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
/// let first = read_trajectories(open_jsonl(path)?).next().unwrap()?;
/// assert_eq!(first.group_id, "sw/find-animal/v146");
///
/// let err = open_jsonl("no/such/file.jsonl").err().unwrap();
/// assert!(matches!(err, Error::Io { kind: std::io::ErrorKind::NotFound, .. }));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn open_jsonl(path: impl AsRef<Path>) -> Result<Box<dyn BufRead>> {
    let path = path.as_ref();
    if path == Path::new("-") {
        return Ok(Box::new(io::stdin().lock()));
    }
    let file = File::open(path).map_err(|e| io_error(&e, &format!("opening {}", path.display())))?;
    Ok(Box::new(BufReader::new(file)))
}

/// Creates (or truncates) a JSON Lines output: a file path, or standard output for `-`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be created (the message names the path).
///
/// ```
/// use beacon_rl::record::{create_jsonl, open_jsonl, read_trajectories, write_jsonl, StepRecord, TrajectoryRecord};
///
/// let mut rec = TrajectoryRecord::new("g", "a", 1.0);
/// rec.steps.push(StepRecord::new("look", "A room.", 0.0, true));
/// let path = std::env::temp_dir().join(format!("beacon-doc-{}.jsonl", std::process::id()));
/// write_jsonl(create_jsonl(&path)?, [&rec])?;
/// let back = read_trajectories(open_jsonl(&path)?).collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(back, vec![rec]);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn create_jsonl(path: impl AsRef<Path>) -> Result<Box<dyn Write>> {
    let path = path.as_ref();
    if path == Path::new("-") {
        return Ok(Box::new(io::stdout().lock()));
    }
    let file = File::create(path).map_err(|e| io_error(&e, &format!("creating {}", path.display())))?;
    Ok(Box::new(BufWriter::new(file)))
}

/// Writes records as JSON Lines, one a line, and flushes; returns the number written.
///
/// Each record is validated ([`JsonlRecord::validate`], line = its 1-based position) and
/// serialized into one buffer before a single `write_all`, so an unbuffered writer is fine.
/// Records before an invalid one are already written when the error is returned.
///
/// # Errors
/// [`Error::Record`] for an invalid record, [`Error::Io`] when writing fails.
///
/// ```
/// use beacon_rl::record::{read_trajectories, write_jsonl, StepRecord, TrajectoryRecord};
///
/// let mut rec = TrajectoryRecord::new("g", "a", 1.0);
/// rec.steps.push(StepRecord::new("look", "A room.", 0.0, true));
/// let mut out = Vec::new();
/// assert_eq!(write_jsonl(&mut out, [&rec, &rec])?, 2);
/// assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 2);
/// let back = read_trajectories(&out[..]).collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(back, vec![rec.clone(), rec]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn write_jsonl<'r, W, T, I>(mut writer: W, records: I) -> Result<usize>
where
    W: Write,
    T: JsonlRecord + 'r,
    I: IntoIterator<Item = &'r T>,
{
    let mut buf = Vec::new();
    let mut written = 0;
    for (i, record) in records.into_iter().enumerate() {
        buf.clear();
        encode(record, i + 1, &mut buf)?;
        buf.push(b'\n');
        writer
            .write_all(&buf)
            .map_err(|e| io_error(&e, &format!("writing record {}", i + 1)))?;
        written += 1;
    }
    writer.flush().map_err(|e| io_error(&e, "flushing output"))?;
    Ok(written)
}

/// Validates `record` and appends its JSON (no line break) to `buf`.
pub(crate) fn encode<T: JsonlRecord>(record: &T, line: usize, buf: &mut Vec<u8>) -> Result<()> {
    record.validate(line)?;
    serde_json::to_writer(&mut *buf, record).map_err(|e| record_error(line, None, e.to_string()))
}

/// Parses one line (trimmed, non-empty) into a validated record.
pub(crate) fn parse_line<T: JsonlRecord>(text: &[u8], line: usize) -> Result<T> {
    match serde_json::from_slice::<T>(text) {
        Ok(record) => {
            record.validate(line)?;
            Ok(record)
        }
        Err(e) => Err(describe::<T>(&e, text, line)),
    }
}

/// Turns a serde_json error on `text` into an [`Error::Record`] with the best field path.
fn describe<T: Sealed>(e: &serde_json::Error, text: &[u8], line: usize) -> Error {
    let message = strip_position(e);
    match e.classify() {
        Category::Data => {
            // serde_json does not say which field a type error is on: re-check the line
            // against the schema (error path only) to find it.
            let located = serde_json::from_slice::<Value>(text)
                .ok()
                .and_then(|v| locate(&v, T::SCHEMA, ""));
            match located {
                Some((field, message)) => record_error(line, field, message),
                None => record_error(line, backticked(&message), message),
            }
        }
        Category::Syntax | Category::Eof | Category::Io => match bad_number(text, e) {
            Some(token) => {
                let field = field_of_token(text, token.clone());
                let shown = String::from_utf8_lossy(&text[token]);
                let why = if message.starts_with("number out of range") {
                    "is out of range for a 64-bit float"
                } else {
                    "is not a JSON number (JSON has no NaN or Infinity)"
                };
                record_error(line, field, format!("`{shown}` {why}"))
            }
            None => record_error(
                line,
                None,
                format!("invalid JSON at column {}: {message}", e.column()),
            ),
        },
    }
}

/// The message without serde_json's " at line 1 column N" suffix (the line is ours).
fn strip_position(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    }
}

/// The first `name` in a serde message like "missing field `name`" or "duplicate field `name`".
fn backticked(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

/// Byte range of a non-finite literal (`NaN`, `-Infinity`, `inf`) or an out-of-range number
/// at the syntax error's position, if that is what the error is about.
fn bad_number(text: &[u8], e: &serde_json::Error) -> Option<std::ops::Range<usize>> {
    // serde_json reports a 1-based byte column on the offending byte (line 1: one record a line).
    if e.line() != 1 || e.column() == 0 {
        return None;
    }
    let at = (e.column() - 1).min(text.len().checked_sub(1)?);
    let is_token = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.');
    if !is_token(text[at]) {
        return None;
    }
    let start = text[..at]
        .iter()
        .rposition(|&b| !is_token(b))
        .map_or(0, |i| i + 1);
    let end = text[at..]
        .iter()
        .position(|&b| !is_token(b))
        .map_or(text.len(), |i| at + i);
    let token = std::str::from_utf8(&text[start..end]).ok()?;
    let unsigned = token.trim_start_matches(['+', '-']).to_ascii_lowercase();
    let non_finite = matches!(unsigned.as_str(), "nan" | "inf" | "infinity");
    let out_of_range = strip_position(e).starts_with("number out of range");
    (non_finite || out_of_range).then_some(start..end)
}

/// The path of the value at `token` (a bad number): replace it by a marker string, replace any
/// further bad numbers by `null`, parse, and find the marker.
fn field_of_token(text: &[u8], token: std::ops::Range<usize>) -> Option<String> {
    const MARKER: &str = "\u{0}beacon-rl bad number\u{0}";
    let mut patched = Vec::with_capacity(text.len() + MARKER.len() + 8);
    patched.extend_from_slice(&text[..token.start]);
    patched.extend_from_slice(br#""\u0000beacon-rl bad number\u0000""#);
    patched.extend_from_slice(&text[token.end..]);
    // Bounded: each round removes one bad literal; give up after a few dozen.
    for _ in 0..64 {
        match serde_json::from_slice::<Value>(&patched) {
            Ok(value) => return path_of(&value, MARKER, &mut String::new()),
            Err(e) => {
                let next = bad_number(&patched, &e)?;
                patched.splice(next, b"null".iter().copied());
            }
        }
    }
    None
}

fn path_of(value: &Value, marker: &str, path: &mut String) -> Option<String> {
    match value {
        Value::String(s) if s == marker => Some(path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = path_of(v, marker, path);
            path.truncate(len);
            found
        }),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(k);
            let found = path_of(v, marker, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

fn trim_ascii_whitespace(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// An [`Error::Io`] with what was being done.
pub(crate) fn io_error(e: &io::Error, context: &str) -> Error {
    Error::Io {
        kind: e.kind(),
        message: format!("{context}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_of(text: &str) -> Error {
        parse_line::<TrajectoryRecord>(text.as_bytes(), 9).unwrap_err()
    }

    fn field(e: &Error) -> Option<&str> {
        match e {
            Error::Record { field, .. } => field.as_deref(),
            _ => panic!("not a record error: {e:?}"),
        }
    }

    #[test]
    fn non_finite_literals_are_located_even_with_several() {
        let e = err_of(r#"{"a": [1, -Infinity], "b": {"c": NaN}, "d": inf}"#);
        assert_eq!(field(&e), Some("a[1]"));
        let Error::Record { message, line, .. } = &e else {
            unreachable!()
        };
        assert_eq!(*line, 9);
        assert!(message.contains("`-Infinity`"), "{message}");
    }

    #[test]
    fn out_of_range_number_is_located() {
        let e = err_of(r#"{"x": "NaN", "y": {"z": 1e400}}"#);
        assert_eq!(field(&e), Some("y.z"));
    }

    #[test]
    fn other_syntax_errors_have_no_field() {
        for text in [r#"{"a": 1"#, r#"{"a" 1}"#, r#"{"a": tru}"#, r#"{"a": Nope}"#] {
            let e = err_of(text);
            assert_eq!(field(&e), None, "{text}");
        }
    }

    #[test]
    fn backticked_name() {
        assert_eq!(backticked("duplicate field `reward`"), Some("reward".into()));
        assert_eq!(backticked("no name"), None);
    }

    #[test]
    fn trims_ascii_whitespace() {
        assert_eq!(trim_ascii_whitespace(b" \t{}\r\n"), b"{}");
        assert_eq!(trim_ascii_whitespace(b" \r\n"), b"");
    }
}
