//! The matcher against Python: `tests/data/difflib.json` (Python 3.11 values, compared with
//! `==` on f64), hand cases whose block structure is derived in the comments, the inputs the
//! fuzzer once failed on, and proptest properties: range, identity, upper bounds, the one
//! symmetry that does hold (a string against a string containing it), no panic on arbitrary
//! Unicode, and agreement with [`py`], a naive port of CPython's dict-based code, which the
//! crate's index/stamp implementation must reproduce exactly, autojunk included: ratio,
//! matching blocks, both quick ratios and `ratio_at_least`, also after `set_b`.

use proptest::prelude::*;
use serde_json::Value;

use super::py::{self, SequenceMatcher};
use super::*;

/// The reference ratio of `a` against `b`.
fn oracle(a: &str, b: &str) -> f64 {
    SequenceMatcher::new(a, b).ratio()
}

/// Every check of the reference against one prepared matcher: ratio, matching blocks, quick
/// ratios, and `ratio_at_least` at the exact ratio (the boundary), `t` and NaN.
fn agrees_with_reference(m: &mut Matcher, a: &str, b: &str, t: f64) {
    let want = SequenceMatcher::new(a, b);
    let blocks = want.get_matching_blocks();
    let expected = py::ratio_of(&blocks, a, b);
    assert_eq!(ratio(a, b).to_bits(), expected.to_bits(), "ratio({a:?}, {b:?})");
    assert_eq!(
        m.ratio(a).to_bits(),
        expected.to_bits(),
        "Matcher::ratio({a:?}) vs {b:?}"
    );
    let got: Vec<_> = m
        .matching_blocks(a)
        .into_iter()
        .map(|Match { a, b, size }| (a, b, size))
        .collect();
    assert_eq!(got, blocks, "matching_blocks({a:?}, {b:?})");
    assert_eq!(
        m.quick_ratio(a).to_bits(),
        want.quick_ratio().to_bits(),
        "quick_ratio"
    );
    assert_eq!(
        m.real_quick_ratio(a).to_bits(),
        want.real_quick_ratio().to_bits(),
        "real_quick_ratio"
    );
    for t in [expected, t, f64::NAN] {
        assert_eq!(
            m.ratio_at_least(a, t),
            expected >= t,
            "ratio_at_least({a:?}, {t}) vs {b:?}"
        );
    }
}

#[test]
fn documented_examples() {
    {}
    {
        // "abcd" vs "bcde": one block "bcd" of 3 code points, ratio = 2·3 / 8.
        assert_eq!(ratio("abcd", "bcde"), 0.75);
    }
    {
        let mut m = Matcher::new("heat pan 1 with microwave 1"); // b, prepared once
        assert_eq!(m.ratio("heat pan 1 with microwave 1"), 1.0);
        assert!(m.ratio("heat pan 2 with microwave 1") > 0.95);
    }
    {
        let blocks = Matcher::new("abxcd").matching_blocks("abcd");
        assert_eq!(blocks[0], Match { a: 0, b: 0, size: 2 });
    }
    {
        let mut m = Matcher::new("put soapbottle 1 in/on countertop 2");
        for action in ["p soapbottle 1 in/on countertop 2", "look"] {
            let r = m.ratio(action);
            assert!((0.0..=1.0).contains(&r));
        }
        // Equal to Python's difflib.SequenceMatcher(None, a, b).ratio():
        assert_eq!(m.ratio("p soapbottle 1 in/on countertop 2"), 0.9705882352941176);
    }
    {
        let mut m = Matcher::new("look");
        assert_eq!(m.b_len(), 4);
        assert_eq!(m.ratio("look"), 1.0);
    }
    {
        let mut m = Matcher::new("abc");
        m.set_b("xyz");
        assert_eq!(m.ratio("abc"), 0.0);
    }
    {
        assert_eq!(Matcher::new("café").b_len(), 4);
    }
    {
        let mut m = Matcher::new("bcde");
        // one block "bcd" (3 code points): 2·3 / (4 + 4)
        assert_eq!(m.ratio("abcd"), 0.75);
    }
    {
        assert_eq!(Matcher::new("abxcd").matches("abcd"), 4);
    }
    {
        // Python: SequenceMatcher(None, "abxcd", "abcd").get_matching_blocks()
        // -> [Match(a=0, b=0, size=2), Match(a=3, b=2, size=2), Match(a=5, b=4, size=0)]
        let blocks = Matcher::new("abcd").matching_blocks("abxcd");
        assert_eq!(
            blocks,
            vec![
                Match { a: 0, b: 0, size: 2 },
                Match { a: 3, b: 2, size: 2 },
                Match { a: 5, b: 4, size: 0 },
            ]
        );
    }
    {
        let m = Matcher::new("abcd");
        assert_eq!(m.real_quick_ratio("ab"), 2.0 * 2.0 / 6.0);
    }
    {
        let mut m = Matcher::new("abcd");
        // "dcba" shares all 4 code points with "abcd" but matches only 1 in order.
        assert_eq!(m.quick_ratio("dcba"), 1.0);
        assert_eq!(m.ratio("dcba"), 0.25);
    }
    {
        let mut m = Matcher::new("heat pan 1 with microwave 1");
        assert!(m.ratio_at_least("heat pan 1 with micr 1owave 1", 0.95));
        assert!(!m.ratio_at_least("look", 0.95));
    }
    {
        assert_eq!(ratio("", ""), 1.0);
        assert_eq!(ratio("abc", ""), 0.0);
        // "look" vs "l theook": blocks "l" and "ook", 2·4 / (4 + 8)
        assert_eq!(ratio("look", "l theook"), 2.0 * 4.0 / 12.0);
    }
}

