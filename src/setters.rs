//! The one config style: consuming `with_<field>` setters, generated from one list per config
//! so every setter has the same shape (`#[must_use]`, doc line stating the default, a runnable
//! example). Validation is not done here: each config keeps one `validate()`, which its
//! estimator's constructor (or `EstimatorConfig::build`) calls.

/// Generates `with_<field>(self, v) -> Self` setters on a config type.
///
/// ```text
/// with_setters! {
///     GrpoConfig, "beacon_rl::estimator::GrpoConfig", GrpoConfig::default();
///     /// Sets `std_eps` (default 1e-6).
///     with_std_eps(std_eps: f64) = 1e-3;
/// }
/// ```
///
/// The example value is used in the setter's doctest: `BASE.with_x(v).x == v`.
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
