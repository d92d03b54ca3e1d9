//! The grammar's values in serde form: a [`Raw`] tree read from any serde format (so a JSON
//! number goes through the same parser as its text), and an [`Out`] written with numbers as
//! numbers and a variant with fields as `{"variant": {fields}}`.

use std::fmt;

use super::{parse_value, Out, Raw};

impl serde::Serialize for Out {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Out::F64(x) => s.serialize_f64(*x),
            Out::U64(x) => s.serialize_u64(*x),
            Out::Bool(x) => s.serialize_bool(*x),
            Out::None => s.serialize_none(),
            Out::Name(n) => s.serialize_str(n),
            Out::Variant(name, fields) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(name, &Fields(fields))?;
                m.end()
            }
        }
    }
}

/// The fields of a variant as a serde map.
struct Fields<'a>(&'a [(&'static str, Out)]);

impl serde::Serialize for Fields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> serde::Deserialize<'de> for Raw {
    /// A scalar becomes its text (a JSON number the text that parses back to it, `null`
    /// `none`, a string its value as the string form reads it); `{"variant": {fields}}` or
    /// `{"variant": null}` a variant.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Raw;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number, string, bool, null or {\"variant\": {fields}}")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Raw, E> {
                Ok(Raw::Text(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Raw, E> {
                Ok(Raw::Text(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Raw, E> {
                Ok(Raw::Text(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Raw, E> {
                Ok(Raw::Text(format!("{v:?}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Raw, E> {
                // A string may use the text form of a variant, `milestone_dropout(p=0.3)`.
                parse_value(v.trim(), v).map_err(E::custom)
            }
            fn visit_unit<E>(self) -> std::result::Result<Raw, E> {
                Ok(Raw::Text("none".into()))
            }
            fn visit_none<E>(self) -> std::result::Result<Raw, E> {
                Ok(Raw::Text("none".into()))
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Raw, D::Error> {
                <Raw as serde::Deserialize>::deserialize(d)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> std::result::Result<Raw, A::Error> {
                use serde::de::Error as _;
                let Some((name, inner)) = m.next_entry::<String, Option<Pairs>>()? else {
                    return Err(A::Error::custom("expected {\"variant\": {fields}}, got {}"));
                };
                if m.next_key::<String>()?.is_some() {
                    return Err(A::Error::custom(
                        "expected one variant in {\"variant\": {fields}}",
                    ));
                }
                Ok(Raw::Variant(name, inner.map_or_else(Vec::new, |p| p.0)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A serde map as the grammar's `key=value` pairs, in the order given.
pub(crate) struct Pairs(pub(crate) Vec<(String, Raw)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of parameter names to values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Pairs, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry::<String, Raw>()? {
                    out.push(entry);
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}