#[test]
fn popular_elements_do_not_seed_but_extend() {
    // b = 200 'a's: len >= 200, 'a' occurs 200 > 200/100 + 1 = 3 times -> popular, so
    // find_longest_match finds no seed. The empty block at (0, 0) is still extended with
    // equal elements (CPython's extension loop), matching the whole common prefix.
    let b = "a".repeat(200);
    let a = "a".repeat(5);
    // Python: SequenceMatcher(None, "a"*5, "a"*200).ratio() == 2*5/205
    assert_eq!(ratio(&a, &b), 10.0 / 205.0);
    // With a leading 'x' in a, the extension at (0, 0) fails immediately: no match at all.
    // Python: SequenceMatcher(None, "x"+"a"*5, "a"*200).ratio() == 0.0
    assert_eq!(ratio(&format!("x{a}"), &b), 0.0);
    // Swapped, b = "aaaaa" is short: no autojunk, the 5 a's match. 2*5/205 again.
    assert_eq!(ratio(&b, &a), 10.0 / 205.0);
}

#[test]
fn stamps_survive_reuse() {
    let mut m = Matcher::new("abcabc");
    for _ in 0..3 {
        assert_eq!(m.matches("abcabc"), 6);
        // "cba" vs "abcabc": seed 'c' (0, 2, 1); right part ("ba", "abc") gives 'b' (1, 4, 1);
        // right of that ("a", "c") nothing. M = 2 (Python agrees).
        assert_eq!(m.matches("cba"), 2);
    }
}

fn load_cases() -> Vec<Value> {
    let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/difflib.json"));
    let doc: Value = serde_json::from_str(text).expect("valid JSON");
    doc["difflib"].as_array().expect("difflib array").clone()
}

#[test]
fn every_vector_is_bit_exact() {
    let cases = load_cases();
    assert!(
        cases.len() >= 29,
        "expected the full vector file, got {}",
        cases.len()
    );
    let mut autojunk = 0;
    let mut matcher = Matcher::default();
    for c in &cases {
        let a = c["a"].as_str().unwrap();
        let b = c["b"].as_str().unwrap();
        let expected = c["ratio"].as_f64().unwrap();
        assert_eq!(a.chars().count() as u64, c["len_a"].as_u64().unwrap());
        assert_eq!(b.chars().count() as u64, c["len_b"].as_u64().unwrap());
        let got = ratio(a, b);
        assert_eq!(
            got.to_bits(),
            expected.to_bits(),
            "ratio({a:?}, {b:?}) = {got}, Python {expected}"
        );
        // The reusable matcher gives the same bits.
        matcher.set_b(b);
        assert_eq!(matcher.ratio(a).to_bits(), expected.to_bits());
        if c["autojunk_active"].as_bool().unwrap() {
            autojunk += 1;
        }
    }
    // The file exercises the autojunk rule (where it changes the value, too).
    assert!(autojunk >= 5);
    assert!(cases.iter().any(|c| c["ratio"] != c["ratio_without_autojunk"]));
}

