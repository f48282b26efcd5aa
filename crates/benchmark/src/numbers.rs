//! How the benchmark writes numbers: factors, durations and values in significant figures.
//! A leaf module: the report, its rendering and the workloads' claims all format through it.

/// A factor in at most three significant figures: `6`, `1.51`, `15`; from a million up in
/// exponent form (`1.000e308`, not 309 digits).
pub fn factor(x: f64) -> String {
    if x >= 1e6 && x.is_finite() {
        return format!("{x:.3e}");
    }
    if x >= 100.0 {
        return format!("{x:.0}");
    }
    let text = format!("{x:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A duration with a unit that keeps three significant figures readable; outside a
/// nanosecond to a million seconds (a hand-edited report's 1e308 or 5e-324) in exponent form.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    let a = s.abs();
    if a != 0.0 && !(1e-9..1e6).contains(&a) {
        format!("{s:.3e} s")
    } else if a >= 1.0 {
        format!("{s:.3} s")
    } else if a >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} us", s * 1e6)
    }
}

/// A number with about four significant figures, in plain or scientific notation.
pub fn significant(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 {
        "0".into()
    } else if (1e-3..1e6).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_readably() {
        assert_eq!(seconds(2.5), "2.500 s");
        assert_eq!(seconds(0.0125), "12.500 ms");
        assert_eq!(seconds(3e-6), "3.000 us");
        assert_eq!(significant(1234.5678), "1235");
        assert_eq!(significant(0.57), "0.5700");
        assert_eq!(significant(1e-7), "1.000e-7");
        assert_eq!(factor(6.0), "6");
        assert_eq!(factor(1.512), "1.51");
        assert_eq!(factor(7.2), "7.2");
        assert_eq!(factor(100.0), "100");
        assert_eq!(factor(1e308), "1.000e308");
        assert_eq!(factor(f64::INFINITY), "inf");
        assert_eq!(seconds(1e308), "1.000e308 s");
        assert_eq!(seconds(5e-324), "4.941e-324 s");
        assert_eq!(seconds(0.0), "0.000 us");
    }
}
