//! CronJob schedules as Kubernetes parses them (robfig/cron's standard parser: five fields or
//! a descriptor such as `@hourly`), with its error messages, and the time zone rules.

use serde_json::Value;

use super::{jstr, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// A field given as `*` or `?` (robfig/cron's star bit, which makes day-of-month and
/// day-of-week match as "either" rather than "both").
pub const STAR: u64 = 1 << 63;

/// A schedule without its `TZ=` prefix, parsed as robfig/cron's standard parser.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// Bit sets of the allowed minutes, hours, days of month, months and weekdays (with
    /// [`STAR`] for a field given as `*` or `?`).
    Fields {
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
    },
    /// `@every <duration>`, in seconds (Go's `time.ParseDuration`).
    Every(f64),
}

/// Parse a schedule the way `cron.ParseStandard` does; `Err` holds its message.
pub fn parse_standard(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let Some(sp) = spec.find(' ') else {
            return Err(format!(
                "provided bad location {}: unknown time zone {}",
                &spec[eq + 1..],
                &spec[eq + 1..]
            ));
        };
        let loc = &spec[eq + 1..sp];
        if !is_time_zone(loc) {
            return Err(format!(
                "provided bad location {loc}: unknown time zone {loc}"
            ));
        }
        spec = spec[sp..].trim();
    }
    parse_spec(spec).map(|_| ())
}

/// Parse a schedule whose `TZ=` prefix (if any) has been taken off: a descriptor or five
/// fields. `Err` holds robfig/cron's message.
pub fn parse_spec(spec: &str) -> Result<Spec, String> {
    if spec.starts_with('@') {
        return descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    Ok(Spec::Fields {
        minute: field_bits(fields[0], &MINUTES)?,
        hour: field_bits(fields[1], &HOURS)?,
        dom: field_bits(fields[2], &DOM)?,
        month: field_bits(fields[3], &MONTHS)?,
        dow: field_bits(fields[4], &DOW)?,
    })
}

fn descriptor(d: &str) -> Result<Spec, String> {
    let expand = |five: &str| parse_spec(five);
    match d {
        "@yearly" | "@annually" => expand("0 0 1 1 *"),
        "@monthly" => expand("0 0 1 * *"),
        "@weekly" => expand("0 0 * * 0"),
        "@daily" | "@midnight" => expand("0 0 * * *"),
        "@hourly" => expand("0 * * * *"),
        _ => match d.strip_prefix("@every ") {
            Some(dur) => go_duration(dur)
                .map(Spec::Every)
                .map_err(|e| format!("failed to parse duration {d}: {e}")),
            None => Err(format!("unrecognized descriptor: {d}")),
        },
    }
}

/// Go's `time.ParseDuration`, in seconds; `Err` holds Go's message.
pub fn go_duration(s: &str) -> Result<f64, String> {
    let invalid = || format!("time: invalid duration {}", crate::field::go_quote(s));
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0.0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if n == 0 || rest[..n] == *"." {
            return Err(invalid());
        }
        let number: f64 = rest[..n].parse().map_err(|_| invalid())?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..u];
        let scale = match unit {
            "" => {
                return Err(format!(
                    "time: missing unit in duration {}",
                    crate::field::go_quote(s)
                ))
            }
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    crate::field::go_quote(unit),
                    crate::field::go_quote(s)
                ))
            }
        };
        total += number * scale;
        rest = &rest[u..];
    }
    Ok(if neg { -total } else { total })
}

fn atoi(expr: &str) -> Result<u64, String> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: invalid syntax",
            crate::field::go_quote(expr)
        ));
    }
    let n: i64 = expr.parse().map_err(|_| {
        format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: value out of range",
            crate::field::go_quote(expr)
        )
    })?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {expr}"));
    }
    Ok(n as u64)
}

