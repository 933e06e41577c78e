//! Go's text forms of times and durations, as `metav1.Time`, `metav1.MicroTime` and
//! `metav1.Duration` write them in JSON.

use std::fmt::Write;

const NANOS_PER_SEC: i128 = 1_000_000_000;

/// `time.Unix(seconds, nanos).UTC().Format(layout)` for RFC 3339 with `frac_digits` (0 or 6)
/// fractional digits, truncated.
pub(super) fn rfc3339(seconds: i64, nanos: i64, frac_digits: u32) -> String {
    let total = i128::from(seconds) * NANOS_PER_SEC + i128::from(nanos);
    let secs = total.div_euclid(NANOS_PER_SEC);
    let sub = total.rem_euclid(NANOS_PER_SEC) as u32;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(days);
    let mut out = String::with_capacity(32);
    if year < 0 {
        let _ = write!(out, "-{:04}", -year);
    } else {
        let _ = write!(out, "{year:04}");
    }
    let _ = write!(
        out,
        "-{:02}-{:02}T{:02}:{:02}:{:02}",
        month,
        day,
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    );
    if frac_digits == 6 {
        let _ = write!(out, ".{:06}", sub / 1000);
    }
    out.push('Z');
    out
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(days: i128) -> (i128, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i128::from(month <= 2);
    (year, month, day)
}

/// Go's `time.Duration.String()`: "1h2m3s", "1.5s", "250ms", "1µs", "0s", "-1m30s".
pub(super) fn go_duration(nanos: i64) -> String {
    let neg = nanos < 0;
    let mut u = nanos.unsigned_abs();
    // Built back to front, as Go does.
    let mut buf = [0u8; 32];
    let mut w = buf.len();
    let mut put = |w: &mut usize, b: u8| {
        *w -= 1;
        buf[*w] = b;
    };
    if u < 1_000_000_000 {
        if u == 0 {
            return "0s".to_string();
        }
        put(&mut w, b's');
        let prec = if u < 1_000 {
            put(&mut w, b'n');
            0
        } else if u < 1_000_000 {
            // "µ" is two bytes in UTF-8.
            put(&mut w, 0xb5);
            put(&mut w, 0xc2);
            3
        } else {
            put(&mut w, b'm');
            6
        };
        u = frac(&mut put, &mut w, u, prec);
        int(&mut put, &mut w, u);
    } else {
        put(&mut w, b's');
        u = frac(&mut put, &mut w, u, 9);
        int(&mut put, &mut w, u % 60);
        u /= 60;
        if u > 0 {
            put(&mut w, b'm');
            int(&mut put, &mut w, u % 60);
            u /= 60;
            if u > 0 {
                put(&mut w, b'h');
                int(&mut put, &mut w, u);
            }
        }
    }
    if neg {
        put(&mut w, b'-');
    }
    String::from_utf8_lossy(&buf[w..]).into_owned()
}

/// Writes the fraction of `v / 10^prec` without trailing zeros (and no dot when it is zero);
/// returns the integer part.
fn frac(put: &mut impl FnMut(&mut usize, u8), w: &mut usize, mut v: u64, prec: u32) -> u64 {
    let mut print = false;
    for _ in 0..prec {
        let digit = (v % 10) as u8;
        print = print || digit != 0;
        if print {
            put(w, b'0' + digit);
        }
        v /= 10;
    }
    if print {
        put(w, b'.');
    }
    v
}

fn int(put: &mut impl FnMut(&mut usize, u8), w: &mut usize, mut v: u64) {
    if v == 0 {
        put(w, b'0');
        return;
    }
    while v > 0 {
        put(w, b'0' + (v % 10) as u8);
        v /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_match_go() {
        let s = 1_000_000_000i64;
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1), "1ns");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(250_000_000), "250ms");
        assert_eq!(go_duration(s), "1s");
        assert_eq!(go_duration(3 * s / 2), "1.5s");
        assert_eq!(go_duration(90 * s), "1m30s");
        assert_eq!(go_duration(3600 * s), "1h0m0s");
        assert_eq!(go_duration(3723 * s), "1h2m3s");
        assert_eq!(go_duration(-90 * s), "-1m30s");
        assert_eq!(go_duration(i64::MIN), "-2562047h47m16.854775808s");
        assert_eq!(go_duration(i64::MAX), "2562047h47m16.854775807s");
    }

    #[test]
    fn times_match_go() {
        assert_eq!(rfc3339(0, 0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_714_557_600, 0, 0), "2024-05-01T10:00:00Z");
        assert_eq!(
            rfc3339(1_714_557_600, 123_456_789, 6),
            "2024-05-01T10:00:00.123456Z"
        );
        assert_eq!(
            rfc3339(1_714_557_600, 999, 6),
            "2024-05-01T10:00:00.000000Z"
        );
        assert_eq!(rfc3339(-1, 0, 0), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(951_782_400, 0, 0), "2000-02-29T00:00:00Z");
        // Go's zero time, year 1.
        assert_eq!(rfc3339(-62_135_596_800, 0, 0), "0001-01-01T00:00:00Z");
        // Extremes never panic.
        let _ = rfc3339(i64::MAX, i64::MAX, 6);
        let _ = rfc3339(i64::MIN, i64::MIN, 6);
    }
}
