//! A hand-written reader for trajectory lines: the JSON Lines reader's fast path.
//!
//! It reads the JSON grammar (RFC 8259) directly into a [`TrajectoryRecord`]: strings without
//! escapes are copied once from the line, numbers are read without an intermediate string,
//! and an unknown field's text goes straight into [`Extra`](super::Extra). It accepts a subset
//! of what the serde path (`de.rs`) accepts and gives the same record for it; on anything
//! else it gives up (`None`) and the caller reads the line again through serde, which gives
//! the record or the located error. Giving up is always safe, so it does on every case where
//! matching serde exactly would take more code than the case is worth: any malformed JSON, a
//! repeated or escaped key, a lone surrogate escape, nesting deeper than [`MAX_DEPTH`], a
//! named number that does not fit an `f64`.
//!
//! # Why hand-written
//!
//! It is kept because the kept JSON libraries do not beat it on this job. One trajectory line
//! of 30 steps (the line of `cargo bench --bench record`, group `record_parse`), criterion
//! medians in µs per line, four readers in turn, three rounds per run, two runs, on
//! 2026-11-27, on a 2-core x86_64 VM, loaded (load average 10–20):
//!
//! | reader | run 1 | run 2 |
//! |---|---|---|
//! | this scanner (`from_json_line`) | 50.8, 39.6, 97.6 | 39.5, 31.0, 31.0 |
//! | serde_json into the record (the fallback) | 89.6, 112.9, 126.3 | 53.6, 49.2, 48.1 |
//! | sonic-rs 0.5.10 | 94.4, 75.2, 100.0 | 56.6, 38.5, 47.6 |
//! | simd-json 0.19.0 (with the line copied into its mutable buffer) | 50.3, 75.0, 71.0 | 32.7, 32.3, 43.4 |
//!
//! sonic-rs and simd-json read into a struct with the same named fields that drops the
//! unknown ones: a lower bound on a reader built on them, which would also keep the unknown
//! fields' text, validate and locate errors. sonic-rs is slower than this scanner even so;
//! simd-json's lower bound is no faster, and its current release needs rustc 1.88 (this crate
//! builds on 1.85). The comparison was a scratch crate depending on this one,
//! `sonic-rs = "0.5"`, `simd-json = "0.19"` and criterion 0.5, calling
//! `TrajectoryRecord::from_json_line`, `serde_json::from_str::<TrajectoryRecord>`,
//! `sonic_rs::from_str` and `simd_json::serde::from_slice` on that line.
//!
//! Numbers: an integer of at most 15 digits is exact in an `f64` (as serde_json's `u64`/`i64`
//! → `f64` conversion is); any other number goes through `str::parse::<f64>`, correctly
//! rounded like serde_json's `float_roundtrip` parser. `-0` reads as `-0.0`, as in serde_json.

use super::extra::ExtraBuilder;
use super::schema::name::*;
use super::{StepRecord, TrajectoryRecord, Value};

/// Deepest nesting of an unknown field's value that the fast path reads (serde_json's limit
/// is 128 levels for the whole line; the record itself takes 3).
const MAX_DEPTH: usize = 64;

/// Reads the record on `text` (one trimmed line) into `rec`, reusing its allocations (its
/// strings, step list and steps); `None` to read the line through serde instead, with `rec`
/// then in an unspecified state.
pub(crate) fn trajectory_into(text: &str, rec: &mut TrajectoryRecord) -> Option<()> {
    let mut c = Cursor {
        s: text,
        b: text.as_bytes(),
        i: 0,
    };
    c.trajectory(rec)?;
    c.ws();
    (c.i == c.b.len()).then_some(())
}

/// Index of the first byte at or after `i` that ends a run of plain string bytes: `"`, `\\`
/// or a control character (below 0x20); `b.len()` if none. Eight bytes at a time.
fn string_stop(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte of `x` that is below `n` (n <= 0x80). Only the lowest flagged
    // byte is certain (a borrow can flag bytes above it), and only the lowest is used.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let stops =
            below(w ^ (ONES * u64::from(b'"')), 1) | below(w ^ (ONES * u64::from(b'\\')), 1) | below(w, 0x20);
        if stops != 0 {
            return i + (stops.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return i;
        }
        i += 1;
    }
    i
}

/// An object's first unknown keys, to refuse a repeat without reading `Extra`'s text back.
#[derive(Default)]
struct Keys<'a> {
    keys: [&'a str; 8],
    n: usize,
}

