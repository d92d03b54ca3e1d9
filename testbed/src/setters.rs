//! Consuming `with_<field>` setters generated from one list (the library's config style: each
//! `#[must_use]`, with a doc line stating the default and a runnable example).
//!
//! A copy of the library's crate-private `with_setters!`: the testbed uses the library's public
//! API only, and exporting the macro would add an item to the library's surface for one user.

/// Generates `with_<field>(self, v) -> Self` setters on a config type; the example value is
/// used in the setter's doctest: `BASE.with_x(v).x == v`.
macro_rules! with_setters {
    (
        $ty:ident, $import:literal, $base:expr;
        $( $(#[$doc:meta])* $setter:ident($field:ident: $fty:ty) = $example:expr; )*
    ) => {
        impl $ty {
            $(
                $(#[$doc])*
                ///
                #[doc = concat!(
                    "```\n", $import, "\nlet c = ", stringify!($base), ".", stringify!($setter),
                    "(", stringify!($example), ");\nassert_eq!(c.", stringify!($field), ", ",
                    stringify!($example), ");\n```"
                )]
                #[must_use]
                pub fn $setter(mut self, $field: $fty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

pub(crate) use with_setters;