fn int_or_name(expr: &str, b: &Bounds) -> Result<u64, String> {
    let lower = expr.to_lowercase();
    if let Some((_, v)) = b.names.iter().find(|(n, _)| *n == lower) {
        return Ok(*v);
    }
    atoi(expr)
}

fn field_bits(field: &str, b: &Bounds) -> Result<u64, String> {
    let mut bits = 0;
    for expr in field.split(',').filter(|e| !e.is_empty()) {
        bits |= range_bits(expr, b)?;
    }
    Ok(bits)
}

fn range_bits(expr: &str, b: &Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let mut extra = 0;
    let (start, mut end) = if low_high[0] == "*" || low_high[0] == "?" {
        extra = STAR;
        (b.min, b.max)
    } else {
        let start = int_or_name(low_high[0], b)?;
        let end = match low_high.len() {
            1 => start,
            2 => int_or_name(low_high[1], b)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = atoi(range_and_step[1])?;
            if single {
                end = b.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    let mut bits = 0u64;
    let mut i = start;
    while i <= end {
        bits |= 1 << i;
        match i.checked_add(step) {
            Some(n) => i = n,
            None => break,
        }
    }
    Ok(bits | extra)
}

/// `validateScheduleFormat`.
pub fn schedule_format(
    errs: &mut Errs,
    schedule: &str,
    allow_tz: bool,
    time_zone: Option<&str>,
    path: &str,
) {
    if let Err(e) = parse_standard(schedule) {
        errs.push(FieldError::invalid(path, &jstr(schedule), &e));
    }
    if allow_tz && schedule.contains("TZ") && time_zone.is_some() {
        errs.push(FieldError::invalid(
            path,
            &jstr(schedule),
            "cannot use both timeZone field and TZ or CRON_TZ in schedule",
        ));
    } else if !allow_tz && schedule.contains("TZ") {
        errs.push(FieldError::invalid(
            path,
            &jstr(schedule),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ));
    }
}

const TZ_AREAS: &[&str] = &[
    "Africa",
    "America",
    "Antarctica",
    "Arctic",
    "Asia",
    "Atlantic",
    "Australia",
    "Brazil",
    "Canada",
    "Chile",
    "Etc",
    "Europe",
    "Indian",
    "Mexico",
    "Pacific",
    "US",
];
const TZ_SINGLE: &[&str] = &[
    "UTC",
    "GMT",
    "Etc/UTC",
    "Etc/GMT",
    "UCT",
    "Universal",
    "Zulu",
    "Greenwich",
    "CET",
    "CST6CDT",
    "EET",
    "EST",
    "EST5EDT",
    "HST",
    "MET",
    "MST",
    "MST7MDT",
    "PST8PDT",
    "WET",
    "Cuba",
    "Egypt",
    "Eire",
    "GB",
    "GB-Eire",
    "Hongkong",
    "Iceland",
    "Iran",
    "Israel",
    "Jamaica",
    "Japan",
    "Kwajalein",
    "Libya",
    "NZ",
    "NZ-CHAT",
    "Navajo",
    "PRC",
    "Poland",
    "Portugal",
    "ROC",
    "ROK",
    "Singapore",
    "Turkey",
    "W-SU",
    "GMT0",
    "GMT+0",
    "GMT-0",
];

/// Whether `tz` names an IANA time zone. Without a zone database at hand this accepts the
/// well-known single names and `Area/Location` names under the IANA areas.
pub fn is_time_zone(tz: &str) -> bool {
    if TZ_SINGLE.contains(&tz) {
        return true;
    }
    let Some((area, rest)) = tz.split_once('/') else {
        return false;
    };
    TZ_AREAS.contains(&area)
        && !rest.is_empty()
        && rest.split('/').all(|p| {
            !p.is_empty()
                && p.chars().next().is_some_and(|c| {
                    c.is_ascii_uppercase() || c.is_ascii_digit() || c == '+' || c == '-'
                })
                && p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'+')
        })
}

/// `validateTimeZone`.
pub fn time_zone(errs: &mut Errs, tz: Option<&str>, path: &str) {
    let Some(tz) = tz else {
        return;
    };
    let shown = crate::field::go_quote(tz);
    if tz.is_empty() {
        errs.push(FieldError::invalid_shown(
            path,
            &shown,
            "timeZone must be nil or non-empty string",
        ));
        return;
    }
    for part in tz.split('/') {
        let ok = part != "."
            && part != ".."
            && !part.starts_with('-')
            && !part.is_empty()
            && part
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'+');
        if !ok {
            errs.push(FieldError::invalid_shown(
                path,
                &shown,
                &format!("unknown time zone {tz}"),
            ));
            return;
        }
    }
    if tz.eq_ignore_ascii_case("Local") {
        errs.push(FieldError::invalid_shown(
            path,
            &shown,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    } else if !is_time_zone(tz) {
        errs.push(FieldError::invalid_shown(
            path,
            &shown,
            &format!("unknown time zone {tz}"),
        ));
    }
}

/// On update, TZ in the schedule stays allowed if the old schedule had it, and an unchanged
/// time zone is not re-checked.
pub fn relax_tz_on_update(errs: &mut Errs, new: &Value, old: &Value) {
    let old_schedule = old
        .at("/spec/schedule")
        .and_then(Value::as_str)
        .unwrap_or("");
    let new_schedule = new
        .at("/spec/schedule")
        .and_then(Value::as_str)
        .unwrap_or("");
    let tz = new.at("/spec/timeZone").and_then(Value::as_str);
    if old_schedule.contains("TZ") {
        errs.retain(|e| {
            !e.message
                .ends_with("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
        });
        if new_schedule.contains("TZ") && tz.is_some() {
            errs.push(FieldError::invalid(
                "spec.schedule",
                &jstr(new_schedule),
                "cannot use both timeZone field and TZ or CRON_TZ in schedule",
            ));
        }
    }
    if new.at("/spec/timeZone") == old.at("/spec/timeZone") {
        errs.retain(|e| e.field != "spec.timeZone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        for ok in [
            "*/5 * * * *",
            "0 0 * * 0",
            "@hourly",
            "@every 1h30m",
            "0 9-17 * jan-jun mon-fri",
            "15,45 * 1 */2 ?",
            "TZ=UTC 0 * * * *",
        ] {
            assert_eq!(parse_standard(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            parse_standard("* * *"),
            Err("expected exactly 5 fields, found 3: [* * *]".into())
        );
        assert_eq!(
            parse_standard("60 * * * *"),
            Err("end of range (60) above maximum (59): 60".into())
        );
        assert_eq!(
            parse_standard("* * 0 * *"),
            Err("beginning of range (0) below minimum (1): 0".into())
        );
        assert_eq!(
            parse_standard("@fortnightly"),
            Err("unrecognized descriptor: @fortnightly".into())
        );
        assert_eq!(
            parse_standard("x * * * *"),
            Err("failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax".into())
        );
        assert_eq!(
            parse_standard("*/0 * * * *"),
            Err("step of range should be a positive number: */0".into())
        );
        assert_eq!(
            parse_standard("5-1 * * * *"),
            Err("beginning of range (5) beyond end of range (1): 5-1".into())
        );
    }

    #[test]
    fn time_zones() {
        let mut errs = Vec::new();
        time_zone(&mut errs, Some("Europe/Paris"), "spec.timeZone");
        time_zone(&mut errs, Some("Etc/GMT+5"), "spec.timeZone");
        assert!(errs.is_empty(), "{errs:?}");
        time_zone(&mut errs, Some("Local"), "spec.timeZone");
        time_zone(&mut errs, Some("Mars/Olympus"), "spec.timeZone");
        assert_eq!(errs[0].message, "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones");
        assert_eq!(
            errs[1].message,
            "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus"
        );
    }
}
