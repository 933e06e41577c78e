//! The string formats kube-openapi's default registry knows (`strfmt.Default`), with the
//! checks Kubernetes runs for `format` in custom resource schemas.
//!
//! Custom resources only keep the formats apiextensions supports (`StripUnsupportedFormats`):
//! `int32`, `int64`, `float`, `double` and any other name are dropped before validation, so
//! they never reject a value.

use std::sync::OnceLock;

use regex::Regex;

use crate::validation::names;

/// Normalized names (dashes removed) of the formats custom resources validate.
const SUPPORTED: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// The registry's name for a format: dashes removed (`date-time` → `datetime`).
pub(crate) fn normalize(format: &str) -> String {
    format.replace('-', "")
}

/// Whether the registry knows `format` (after normalizing).
pub(crate) fn is_known(format: &str) -> bool {
    SUPPORTED.contains(&normalize(format).as_str())
}

/// Whether `value` is valid for the known `format`; unknown formats accept anything.
pub(crate) fn validates(format: &str, value: &str) -> bool {
    match normalize(format).as_str() {
        "bsonobjectid" => value.len() == 24 && value.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(value),
        "email" => is_email(value),
        "hostname" => is_hostname(value),
        "ipv4" => names::parse_ip(value).is_some() && value.contains('.'),
        "ipv6" => names::parse_ip(value).is_some() && value.contains(':'),
        "cidr" => names::is_cidr(value),
        "mac" => is_mac(value),
        "uuid" => is_uuid(value, None),
        "uuid3" => is_uuid(value, Some('3')),
        "uuid4" => is_uuid(value, Some('4')),
        "uuid5" => is_uuid(value, Some('5')),
        "isbn" => is_isbn10(value) || is_isbn13(value),
        "isbn10" => is_isbn10(value),
        "isbn13" => is_isbn13(value),
        "creditcard" => is_credit_card(value),
        "ssn" => is_ssn(value),
        "hexcolor" => is_hex_color(value),
        "rgbcolor" => is_rgb_color(value),
        "byte" => is_base64(value),
        "date" => is_date(value),
        "datetime" => is_date_time(value),
        "duration" => is_duration(value),
        _ => true,
    }
}

/// `url.ParseRequestURI` succeeds: an absolute path, or a scheme with an opaque part or an
/// authority whose host is well formed.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.chars().any(|c| (c as u32) < 0x20 || c as u32 == 0x7f) {
        return false;
    }
    if s.starts_with('/') {
        return true;
    }
    let Some(colon) = s.find(':') else {
        return false;
    };
    let scheme = &s[..colon];
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return false;
    }
    let rest = &s[colon + 1..];
    let rest = rest.split('?').next().unwrap_or("");
    let Some(after) = rest.strip_prefix("//") else {
        return true;
    };
    let authority = after.split('/').next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    valid_host_port(host)
}

/// The host[:port] part of a URL as `net/url` accepts it.
fn valid_host_port(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return false;
        };
        return ip.parse::<std::net::Ipv6Addr>().is_ok()
            && (after.is_empty() || after.strip_prefix(':').is_some_and(valid_port));
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (host, None),
    };
    if port.is_some_and(|p| !valid_port(p)) {
        return false;
    }
    name.chars()
        .all(|c| c.is_alphanumeric() || "-._~!$&'()*+,;=%".contains(c) || !c.is_ascii())
}

fn valid_port(p: &str) -> bool {
    p.bytes().all(|b| b.is_ascii_digit())
}

/// `net/mail.ParseAddress` yields an address: `local@domain`, optionally as
/// `Display Name <local@domain>`.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.ends_with('>')) {
        (Some(open), true) => &s[open + 1..s.len() - 1],
        (None, false) => s,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii();
    let dot_atom =
        |t: &str| !t.is_empty() && t.split('.').all(|p| !p.is_empty() && p.chars().all(atext));
    let local_ok = if local.len() >= 2 && local.starts_with('"') && local.ends_with('"') {
        true
    } else {
        dot_atom(local)
    };
    let domain_ok = if domain.starts_with('[') && domain.ends_with(']') {
        true
    } else {
        dot_atom(domain)
    };
    local_ok && domain_ok
}

fn hostname_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$")
            .expect("the hostname pattern is valid")
    })
}

