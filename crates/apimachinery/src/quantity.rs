//! Resource quantities (upstream `k8s.io/apimachinery/pkg/api/resource.Quantity`): parsing, exact
//! arithmetic, comparison and the canonical string form the API serves (`1500m`, `2Gi`, `1k`).
//!
//! A quantity keeps its value and the format of its suffix (decimal SI, binary SI, decimal exponent),
//! which decides how it prints, as upstream: `1024Mi` prints `1Gi`, `1.5` prints `1500m`, a sum takes
//! the format of its first non-zero operand.
//!
//! Deliberately different: the value is an `i128` count of nano-units, so precision stops at `1n` (where
//! upstream rounds too) and magnitudes beyond about 1.7e29 are rejected (upstream's `inf.Dec` has no
//! bound). Rounding to nano-units, `value()` and `milli_value()` round away from zero, as upstream.

use std::cmp::Ordering;
use std::fmt;

/// Nano-units per unit.
const NANO: i128 = 1_000_000_000;

/// How a quantity prints (upstream `resource.Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `e3`, `e-6`, ...
    DecimalExponent,
    /// `Ki`, `Mi`, ... (powers of 1024)
    BinarySi,
    /// `n`, `u`, `m`, ``, `k`, `M`, ... (powers of 1000)
    DecimalSi,
}

/// Why a quantity string did not parse; the texts are upstream's error values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// Upstream `ErrFormatWrong`.
    Format,
    /// Upstream `ErrNumeric`.
    Numeric,
    /// Upstream `ErrSuffix`.
    Suffix,
    /// Too large to represent here (upstream would accept it).
    OutOfRange,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::Format => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Numeric => "unable to parse numeric part of quantity",
            QuantityError::Suffix => "unable to parse quantity's suffix",
            QuantityError::OutOfRange => "quantity is too large",
        })
    }
}

impl std::error::Error for QuantityError {}

/// A resource quantity.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    /// Equal values are equal whatever their format (upstream `Cmp(...) == 0`).
    fn eq(&self, other: &Quantity) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Default for Quantity {
    fn default() -> Quantity {
        Quantity::zero()
    }
}

/// `n / d` rounded away from zero.
fn div_away(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n < 0 {
        q - 1
    } else {
        q + 1
    }
}

impl Quantity {
    /// Zero, in decimal SI (upstream `Quantity{Format: DecimalSI}`).
    pub fn zero() -> Quantity {
        Quantity {
            nanos: 0,
            format: Format::DecimalSi,
        }
    }

    /// `value` units (upstream `NewQuantity`).
    pub fn new(value: i64, format: Format) -> Quantity {
        Quantity {
            nanos: i128::from(value) * NANO,
            format,
        }
    }