#[test]
fn hand_cases() {
    // "abcd" vs "bcde": one block "bcd": 2·3 / (4 + 4) = 0.75.
    assert_eq!(ratio("abcd", "bcde"), 0.75);
    // "abxcd" vs "abcd": longest block "ab" (0, 0, 2), right part ("xcd", "cd") gives "cd":
    // M = 4, 2·4 / 9.
    assert_eq!(ratio("abxcd", "abcd"), 8.0 / 9.0);
    // Both empty: 1.0 by definition; one empty: 2·0 / n = 0.
    assert_eq!(ratio("", ""), 1.0);
    assert_eq!(ratio("a", ""), 0.0);
    assert_eq!(ratio("", "a"), 0.0);
    // "dcba" vs "abcd": all blocks have length 1; the first found is a[0] = 'd' at b[3]. Left
    // of it nothing (i = 0), right of it b is exhausted (j + 1 = 4): M = 1, 2·1 / 8.
    assert_eq!(ratio("dcba", "abcd"), 0.25);
    // Tie-breaking asymmetry, both strings short (no autojunk):
    // ratio("ac", "bcccabbc"): 'a' (i = 0) seeds first -> block (0, 4, 1); right part
    // ("c", "bbc") -> block (1, 7, 1): M = 2, 2·2 / 10 = 0.4.
    // ratio("bcccabbc", "ac"): first seed is a[1] = 'c' at b[1] -> (1, 1, 1); left ("b", "a")
    // nothing, right part of b is empty: M = 1, 2·1 / 10 = 0.2.
    assert_eq!(ratio("ac", "bcccabbc"), 0.4);
    assert_eq!(ratio("bcccabbc", "ac"), 0.2);
    // Code points, not bytes: "é" is one element. "café" vs "cafe": block "caf", 2·3 / 8.
    assert_eq!(ratio("café", "cafe"), 0.75);
}

#[test]
fn autojunk_hand_cases() {
    // b = "x" + 299 'a': len 300 >= 200, 'a' occurs 299 > 300/100 + 1 = 4 times: popular.
    // a = "a" * 10: no seed at all; CPython then extends the empty block at (0, 0): a[0] = 'a'
    // vs b[0] = 'x' fails, so M = 0.
    let b = format!("x{}", "a".repeat(299));
    assert_eq!(ratio(&"a".repeat(10), &b), 0.0);
    // a = "x" + "a" * 9: seed 'x' (0, 0, 1), extended forward through the popular 'a's while
    // equal: block (0, 0, 10), M = 10, 2·10 / 310.
    assert_eq!(ratio(&format!("x{}", "a".repeat(9)), &b), 20.0 / 310.0);
    // Swapped: b is now "x" + 9 'a' (short, no autojunk) and the same block: 2·10 / 310.
    assert_eq!(ratio(&b, &format!("x{}", "a".repeat(9))), 20.0 / 310.0);
    // And "a" * 10 as the short b side is not popular: the block of ten 'a' (a[1..11]) matches,
    // M = 10, 2·10 / 310 — where the other argument order gave 0.0: the asymmetry autojunk
    // causes.
    assert_eq!(ratio(&b, &"a".repeat(10)), 20.0 / 310.0);
    // Exactly 200 elements: the rule applies (n >= 200). 'a' occurs 200 - 2 = 198 > 3 times.
    let b200 = format!("x{}y", "a".repeat(198));
    assert_eq!(b200.chars().count(), 200);
    // a = "aa": no seed; extension at (0, 0): 'a' vs 'x' fails: 0.
    assert_eq!(ratio("aa", &b200), 0.0);
    // 199 elements: no autojunk, "aa" matches: 2·2 / 201.
    let b199 = format!("x{}", "a".repeat(198));
    assert_eq!(ratio("aa", &b199), 4.0 / 201.0);
}

#[test]
fn matching_blocks_match_python() {
    // Python: SequenceMatcher(None, "abxcd", "abcd").get_matching_blocks()
    //   [Match(a=0, b=0, size=2), Match(a=3, b=2, size=2), Match(a=5, b=4, size=0)]
    let blocks = Matcher::new("abcd").matching_blocks("abxcd");
    let m = |a, b, size| Match { a, b, size };
    assert_eq!(blocks, vec![m(0, 0, 2), m(3, 2, 2), m(5, 4, 0)]);
    // Python: SequenceMatcher(None, "qabxcd", "abycdf").get_matching_blocks()
    //   [Match(a=1, b=0, size=2), Match(a=4, b=3, size=2), Match(a=6, b=6, size=0)]
    let blocks = Matcher::new("abycdf").matching_blocks("qabxcd");
    assert_eq!(blocks, vec![m(1, 0, 2), m(4, 3, 2), m(6, 6, 0)]);
    // Empty inputs: only the sentinel.
    assert_eq!(Matcher::new("").matching_blocks(""), vec![m(0, 0, 0)]);
}

