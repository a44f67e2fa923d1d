//! Kubernetes resource quantities (`64Gi`, `500m`, `1.5`, `1e3`): one grammar for the
//! validator's yes/no ([`is_quantity`]) and the spoke policy's exact comparisons
//! ([`thousandths`]).
//!
//! Ours, not a crate's: the maintained parsers go through `f64` (inexact for the ceilings
//! a policy compares) or pin an old k8s-openapi; this is one splitter and one suffix table.

/// A quantity's text split into its parts (`[sign] number [suffix]`); `None` when it is
/// not a quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Parts<'a> {
    sign: Option<char>,
    /// Digits before the point (may be empty when `fraction` is not: `.5`).
    whole: &'a str,
    /// Digits after the point.
    fraction: &'a str,
    suffix: Suffix<'a>,
}

/// What a suffix multiplies by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suffix<'a> {
    /// `Ki` .. `Ei`: 2 to this power.
    Binary(u32),
    /// `n` .. `E` and no suffix: 10 to this power.
    Decimal(i32),
    /// `e`/`E` with an optional sign and digits, as written (any length).
    Exponent { negative: bool, digits: &'a str },
}

fn split(s: &str) -> Option<Parts<'_>> {
    let (sign, rest) = match s.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
        _ => (None, s),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let suffix = match suffix {
        "Ki" => Suffix::Binary(10),
        "Mi" => Suffix::Binary(20),
        "Gi" => Suffix::Binary(30),
        "Ti" => Suffix::Binary(40),
        "Pi" => Suffix::Binary(50),
        "Ei" => Suffix::Binary(60),
        "n" => Suffix::Decimal(-9),
        "u" => Suffix::Decimal(-6),
        "m" => Suffix::Decimal(-3),
        "" => Suffix::Decimal(0),
        "k" => Suffix::Decimal(3),
        "M" => Suffix::Decimal(6),
        "G" => Suffix::Decimal(9),
        "T" => Suffix::Decimal(12),
        "P" => Suffix::Decimal(15),
        "E" => Suffix::Decimal(18),
        e => {
            let exp = e.strip_prefix(['e', 'E'])?;
            let (negative, digits) = match exp.chars().next() {
                Some('-') => (true, &exp[1..]),
                Some('+') => (false, &exp[1..]),
                _ => (false, exp),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Suffix::Exponent { negative, digits }
        }
    };
    Some(Parts {
        sign,
        whole,
        fraction,
        suffix,
    })
}

/// Whether `s` is a Kubernetes resource quantity (signs, `n`/`u` and negative exponents
/// included, as the API server accepts them).
pub fn is_quantity(s: &str) -> bool {
    split(s).is_some()
}

/// A quantity (`2`, `500m`, `4Gi`, `1e3`), surrounding white space ignored, in
/// thousandths of its unit, rounded up. `None` when it does not parse, carries a sign,
/// is finer than thousandths by its suffix (`n`, `u`, a negative exponent), or is too
/// large to compare exactly (more than 20 whole or 9 fraction digits, an exponent over
/// 18).
pub fn thousandths(s: &str) -> Option<u128> {
    let parts = split(s.trim())?;
    if parts.sign.is_some() || parts.whole.len() > 20 || parts.fraction.len() > 9 {
        return None;
    }
    let multiplier: u128 = match parts.suffix {
        Suffix::Binary(shift) => 1000 << shift,
        Suffix::Decimal(power) => 10u128.pow(u32::try_from(power + 3).ok()?),
        Suffix::Exponent {
            negative: false,
            digits,
        } => {
            let exp: u32 = digits.parse().ok().filter(|x| *x <= 18)?;
            1000 * 10u128.pow(exp)
        }
        Suffix::Exponent { negative: true, .. } => return None,
    };
    let mut digits: u128 = 0;
    for b in parts.whole.bytes().chain(parts.fraction.bytes()) {
        digits = digits.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
    }
    // value = digits / 10^fraction.len() * multiplier, in thousandths.
    let scale = 10u128.pow(u32::try_from(parts.fraction.len()).ok()?);
    Some(digits.checked_mul(multiplier)?.div_ceil(scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_forms_are_quantities() {
        for q in [
            "64Gi", "500M", "1.5", "100m", "1e3", "1E-3", "+1", "-2Ki", ".5", "1.", "3n", "4u",
        ] {
            assert!(is_quantity(q), "{q:?}");
        }
        for q in [
            "", ".", "Gi", "1.2.3", "1Z", "1e", "1e+", "e3", "1 Gi", "--1", "1iB",
        ] {
            assert!(!is_quantity(q), "{q:?}");
        }
    }

    #[test]
    fn thousandths_are_exact_and_rounded_up() {
        for (q, v) in [
            ("2", Some(2000)),
            (" 2 ", Some(2000)),
            ("500m", Some(500)),
            ("0.0001", Some(1)),
            ("4Gi", Some(4000u128 << 30)),
            ("1e+3", Some(1_000_000)),
            ("1e18", Some(1000 * 10u128.pow(18))),
            ("1e19", None),
            ("1e-3", None),
            ("1u", None),
            ("+1", None),
            ("0.0000000001", None),
            ("123456789012345678901", None),
        ] {
            assert_eq!(thousandths(q), v, "{q:?}");
        }
    }

    proptest::proptest! {
        /// Whatever parses exactly is a quantity to the validator too, so a policy never
        /// admits a request the validator would call malformed.
        #[test]
        fn what_parses_exactly_is_a_quantity(q in "[0-9.eEkMGTPimnu+-]{0,12}") {
            if thousandths(&q).is_some() {
                proptest::prop_assert!(is_quantity(q.trim()));
            }
        }
    }
}