    /// `value` thousandths (upstream `NewMilliQuantity`).
    pub fn from_milli(value: i64, format: Format) -> Quantity {
        Quantity {
            nanos: i128::from(value) * 1_000_000,
            format,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Parses upstream's quantity syntax: `[+-]digits[.digits][suffix]`.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::Format);
        }
        let bytes = s.as_bytes();
        let (negative, rest) = match bytes[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        // digits, optionally `.` and more digits, then the suffix (upstream `parseQuantityString`).
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, suffix) = match after.strip_prefix('.') {
            Some(frac) => frac.split_at(frac.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(QuantityError::Format);
        }
        // The suffix: letters, then an optional signed exponent (upstream's grammar).
        let letters = suffix
            .bytes()
            .take_while(|b| b"eEinumkKMGTP".contains(b))
            .count();
        let tail = &suffix[letters..];
        let tail_digits = tail.strip_prefix(['+', '-']).unwrap_or(tail);
        if !tail_digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(QuantityError::Format);
        }
        let (bin_exp, dec_exp, format): (u32, i64, Format) = match suffix {
            "" => (0, 0, Format::DecimalSi),
            "n" => (0, -9, Format::DecimalSi),
            "u" => (0, -6, Format::DecimalSi),
            "m" => (0, -3, Format::DecimalSi),
            "k" => (0, 3, Format::DecimalSi),
            "M" => (0, 6, Format::DecimalSi),
            "G" => (0, 9, Format::DecimalSi),
            "T" => (0, 12, Format::DecimalSi),
            "P" => (0, 15, Format::DecimalSi),
            "E" => (0, 18, Format::DecimalSi),
            "Ki" => (10, 0, Format::BinarySi),
            "Mi" => (20, 0, Format::BinarySi),
            "Gi" => (30, 0, Format::BinarySi),
            "Ti" => (40, 0, Format::BinarySi),
            "Pi" => (50, 0, Format::BinarySi),
            "Ei" => (60, 0, Format::BinarySi),
            _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
                let exp = &suffix[1..];
                let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(QuantityError::Suffix);
                }
                let e: i64 = exp.parse().map_err(|_| QuantityError::Suffix)?;
                (0, e, Format::DecimalExponent)
            }
            _ => return Err(QuantityError::Suffix),
        };
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        // value = digits * 10^(dec_exp - frac_len) * 2^bin_exp; in nano-units one more 10^9. The
        // exponent may be any i64 (`1e9223372036854775807`): saturated, it still ends out of range
        // (or below one nano-unit) as it should.
        let mut exp10 = dec_exp
            .saturating_sub(frac_part.len() as i64)
            .saturating_add(9);
        let mut digits = digits.to_string();
        while digits.ends_with('0') {
            digits.pop();
            exp10 = exp10.saturating_add(1);
        }
        if digits.is_empty() {
            return Ok(Quantity { nanos: 0, format });
        }
        // Every value the printer writes must parse back: up to 39 digits (i128's), signed so that
        // the most negative one fits too. The digits are ASCII digits, so a failure is an overflow.
        if digits.len() > 39 {
            return Err(QuantityError::OutOfRange);
        }
        let signed = if negative {
            format!("-{digits}")
        } else {
            digits
        };
        let mut v: i128 = signed.parse().map_err(|_| QuantityError::OutOfRange)?;
        v = v
            .checked_mul(1i128 << bin_exp)
            .ok_or(QuantityError::OutOfRange)?;
        if exp10 >= 0 {
            let p = u32::try_from(exp10)
                .ok()
                .and_then(|e| 10i128.checked_pow(e))
                .ok_or(QuantityError::OutOfRange)?;
            v = v.checked_mul(p).ok_or(QuantityError::OutOfRange)?;
        } else if exp10 < -38 {
            // Below one nano-unit: rounds up to one (away from zero).
            v = v.signum();
        } else {
            v = div_away(v, 10i128.pow((-exp10) as u32));
        }
        Ok(Quantity { nanos: v, format })
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// -1, 0 or 1.
    pub fn sign(&self) -> i32 {
        self.nanos.signum() as i32
    }

    /// The sum; a zero left operand takes the right one's format (upstream `Add`).
    pub fn add(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    /// The difference; a zero left operand takes the right one's format (upstream `Sub`).
    pub fn sub(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    pub fn neg(&self) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_neg(),
            format: self.format,
        }
    }

    /// The value in whole units, rounded away from zero (upstream `Value`).
    pub fn value(&self) -> i64 {
        let v = div_away(self.nanos, NANO);
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }

    /// The value in thousandths, rounded away from zero (upstream `MilliValue`).
    pub fn milli_value(&self) -> i64 {
        let v = div_away(self.nanos, 1_000_000);
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }

    /// Rounded up to whole units, keeping the format (upstream `RoundUp(0)`).
    pub fn round_up_to_units(&self) -> Quantity {
        Quantity {
            nanos: div_away(self.nanos, NANO).saturating_mul(NANO),
            format: self.format,
        }
    }

    /// The value as a float (for ratios only).
    pub fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    /// The k8s-openapi form (its canonical string).
    pub fn to_k8s(&self) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(self.to_string())
    }
}

/// Mantissa and exponent with `value = m * 10^e`, `e` a multiple of 3 and `m` free of trailing
/// zero groups (upstream `AsCanonicalBytes`).
fn decimal_canonical(nanos: i128) -> (i128, i64) {
    let (mut m, mut e) = (nanos, -9i64);
    while m != 0 && m % 10 == 0 {
        m /= 10;
        e += 1;
    }
    let r = e.rem_euclid(3);
    // Values this large are far beyond any real resource; saturate rather than panic.
    m = m.saturating_mul(10i128.pow(r as u32));
    e -= r;
    (m, e)
}

