//! Resource quantities ("500m", "1Gi", "1e3", or bare JSON numbers): parsing, comparison and
//! the canonical spelling Kubernetes serializes (`Quantity.String()`), plus the milli-unit
//! rounding its defaulting applies to resource lists.

use serde_json::Value;

const NANO: i128 = 1_000_000_000;

/// The notation a quantity was written in; the canonical form keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// A quantity as an exact count of nano-units (saturating far beyond any real resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    pub nanos: i128,
    pub format: Format,
}

/// The message Kubernetes gives for a malformed quantity.
pub const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

impl Quantity {
    /// `Quantity.String()`: the canonical spelling.
    pub fn canonical(&self) -> String {
        canonical(self.nanos, self.format)
    }

    /// Round up (away from zero) to a whole milli-unit, as `SetDefaults_ResourceList` does.
    pub fn round_up_milli(self) -> Quantity {
        let m = 1_000_000i128;
        let rem = self.nanos % m;
        if rem == 0 {
            return self;
        }
        let nanos = if self.nanos > 0 {
            self.nanos - rem + m
        } else {
            self.nanos - rem - m
        };
        Quantity { nanos, ..self }
    }

    /// The value in milli-units, rounded up.
    pub fn milli(&self) -> i128 {
        let m = 1_000_000i128;
        self.nanos / m + i128::from(self.nanos % m > 0)
    }
}

/// Parse a quantity from its JSON form (string or number).
pub fn parse_value(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => parse(s),
        Value::Number(n) => parse(&n.to_string()),
        _ => None,
    }
}

/// Parse a quantity string.
pub fn parse(s: &str) -> Option<Quantity> {
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
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
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
        mantissa = mantissa
            .saturating_mul(10)
            .saturating_add((c - b'0') as i128);
    }
    mantissa = mantissa.saturating_mul(1024i128.saturating_pow(pow1024));
    let scale = 9 + pow10 - fraction.len() as i32;
    let nanos = if scale >= 0 {
        mantissa.saturating_mul(10i128.checked_pow(scale as u32).unwrap_or(i128::MAX))
    } else {
        let div = 10i128.checked_pow((-scale) as u32).unwrap_or(i128::MAX);
        mantissa / div + i128::from(mantissa % div != 0)
    };
    Some(Quantity {
        nanos: if negative { -nanos } else { nanos },
        format,
    })
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
    if format == Format::DecimalSI && exponent > 18 {
        let shift = (exponent - 18) as u32;
        mantissa = mantissa.saturating_mul(10i128.pow(shift));
        exponent = 18;
    }
    format!("{mantissa}{}", decimal_suffix(exponent, format))
}

/// The canonical JSON form of a quantity value with resource-list rounding applied, or `None`
/// when it does not parse (left for validation to report).
pub fn normalize_resource(v: &Value) -> Option<Value> {
    parse_value(v).map(|q| Value::String(q.round_up_milli().canonical()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_and_rounding() {
        for (input, want) in [
            ("100m", "100m"),
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("1024", "1024"),
            ("1k", "1k"),
            ("1e3", "1e3"),
            ("128974848", "128974848"),
            ("0", "0"),
        ] {
            assert_eq!(parse(input).unwrap().canonical(), want, "{input}");
        }
        assert_eq!(normalize_resource(&json!("100u")), Some(json!("1m")));
        assert_eq!(normalize_resource(&json!(2)), Some(json!("2")));
        assert_eq!(normalize_resource(&json!("abc")), None);
        assert!(parse("1Ki").unwrap().nanos > parse("1k").unwrap().nanos);
        assert!(parse("-1").unwrap().nanos < 0);
        assert!(parse("1.2.3").is_none() && parse("").is_none() && parse("5K").is_none());
    }
}
