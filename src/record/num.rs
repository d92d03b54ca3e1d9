//! How the named numeric fields are written: integral values as JSON integers, so that the
//! bundled files (written by Python with integer scores) round-trip to equal JSON, and
//! non-finite values refused instead of serde_json's silent `null`.

use serde::ser::Error as _;
use serde::{Serialize, Serializer};

/// 2^53: every integer up to this magnitude is exactly an `f64` and an `i64`.
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

pub(crate) fn ser<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    let v = *v;
    if !v.is_finite() {
        return Err(S::Error::custom(format!(
            "non-finite number {v} cannot be written as JSON"
        )));
    }
    // -0.0 stays a float: as an integer it would lose its sign.
    if v.fract() == 0.0 && v.abs() <= MAX_EXACT_INT && !(v == 0.0 && v.is_sign_negative()) {
        s.serialize_i64(v as i64)
    } else {
        s.serialize_f64(v)
    }
}

pub(crate) fn ser_opt<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(&Num(*v)),
        None => s.serialize_none(),
    }
}

struct Num(f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ser(&self.0, s)
    }
}

#[cfg(test)]
mod tests {
    use super::Num;

    fn text(v: f64) -> String {
        serde_json::to_string(&Num(v)).unwrap()
    }

    #[test]
    fn integral_values_are_integers_others_shortest_floats() {
        assert_eq!(text(1.0), "1");
        assert_eq!(text(-100.0), "-100");
        assert_eq!(text(0.0), "0");
        assert_eq!(text(-0.0), "-0.0");
        assert_eq!(text(0.5), "0.5");
        // 2^53 is the last integer written as one; 2^54 is a float (exactly representable,
        // but i64 text would suggest integer precision the f64 does not have past 2^53).
        assert_eq!(text(9_007_199_254_740_992.0), "9007199254740992");
        assert_eq!(text(18_014_398_509_481_984.0), "1.8014398509481984e+16");
    }

    #[test]
    fn non_finite_is_an_error() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(serde_json::to_string(&Num(v)).is_err());
        }
    }

    #[test]
    fn values_read_back_bit_exact() {
        for v in [0.1, 1.0 / 3.0, 5e-324, f64::MAX, -2.5e-300, 123456789.125, -0.0] {
            let back: f64 = serde_json::from_str(&text(v)).unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{v}");
        }
    }
}
