//! Allocation-free text keys for discovery: every action and response is reduced to 64-bit
//! hashes. Actions (written by the agent) are *normalised* first (ASCII lower case, runs of
//! whitespace collapsed to one space, leading and trailing whitespace dropped), so two actions
//! that differ only in case or spacing get the same key; responses (written by the
//! environment) are split into sentences compared exactly ([`response_keys`]).
//!
//! Hashes: a multiply-rotate hash over bytes eight at a time (normalised action bytes,
//! response sentences), ended by the SplitMix64 finaliser (the keys go into identity-hashed
//! tables). Fixed constants: keys are identical across runs, platforms and compiler versions,
//! which keeps discovery deterministic.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// SplitMix64's finaliser: spreads every input bit over the output.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Combines two keys into one (order matters).
pub(crate) fn pair(a: u64, b: u64) -> u64 {
    mix(a ^ b.rotate_left(29).wrapping_mul(FNV_PRIME))
}

/// An action's keys: the whole normalised action and its first word (its verb). The action
/// is normalised into `buf` (reused across calls: no allocation once it is long enough), then
/// hashed like a sentence, eight bytes at a time; a byte-at-a-time hash was the third cost
/// of discovery.
pub(crate) fn action_keys(action: &str, buf: &mut Vec<u8>) -> (u64, u64) {
    buf.clear();
    let mut pending_space = false;
    let mut verb_end = None;
    for &b in action.as_bytes() {
        if b.is_ascii_whitespace() {
            pending_space = !buf.is_empty();
            continue;
        }
        if pending_space {
            verb_end.get_or_insert(buf.len());
            buf.push(b' ');
            pending_space = false;
        }
        buf.push(b.to_ascii_lowercase());
    }
    let verb_end = verb_end.unwrap_or(buf.len());
    (bytes_key(buf), bytes_key(&buf[..verb_end]))
}

/// `s` without leading and trailing ASCII whitespace (`<[u8]>::trim_ascii` needs Rust 1.80).
fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |p| p + 1);
    &s[start..end]
}

/// 8 bytes as a little-endian word (a single load).
#[inline]
fn word(c: &[u8]) -> u64 {
    <[u8; 8]>::try_from(c).map_or(0, u64::from_le_bytes)
}

/// 4 bytes as a little-endian word.
#[inline]
fn half(c: &[u8]) -> u64 {
    <[u8; 4]>::try_from(c).map_or(0, |w| u64::from(u32::from_le_bytes(w)))
}

/// Key of a byte string, 16 bytes at a time in two independent lanes; the last (partial)
/// block is read as the string's last 16 bytes, overlapping the previous block, and short
/// strings as overlapping head and tail words, so no byte is copied (responses are the bulk
/// of the text: this and the sentence split are the hot loop of discovery). The length is
/// hashed too, so overlapping reads cannot make two strings of different lengths collide
/// systematically.
#[inline]
fn bytes_key(s: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let n = s.len();
    let (mut a, mut b) = ((n as u64).wrapping_mul(K) ^ FNV_OFFSET, n as u64 ^ FNV_PRIME);
    let mut step = |x: u64, y: u64| {
        a = (a.rotate_left(23) ^ x).wrapping_mul(K);
        b = (b.rotate_left(23) ^ y).wrapping_mul(K);
    };
    if n >= 16 {
        let mut chunks = s.chunks_exact(16);
        for c in &mut chunks {
            step(word(&c[..8]), word(&c[8..]));
        }
        if !chunks.remainder().is_empty() {
            step(word(&s[n - 16..n - 8]), word(&s[n - 8..]));
        }
    } else if n >= 8 {
        step(word(&s[..8]), word(&s[n - 8..]));
    } else if n >= 4 {
        step(half(&s[..4]), half(&s[n - 4..]));
    } else if n > 0 {
        let x = u64::from(s[0]) | u64::from(s[n / 2]) << 8 | u64::from(s[n - 1]) << 16;
        step(x, 0);
    }
    pair(a, b)
}

