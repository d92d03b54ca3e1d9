//! The fields of a record the crate does not name, kept as JSON text.
//!
//! A record's unknown fields (`env`, `task`, `t`, `isCompleted`, `meta`, ...) are only carried
//! through: they are stored as one string of JSON object members, `"key":value,"key":value`,
//! each value the text read from the line with the whitespace outside strings removed (numbers
//! and string escapes as written). One allocation per record or step, however many fields;
//! a map of `serde_json::Value`s cost about 345 bytes a field.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::Error;

/// The unknown fields of a record, in input order, as compact JSON text.
///
/// Values keep their text: `1.0` stays `1.0`, a 30-digit integer keeps its digits, `"\u00e9"`
/// keeps its escape; only whitespace outside strings is dropped. Writing a record writes its
/// unknown fields back in the order read. Keys are unique: a line repeating an unknown key
/// is rejected as one repeating a named key is. Two `Extra`s are equal when their keys,
/// order and value texts are equal.
///
/// ```
/// use beacon_rl::record::Extra;
/// use serde_json::Value;
///
/// let mut extra = Extra::default();
/// extra.insert("env", "scienceworld");
/// extra.insert("t", 3);
/// assert_eq!(extra.iter().count(), 2);
/// assert_eq!(extra.get("t").map(|v| v.get()), Some("3"));
/// // A field as a serde_json `Value`:
/// let env: Value = serde_json::from_str(extra.get("env").unwrap().get()).unwrap();
/// assert_eq!(env, "scienceworld");
/// assert_eq!(serde_json::to_string(&extra).unwrap(), r#"{"env":"scienceworld","t":3}"#);
/// extra.insert("t", 4); // replaces
/// assert_eq!(serde_json::to_string(&extra).unwrap(), r#"{"env":"scienceworld","t":4}"#);
/// assert!(extra.remove("env") && extra.get("env").is_none());
/// ```
///
/// A record read holds no unknown field nested (arrays and objects inside one another) deeper
/// than 100 levels: a deeper one is a record error naming the field, not a field that reads
/// back as absent. So every field of a record read parses as a serde_json [`Value`] (whose
/// parser stops at 128 levels); a value set through [`insert`](Self::insert) may not.
///
/// ```
/// use beacon_rl::record::read_trajectories;
/// let deep = "[".repeat(101) + &"]".repeat(101);
/// let line = format!(r#"{{"group_id":"g","traj_id":"t","terminal_reward":1,"steps":[],"m":{deep}}}"#);
/// let err = read_trajectories(line.as_bytes()).next().unwrap().unwrap_err();
/// assert!(err.to_string().contains("nests deeper than 100 levels"), "{err}");
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Extra {
    /// `"key":value` members joined by `,`; keys JSON-escaped, values minified.
    text: String,
}

impl Extra {
    /// The deepest nesting of an unknown field's value in a record read (see the type's docs).
    pub(crate) const MAX_DEPTH: usize = 100;

