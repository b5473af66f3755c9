//! [`ETag`]: the version of an object's bytes as the store names it, compared the same way
//! wherever it comes from.
//!
//! Stores and tools spell one ETag differently: S3 sends `"9b2c…"` with quotes, a weak
//! validator is `W/"9b2c…"`, and bucketload's manifests record it bare (`9b2c…`). Compared as
//! strings, the same version looks changed (and a cache shared by the loader and the mount
//! never hits). An `ETag` holds only the opaque value between the quotes, so equality means
//! "the same version"; [`ETag::quoted`] gives the form an `If-Match` header needs.

use std::fmt;
use std::str::FromStr;

/// An entity tag without its quotes and weak prefix: `"abc"`, `W/"abc"` and `abc` are one
/// ETag, and [`Display`](fmt::Display) prints `abc` (the manifests' spelling).
///
/// The weak prefix is dropped: object stores hand out strong ETags, and a weak one names the
/// same version for our purpose (which bytes to serve); [`ETag::quoted`] always sends the
/// strong form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ETag(String);

impl ETag {
    /// The ETag spelled `raw`: surrounding whitespace, a `W/` prefix and one pair of
    /// surrounding double quotes are removed.
    pub fn parse(raw: &str) -> ETag {
        let raw = raw.trim();
        let raw = raw.strip_prefix("W/").unwrap_or(raw);
        let bare = raw
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .unwrap_or(raw);
        ETag(bare.to_owned())
    }

    /// The ETag of a store response or listing (`object_store`'s `e_tag`); `None` when the
    /// store gave none or an empty one.
    pub fn from_store(raw: Option<&str>) -> Option<ETag> {
        raw.map(ETag::parse).filter(|e| !e.0.is_empty())
    }

    /// The opaque value, without quotes.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value in double quotes, as an `If-Match` or `If-None-Match` header carries it.
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// A 64-bit fingerprint of the value (FNV-1a over its bytes, the same in every process and
    /// release): what a compact catalog keeps of an ETag instead of the ETag itself. Two ETags
    /// with the same fingerprint are taken as the same version; two different ones collide with
    /// a probability of about 2^-64, so a changed object goes unnoticed that rarely.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(self.0.as_bytes())
    }
}

/// FNV-1a, 64 bits: fast on short strings (an ETag is 32–40 bytes), fixed for good (fingerprints
/// are written into shared catalog files), and no dependency.
fn fingerprint(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ETag {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<ETag, Self::Err> {
        Ok(ETag::parse(s))
    }
}

impl From<&str> for ETag {
    fn from(raw: &str) -> ETag {
        ETag::parse(raw)
    }
}

impl From<String> for ETag {
    fn from(raw: String) -> ETag {
        ETag::parse(&raw)
    }
}

impl From<&String> for ETag {
    fn from(raw: &String) -> ETag {
        ETag::parse(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_the_weak_prefix_do_not_change_the_version() {
        let bare = ETag::parse("9b2cf535");
        for spelling in [
            "\"9b2cf535\"",
            "W/\"9b2cf535\"",
            " \"9b2cf535\" ",
            "W/9b2cf535",
        ] {
            assert_eq!(ETag::parse(spelling), bare, "{spelling}");
        }
        assert_ne!(ETag::parse("\"9b2cf536\""), bare);
        assert_eq!(ETag::parse("\"abc-3\"").as_str(), "abc-3");
    }

    #[test]
    fn display_is_bare_and_quoted_is_a_header_value() {
        let e = ETag::parse("\"abc\"");
        assert_eq!(e.to_string(), "abc");
        assert_eq!(e.quoted(), "\"abc\"");
        assert_eq!(ETag::parse(&e.quoted()), e);
    }

    #[test]
    fn fingerprints_ignore_the_spelling_and_are_fixed() {
        let bare = ETag::parse("9b2cf535");
        assert_eq!(
            ETag::parse("W/\"9b2cf535\"").fingerprint(),
            bare.fingerprint()
        );
        assert_ne!(ETag::parse("9b2cf536").fingerprint(), bare.fingerprint());
        // Written into catalog files: the function never changes (FNV-1a's test vector).
        assert_eq!(ETag::parse("a").fingerprint(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn missing_or_empty_etags_are_none() {
        assert_eq!(ETag::from_store(None), None);
        assert_eq!(ETag::from_store(Some("\"\"")), None);
        assert_eq!(ETag::from_store(Some("\"x\"")), Some(ETag::parse("x")));
    }
}