/// strfmt's `IsHostname`: the RFC 1034 pattern (letters and symbols of any script allowed),
/// at most 255 bytes, labels of at most 63 bytes.
fn is_hostname(s: &str) -> bool {
    hostname_regex().is_match(s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// `net.ParseMAC`: 6, 8 or 20 octets as `xx:xx:..`, `xx-xx-..` or `xxxx.xxxx.xxxx`.
fn is_mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let groups = |sep: char, width: usize| -> Option<usize> {
        let parts: Vec<&str> = s.split(sep).collect();
        parts.iter().all(|p| hex(p, width)).then_some(parts.len())
    };
    if s.len() < 14 {
        return false;
    }
    let octets = if s.as_bytes().get(2) == Some(&b':') {
        groups(':', 2)
    } else if s.as_bytes().get(2) == Some(&b'-') {
        groups('-', 2)
    } else if s.as_bytes().get(4) == Some(&b'.') {
        groups('.', 4).map(|n| n * 2)
    } else {
        None
    };
    matches!(octets, Some(6 | 8 | 20))
}

/// The UUID patterns, dashes optional, any case; `version` pins the version digit (and the
/// variant for versions 4 and 5).
fn is_uuid(s: &str, version: Option<char>) -> bool {
    let compact: String = s.chars().filter(|c| *c != '-').collect();
    // Dashes may only sit at the canonical places.
    let dashes_ok = {
        let b = s.as_bytes();
        let mut pos = 0;
        let mut ok = true;
        for (i, len) in [8usize, 4, 4, 4, 12].iter().enumerate() {
            if b.len() < pos + len || !b[pos..pos + len].iter().all(u8::is_ascii_hexdigit) {
                ok = false;
                break;
            }
            pos += len;
            if i < 4 && b.get(pos) == Some(&b'-') {
                pos += 1;
            }
        }
        ok && pos == b.len()
    };
    if !dashes_ok || compact.len() != 32 {
        return false;
    }
    let c = compact.as_bytes();
    match version {
        None => true,
        Some(v) => {
            let variant_ok =
                v == '3' || matches!(c[16].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b');
            c[12] as char == v && variant_ok
        }
    }
}

fn sanitize_isbn(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect()
}

fn is_isbn10(s: &str) -> bool {
    let s = sanitize_isbn(s);
    let b = s.as_bytes();
    if b.len() != 10
        || !b[..9].iter().all(u8::is_ascii_digit)
        || !(b[9].is_ascii_digit() || b[9] == b'X')
    {
        return false;
    }
    let mut sum = 0u32;
    for (i, c) in b[..9].iter().enumerate() {
        sum += (i as u32 + 1) * u32::from(c - b'0');
    }
    sum += if b[9] == b'X' {
        100
    } else {
        10 * u32::from(b[9] - b'0')
    };
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let s = sanitize_isbn(s);
    let b = s.as_bytes();
    if b.len() != 13 || !b.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let mut sum = 0u32;
    for (i, c) in b[..12].iter().enumerate() {
        let w = if i % 2 == 0 { 1 } else { 3 };
        sum += w * u32::from(c - b'0');
    }
    (10 - sum % 10) % 10 == u32::from(b[12] - b'0')
}

/// govalidator's `IsCreditCard`: digits (dashes and spaces removed) of a known issuer that
/// pass the Luhn check.
fn is_credit_card(s: &str) -> bool {
    let digits: String = s.chars().filter(|c| *c != '-' && *c != ' ').collect();
    if !(13..=19).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let mut sum = 0;
    let mut double = false;
    for b in digits.bytes().rev() {
        let mut d = u32::from(b - b'0');
        if double {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
        double = !double;
    }
    sum % 10 == 0
}

fn is_ssn(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 11
        && b[..3].iter().all(u8::is_ascii_digit)
        && matches!(b[3], b'-' | b' ')
        && b[4..6].iter().all(u8::is_ascii_digit)
        && matches!(b[6], b'-' | b' ')
        && b[7..].iter().all(u8::is_ascii_digit)
}

fn is_hex_color(s: &str) -> bool {
    let h = s.strip_prefix('#').unwrap_or(s);
    (h.len() == 3 || h.len() == 6) && h.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_rgb_color(s: &str) -> bool {
    let Some(inner) = s.strip_prefix("rgb(").and_then(|r| r.strip_suffix(')')) else {
        return false;
    };
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 3
                && p.bytes().all(|b| b.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
                && p.parse::<u32>().is_ok_and(|v| v <= 255)
        })
}

/// govalidator's `IsBase64`: padded standard base64, at least one quantum.
fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !b.len().is_multiple_of(4) {
        return false;
    }
    let sym = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
    let (body, tail) = b.split_at(b.len() - 4);
    body.iter().all(|c| sym(*c))
        && match tail {
            [a, b2, b'=', b'='] => sym(*a) && sym(*b2),
            [a, b2, c, b'='] => sym(*a) && sym(*b2) && sym(*c),
            [a, b2, c, d] => sym(*a) && sym(*b2) && sym(*c) && sym(*d),
            _ => false,
        }
}

/// `time.Parse("2006-01-02", s)`: four-digit year, two-digit month and day, a real date.
pub(crate) fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r.clone()]
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| s[r].parse().ok())
            .flatten()
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    if !(1..=12).contains(&m) || d == 0 {
        return false;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    d <= days
}

