//! Just enough of resource quantities for the downward API and tmpfs sizes: parse a
//! quantity string (`500m`, `1.5Gi`, `2e3`, `128974848`) exactly and scale it to an integer
//! rounding up, as `Quantity.Value()` and `Quantity.MilliValue()` do.

/// An exact quantity: `num / den` (den > 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    num: i128,
    den: i128,
}

/// The largest number of significant digits accepted (keeps the arithmetic in i128).
const MAX_DIGITS: usize = 30;

impl Quantity {
    pub const ZERO: Quantity = Quantity { num: 0, den: 1 };

    pub fn from_int(v: i64) -> Quantity {
        Quantity {
            num: v as i128,
            den: 1,
        }
    }

    /// Parse a quantity in Kubernetes' syntax. None when it is not one.
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let (negative, rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let digits_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(digits_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let all = format!("{int_part}{frac_part}");
        let all = all.trim_start_matches('0');
        if all.len() > MAX_DIGITS {
            return None;
        }
        let mut num: i128 = if all.is_empty() { 0 } else { all.parse().ok()? };
        let mut den: i128 = pow10(frac_part.len() as u32)?;
        // (base, exponent) of the suffix: 2^(10n) or 10^n.
        let (binary, exp): (bool, i32) = match suffix {
            "" => (false, 0),
            "Ki" => (true, 1),
            "Mi" => (true, 2),
            "Gi" => (true, 3),
            "Ti" => (true, 4),
            "Pi" => (true, 5),
            "Ei" => (true, 6),
            "n" => (false, -9),
            "u" => (false, -6),
            "m" => (false, -3),
            "k" => (false, 3),
            "M" => (false, 6),
            "G" => (false, 9),
            "T" => (false, 12),
            "P" => (false, 15),
            "E" => (false, 18),
            other => {
                let e = other.strip_prefix(['e', 'E'])?;
                let v: i32 = e.parse().ok()?;
                if !(-40..=40).contains(&v) {
                    return None;
                }
                (false, v)
            }
        };
        if binary {
            num = num.checked_mul(1i128 << (10 * exp))?;
        } else if exp >= 0 {
            num = num.checked_mul(pow10(exp as u32)?)?;
        } else {
            den = den.checked_mul(pow10((-exp) as u32)?)?;
        }
        if negative {
            num = -num;
        }
        Some(Quantity { num, den }.reduced())
    }

    fn reduced(self) -> Quantity {
        let g = gcd(self.num.unsigned_abs(), self.den.unsigned_abs()) as i128;
        if g <= 1 {
            return self;
        }
        Quantity {
            num: self.num / g,
            den: self.den / g,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.num == 0
    }

    /// The value times 10^`scale`, rounded up (away from zero for negative values, as
    /// Kubernetes does), saturating at the i64 range.
    pub fn scaled(&self, scale: u32) -> i64 {
        let Some(mult) = pow10(scale) else {
            return if self.num >= 0 { i64::MAX } else { i64::MIN };
        };
        let Some(n) = self.num.checked_mul(mult) else {
            return if self.num >= 0 { i64::MAX } else { i64::MIN };
        };
        let q = n / self.den;
        let r = n % self.den;
        let v = if r == 0 {
            q
        } else if n > 0 {
            q + 1
        } else {
            q - 1
        };
        v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// `Quantity.Value()`.
    pub fn value(&self) -> i64 {
        self.scaled(0)
    }

    /// `Quantity.MilliValue()`.
    pub fn milli_value(&self) -> i64 {
        self.scaled(3)
    }
}

fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// `ceil(a / b)` in floating point, as the downward API computes it; a zero divisor is
/// taken as 1.
pub fn ceil_div(a: i64, b: i64) -> i64 {
    let b = if b == 0 { 1 } else { b };
    (a as f64 / b as f64).ceil() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes_and_rounds_up() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(q("500m").milli_value(), 500);
        assert_eq!(q("500m").value(), 1);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("2").milli_value(), 2000);
        assert_eq!(q("1Ki").value(), 1024);
        assert_eq!(q("1.5Gi").value(), 1610612736);
        assert_eq!(q("128974848").value(), 128974848);
        assert_eq!(q("129e6").value(), 129000000);
        assert_eq!(q("123Mi").value(), 128974848);
        assert_eq!(q("1k").value(), 1000);
        assert_eq!(q("100n").value(), 1);
        assert_eq!(q("100n").milli_value(), 1);
        assert_eq!(q("0").value(), 0);
        assert_eq!(q("0.1m").milli_value(), 1);
        assert_eq!(q("1E").value(), 1_000_000_000_000_000_000);
        assert_eq!(q("10E").value(), i64::MAX);
        assert!(Quantity::parse("").is_none());
        assert!(Quantity::parse("abc").is_none());
        assert!(Quantity::parse("1.2.3").is_none());
        assert!(Quantity::parse("1Zi").is_none());
        assert!(Quantity::parse("1e999").is_none());
    }

    #[test]
    fn ceil_division() {
        assert_eq!(ceil_div(1500, 1000), 2);
        assert_eq!(ceil_div(1000, 1000), 1);
        assert_eq!(ceil_div(1, 1000), 1);
        assert_eq!(ceil_div(0, 1000), 0);
        assert_eq!(ceil_div(5, 0), 5);
    }
}