    /// The JSON text of field `key`.
    ///
    /// ```
    /// let mut extra = beacon_rl::record::Extra::default();
    /// extra.insert("kind", "gold");
    /// assert_eq!(extra.get("kind").unwrap().get(), r#""gold""#);
    /// assert!(extra.get("nope").is_none());
    /// ```
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.members()
            .find(|m| m.key_is(&self.text, key))
            .and_then(|m| raw(&self.text[m.value.clone()]))
    }

    /// Field `key` parsed as a [`Value`]: `Ok(None)` when there is no such field; an
    /// [`Error::Parse`] naming the field when it nests deeper than serde_json allows.
    pub(crate) fn value(&self, key: &str) -> Result<Option<Value>, Error> {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        serde_json::from_str(raw.get())
            .map(Some)
            .map_err(|e| Error::Parse {
                what: "extra field value",
                reason: format!("field `{key}`: {e}"),
            })
    }

    /// Whether field `key` is present.
    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.members().any(|m| m.key_is(&self.text, key))
    }

    /// The first of `names` that is a key here (one pass over the fields).
    pub(crate) fn find_any<'n>(&self, names: impl Iterator<Item = &'n str> + Clone) -> Option<&'n str> {
        self.members()
            .find_map(|m| names.clone().find(|n| m.key_is(&self.text, n)))
    }

    /// Sets field `key` to `value` (written compactly), replacing an earlier value in place.
    ///
    /// ```
    /// use beacon_rl::record::Extra;
    /// use serde_json::Value;
    /// let mut extra = Extra::default();
    /// extra.insert("meta", serde_json::json!({"seed": 1, "tags": ["a"]}));
    /// assert_eq!(extra.get("meta").unwrap().get(), r#"{"seed":1,"tags":["a"]}"#);
    /// ```
    pub fn insert(&mut self, key: &str, value: impl Into<Value>) {
        let value: Value = value.into();
        // A Value always serializes (its map keys are strings).
        let text = value.to_string();
        self.set(key, &text);
    }

    /// Removes field `key`; returns whether it was there.
    ///
    /// ```
    /// let mut extra = beacon_rl::record::Extra::default();
    /// extra.insert("a", 1);
    /// extra.insert("b", 2);
    /// assert!(extra.remove("a") && !extra.remove("a"));
    /// assert_eq!(extra.iter().count(), 1);
    /// ```
    pub fn remove(&mut self, key: &str) -> bool {
        let Some(m) = self.members().find(|m| m.key_is(&self.text, key)) else {
            return false;
        };
        let (start, end) = (m.key.start, m.value.end);
        // Drop the member and one separating comma.
        if end < self.text.len() {
            self.text.replace_range(start..end + 1, "");
        } else if start > 0 {
            self.text.replace_range(start - 1..end, "");
        } else {
            self.text.clear();
        }
        true
    }

    /// The fields in order: (key, JSON text of the value).
    ///
    /// ```
    /// let mut extra = beacon_rl::record::Extra::default();
    /// extra.insert("t", 0);
    /// extra.insert("done", false);
    /// let fields: Vec<(String, String)> =
    ///     extra.iter().map(|(k, v)| (k.into_owned(), v.get().to_string())).collect();
    /// assert_eq!(fields, [("t".into(), "0".into()), ("done".into(), "false".into())]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (Cow<'_, str>, &RawValue)> + '_ {
        self.members().filter_map(move |m| {
            let key = m.key(&self.text)?;
            Some((key, raw(&self.text[m.value.clone()])?))
        })
    }

    fn set(&mut self, key: &str, value: &str) {
        self.remove(key);
        let mut builder = ExtraBuilder {
            extra: std::mem::take(self),
            seen: None,
            count: 0,
        };
        builder.append(key, value);
        *self = builder.extra;
    }

    fn members(&self) -> Members<'_> {
        Members {
            text: self.text.as_bytes(),
            at: 0,
        }
    }
}

/// Borrows `text` (valid JSON by the type's invariant) as a `RawValue`.
fn raw(text: &str) -> Option<&RawValue> {
    serde_json::from_str(text).ok()
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.text)
    }
}

impl<K: AsRef<str>, V: Into<Value>> FromIterator<(K, V)> for Extra {
    /// Fields from (key, value) pairs; a repeated key keeps its first position and last value.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut extra = Extra::default();
        for (k, v) in iter {
            extra.insert(k.as_ref(), v);
        }
        extra
    }
}

/// One member's byte ranges in the text: the key with its quotes, and the value.
struct Member {
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
}

impl Member {
    fn key<'t>(&self, text: &'t str) -> Option<Cow<'t, str>> {
        let quoted = &text[self.key.clone()];
        let inner = &quoted[1..quoted.len() - 1];
        if inner.contains('\\') {
            serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(inner))
        }
    }

    fn key_is(&self, text: &str, key: &str) -> bool {
        let inner = &text.as_bytes()[self.key.start + 1..self.key.end - 1];
        // Without escapes the text is the key (the usual case: compare bytes, no decoding).
        if !inner.contains(&b'\\') {
            return inner == key.as_bytes();
        }
        self.key(text).is_some_and(|k| k == key)
    }
}

/// Splits the member text; relies on the invariant (minified, valid members).
struct Members<'t> {
    text: &'t [u8],
    at: usize,
}