/// strfmt's `IsDateTime`: a date, a `t`, then `hh:mm:ss[.frac](z|±hh:mm)` (case-insensitive).
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let t = parts[1].as_bytes();
    let two = |i: usize| t.len() >= i + 2 && t[i].is_ascii_digit() && t[i + 1].is_ascii_digit();
    if !(two(0) && t.get(2) == Some(&b':') && two(3) && t.get(5) == Some(&b':') && two(6)) {
        return false;
    }
    let mut i = 8;
    // `.` in the pattern is any character, followed by digits.
    if i < t.len() && t[i] != b'z' && t[i] != b'+' && t[i] != b'-' {
        let ch_len = parts[1][i..].chars().next().map_or(1, char::len_utf8);
        let start = i + ch_len;
        let mut j = start;
        while j < t.len() && t[j].is_ascii_digit() {
            j += 1;
        }
        if j == start {
            return false;
        }
        i = j;
    }
    let zone = &t[i.min(t.len())..];
    let zone_ok = zone == b"z"
        || (zone.len() == 6
            && matches!(zone[0], b'+' | b'-')
            && zone[1].is_ascii_digit()
            && zone[2].is_ascii_digit()
            && zone[3] == b':'
            && zone[4].is_ascii_digit()
            && zone[5].is_ascii_digit());
    zone_ok && &parts[1][0..2] <= "23" && &parts[1][3..5] <= "59" && &parts[1][6..8] <= "59"
}

/// strfmt's `IsDuration`: Go's `time.ParseDuration`, or any text holding `<n><unit>` pairs
/// with a known unit word.
fn is_duration(s: &str) -> bool {
    if go_parse_duration(s) {
        return true;
    }
    const UNITS: &[&[&str]] = &[
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    // `(\d+)\s*([A-Za-zµ]+)` anywhere in the text.
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\n' | '\r' | '\u{c}') {
            i += 1;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphabetic() || chars[i] == 'µ') {
            i += 1;
        }
        if start == i {
            continue;
        }
        let unit: String = chars[start..i].iter().collect::<String>().to_lowercase();
        for variants in UNITS {
            let last = variants.len() - 1;
            for (k, v) in variants.iter().enumerate() {
                if (k == last && unit.starts_with(v)) || unit == *v {
                    return true;
                }
            }
        }
    }
    false
}

/// Go's `time.ParseDuration` syntax: `[-+]` then one or more `<decimal><unit>`, or `0`.
fn go_parse_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut after = &rest[int_len..];
        let mut frac_len = 0;
        if let Some(f) = after.strip_prefix('.') {
            frac_len = f.bytes().take_while(u8::is_ascii_digit).count();
            after = &f[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return false;
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let unit = &after[..unit_len];
        if !matches!(unit, "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h") {
            return false;
        }
        rest = &after[unit_len..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_accept_and_reject_like_strfmt() {
        let cases: &[(&str, &str, bool)] = &[
            ("date", "2006-01-02", true),
            ("date", "2006-02-30", false),
            ("date", "2006-1-02", false),
            ("date-time", "2006-01-02T15:04:05Z", true),
            ("date-time", "2006-01-02T15:04:05.123+07:00", true),
            ("date-time", "2006-01-02T25:04:05Z", false),
            ("date-time", "2006-01-02 15:04:05Z", false),
            ("datetime", "2006-01-02t15:04:05z", true),
            ("duration", "1h30m", true),
            ("duration", "3 days", true),
            ("duration", "forever", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "::1", false),
            ("ipv6", "::1", true),
            ("ipv6", "10.0.0.1", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "10.0.0.0", false),
            ("mac", "00:1a:2b:3c:4d:5e", true),
            ("mac", "001a.2b3c.4d5e", true),
            ("mac", "00:1a:2b", false),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid", "123E4567E89B12D3A456426614174000", true),
            ("uuid", "123e4567-e89b-12d3-a456", false),
            ("uuid4", "123e4567-e89b-42d3-a456-426614174000", true),
            ("uuid4", "123e4567-e89b-12d3-a456-426614174000", false),
            ("uuid3", "123e4567-e89b-32d3-c456-426614174000", true),
            ("byte", "aGVsbG8=", true),
            ("byte", "aGVsbG8", false),
            ("byte", "", false),
            ("hostname", "example.com", true),
            ("hostname", "-bad.com", false),
            ("hostname", "localhost", true),
            ("email", "a@example.com", true),
            ("email", "Jane <a@example.com>", true),
            ("email", "not-an-email", false),
            ("uri", "https://example.com/a?b", true),
            ("uri", "/relative/path", true),
            ("uri", "relative/path", false),
            ("uri", "mailto:a@b", true),
            ("isbn10", "0-306-40615-2", true),
            ("isbn13", "978-0-306-40615-7", true),
            ("isbn13", "978-0-306-40615-8", false),
            ("creditcard", "4111 1111 1111 1111", true),
            ("creditcard", "4111 1111 1111 1112", false),
            ("ssn", "123-45-6789", true),
            ("ssn", "123456789", false),
            ("hexcolor", "#fff", true),
            ("hexcolor", "#ffff", false),
            ("rgbcolor", "rgb(255, 0, 10)", true),
            ("rgbcolor", "rgb(256,0,0)", false),
            ("bsonobjectid", "507f1f77bcf86cd799439011", true),
            ("password", "anything", true),
        ];
        for (format, value, want) in cases {
            assert!(is_known(format), "{format}");
            assert_eq!(validates(format, value), *want, "{format} {value}");
        }
        assert!(!is_known("int32"));
        assert!(!is_known("float"));
    }
}
