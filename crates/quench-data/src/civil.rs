//! Civil (proleptic Gregorian, UTC) dates and unix time, after Howard Hinnant's
//! `days_from_civil` and `civil_from_days` (<https://howardhinnant.github.io/date_algorithms.html>).

/// Seconds in a day.
pub(crate) const DAY: i64 = 86_400;

/// Days since 1970-01-01 of `year-month-day`; `None` for a month outside 1..=12 or a day
/// that month lacks.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let (month, day) = (i64::from(month), i64::from(day));
    // Years start in March, so the leap day ends the year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

/// `(year, month, day)` of day `days` since 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * march_month + 2) / 5 + 1) as u32;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days of `month` (1..=12) in `year`.
fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Day of the week of unix time `seconds`: 0 Sunday, 1 Monday, ..., 6 Saturday.
pub(crate) fn weekday(seconds: i64) -> i64 {
    // 1970-01-01 was a Thursday.
    (seconds.div_euclid(DAY) + 4).rem_euclid(7)
}

/// Unix time `seconds` as `YYYY-MM-DD HH:MM:SS` (UTC), for messages.
pub(crate) fn format_utc(seconds: i64) -> String {
    let (year, month, day) = civil_from_days(seconds.div_euclid(DAY));
    let clock = seconds.rem_euclid(DAY);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        clock / 3600,
        clock / 60 % 60,
        clock % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates_round_trip() {
        for (date, days) in [
            ((1970, 1, 1), 0),
            ((2000, 2, 29), 11_016),
            ((2024, 1, 1), 19_723),
            ((1969, 12, 31), -1),
            ((1600, 3, 1), -135_080),
        ] {
            assert_eq!(
                days_from_civil(date.0, date.1, date.2),
                Some(days),
                "{date:?}"
            );
            assert_eq!(civil_from_days(days), date);
        }
        for days in -800_000..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), Some(days));
        }
    }

    #[test]
    fn impossible_dates_are_refused() {
        assert_eq!(days_from_civil(2023, 2, 29), None);
        assert_eq!(days_from_civil(1900, 2, 29), None);
        assert!(days_from_civil(2000, 2, 29).is_some());
        assert_eq!(days_from_civil(2024, 13, 1), None);
        assert_eq!(days_from_civil(2024, 4, 31), None);
        assert_eq!(days_from_civil(2024, 4, 0), None);
    }

    #[test]
    fn weekdays_and_formatting() {
        assert_eq!(weekday(1_704_067_200), 1); // 2024-01-01, a Monday
        assert_eq!(weekday(-1), 3); // 1969-12-31, a Wednesday
        assert_eq!(format_utc(1_704_067_200 + 3_723), "2024-01-01 01:02:03");
        assert_eq!(format_utc(-1), "1969-12-31 23:59:59");
    }
}