struct Cursor<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Walks the members of an object (the `{` not yet read), calling `member` with each key
    /// with the cursor on the value (whitespace skipped).
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.expect(b':')?;
            self.ws();
            member(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A key without escapes (an escaped key could spell a named field: serde decides).
    #[inline]
    fn key(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let i = string_stop(self.b, start);
        if *self.b.get(i)? != b'"' {
            return None;
        }
        self.i = i + 1;
        self.s.get(start..i)
    }

    /// A string value appended to `out`, escapes decoded.
    fn string_into(&mut self, out: &mut String) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        let mut run = self.i + 1;
        let mut i = run;
        loop {
            i = string_stop(self.b, i);
            match *self.b.get(i)? {
                b'"' => {
                    out.push_str(self.s.get(run..i)?);
                    self.i = i + 1;
                    return Some(());
                }
                b'\\' => {
                    out.push_str(self.s.get(run..i)?);
                    i += 1;
                    let decoded = match *self.b.get(i)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let (ch, end) = self.unicode_escape(i + 1)?;
                            i = end - 1;
                            ch
                        }
                        _ => return None,
                    };
                    out.push(decoded);
                    i += 1;
                    run = i;
                }
                // A control character (string_stop stops only on these three kinds).
                _ => return None,
            }
        }
    }

    /// The character of `\uXXXX` (and its low surrogate's escape) whose hex digits start at
    /// `at`, and the index after it. A lone surrogate gives up.
    fn unicode_escape(&self, at: usize) -> Option<(char, usize)> {
        let cp = self.hex4(at)?;
        match cp {
            0xD800..=0xDBFF => {
                if self.b.get(at + 4..at + 6)? != b"\\u" {
                    return None;
                }
                let low = self.hex4(at + 6)?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return None;
                }
                let c = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                Some((char::from_u32(c)?, at + 10))
            }
            0xDC00..=0xDFFF => None,
            _ => Some((char::from_u32(cp)?, at + 4)),
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.b.get(at..at + 4)?;
        digits
            .iter()
            .try_fold(0u32, |acc, &d| Some(acc * 16 + char::from(d).to_digit(16)?))
    }

    fn string(&mut self) -> Option<String> {
        let mut s = String::new();
        self.string_into(&mut s)?;
        Some(s)
    }

    /// `null` (consumed) or not.
    fn null(&mut self) -> bool {
        let is_null = self.b.get(self.i..self.i + 4) == Some(b"null");
        if is_null {
            self.i += 4;
        }
        is_null
    }

    fn bool(&mut self) -> Option<bool> {
        let rest = self.b.get(self.i..)?;
        if rest.starts_with(b"true") {
            self.i += 4;
            Some(true)
        } else if rest.starts_with(b"false") {
            self.i += 5;
            Some(false)
        } else {
            None
        }
    }

    /// Skips a JSON number, checking its grammar; returns whether it is a plain integer.
    fn skip_number(&mut self) -> Option<bool> {
        let b = self.b;
        let mut i = self.i;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match *b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            _ => return None,
        }
        let mut integer = true;
        if b.get(i) == Some(&b'.') {
            integer = false;
            i += 1;
            let digits = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == digits {
                return None;
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            integer = false;
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let digits = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == digits {
                return None;
            }
        }
        // "01" is not JSON: serde reports it.
        if b.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        self.i = i;
        Some(integer)
    }

    /// A number as `f64`; gives up on one out of the `f64` range.
    fn number(&mut self) -> Option<f64> {
        let start = self.i;
        let integer = self.skip_number()?;
        let text = &self.b[start..self.i];
        let (neg, digits) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        if integer && digits.len() <= 15 {
            // Exact: below 10^15 < 2^53.
            let v = digits.iter().fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0')) as f64;
            return Some(if neg { -v } else { v });
        }
        let v: f64 = self.s.get(start..self.i)?.parse().ok()?;
        v.is_finite().then_some(v)
    }

    fn opt_number(&mut self) -> Option<Option<f64>> {
        if self.null() {
            Some(None)
        } else {
            self.number().map(Some)
        }
    }

    /// Skips any JSON value, checking its grammar.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.skip_object(depth + 1)
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.list(|c| c.skip_value(depth + 1))
            }
            b't' | b'f' => self.bool().map(drop),
            b'n' => self.null().then_some(()),
            _ => self.skip_number().map(drop),
        }
    }

    /// Skips an object (any keys, escaped or not) whose members are at `depth`.
    fn skip_object(&mut self, depth: usize) -> Option<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.skip_string()?;
            self.expect(b':')?;
            self.ws();
            self.skip_value(depth)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Skips a string, checking its escapes as serde_json does when it skips one.
    fn skip_string(&mut self) -> Option<()> {
        let mut i = self.i + 1;
        loop {
            i = string_stop(self.b, i);
            match *self.b.get(i)? {
                b'"' => {
                    self.i = i + 1;
                    return Some(());
                }
                b'\\' => {
                    i += 1;
                    match *self.b.get(i)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 1,
                        b'u' => {
                            self.hex4(i + 1)?;
                            i += 5;
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// Walks a list (the `[` not yet read), calling `element` with the cursor on each element.
    fn list(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            element(self)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An unknown field's value into `extra` as its text (repeated key: give up).
    fn unknown(&mut self, key: &'a str, extra: &mut ExtraBuilder, seen: &mut Keys<'a>) -> Option<()> {
        let start = self.i;
        self.skip_value(0)?;
        let value = self.s.get(start..self.i)?;
        if seen.n < seen.keys.len() {
            // Compared here, as borrowed keys (escaped keys gave up): cheaper than the
            // builder's check, which reads its text back.
            if seen.keys[..seen.n].contains(&key) {
                return None;
            }
            seen.keys[seen.n] = key;
            seen.n += 1;
            extra.push_new(key, value);
            Some(())
        } else {
            extra.push(key, value).ok()
        }
    }

    /// Reads a trajectory object into `rec`, reusing its allocations.
    fn trajectory(&mut self, rec: &mut TrajectoryRecord) -> Option<()> {
        // Which fields were read: a repeat gives up, a missing required one too.
        let (mut group_id, mut traj_id, mut terminal_reward) = (false, false, false);
        let (mut initial_observation, mut initial_score, mut steps) = (false, false, false);
        rec.group_id.clear();
        rec.traj_id.clear();
        rec.initial_score = None;
        let mut observation = rec.initial_observation.take();
        let mut extra = ExtraBuilder::reusing(std::mem::take(&mut rec.extra));
        let mut keys = Keys::default();
        let mut n = 0;
        self.object(|c, key| {
            match key {
                GROUP_ID => c.string_once(&mut group_id, &mut rec.group_id)?,
                TRAJ_ID => c.string_once(&mut traj_id, &mut rec.traj_id)?,
                TERMINAL_REWARD => {
                    first(&mut terminal_reward)?;
                    rec.terminal_reward = c.number()?;
                }
                INITIAL_OBSERVATION => {
                    first(&mut initial_observation)?;
                    if c.null() {
                        observation = None;
                    } else {
                        let text = observation.get_or_insert_with(String::new);
                        text.clear();
                        c.string_into(text)?;
                    }
                }
                INITIAL_SCORE => {
                    first(&mut initial_score)?;
                    rec.initial_score = c.opt_number()?;
                }
                STEPS => {
                    first(&mut steps)?;
                    c.list(|c| {
                        if n == rec.steps.len() {
                            // Agent trajectories have tens of steps: skip the first doublings.
                            rec.steps.reserve(16);
                            rec.steps.push(StepRecord::default());
                        }
                        c.step(&mut rec.steps[n])?;
                        n += 1;
                        Some(())
                    })?;
                }
                other => c.unknown(other, &mut extra, &mut keys)?,
            }
            Some(())
        })?;
        rec.steps.truncate(n);
        rec.initial_observation = if initial_observation { observation } else { None };
        rec.extra = extra.finish();
        (group_id && traj_id && terminal_reward && steps).then_some(())
    }

    /// A string field read once into `out` (cleared first).
    fn string_once(&mut self, seen: &mut bool, out: &mut String) -> Option<()> {
        first(seen)?;
        out.clear();
        self.string_into(out)
    }

    /// Reads a step object into `step`, reusing its allocations.
    fn step(&mut self, step: &mut StepRecord) -> Option<()> {
        let (mut action, mut observation, mut score, mut reward) = (false, false, false, false);
        let (mut done, mut milestone, mut new_subgoals, mut info) = (false, false, false, false);
        step.score = None;
        step.milestone = None;
        step.info = None;
        let mut subgoals = step.new_subgoals.take();
        let mut extra = ExtraBuilder::reusing(std::mem::take(&mut step.extra));
        let mut keys = Keys::default();
        self.object(|c, key| {
            match key {
                ACTION => c.string_once(&mut action, &mut step.action)?,
                OBSERVATION => c.string_once(&mut observation, &mut step.observation)?,
                SCORE => {
                    first(&mut score)?;
                    step.score = c.opt_number()?;
                }
                REWARD => {
                    first(&mut reward)?;
                    step.reward = c.number()?;
                }
                DONE => {
                    first(&mut done)?;
                    step.done = c.bool()?;
                }
                MILESTONE => {
                    first(&mut milestone)?;
                    step.milestone = if c.null() { None } else { Some(c.bool()?) };
                }
                NEW_SUBGOALS => {
                    first(&mut new_subgoals)?;
                    if c.null() {
                        subgoals = None;
                    } else {
                        let list = subgoals.get_or_insert_with(Vec::new);
                        list.clear();
                        c.list(|c| {
                            list.push(c.string()?);
                            Some(())
                        })?;
                    }
                }
                INFO => {
                    first(&mut info)?;
                    step.info = if c.null() {
                        None
                    } else {
                        // Rare: serde_json builds the value from its text.
                        let start = c.i;
                        c.skip_value(0)?;
                        Some(serde_json::from_str::<Value>(c.s.get(start..c.i)?).ok()?)
                    };
                }
                other => c.unknown(other, &mut extra, &mut keys)?,
            }
            Some(())
        })?;
        step.new_subgoals = if new_subgoals { subgoals } else { None };
        step.extra = extra.finish();
        (action && observation && reward && done).then_some(())
    }
}

/// Marks a field read; `None` (give up) if it was already: serde reports the repeat.
fn first(seen: &mut bool) -> Option<()> {
    if std::mem::replace(seen, true) {
        None
    } else {
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The fast path's record, or `None` when it gives up.
    fn fast(text: &str) -> Option<TrajectoryRecord> {
        let mut rec = TrajectoryRecord::default();
        trajectory_into(text, &mut rec).map(|()| rec)
    }

    /// serde's record (the reference).
    fn serde(text: &str) -> Option<TrajectoryRecord> {
        super::super::de::from_str_borrowing::<TrajectoryRecord>(text).ok()
    }

    /// Debug text tells -0.0 from 0.0 and shows every f64 in round-trip form: equal text, equal
    /// bits.
    fn same(a: &TrajectoryRecord, b: &TrajectoryRecord) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    const LINE: &str = r#"{"env": "x", "group_id": "g\u00e9\"", "traj_id": "t/1", "terminal_reward": -0, "initial_observation": null, "initial_score": 1.5e-3, "meta": {"a\n": [1, 2.50, {"b": null}], "c": "\ud83d\ude00"}, "steps": [{"t": 0, "action": "go\tnorth \\ \/", "observation": "A hall.", "score": null, "reward": 18446744073709551617, "done": false, "milestone": null, "new_subgoals": ["x", "y"], "info": {"k": [true, 1e400]}}, {"action": "", "observation": "\u0000", "reward": 1E+2, "done": true, "milestone": true, "new_subgoals": null, "isCompleted": false}]}"#;

    #[test]
    fn reads_what_serde_reads() {
        // Escapes, -0, null options, big integers, nested unknown values, a surrogate pair;
        // `info` holds 1e400, which serde_json's Value refuses: the whole line is an error.
        assert!(fast(LINE).is_none() && serde(LINE).is_none());
        let line = LINE.replace("1e400", "1e300");
        let (f, s) = (fast(&line).unwrap(), serde(&line).unwrap());
        assert!(same(&f, &s), "{f:?}\n{s:?}");
        assert_eq!(f.group_id, "gé\"");
        assert_eq!(f.terminal_reward.to_bits(), (-0.0f64).to_bits());
        assert_eq!(f.steps[0].reward, 18446744073709551617.0);
        assert_eq!(f.steps[1].reward, 100.0);
        assert_eq!(
            f.extra.get("meta").unwrap().get(),
            r#"{"a\n":[1,2.50,{"b":null}],"c":"\ud83d\ude00"}"#
        );
    }

    #[test]
    fn gives_up_where_serde_decides() {
        let base = r#"{"group_id": "g", "traj_id": "t", "terminal_reward": 1, "steps": [{"action": "a", "observation": "o", "reward": 0, "done": true}]}"#;
        assert!(fast(base).is_some());
        for (from, to) in [
            (r#""group_id""#, r#""gr\u006fup_id""#), // escaped key: may be a named field
            (r#""a""#, r#""\ud800""#),               // lone surrogate
            (r#""reward": 0"#, r#""reward": NaN"#),  // not JSON
            (r#""reward": 0"#, r#""reward": 1e400"#), // out of range
            (r#""reward": 0"#, r#""reward": 01"#),   // leading zero
            (r#""reward": 0"#, r#""reward": 0, "reward": 1"#), // repeated field
            (r#""done": true"#, r#""done": true, "x": 1, "x": 2"#), // repeated unknown field
            (r#""done": true"#, r#""done": null"#),  // required field null
            (r#""done": true}"#, r#""done": true,}"#), // trailing comma
            (r#""o""#, "\"o\tp\""),                  // raw control character
            (r#""steps""#, r#""steps": [], "steps""#), // repeated list
        ] {
            let line = base.replacen(from, to, 1);
            assert_ne!(line, base);
            assert!(fast(&line).is_none(), "{line}");
        }
        // Nesting past MAX_DEPTH gives up; serde reads it (its limit is 128 levels).
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let line = base.replacen(r#""done": true"#, &format!(r#""done": true, "d": {deep}"#), 1);
        assert!(fast(&line).is_none() && serde(&line).is_some());
        assert!(fast(&format!("{base} x")).is_none());
        assert!(fast(&format!("{base} \t")).is_some());
    }

    #[test]
    fn reading_into_a_used_record_gives_a_fresh_read() {
        let line = LINE.replace("1e400", "1e300");
        let mut rec = fast(&line).unwrap();
        let short = r#"{"group_id": "h", "traj_id": "u", "terminal_reward": 2, "steps": [{"action": "b", "observation": "p", "reward": 1, "done": true}]}"#;
        trajectory_into(short, &mut rec).unwrap();
        assert!(same(&rec, &serde(short).unwrap()), "{rec:?}");
        trajectory_into(&line, &mut rec).unwrap();
        assert!(same(&rec, &serde(&line).unwrap()));
    }

    #[test]
    fn string_stop_finds_the_first_stop_byte() {
        let text = "abcdefgh\u{e9}ijklmnop\"q\\r\u{1}s";
        let b = text.as_bytes();
        for i in 0..=b.len() {
            let naive = (i..b.len())
                .find(|&j| b[j] == b'"' || b[j] == b'\\' || b[j] < 0x20)
                .unwrap_or(b.len());
            assert_eq!(string_stop(b, i), naive, "from {i}");
        }
    }

    /// Pieces of trajectory lines: whitespace, numbers, strings and values of every kind.
    fn ws() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["", "", " ", "  ", "\t", "\r\n "]).prop_map(str::to_string)
    }

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            any::<f64>()
                .prop_filter("finite", |v| v.is_finite())
                .prop_map(|v| format!("{v:e}")),
            (
                any::<bool>(),
                "[0-9]{1,25}",
                prop::option::of("[0-9]{1,20}"),
                prop::option::of("[eE][+-]?[0-9]{1,3}")
            )
                .prop_map(|(neg, int, frac, exp)| {
                    let int = int.trim_start_matches('0');
                    let int = if int.is_empty() { "0" } else { int };
                    format!(
                        "{}{int}{}{}",
                        if neg { "-" } else { "" },
                        frac.map_or(String::new(), |f| format!(".{f}")),
                        exp.unwrap_or_default()
                    )
                }),
        ]
    }

    fn string() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            "[a-z ]{0,12}",
            Just("é".to_string()),
            prop::sample::select(vec![
                r#"\""#,
                r"\\",
                r"\/",
                r"\b",
                r"\f",
                r"\n",
                r"\r",
                r"\t",
                r"\u00e9",
                r"\u0000",
                r"\ud83d\ude00",
                r"\uD83D\uDE00"
            ])
            .prop_map(str::to_string),
        ];
        prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            number(),
            string(),
            prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_string),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..4), ws())
                    .prop_map(|(v, w)| format!("[{w}{}{w}]", v.join(&format!("{w},{w}")))),
                (prop::collection::vec((string(), inner), 0..4), ws()).prop_map(|(v, w)| {
                    let members: Vec<String> = v.into_iter().map(|(k, v)| format!("{k}{w}:{w}{v}")).collect();
                    format!("{{{w}{}{w}}}", members.join(","))
                }),
            ]
        })
    }

    /// A field: a named one with a value of its type (or null, or a wrong type), or an
    /// unknown one.
    fn field(names: &'static [&'static str]) -> impl Strategy<Value = String> {
        (
            prop::sample::select(names),
            prop_oneof![6 => Just(true), 1 => Just(false)],
            value(),
            string(),
            number(),
            any::<bool>(),
            ws(),
        )
            .prop_map(|(name, typed, any_value, s, n, b, w)| {
                let v = if !typed {
                    any_value
                } else {
                    match name {
                        "reward" | "score" | "terminal_reward" | "initial_score" => n,
                        "done" | "milestone" => b.to_string(),
                        "new_subgoals" => format!("[{s}]"),
                        "x" | "t" | "info" | "meta" => any_value,
                        _ => s,
                    }
                };
                format!("\"{name}\"{w}:{w}{v}")
            })
    }

    fn line() -> impl Strategy<Value = String> {
        let step = (
            string(),
            string(),
            number(),
            any::<bool>(),
            prop::collection::vec(
                field(&[
                    "action",
                    "observation",
                    "score",
                    "reward",
                    "done",
                    "milestone",
                    "new_subgoals",
                    "info",
                    "t",
                    "x",
                ]),
                0..3,
            ),
            ws(),
        )
            .prop_map(|(a, o, r, d, more, w)| {
                let mut fields = vec![
                    format!("\"action\":{w}{a}"),
                    format!("\"observation\":{o}"),
                    format!("\"reward\":{w}{r}"),
                    format!("\"done\":{d}"),
                ];
                fields.extend(more);
                format!("{{{w}{}{w}}}", fields.join(&format!("{w},")))
            });
        (
            string(),
            string(),
            number(),
            prop::collection::vec(step, 0..3),
            prop::collection::vec(
                field(&[
                    "group_id",
                    "traj_id",
                    "terminal_reward",
                    "initial_observation",
                    "initial_score",
                    "meta",
                    "x",
                ]),
                0..3,
            ),
            ws(),
        )
            .prop_map(|(g, t, r, steps, more, w)| {
                let mut fields = vec![
                    format!("\"group_id\":{g}"),
                    format!("\"traj_id\":{w}{t}"),
                    format!("\"terminal_reward\":{r}"),
                ];
                fields.extend(more);
                fields.push(format!("\"steps\":{w}[{}]", steps.join(",")));
                format!("{{{}}}", fields.join(&format!(",{w}")))
            })
    }

    /// A line, sometimes damaged: a byte deleted, replaced or inserted.
    fn damaged() -> impl Strategy<Value = String> {
        (
            line(),
            any::<prop::sample::Index>(),
            0u8..4,
            prop::sample::select(vec![
                b'"', b'\\', b',', b'}', b']', b'0', b' ', b'n', b'e', b'-', b'.',
            ]),
        )
            .prop_map(|(line, at, how, byte)| {
                let mut b = line.into_bytes();
                let i = at.index(b.len().max(1)).min(b.len().saturating_sub(1));
                match how {
                    0 => {}
                    1 => {
                        b.remove(i);
                    }
                    2 => b[i] = byte,
                    _ => b.insert(i, byte),
                }
                String::from_utf8(b).unwrap_or_default()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whenever the fast path reads a line, serde reads the same record from it.
        #[test]
        fn fast_path_agrees_with_serde(text in damaged()) {
            if let Some(f) = fast(&text) {
                let s = serde(&text);
                prop_assert!(s.as_ref().is_some_and(|s| same(&f, s)), "{text}\nfast:  {f:?}\nserde: {s:?}");
            }
        }

        /// Undamaged lines whose named fields have their types are read by the fast path
        /// (so the agreement above is not vacuous), unless serde refuses them too or they
        /// repeat a key.
        #[test]
        fn fast_path_reads_well_formed_lines(text in line()) {
            if let Some(s) = serde(&text) {
                let f = fast(&text);
                let escaped_key = text.contains("\"\\");
                prop_assert!(f.as_ref().is_some_and(|f| same(f, &s)) || escaped_key, "{text}\nfast:  {f:?}\nserde: {s:?}");
            }
        }

        #[test]
        fn numbers_agree_with_serde(text in number()) {
            let mut c = Cursor { s: &text, b: text.as_bytes(), i: 0 };
            let fast = c.number().filter(|_| c.i == text.len());
            let serde: Option<f64> = serde_json::from_str(&text).ok();
            match (fast, serde) {
                (Some(f), Some(s)) => prop_assert_eq!(f.to_bits(), s.to_bits(), "{}", text),
                (Some(f), None) => prop_assert!(false, "{} read as {} but serde refuses it", text, f),
                // Giving up is for numbers serde refuses (out of the f64 range) only.
                (None, s) => prop_assert!(s.is_none(), "{} gave up, serde reads {:?}", text, s),
            }
        }
    }
}
