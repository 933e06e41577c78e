//! Resource quantities in their canonical form ("1536Mi", "500m", "1k"), the way the API server
//! prints them in table cells whatever spelling the object was written with.

use serde_json::Value;

const NANO: i128 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// A quantity as an exact number of nano-units and the notation it was written in.
fn parse(s: &str) -> Option<(i128, Format)> {
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let (format, pow10, pow1024): (Format, i32, u32) = match suffix {
        "" => (Format::DecimalSI, 0, 0),
        "n" => (Format::DecimalSI, -9, 0),
        "u" => (Format::DecimalSI, -6, 0),
        "m" => (Format::DecimalSI, -3, 0),
        "k" => (Format::DecimalSI, 3, 0),
        "M" => (Format::DecimalSI, 6, 0),
        "G" => (Format::DecimalSI, 9, 0),
        "T" => (Format::DecimalSI, 12, 0),
        "P" => (Format::DecimalSI, 15, 0),
        "E" => (Format::DecimalSI, 18, 0),
        "Ki" => (Format::BinarySI, 0, 1),
        "Mi" => (Format::BinarySI, 0, 2),
        "Gi" => (Format::BinarySI, 0, 3),
        "Ti" => (Format::BinarySI, 0, 4),
        "Pi" => (Format::BinarySI, 0, 5),
        "Ei" => (Format::BinarySI, 0, 6),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            (Format::DecimalExponent, exp.parse().ok()?, 0)
        }
    };
    let mut mantissa: i128 = 0;
    for c in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa.checked_mul(10)?.checked_add((c - b'0') as i128)?;
    }
    mantissa = mantissa.checked_mul(1024i128.checked_pow(pow1024)?)?;
    let scale = 9 + pow10 - fraction.len() as i32;
    let nanos = if scale >= 0 {
        mantissa.checked_mul(10i128.checked_pow(scale as u32)?)?
    } else {
        // Finer than a nano-unit: round up, away from zero, as Kubernetes does.
        let div = 10i128.checked_pow((-scale) as u32).unwrap_or(i128::MAX);
        mantissa / div + i128::from(mantissa % div != 0)
    };
    Some((if negative { -nanos } else { nanos }, format))
}

fn decimal_suffix(exponent: i32, format: Format) -> String {
    if format == Format::DecimalSI {
        let si = match exponent {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        if let Some(si) = si {
            return si.to_string();
        }
    }
    if exponent == 0 {
        String::new()
    } else {
        format!("e{exponent}")
    }
}

fn canonical(nanos: i128, mut format: Format) -> String {
    if nanos == 0 {
        return "0".into();
    }
    if format == Format::BinarySI && (nanos.abs() < 1024 * NANO || nanos % NANO != 0) {
        format = Format::DecimalSI;
    }
    if format == Format::BinarySI {
        let mut units = nanos / NANO;
        let mut power = 0;
        while power < 6 && units % 1024 == 0 {
            units /= 1024;
            power += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
        return format!("{units}{suffix}");
    }
    let (mut mantissa, mut exponent) = (nanos, -9i32);
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    let r = exponent.rem_euclid(3);
    mantissa *= 10i128.pow(r as u32);
    exponent -= r;
    format!("{mantissa}{}", decimal_suffix(exponent, format))
}

/// The canonical spelling of a quantity string; unparsable input is returned as it is.
pub fn canonicalize(s: &str) -> String {
    match parse(s) {
        Some((nanos, format)) => canonical(nanos, format),
        None => s.to_string(),
    }
}

/// A quantity field as `Quantity.String()` prints it: "0" when missing.
pub fn field(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => canonicalize(s),
        Some(Value::Number(n)) => canonicalize(&n.to_string()),
        _ => "0".into(),
    }
}

/// A quantity pointer field: "<nil>" when missing, as Go prints a nil `*Quantity`.
pub fn pointer(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "<nil>".into(),
        v => field(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        let cases = [
            ("0", "0"),
            ("0Mi", "0"),
            ("100Mi", "100Mi"),
            ("1Gi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("2048", "2048"),
            ("0.5Ki", "512"),
            ("0.3Ki", "307200m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1500m", "1500m"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("0.1", "100m"),
            ("2000000", "2M"),
            ("100k", "100k"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("1E", "1E"),
            ("12e6", "12e6"),
            ("-5Gi", "-5Gi"),
            ("+200m", "200m"),
            ("0.0000000001", "1n"),
            ("10G", "10G"),
            ("5Ei", "5Ei"),
        ];
        for (input, want) in cases {
            assert_eq!(canonicalize(input), want, "{input}");
        }
        assert_eq!(canonicalize("bogus"), "bogus");
        assert_eq!(field(None), "0");
        assert_eq!(field(Some(&serde_json::json!(2))), "2");
        assert_eq!(pointer(None), "<nil>");
    }
}
