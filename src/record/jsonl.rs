//! JSON Lines reading and writing, with errors located on a line and a field.

use std::io::{self, BufRead, Read, Write};
use std::marker::PhantomData;

use serde_json::error::Category;

use super::sealed::Sealed;
use super::{record_error, JsonlRecord, RowRecord, TrajectoryRecord, Value};
use crate::error::{Error, Result};

/// A streaming JSON Lines reader: yields one parsed and validated record per non-blank line.
///
/// Reads line by line through one reused buffer, so memory stays constant in the file size
/// (it grows to the longest line only, and a line longer than the limit,
/// [`DEFAULT_MAX_LINE_BYTES`](Self::DEFAULT_MAX_LINE_BYTES) unless set with
/// [`with_max_line_bytes`](JsonlReader::with_max_line_bytes), is an [`Error::LineTooLong`]
/// that ends the iteration). Blank lines (spaces, tabs, `\r` only) are skipped but counted,
/// `\r\n` endings and a UTF-8 byte-order mark on the first line are accepted.
///
/// A malformed line yields an [`Error::Record`] naming the line (and the input, when given
/// with [`with_source`](JsonlReader::with_source)) and reading continues with the next line;
/// collect into `Result<Vec<_>>` to stop at the first error. An I/O error yields
/// [`Error::Io`] and ends the iteration.
///
/// ```
/// use beacon_rl::record::{JsonlReader, TrajectoryRecord};
/// use beacon_rl::Error;
///
/// let text = "\n{\"group_id\": \"g\"}\n";
/// let mut reader = JsonlReader::<_, TrajectoryRecord>::new(text.as_bytes()).with_source("runs.jsonl");
/// let err = reader.next().unwrap().unwrap_err();
/// assert!(matches!(&err, Error::Record { line: 2, field: Some(f), .. } if f == "traj_id"));
/// assert!(err.to_string().starts_with("record at line 2 of runs.jsonl"));
/// assert!(reader.next().is_none());
/// ```
#[derive(Debug)]
pub struct JsonlReader<R, T> {
    reader: R,
    buf: Vec<u8>,
    line: usize,
    finished: bool,
    max_line: usize,
    source: Option<String>,
    record: PhantomData<fn() -> T>,
}

impl<R, T> JsonlReader<R, T> {
    /// The default maximum line length: 64 MiB. A trajectory of 1,000 steps with 10 kB
    /// observations is 10 MB; a longer line is more likely a stream without line breaks
    /// (`/dev/zero`, a binary file) than a record, and is refused before it fills memory. The
    /// value does not depend on the type parameters: `JsonlReader::<(), ()>::DEFAULT_MAX_LINE_BYTES`.
    pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;
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
            max_line: Self::DEFAULT_MAX_LINE_BYTES,
            source: None,
            record: PhantomData,
        }
    }

    /// Sets the maximum line length in bytes (line break not counted; default
    /// [`DEFAULT_MAX_LINE_BYTES`](Self::DEFAULT_MAX_LINE_BYTES)). A longer line is an [`Error::LineTooLong`] and ends the
    /// iteration: at most `max + 1` bytes of it are read.
    ///
    /// ```
    /// use beacon_rl::record::read_trajectories;
    /// use beacon_rl::Error;
    /// let mut reader = read_trajectories(&[b'x'; 100][..]).with_max_line_bytes(10);
    /// let err = reader.next().unwrap().unwrap_err();
    /// assert!(matches!(err, Error::LineTooLong { line: 1, limit: 10, .. }));
    /// assert!(reader.next().is_none());
    /// ```
    #[must_use]
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line = max;
        self
    }

    /// Names the input (a file path, `-` for stdin) in the errors of this reader.
    ///
    /// ```
    /// use beacon_rl::record::read_trajectories;
    /// use beacon_rl::Error;
    /// let err = read_trajectories(&b"{}"[..]).with_source("a.jsonl").next().unwrap().unwrap_err();
    /// assert!(matches!(err, Error::Record { file: Some(f), line: 1, .. } if f == "a.jsonl"));
    /// ```
    #[must_use]
    pub fn with_source(mut self, name: impl Into<String>) -> Self {
        self.source = Some(name.into());
        self
    }

    /// The input's name, if given with [`with_source`](JsonlReader::with_source).
    pub(crate) fn source(&self) -> Option<&str> {
        self.source.as_deref()
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

    /// The next record with its 1-based line number; `None` at the end of the input.
    pub(crate) fn next_numbered(&mut self) -> Option<Result<(usize, T)>> {
        self.next_reusing(None)
    }

    /// `next_numbered`, reading the record into `reuse`'s allocations
    /// (its strings and lists) when it can.
    pub(crate) fn next_reusing(&mut self, mut reuse: Option<T>) -> Option<Result<(usize, T)>> {
        while !self.finished {
            self.buf.clear();
            // At most max + 1 bytes: a line break within them ends the line, else it is too long.
            let limit = (self.max_line as u64).saturating_add(1);
            match (&mut self.reader).take(limit).read_until(b'\n', &mut self.buf) {
                Ok(0) => self.finished = true,
                Ok(_) => {
                    self.line += 1;
                    let body = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
                    if body.len() > self.max_line {
                        self.finished = true;
                        return Some(Err(Error::LineTooLong {
                            file: self.source.clone(),
                            line: self.line,
                            limit: self.max_line,
                        }));
                    }
                    let mut text = trim_ascii_whitespace(body);
                    if self.line == 1 {
                        text = text.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(text);
                    }
                    if !text.is_empty() {
                        let parsed = parse_line_reusing(text, self.line, reuse.take())
                            .map_err(|e| in_file(e, &self.source));
                        return Some(parsed.map(|r| (self.line, r)));
                    }
                }
                Err(e) => {
                    // A failing stream usually keeps failing: stop rather than loop.
                    self.finished = true;
                    let context = match &self.source {
                        Some(f) => format!("reading line {} of {f}", self.line + 1),
                        None => format!("reading line {}", self.line + 1),
                    };
                    return Some(Err(io_error(&e, &context)));
                }
            }
        }
        None
    }
}