/// A response's keys: the whole response, its first sentence (its *gist*, which ignores the
/// state listings that often follow), the gist's *shape* (the first sentence with every run
/// of digits read as one `#`, so "a temperature of 29 degrees" and "of 23 degrees" are one
/// reading; `buf` holds the copy, reused across calls), and the key of every non-empty
/// sentence, pushed onto `sentences` in order. Sentences end at `.`, `!`, `?` or a line
/// break and are compared exactly after trimming surrounding whitespace (an environment
/// writes the same text the same way; actions, which agents write, are the ones normalised).
/// The whole response's key is that of its sentence keys and boundaries in order, so
/// whitespace around sentences does not count.
pub(crate) fn response_keys(text: &str, sentences: &mut Vec<u64>, buf: &mut Vec<u8>) -> ResponseKeys {
    let bytes = text.as_bytes();
    // Sentence ends, in order, from two SIMD searches merged. On x86-64 with AVX2 the
    // searchers are built once per response and called directly: the generic iterators
    // dispatch and rebuild them at every sentence, a third of the search's cost on
    // sentence-sized gaps.
    #[cfg(target_arch = "x86_64")]
    {
        use memchr::arch::x86_64::avx2::memchr::{Three, Two};
        if let (Some(marks), Some(breaks)) = (Three::new(b'.', b'!', b'?'), Two::new(b'\n', b'\r')) {
            return split_keys(bytes, marks.iter(bytes), breaks.iter(bytes), sentences, buf);
        }
    }
    split_keys(
        bytes,
        memchr::memchr3_iter(b'.', b'!', b'?', bytes),
        memchr::memchr2_iter(b'\n', b'\r', bytes),
        sentences,
        buf,
    )
}

/// The keys of one response (see [`response_keys`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponseKeys {
    pub(crate) whole: u64,
    pub(crate) gist: u64,
    pub(crate) shape: u64,
}

/// Key of `sentence` with every run of ASCII digits replaced by one `#`, copied into `buf`;
/// the sentence's own key `key` when it has no digit (no copy).
fn shape_key(sentence: &[u8], key: u64, buf: &mut Vec<u8>) -> u64 {
    if !sentence.iter().any(u8::is_ascii_digit) {
        return key;
    }
    buf.clear();
    let mut in_number = false;
    for &b in sentence {
        let digit = b.is_ascii_digit();
        if !digit {
            buf.push(b);
        } else if !in_number {
            buf.push(b'#');
        }
        in_number = digit;
    }
    bytes_key(buf)
}

/// [`response_keys`] given the positions of `bytes`' sentence marks and line breaks.
#[inline]
fn split_keys(
    bytes: &[u8],
    marks: impl Iterator<Item = usize>,
    breaks: impl Iterator<Item = usize>,
    sentences: &mut Vec<u64>,
    buf: &mut Vec<u8>,
) -> ResponseKeys {
    let mut whole = FNV_OFFSET;
    let mut gist = None;
    let mut shape = 0;
    let (mut marks, mut breaks) = (marks, breaks);
    let n = bytes.len();
    // The next mark and line break (n once there is none): they never coincide.
    let mut next_mark = marks.next().unwrap_or(n);
    let mut next_break = breaks.next().unwrap_or(n);
    let mut start = 0;
    loop {
        let end = next_mark.min(next_break);
        let sentence = trim(&bytes[start..end]);
        if !sentence.is_empty() {
            let k = bytes_key(sentence);
            if gist.is_none() {
                gist = Some(k);
                shape = shape_key(sentence, k, buf);
            }
            sentences.push(k);
            whole = (whole.rotate_left(23) ^ k).wrapping_mul(FNV_PRIME);
        }
        let Some(&b) = bytes.get(end) else { break };
        // A boundary byte is < 128, never confused with a (mixed, 64-bit) sentence key.
        whole = (whole.rotate_left(23) ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        if end == next_mark {
            next_mark = marks.next().unwrap_or(n);
        } else {
            next_break = breaks.next().unwrap_or(n);
        }
        start = end + 1;
    }
    let whole = mix(whole);
    match gist {
        Some(gist) => ResponseKeys { whole, gist, shape },
        None => ResponseKeys {
            whole,
            gist: whole,
            shape: whole,
        },
    }
}

/// A hasher for keys that are already well-mixed 64-bit hashes: passes them through.
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed in this module; fold anything else FNV-style.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = k;
    }
}

