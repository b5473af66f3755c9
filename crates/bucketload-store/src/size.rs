//! Human-readable byte sizes: `4096`, `100KB`, `256MiB`, `1.5GB`.

use crate::Error;

/// Decimal (`KB` = 1000) and binary (`KiB` = 1024) units, longest suffix first.
const UNITS: &[(&str, u64)] = &[
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("k", 1_000),
    ("m", 1_000_000),
    ("g", 1_000_000_000),
    ("b", 1),
];

/// Parses a byte size such as `"4096"`, `"100KB"` (100 000), `"256MiB"`
/// (268 435 456) or `"1.5GB"`; units are case-insensitive and a space between
/// number and unit is allowed.
pub fn parse_size(s: &str) -> Result<u64, Error> {
    let invalid = || Error::InvalidInput {
        message: format!(
            "`{s}` is not a size; use bytes or a unit such as 100KB, 256MiB, 1GiB (KB = 1000, KiB = 1024)"
        ),
    };
    let lower = s.trim().to_ascii_lowercase();
    let (number, multiplier) = UNITS
        .iter()
        .find_map(|(unit, mult)| lower.strip_suffix(unit).map(|n| (n.trim(), *mult)))
        .unwrap_or((lower.as_str(), 1));
    if number.is_empty() {
        return Err(invalid());
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(multiplier).ok_or_else(invalid);
    }
    let value: f64 = number.parse().map_err(|_| invalid())?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(invalid());
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_size;

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size(" 0 ").unwrap(), 0);
        assert_eq!(parse_size("12B").unwrap(), 12);
    }

    #[test]
    fn decimal_and_binary_units() {
        assert_eq!(parse_size("100KB").unwrap(), 100_000);
        assert_eq!(parse_size("100kb").unwrap(), 100_000);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1 GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("8m").unwrap(), 8_000_000);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "MiB",
            "ten",
            "-1",
            "1.2.3KB",
            "99999999999999999999GiB",
            "5 XB",
        ] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.to_string().contains("is not a size"), "{bad}: {err}");
        }
    }
}
