//! The checks shared by the crate's validations: finite values, lengths, and the parameter
//! ranges of config `validate()` methods, each failing with its [`Error`] variant.

use std::fmt;

use super::{Error, Result};

/// Checks that every value is finite, naming the first offender.
pub(crate) fn check_finite(what: &'static str, values: &[f64]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(Error::NonFinite {
            what,
            index,
            value: values[index],
        }),
    }
}

/// Checks that `actual == expected`.
pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}

/// Checks that a buffer of one value per row has `expected` entries ([`Error::OutputShape`]
/// with the shapes (len, 1)).
pub(crate) fn check_out_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::OutputShape {
            what,
            expected: (expected, 1),
            actual: (actual, 1),
        })
    }
}

/// A validated parameter range used by config `validate()` methods.
pub(crate) struct Range {
    pub(crate) expected: &'static str,
    pub(crate) ok: fn(f64) -> bool,
}

impl Range {
    pub(crate) const UNIT: Range = Range {
        expected: "finite, in [0, 1]",
        ok: |v| (0.0..=1.0).contains(&v),
    };
    pub(crate) const POSITIVE: Range = Range {
        expected: "finite, > 0",
        ok: |v| v.is_finite() && v > 0.0,
    };
    pub(crate) const NON_NEGATIVE: Range = Range {
        expected: "finite, >= 0",
        ok: |v| v.is_finite() && v >= 0.0,
    };

    pub(crate) fn check(&self, name: &'static str, value: f64) -> Result<()> {
        if (self.ok)(value) {
            Ok(())
        } else {
            Err(Error::InvalidConfig {
                name,
                value,
                expected: self.expected,
            })
        }
    }
}

impl fmt::Debug for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expected)
    }
}