pub(crate) type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;
pub(crate) type KeySet = HashSet<u64, BuildHasherDefault<KeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> u64 {
        action_keys(text, &mut Vec::new()).0
    }

    #[test]
    fn normalisation_ignores_case_and_spacing_only() {
        assert_eq!(key("Open  Door\tto Hallway "), key("open door to hallway"));
        assert_ne!(key("open door to hallway"), key("open door to kitchen"));
        assert_ne!(key("opendoor"), key("open door"));
        assert_ne!(key(""), key(" a"));
    }

    #[test]
    fn verb_is_first_word() {
        let mut buf = Vec::new();
        let (a, v) = action_keys("  Take knife from counter", &mut buf);
        assert_eq!(buf, b"take knife from counter");
        assert_eq!(v, key("take"));
        assert_eq!(a, key("take knife from counter"));
        assert_eq!(action_keys("look", &mut buf), (key("look"), key("look")));
        assert_eq!(action_keys(" \t", &mut buf), (key(""), key("")));
    }

    /// (whole, gist) of `text`, its sentence keys appended to `s`.
    fn keys(text: &str, s: &mut Vec<u64>) -> (u64, u64) {
        let k = response_keys(text, s, &mut Vec::new());
        (k.whole, k.gist)
    }

    #[test]
    fn sentences_and_gist() {
        let mut s = Vec::new();
        let (whole, gist) = keys("  You take the tomato.   Your score went up!  >", &mut s);
        let mut t = Vec::new();
        let (whole2, gist2) = keys("You take the tomato.\nYour score went up! >  ", &mut t);
        // Same sentences, other boundaries: same gist and sentences, other whole key.
        assert_eq!(s, t);
        assert_eq!(s.len(), 3);
        assert_eq!((gist, gist2), (s[0], s[0]));
        assert_ne!(whole, whole2);
        // Same sentences and boundaries, other spacing around them: same whole key.
        let (whole3, _) = keys("You take the tomato. Your score went up!>", &mut t);
        assert_eq!(whole, whole3);
        // Case and inner spacing count in responses.
        let mut u = Vec::new();
        keys("you take the tomato.", &mut u);
        keys("You take  the tomato.", &mut u);
        assert!(u[0] != s[0] && u[1] != s[0]);
        // No boundary at all: the gist is the text's only sentence.
        let mut v = Vec::new();
        let (_, gist) = keys("Nothing happens", &mut v);
        assert_eq!(v, [gist]);
    }

    #[test]
    fn the_shape_reads_every_number_as_one_mark() {
        let mut buf = Vec::new();
        let shape = |text: &str, buf: &mut Vec<u8>| response_keys(text, &mut Vec::new(), buf).shape;
        let hot = response_keys("It reads 29 degrees. Then 7.", &mut Vec::new(), &mut buf);
        let cold = response_keys("It reads 3 degrees. Then 8.", &mut Vec::new(), &mut buf);
        // Other numbers: other gists, one shape; only the first sentence is shaped.
        assert_ne!(hot.gist, cold.gist);
        assert_eq!(hot.shape, cold.shape);
        assert_eq!(buf, b"It reads # degrees");
        assert_eq!(hot.shape, bytes_key(b"It reads # degrees"));
        // A run of digits is one mark; digits and words stay apart.
        assert_eq!(
            shape("pot 12 has 345 seeds.", &mut buf),
            shape("pot 1 has 2 seeds.", &mut buf)
        );
        assert_ne!(
            shape("pot 1 has 2 seeds.", &mut buf),
            shape("pot 1 has seeds.", &mut buf)
        );
        // A literal `#` reads like a number (environments rarely write one).
        assert_eq!(
            shape("pot 1 has 2 seeds.", &mut buf),
            shape("pot # has # seeds.", &mut buf)
        );
        // Without a digit the shape is the gist (no copy).
        let plain = response_keys("You take the key. 4 left.", &mut Vec::new(), &mut buf);
        assert_eq!(plain.shape, plain.gist);
        // No sentence at all: every key is the whole response's.
        let empty = response_keys("  ", &mut Vec::new(), &mut buf);
        assert_eq!((empty.gist, empty.shape), (empty.whole, empty.whole));
    }

    #[test]
    fn bytes_key_separates_lengths_and_tails() {
        assert_ne!(bytes_key(b"abcdefgh"), bytes_key(b"abcdefgh\0"));
        assert_ne!(bytes_key(b"abcdefghi"), bytes_key(b"abcdefghj"));
        assert_ne!(bytes_key(b""), bytes_key(b"\0"));
    }
}
