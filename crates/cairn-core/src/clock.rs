//! Calendar dates for the times Cairn prints and names things by (job ids, listings, benchmark
//! records), without a date library: UTC only, from seconds since the Unix epoch.

/// Seconds since the Unix epoch as (year, month, day, hour, minute, second), UTC.
pub fn utc_parts(unix_secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let (days, s) = (
        unix_secs.div_euclid(86_400),
        unix_secs.rem_euclid(86_400) as u32,
    );
    let (y, m, d) = civil_from_days(days);
    (y, m, d, s / 3600, s / 60 % 60, s % 60)
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn utc_text(unix_secs: i64) -> String {
    let (y, m, d, h, mi, s) = utc_parts(unix_secs);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_known_days() {
        assert_eq!(utc_parts(0), (1970, 1, 1, 0, 0, 0));
        // 2000-02-29 12:34:56 UTC (a leap day of a century leap year).
        assert_eq!(utc_parts(951_827_696), (2000, 2, 29, 12, 34, 56));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