impl Iterator for Members<'_> {
    type Item = Member;

    fn next(&mut self) -> Option<Member> {
        let t = self.text;
        let start = self.at;
        if start >= t.len() {
            return None;
        }
        let key_end = string_end(t, start)? + 1;
        // key_end is the ':'.
        let value_start = key_end + 1;
        let mut depth = 0usize;
        let mut i = value_start;
        while i < t.len() {
            match t[i] {
                b'"' => i = string_end(t, i)?,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth = depth.saturating_sub(1),
                b',' if depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
        self.at = i + 1;
        Some(Member {
            key: start..key_end,
            value: value_start..i,
        })
    }
}

/// Index of the closing quote of the JSON string opening at `t[open]`.
pub(crate) fn string_end(t: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    while i < t.len() {
        match t[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Builds an [`Extra`] while a record is read, refusing repeated keys.
#[derive(Default)]
pub(crate) struct ExtraBuilder {
    extra: Extra,
    /// Keys seen, once there are too many to compare one by one.
    seen: Option<HashSet<String>>,
    count: usize,
}

/// Past this many fields, repeated keys are found through a hash set, so that a line of many
/// unknown fields is checked in linear time.
const LINEAR_SCAN_MAX: usize = 16;

impl ExtraBuilder {
    /// Appends `key` with raw JSON `value`; `Err` names the key if it is already there.
    pub(crate) fn push(&mut self, key: &str, value: &str) -> Result<(), String> {
        let repeated = match &mut self.seen {
            Some(seen) => !seen.insert(key.to_string()),
            None => self.extra.contains_key(key),
        };
        if repeated {
            return Err(format!("duplicate field `{key}`"));
        }
        if nests_deeper_than(value, Extra::MAX_DEPTH) {
            return Err(format!(
                "field `{key}` nests deeper than {} levels (the limit for fields the format does not name)",
                Extra::MAX_DEPTH
            ));
        }
        self.append(key, value);
        if self.seen.is_none() && self.count > LINEAR_SCAN_MAX {
            let keys = self.extra.iter().map(|(k, _)| k.into_owned()).collect();
            self.seen = Some(keys);
        }
        Ok(())
    }

    /// [`push`](Self::push) for a key the caller knows is not there yet (the fast reader
    /// compares a record's first unknown keys itself, without re-reading the text).
    pub(crate) fn push_new(&mut self, key: &str, value: &str) {
        match &mut self.seen {
            Some(seen) => {
                seen.insert(key.to_string());
                self.append(key, value);
            }
            None => {
                self.append(key, value);
                if self.count > LINEAR_SCAN_MAX {
                    let keys = self.extra.iter().map(|(k, _)| k.into_owned()).collect();
                    self.seen = Some(keys);
                }
            }
        }
    }

    fn append(&mut self, key: &str, value: &str) {
        let text = &mut self.extra.text;
        if text.is_empty() {
            // Room for a few small fields at once (`"t":3,"isCompleted":false`): one allocation.
            text.reserve((key.len() + value.len() + 3).max(48));
        } else {
            text.push(',');
        }
        let plain = !key.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20);
        if plain {
            text.push('"');
            text.push_str(key);
            text.push('"');
        } else {
            // A string always serializes.
            text.push_str(&Value::from(key).to_string());
        }
        text.push(':');
        minify_into(value, text);
        self.count += 1;
    }

    /// A builder that writes into `extra`'s allocation (its fields are dropped).
    pub(crate) fn reusing(mut extra: Extra) -> Self {
        extra.text.clear();
        Self {
            extra,
            seen: None,
            count: 0,
        }
    }

    pub(crate) fn finish(self) -> Extra {
        self.extra
    }
}

/// Whether the JSON text `json` has arrays or objects nested more than `limit` deep.
fn nests_deeper_than(json: &str, limit: usize) -> bool {
    let bytes = json.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = string_end(bytes, i).unwrap_or(bytes.len()),
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

/// Appends `json` without the whitespace outside its strings.
fn minify_into(json: &str, out: &mut String) {
    let bytes = json.as_bytes();
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i).unwrap_or(bytes.len() - 1);
            }
            b' ' | b'\t' | b'\n' | b'\r' => {
                out.push_str(&json[run..i]);
                run = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(&json[run..]);
}

impl Serialize for Extra {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.iter() {
            map.serialize_entry(&k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Extra {
    /// From a JSON object; a repeated key is an error.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Extra;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Extra, A::Error> {
                let mut b = ExtraBuilder::default();
                while let Some(Key(k)) = map.next_key()? {
                    let v: Box<RawValue> = map.next_value()?;
                    b.push(&k, v.get()).map_err(de::Error::custom)?;
                }
                Ok(b.finish())
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// A map key, borrowed from the input when it has no escapes.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minify_keeps_strings_and_numbers() {
        let mut out = String::new();
        minify_into(" { \"a b\" : [ 1.50 , \"x\\\" y\" ] }\n", &mut out);
        assert_eq!(out, r#"{"a b":[1.50,"x\" y"]}"#);
    }

    #[test]
    fn members_split_nested_values() {
        let mut b = ExtraBuilder::default();
        b.push("a", r#"{"x": [1, {"y": ","}]}"#).unwrap();
        b.push("q\"k", "\"s,}\"").unwrap();
        b.push("n", "null").unwrap();
        let e = b.finish();
        let got: Vec<(String, String)> = e
            .iter()
            .map(|(k, v)| (k.into_owned(), v.get().to_string()))
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), r#"{"x":[1,{"y":","}]}"#.to_string()),
                ("q\"k".to_string(), "\"s,}\"".to_string()),
                ("n".to_string(), "null".to_string()),
            ]
        );
        assert!(e.contains_key("q\"k"));
    }

    #[test]
    fn repeated_keys_are_refused_below_and_above_the_scan_limit() {
        for n in [3, LINEAR_SCAN_MAX + 5] {
            let mut b = ExtraBuilder::default();
            for i in 0..n {
                b.push(&format!("k{i}"), "0").unwrap();
            }
            assert_eq!(b.push("k1", "1").unwrap_err(), "duplicate field `k1`");
            assert_eq!(
                b.push(&format!("k{}", n - 1), "1").unwrap_err(),
                format!("duplicate field `k{}`", n - 1)
            );
            assert!(b.push("new", "1").is_ok());
        }
    }

    #[test]
    fn nesting_past_the_limit_is_an_error_not_an_absent_field() {
        let nested = |levels: usize| "[".repeat(levels) + &"]".repeat(levels);
        let mut b = ExtraBuilder::default();
        b.push("ok", &nested(Extra::MAX_DEPTH)).unwrap();
        // Brackets inside strings are text, not nesting.
        b.push("s", &format!("[\"{}\"]", "[".repeat(500))).unwrap();
        assert_eq!(
            b.push("m", &format!(r#"{{"a":{}}}"#, nested(Extra::MAX_DEPTH)))
                .unwrap_err(),
            "field `m` nests deeper than 100 levels (the limit for fields the format does not name)"
        );
        let e = b.finish();
        assert!(matches!(e.value("ok"), Ok(Some(Value::Array(_)))));
        assert!(!e.contains_key("m"));
        // Read from a record: the field is refused, with its name.
        let line = format!(r#"{{"m": {}}}"#, nested(100_000));
        let err = serde_json::from_str::<Extra>(&line).unwrap_err().to_string();
        assert!(err.contains("field `m` nests deeper than 100 levels"), "{err}");
        // Set by hand past serde_json's own limit: present, and an error, not `None`.
        let mut by_hand = Extra::default();
        by_hand.set("m", &nested(200));
        assert!(matches!(
            by_hand.value("m"),
            Err(Error::Parse { what: "extra field value", ref reason }) if reason.starts_with("field `m`: recursion limit")
        ));
        assert_eq!(by_hand.value("absent"), Ok(None));
    }

    #[test]
    fn remove_first_middle_last() {
        let make = || Extra::from_iter([("a", 1), ("b", 2), ("c", 3)]);
        for (key, left) in [
            ("a", r#""b":2,"c":3"#),
            ("b", r#""a":1,"c":3"#),
            ("c", r#""a":1,"b":2"#),
        ] {
            let mut e = make();
            assert!(e.remove(key));
            assert_eq!(e.text, left);
        }
        let mut one = Extra::from_iter([("a", 1)]);
        assert!(one.remove("a") && one == Extra::default());
    }
}