/// Puts the input's name into a record error that has none.
pub(crate) fn in_file(e: Error, source: &Option<String>) -> Error {
    match e {
        Error::Record {
            file: None,
            line,
            field,
            message,
        } => Error::Record {
            file: source.clone(),
            line,
            field,
            message,
        },
        other => other,
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

/// Reads a verl-agent style row dump, one [`RowRecord`] a line (grouped by [`read_row_dump`](super::read_row_dump)).
pub(crate) fn read_rows<R: BufRead>(reader: R) -> JsonlReader<R, RowRecord> {
    JsonlReader::new(reader)
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
    parse_line_reusing(text, line, None)
}

/// [`parse_line`], reading into `reuse`'s allocations when it can.
fn parse_line_reusing<T: JsonlRecord>(text: &[u8], line: usize, reuse: Option<T>) -> Result<T> {
    // One UTF-8 check of the whole line, then serde_json's `str` reader (which checks no
    // string again), borrowing the unknown fields' text.
    let checked = match std::str::from_utf8(text) {
        Ok(s) => s,
        Err(e) => {
            let at = e.valid_up_to();
            return Err(record_error(
                line,
                path_at(text, at),
                format!("invalid UTF-8 at byte {} of the line", at + 1),
            ));
        }
    };
    // The hand-written reader first (trajectory lines); serde for anything it leaves.
    if let Some(record) = T::parse_fast(checked, reuse) {
        record.validate_values(line)?;
        return Ok(record);
    }
    match super::de::from_str_borrowing::<T>(checked) {
        Ok(record) => {
            // Read records cannot hold a named key in `extra`: only the values are checked.
            record.validate_values(line)?;
            Ok(record)
        }
        Err(e) => Err(describe::<T>(&e, text, line)),
    }
}

/// Turns a serde_json error on `text` into an [`Error::Record`] with the best field path.
///
/// Linear in the line: at most one more parse (for a type error) and one scan.
fn describe<T: Sealed>(e: &serde_json::Error, text: &[u8], line: usize) -> Error {
    let message = strip_position(e);
    match e.classify() {
        Category::Data => {
            // serde_json does not say which field a type error is on: re-check the line
            // against the schema (error path only) to find it.
            count_pass();
            let located = serde_json::from_slice::<Value>(text)
                .ok()
                .and_then(|v| T::locate(&v));
            match located {
                Some((field, message)) => record_error(line, field, message),
                // A repeated key is raised right after the key: the path there names it.
                None if message.starts_with("duplicate field") => {
                    let field = error_offset(text, e).and_then(|at| path_at(text, at));
                    record_error(line, field.or_else(|| backticked(&message)), message)
                }
                None => record_error(line, backticked(&message), message),
            }
        }
        Category::Syntax | Category::Eof | Category::Io => match bad_number(text, e) {
            Some(token) => {
                let field = path_at(text, token.start);
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

#[cfg(test)]
thread_local! {
    /// Full re-parses of a line on the error path (tests check the path stays linear).
    static PASSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_pass() {
    #[cfg(test)]
    PASSES.with(|p| p.set(p.get() + 1));
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

/// The 0-based byte offset serde_json's error points at (its 1-based column on line 1: one
/// record a line).
fn error_offset(text: &[u8], e: &serde_json::Error) -> Option<usize> {
    if e.line() != 1 || e.column() == 0 {
        return None;
    }
    Some((e.column() - 1).min(text.len().checked_sub(1)?))
}

/// Byte range of a non-finite literal (`NaN`, `-Infinity`, `inf`) or an out-of-range number
/// at the syntax error's position, if that is what the error is about.
fn bad_number(text: &[u8], e: &serde_json::Error) -> Option<std::ops::Range<usize>> {
    let at = error_offset(text, e)?;
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

/// The field path (`steps[3].reward`) of the value at byte `at` of a line whose bytes before
/// `at` are valid JSON so far (serde_json read them): one scan of `text[..at]` keeping the
/// stack of open objects (with their current key) and lists (with their current index).
fn path_at(text: &[u8], at: usize) -> Option<String> {
    enum Frame {
        /// An object and the byte range of its current key (with quotes), if any.
        Object(Option<std::ops::Range<usize>>),
        /// A list and its current index.
        List(usize),
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < at.min(text.len()) {
        match text[i] {
            b'"' => {
                let end = super::extra::string_end(text, i)?;
                if let (true, Some(Frame::Object(key))) = (expect_key, stack.last_mut()) {
                    *key = Some(i..end + 1);
                    expect_key = false;
                }
                i = end;
            }
            b'{' => {
                stack.push(Frame::Object(None));
                expect_key = true;
            }
            b'[' => {
                stack.push(Frame::List(0));
                expect_key = false;
            }
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
            }
            b',' => match stack.last_mut() {
                Some(Frame::List(index)) => *index += 1,
                Some(Frame::Object(key)) => {
                    *key = None;
                    expect_key = true;
                }
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for frame in &stack {
        match frame {
            Frame::Object(Some(key)) => {
                let name: String = serde_json::from_slice(&text[key.clone()]).ok()?;
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&name);
            }
            Frame::Object(None) => {}
            Frame::List(index) => path.push_str(&format!("[{index}]")),
        }
    }
    (!path.is_empty()).then_some(path)
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
        let e = err_of(
            r#"{"x": "NaN", "steps": [{"action": "a", "observation": "o", "reward": 0, "done": false}, {"reward": 1e400}]}"#,
        );
        assert_eq!(field(&e), Some("steps[1].reward"));
        // In an unknown field the number is only carried: kept as written.
        let line = r#"{"group_id": "g", "traj_id": "t", "terminal_reward": 1, "big": 1e400, "steps": [{"action": "a", "observation": "o", "reward": 0, "done": true}]}"#;
        let rec = parse_line::<TrajectoryRecord>(line.as_bytes(), 1).unwrap();
        assert_eq!(rec.extra.get("big").unwrap().get(), "1e400");
    }

    #[test]
    fn other_syntax_errors_have_no_field() {
        for text in [r#"{"a": 1"#, r#"{"a" 1}"#, r#"{"a": tru}"#, r#"{"a": Nope}"#] {
            let e = err_of(text);
            assert_eq!(field(&e), None, "{text}");
        }
    }

    /// A line with many bad literals is described in one scan, without re-parsing it once
    /// per literal (the old path patched and re-parsed the line up to 64 times).
    #[test]
    fn bad_literals_cost_no_extra_parse() {
        let steps: Vec<String> = (0..70)
            .map(|i| {
                format!(
                    r#"{{"action": "a", "observation": "o", "reward": NaN, "done": {}}}"#,
                    i == 69
                )
            })
            .collect();
        let text = format!(
            r#"{{"group_id": "g", "traj_id": "t", "terminal_reward": 1, "steps": [{}]}}"#,
            steps.join(", ")
        );
        PASSES.with(|p| p.set(0));
        let e = err_of(&text);
        assert_eq!(field(&e), Some("steps[0].reward"));
        assert_eq!(PASSES.with(|p| p.get()), 0);
        // A type error costs one re-parse (to find its field), however many there are.
        let typed = text.replace("NaN", "\"x\"");
        PASSES.with(|p| p.set(0));
        assert_eq!(field(&err_of(&typed)), Some("steps[0].reward"));
        assert_eq!(PASSES.with(|p| p.get()), 1);
    }

    #[test]
    fn path_at_follows_objects_lists_and_escaped_keys() {
        let text = br#"{"a": [1, {"b\"c": [2, 3, NaN"#;
        let at = text.len() - 3;
        assert_eq!(path_at(text, at).as_deref(), Some("a[1].b\"c[2]"));
        let text = br#"{"x": {"y": 1}, "z": NaN}"#;
        assert_eq!(path_at(text, 21).as_deref(), Some("z"));
        assert_eq!(path_at(b"NaN", 0), None);
    }

    #[test]
    fn invalid_utf8_is_located() {
        let mut text = br#"{"group_id": "g", "traj_id": "#.to_vec();
        text.extend_from_slice(b"\"\xff\"}");
        let e = parse_line::<TrajectoryRecord>(&text, 2).unwrap_err();
        assert_eq!(field(&e), Some("traj_id"));
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
