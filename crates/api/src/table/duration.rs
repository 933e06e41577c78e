//! Timestamps and ages: a small RFC 3339 parser and the age format kubectl users know
//! ("5s", "3m20s", "2d3h"), as the API server's printers compute it.

use std::time::{SystemTime, UNIX_EPOCH};

const NANOS_PER_SEC: i128 = 1_000_000_000;

/// Nanoseconds since the Unix epoch (negative before 1970).
pub type Nanos = i128;

/// `now` as nanoseconds since the Unix epoch.
pub fn system_nanos(now: SystemTime) -> Nanos {
    match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let part = s.get(at..at + n)?;
    let mut v = 0i64;
    for &c in part {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as i64;
    }
    Some(v)
}

/// Parse an RFC 3339 timestamp ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00.123456+02:00")
/// into nanoseconds since the Unix epoch.
pub fn parse_rfc3339(s: &str) -> Option<Nanos> {
    let b = s.as_bytes();
    let year = digits(b, 0, 4)?;
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    let month = digits(b, 5, 2)? as u32;
    let day = digits(b, 8, 2)? as u32;
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let hour = digits(b, 11, 2)?;
    if b.get(13) != Some(&b':') || b.get(16) != Some(&b':') {
        return None;
    }
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    let month_days = [
        31,
        if is_leap(year) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day == 0
        || day > month_days[month as usize - 1]
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut frac: i128 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        let mut scale = NANOS_PER_SEC / 10;
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            frac += (c - b'0') as i128 * scale;
            scale /= 10;
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset_secs: i64 = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (digits(b, i + 1, 2)?, digits(b, i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs as i128 * NANOS_PER_SEC + frac)
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z), which Kubernetes treats as "unset".
fn is_zero(t: Nanos) -> bool {
    t == days_from_civil(1, 1, 1) as i128 * 86_400 * NANOS_PER_SEC
}

/// A timestamp field: `None` when missing, null, unparsable or Go's zero time.
pub fn timestamp(v: Option<&serde_json::Value>) -> Option<Nanos> {
    v.and_then(|v| v.as_str())
        .and_then(parse_rfc3339)
        .filter(|t| !is_zero(*t))
}

/// The age format of `kubectl get`: about two significant figures of the elapsed time.
pub fn human_duration(d: Nanos) -> String {
    let seconds = d / NANOS_PER_SEC; // truncates toward zero, as Go's int(d.Seconds())
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{}h", hours / 24, h)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{}d", hours / 24 / 365, dy)
        }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// Age of a timestamp field at `now`, or `<unknown>` when it is unset.
pub fn since(v: Option<&serde_json::Value>, now: Nanos) -> String {
    match timestamp(v) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

/// Format nanoseconds since the epoch as RFC 3339 in UTC with second precision.
pub fn format_rfc3339(t: Nanos) -> String {
    let secs = t.div_euclid(NANOS_PER_SEC) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil_from_days
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A timestamp field as RFC 3339 in UTC, as the default table prints "Created At";
/// Go's zero time when unset.
pub fn rfc3339_utc(v: Option<&serde_json::Value>) -> String {
    match v.and_then(|v| v.as_str()).and_then(parse_rfc3339) {
        Some(t) => format_rfc3339(t),
        None => "0001-01-01T00:00:00Z".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = NANOS_PER_SEC;

    #[test]
    fn parses_rfc3339_forms() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-05-01T10:00:00Z"),
            Some(1_714_557_600 * S)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.5+02:00"),
            Some(1_714_557_600 * S + S / 2)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T10:00:00.000123Z"),
            Some(1_714_557_600 * S + 123_000)
        );
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_some());
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2024-05-01 10:00"), None);
        assert_eq!(parse_rfc3339("2024-05-01T10:00:00"), None);
        assert_eq!(parse_rfc3339("2024-13-01T10:00:00Z"), None);
        assert!(timestamp(Some(&serde_json::json!("0001-01-01T00:00:00Z"))).is_none());
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(
            format_rfc3339(1_714_557_600 * S + 5),
            "2024-05-01T10:00:00Z"
        );
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        let t = parse_rfc3339("2000-02-29T23:59:59+01:00").unwrap();
        assert_eq!(format_rfc3339(t), "2000-02-29T22:59:59Z");
        assert_eq!(
            rfc3339_utc(Some(&serde_json::json!("0001-01-01T00:00:00Z"))),
            "0001-01-01T00:00:00Z"
        );
    }

    #[test]
    fn human_durations_match_kubectl() {
        let cases: &[(i128, &str)] = &[
            (-3 * S, "<invalid>"),
            (-S - S / 2, "0s"),
            (0, "0s"),
            (5 * S, "5s"),
            (119 * S, "119s"),
            (120 * S, "2m"),
            (200 * S, "3m20s"),
            (599 * S, "9m59s"),
            (600 * S, "10m"),
            (179 * 60 * S, "179m"),
            (180 * 60 * S, "3h"),
            ((3 * 3600 + 25 * 60) * S, "3h25m"),
            (8 * 3600 * S, "8h"),
            (47 * 3600 * S, "47h"),
            (48 * 3600 * S, "2d"),
            (51 * 3600 * S, "2d3h"),
            (8 * 24 * 3600 * S, "8d"),
            (729 * 24 * 3600 * S, "729d"),
            (730 * 24 * 3600 * S, "2y"),
            (800 * 24 * 3600 * S, "2y70d"),
            (3000 * 24 * 3600 * S, "8y"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(*d), *want, "{d}");
        }
    }
}