#[test]
fn ratio_at_least_agrees_on_vectors() {
    for c in load_cases() {
        let (a, b) = (c["a"].as_str().unwrap(), c["b"].as_str().unwrap());
        let r = c["ratio"].as_f64().unwrap();
        let mut m = Matcher::new(b);
        for t in [0.0, 0.5, 0.85, 0.9, 0.95, r, f64::from_bits(r.to_bits() + 1), 1.0] {
            assert_eq!(m.ratio_at_least(a, t), r >= t, "{a:?} {b:?} {t}");
        }
        assert!(!m.ratio_at_least(a, f64::NAN));
    }
}

/// Strings over a small alphabet (many repeats, ties and popular elements), up to `max` long.
fn small_alphabet(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!['a', 'b', 'c', ' ', 'é', '→']), 0..max)
        .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn in_unit_range_and_no_panic(a in any::<String>(), b in any::<String>()) {
        let r = ratio(&a, &b);
        prop_assert!((0.0..=1.0).contains(&r));
    }

    #[test]
    fn identity(a in any::<String>().prop_filter("non-empty", |s| !s.is_empty())) {
        prop_assert_eq!(ratio(&a, &a), 1.0);
    }

    #[test]
    fn identity_with_autojunk(a in small_alphabet(400).prop_filter("non-empty", |s| !s.is_empty())) {
        prop_assert_eq!(ratio(&a, &a), 1.0);
    }

    #[test]
    fn agrees_with_cpython_transliteration(a in small_alphabet(320), b in small_alphabet(320)) {
        let mut m = Matcher::new(&b);
        let got = m.ratio(&a);
        prop_assert_eq!(got.to_bits(), oracle(&a, &b).to_bits());
        // Reuse of the matcher for another a gives the same as a fresh one.
        prop_assert_eq!(m.ratio(&b).to_bits(), oracle(&b, &b).to_bits());
    }

    #[test]
    fn upper_bounds_hold(a in small_alphabet(250), b in small_alphabet(250), t in 0.0f64..=1.0) {
        let mut m = Matcher::new(&b);
        let r = m.ratio(&a);
        prop_assert!(r <= m.quick_ratio(&a));
        prop_assert!(m.quick_ratio(&a) <= m.real_quick_ratio(&a));
        prop_assert_eq!(m.ratio_at_least(&a, t), r >= t);
    }

    /// The symmetry that holds: x against u + x + v (all short, no autojunk) matches all of x
    /// in both argument orders, so ratio = 2|x| / (|x| + |u x v|) both ways. Arbitrary pairs of
    /// short strings are *not* symmetric (see hand_cases), so no such property is asserted.
    #[test]
    fn symmetric_when_one_contains_the_other(x in "[a-d]{1,20}", u in "[a-d]{0,20}", v in "[a-d]{0,20}") {
        let y = format!("{u}{x}{v}");
        let lx = x.chars().count();
        let expected = 2.0 * lx as f64 / (lx + y.chars().count()) as f64;
        prop_assert_eq!(ratio(&x, &y), expected);
        prop_assert_eq!(ratio(&y, &x), expected);
    }
}

/// Inputs the fuzzer once failed on (autojunk: popular spaces and x's in a 400-code-point `b`).
#[test]
fn fuzz_regressions() {
    let b = [(' ', 54), ('x', 54), (' ', 64), ('x', 128), (' ', 100)];
    let b: String = b.iter().map(|&(c, n)| c.to_string().repeat(n)).collect();
    let a1 = format!("{}{}{}", " ".repeat(64), "x".repeat(15), "1".repeat(15));
    let a2 = " ".repeat(65);
    let mut m = Matcher::new(&b);
    agrees_with_reference(&mut m, &a1, &b, 0.0);
    agrees_with_reference(&mut m, &a2, &b, 0.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Several `a` against one prepared `b`, then the same matcher after `set_b` (buffers
    /// reused from a different `b`).
    #[test]
    fn agrees_with_reference_after_reuse(
        b in small_alphabet(320),
        a in prop::collection::vec(small_alphabet(320), 1..3),
        b2 in small_alphabet(320),
        t in 0.0f64..=1.0,
    ) {
        let mut m = Matcher::new(&b);
        for a in &a {
            agrees_with_reference(&mut m, a, &b, t);
        }
        m.set_b(&b2);
        agrees_with_reference(&mut m, &a[0], &b2, t);
    }
}