fn decimal_suffix(e: i64) -> Option<&'static str> {
    Some(match e {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

impl fmt::Display for Quantity {
    /// The canonical form (upstream `String`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == Format::BinarySi
            && (self.nanos.unsigned_abs() < 1024 * NANO as u128 || self.nanos % NANO != 0)
        {
            // Small or fractional binary values print in decimal, without rounding.
            format = Format::DecimalSi;
        }
        match format {
            Format::BinarySi => {
                let (mut m, mut e) = (self.nanos / NANO, 0);
                while m % 1024 == 0 && e < 6 {
                    m /= 1024;
                    e += 1;
                }
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][e];
                write!(f, "{m}{suffix}")
            }
            Format::DecimalSi => {
                let (mut m, mut e) = decimal_canonical(self.nanos);
                while e > 18 {
                    m = m.saturating_mul(1000);
                    e -= 3;
                }
                write!(f, "{m}{}", decimal_suffix(e).unwrap_or(""))
            }
            Format::DecimalExponent => {
                let (m, e) = decimal_canonical(self.nanos);
                if e == 0 {
                    write!(f, "{m}")
                } else {
                    write!(f, "{m}e{e}")
                }
            }
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(s)
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let s = match &v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => {
                return Err(serde::de::Error::custom(
                    "a quantity must be a string or number",
                ))
            }
        };
        Quantity::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn canonical_forms_as_upstream() {
        // (input, canonical) pairs from upstream's quantity_test.go table.
        let cases = [
            ("0", "0"),
            ("0Mi", "0"),
            ("1", "1"),
            ("100m", "100m"),
            ("0.1", "100m"),
            ("1.5", "1500m"),
            ("1500m", "1500m"),
            ("1000m", "1"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("1k", "1k"),
            ("1000k", "1M"),
            ("1G", "1G"),
            ("1Ki", "1Ki"),
            ("1024", "1024"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("1023", "1023"),
            ("100Mi", "100Mi"),
            ("700Mi", "700Mi"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("1e-3", "1e-3"),
            ("1.5e3", "1500"),
            ("10n", "10n"),
            ("1u", "1u"),
            ("0.1n", "1n"),
            ("-1", "-1"),
            ("-100m", "-100m"),
            ("+5", "5"),
            (".5", "500m"),
            ("5.", "5"),
        ];
        for (input, want) in cases {
            assert_eq!(q(input).to_string(), want, "{input}");
        }
    }

    #[test]
    fn bad_quantities_are_rejected_with_upstream_errors() {
        let cases = [
            ("", QuantityError::Format),
            ("m", QuantityError::Format),
            ("1.2.3", QuantityError::Format),
            ("1Kb", QuantityError::Format),
            ("1K", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
            ("1x", QuantityError::Format),
            ("1 ", QuantityError::Format),
        ];
        for (input, want) in cases {
            assert_eq!(Quantity::parse(input), Err(want), "{input:?}");
        }
    }

    /// Found by fuzzing (`fuzz/corpus/quantity/`): exponents at the ends of i64 overflowed the
    /// exponent arithmetic, and sums at the ends of the range overflowed negation, rounding and
    /// printing.
    #[test]
    fn extreme_exponents_and_sums_do_not_overflow() {
        assert_eq!(
            Quantity::parse("1e9223372036854775807"),
            Err(QuantityError::OutOfRange)
        );
        assert_eq!(Quantity::parse("1e-9223372036854775808"), Ok(q("1n")));
        assert_eq!(
            Quantity::parse("0e9223372036854775807"),
            Ok(Quantity::zero())
        );
        assert_eq!(
            Quantity::parse("10e9223372036854775807"),
            Err(QuantityError::OutOfRange)
        );
        // A value with 39 digits of nano-units prints as such and parses back.
        let long = q("109111111911111111111111110.111111199Ki");
        assert_eq!(long.to_string(), "111729778596977777777777776753777867776n");
        assert_eq!(q(&long.to_string()), long);
        assert_eq!(q(&long.neg().to_string()), long.neg());
        let big = q("99999999999999999999999999999.123456789");
        let max = big.add(&big).add(&big);
        let min = max.neg().sub(&big);
        assert_eq!(min.neg(), max);
        let _ = (max.round_up_to_units(), min.round_up_to_units());
        assert_eq!(q(&max.to_string()), max);
        assert_eq!(q(&min.to_string()), min);
        let bin = Quantity::zero().sub(&q("1Ei")).sub(&max);
        let _ = (bin.to_string(), bin.neg().to_string());
    }

    #[test]
    fn arithmetic_keeps_the_first_non_zero_format() {
        let sum = Quantity::zero().add(&q("1Gi"));
        assert_eq!(sum.to_string(), "1Gi");
        assert_eq!(sum.add(&q("512Mi")).to_string(), "1536Mi");
        assert_eq!(q("500m").add(&q("1")).to_string(), "1500m");
        assert_eq!(q("1").sub(&q("250m")).to_string(), "750m");
        assert_eq!(Quantity::zero().sub(&q("1Ki")).to_string(), "-1Ki");
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert!(q("1G") < q("1Gi"));
        assert_eq!(q("1500m").value(), 2);
        assert_eq!(q("1500m").milli_value(), 1500);
        assert_eq!(q("1n").milli_value(), 1);
        assert_eq!(q("1.5").round_up_to_units().to_string(), "2");
        assert_eq!(Quantity::new(3, Format::DecimalSi).to_string(), "3");
        assert_eq!(
            Quantity::from_milli(2500, Format::DecimalSi).to_string(),
            "2500m"
        );
    }

    #[test]
    fn serde_uses_the_canonical_string() {
        let v: Quantity = serde_json::from_str("\"1024Ki\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"1Mi\"");
        let n: Quantity = serde_json::from_str("3").unwrap();
        assert_eq!(n.to_string(), "3");
    }
}
