//! Numbers as messages print them: a value a user typed is shown as they would write it,
//! never as the 300 digits Rust's `Display` gives `1e300`.

/// Whether `x` is finite in f32, the devices' arithmetic: finite and at most `f32::MAX` in
/// magnitude (1e39 is finite in f64 and infinite once a device holds it).
pub fn fits_f32(x: f64) -> bool {
    x.is_finite() && x.abs() <= f64::from(f32::MAX)
}

/// Whether `x` is a positive number the devices' f32 holds as it is: from `f32::MIN_POSITIVE`
/// (1.2e-38; below it f32 loses digits, and 1e-46 becomes 0) to `f32::MAX` (3.4e38). For
/// step sizes, rates and scales, which a 0 or an infinity would silently disable or blow up.
pub fn positive_in_f32(x: f64) -> bool {
    x.is_finite() && x >= f64::from(f32::MIN_POSITIVE) && x <= f64::from(f32::MAX)
}

/// The reason [`positive_in_f32`] gives in a refusal.
pub const POSITIVE_IN_F32: &str = "must be positive, from 1.2e-38 to 3.4e38 (f32's normal range)";

/// `x` as `Display` writes it for magnitudes from 1e-4 to below 1e15 and for 0 (`0.1`, `-3`,
/// `12345.678`), else in exponent form (`1e300`, `1.5e-12`), where `Display` would write
/// hundreds of digits or a run of zeros; NaN and infinities as `Display` writes them.
pub fn short(x: f64) -> String {
    let magnitude = x.abs();
    if x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&magnitude) {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_f32_values_are_those_f32_holds_whole() {
        for x in [1.2e-38, 1e-3, 1.0, 3.4e38] {
            assert!(positive_in_f32(x), "{x}");
        }
        for x in [0.0, -1.0, 1e-39, 1e-46, 3.5e38, f64::NAN, f64::INFINITY] {
            assert!(!positive_in_f32(x), "{x}");
        }
    }

    #[test]
    fn short_values_stay_as_written_and_long_ones_take_an_exponent() {
        assert_eq!(short(-0.1), "-0.1");
        assert_eq!(short(3.0), "3");
        assert_eq!(short(f64::NAN), "NaN");
        assert_eq!(short(f64::NEG_INFINITY), "-inf");
        assert_eq!(short(1e300), "1e300");
        assert_eq!(short(-1.5e-12), "-1.5e-12");
        assert_eq!(short(f64::MAX), "1.7976931348623157e308");
        assert_eq!(short(0.0), "0");
        assert_eq!(short(0.001), "0.001");
    }
}
