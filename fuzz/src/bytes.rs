//! A tiny decoder from fuzz bytes to structured values, shared by the fuzz targets and the
//! regression replay (`tests/it/fuzz_regressions.rs`).
//!
//! It plays the role of `arbitrary::Unstructured`, but it is a plain module with no
//! dependency, so that the root crate's tests can include it (`#[path]`) without a new
//! dev-dependency. Reading past the end yields zeros, so every byte string decodes to some
//! input (libFuzzer never wastes an execution on "not enough bytes").

/// Vocabulary of [`Bytes::text`]'s word mode.
const WORDS: [&str; 40] = [
    "You",
    "pick",
    "up",
    "the",
    "put",
    "in/on",
    "heat",
    "using",
    "egg",
    "1",
    "microwave",
    "slice",
    "sliced",
    "with",
    "turn on",
    "desklamp",
    "Your score has just gone up by",
    "one",
    "point.",
    "points.",
    "[SEP]",
    "search[",
    "click[",
    "]",
    "Buy Now",
    "< Prev",
    "Back to Search",
    "Thank you for shopping with us",
    "Page 1 (Total results: 50)",
    "B078GWRC1J",
    "b078gwrc1j",
    "bright citrus",
    "3 ounce (pack of 1)",
    "$10.99",
    "[button]",
    "[button_]",
    "\n",
    "'",
    "Next >",
    "< Back to Results",
];

/// A cursor over the fuzz input.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// Wraps the fuzz input.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte, 0 past the end.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next `N` bytes (zero-padded past the end).
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// The next bool (low bit of a byte).
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A value in `lo..=hi` from one byte (`hi - lo` small).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + usize::from(self.u8()) % (hi - lo + 1)
    }

    /// A size: usually small, sometimes any `u64` (claimed sizes far beyond the data).
    pub fn size(&mut self) -> usize {
        match self.u8() {
            0..=239 => self.range(0, 16),
            240..=247 => self.range(0, 255) * 257,
            248..=251 => 1usize << self.range(20, 63),
            _ => usize::try_from(self.u64()).unwrap_or(usize::MAX),
        }
    }

    /// An `f64` biased towards the values that break numerics: small integers, halves,
    /// signed zeros, values whose square overflows, the extremes, subnormals, NaN and
    /// infinities; otherwise raw bits.
    pub fn f64(&mut self) -> f64 {
        const SPECIAL: [f64; 24] = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            2.0,
            -2.0,
            1e-6,
            1e-300,
            1e30,
            -1e30,
            1e155,
            -1e155,
            1e200,
            1e308,
            -1e308,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            f64::EPSILON,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        match self.u8() {
            0..=95 => f64::from(self.u8() as i8) / 4.0,
            96..=191 => SPECIAL[usize::from(self.u8()) % SPECIAL.len()],
            _ => f64::from_bits(self.u64()),
        }
    }

    /// A short string over a few code points (ASCII, a space, multi-byte ones), so that
    /// texts share symbols and matchers find blocks; at most `max` code points.
    pub fn text(&mut self, max: usize) -> String {
        const ALPHABET: [char; 16] = [
            'a', 'b', 'c', 'd', 'e', ' ', '1', 'x', 'é', 'λ', '中', '🦀', 'A', '/', '\n', '\u{0}',
        ];
        let len = self.range(0, max.min(255));
        let mode = self.u8();
        let mut out = String::with_capacity(len);
        match mode % 5 {
            // Few symbols: many repeats. At most 100 code points: the reference matcher's
            // cost grows with |a|·|b|·blocks, and the runs below reach the long strings.
            0 => (0..len.min(100)).for_each(|_| out.push(ALPHABET[usize::from(self.u8() % 3)])),
            1 => (0..len.min(100)).for_each(|_| out.push(ALPHABET[usize::from(self.u8() % 16)])),
            // Runs: (symbol, count) pairs, to reach the autojunk length (200) quickly.
            2 => {
                // At most 400 code points: past the autojunk threshold, and cheap enough for
                // the naive O(|a|·|b|) reference matcher.
                let (mut runs, mut total) = (len, 0);
                while runs > 0 && total < 400 && !self.is_empty() {
                    let c = ALPHABET[usize::from(self.u8() % 8)];
                    let n = (1 + usize::from(self.u8() % 64)).min(400 - total);
                    (0..n).for_each(|_| out.push(c));
                    (runs, total) = (runs - 1, total + n);
                }
            }
            // Words of the environments' texts (ALFWorld, TextWorld, WebShop), so that the
            // detectors' patterns and page markers occur.
            3 => {
                for i in 0..len.min(24) {
                    if i > 0 && self.bool() {
                        out.push(' ');
                    }
                    out.push_str(WORDS[usize::from(self.u8()) % WORDS.len()]);
                }
            }
            // Raw bytes, lossily decoded: any code point the fuzzer finds.
            _ => {
                let n = len.min(self.data.len());
                out.push_str(&String::from_utf8_lossy(&self.data[..n]));
                self.data = &self.data[n..];
            }
        }
        out
    }
}
