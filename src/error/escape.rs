//! [`Escaped`]: caller text made safe to print, as every [`Error`](crate::Error) message
//! prints it.

use std::fmt;

/// Caller text (a trajectory or group id, a file path, a display name) made safe to print on a
/// terminal or in a log: every control character (C0 including line breaks and tabs, DEL, C1)
/// and every invisible formatting character that can reorder or hide text (zero-width
/// characters, line and paragraph separators, bidirectional overrides and isolates, the byte
/// order mark) is written as a Rust-style escape `\u{1b}`; all other text is written as is.
///
/// [`Error`](crate::Error)'s messages print every caller-supplied string through it, so a `traj_id` holding
/// `"\u{1b}[2J"` cannot clear the terminal it is printed on. The error's fields keep the text
/// as given. A backslash is written as is, so an id that already reads `\u{1b}` prints the same
/// as an escaped ESC: the escape protects the terminal, it is not a reversible encoding (use
/// `{:?}` for that).
///
/// ```
/// use beacon_rl::Escaped;
/// assert_eq!(Escaped("traj-1\u{1b}[2J").to_string(), "traj-1\\u{1b}[2J");
/// assert_eq!(Escaped("a\nb\u{202e}c").to_string(), "a\\u{a}b\\u{202e}c");
/// assert_eq!(Escaped("x\u{61c}y").to_string(), "x\\u{61c}y"); // Arabic letter mark
/// assert_eq!(Escaped("épisode 3 / tâche").to_string(), "épisode 3 / tâche");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, false)
    }
}

/// [`Escaped`] keeping line breaks: for messages of several lines (a regex compiler's, which
/// quotes the pattern), where the rest of the text may still hold caller content.
pub(super) struct EscapedLines<'a>(pub(super) &'a str);

impl fmt::Display for EscapedLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, true)
    }
}

fn write_escaped(f: &mut fmt::Formatter<'_>, text: &str, keep_newlines: bool) -> fmt::Result {
    let mut run = 0;
    for (i, c) in text.char_indices() {
        if hides_or_controls(c) && !(keep_newlines && c == '\n') {
            f.write_str(&text[run..i])?;
            write!(f, "\\u{{{:x}}}", u32::from(c))?;
            run = i + c.len_utf8();
        }
    }
    f.write_str(&text[run..])
}

/// Characters a terminal acts on or that change how the text around them reads: controls
/// (C0, DEL, C1) and Unicode's invisible format characters that hide or reorder text.
pub(super) fn hides_or_controls(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{61c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}
