//! Log redaction: every log line goes through [`redact`] before it reaches stderr, so request
//! signatures (which can be replayed until they expire), session tokens and secret keys never
//! land in a log, whichever crate logged them.
//!
//! Redacted: the value after `Signature=` and `X-Amz-Signature=` (Authorization headers and
//! presigned URLs, SigV4 and SigV2) and after `signature=` / `expected=` (s3s's report of a
//! signature mismatch), the SigV2 signature in `AWS <key>:<signature>`, `X-Amz-Security-Token`
//! (query or header), and any secret registered with [`add_secret`]. Access key ids stay:
//! they name the credentials without granting anything.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::{PoisonError, RwLock};

/// Replaces what is hidden.
const REDACTED: &str = "<redacted>";
/// Secrets shorter than this are not searched for: they would hide ordinary words.
const MIN_SECRET_LEN: usize = 8;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Names whose value is hidden, lower case, matched without regard to case. `signature`
/// also covers `x-amz-signature` and `raw_signature`.
const KEYS: [&str; 3] = ["signature", "expected", "x-amz-security-token"];

/// Hides `secret` wherever it appears in later log lines.
pub fn add_secret(secret: &str) {
    if secret.len() < MIN_SECRET_LEN {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(PoisonError::into_inner);
    if !secrets.iter().any(|s| s == secret) {
        secrets.push(secret.to_owned());
    }
}

/// `line` with signatures, tokens and registered secrets replaced by `<redacted>`.
pub fn redact(line: &str) -> Cow<'_, str> {
    let mut out = redact_keys(line);
    if let Some(sigv2) = redact_sigv2(&out) {
        out = Cow::Owned(sigv2);
    }
    let secrets = SECRETS.read().unwrap_or_else(PoisonError::into_inner);
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
        }
    }
    out
}

/// Hides the value after each of [`KEYS`] followed by `=` or `": "` (a header in a
/// debug-printed map), skipping terminal colour codes between name and value.
fn redact_keys(line: &str) -> Cow<'_, str> {
    let lower = line.to_ascii_lowercase();
    let mut out = String::new();
    let mut copied = 0;
    let mut at = 0;
    while let Some((start, key)) = next_key(&lower, at) {
        let after = start + key.len();
        at = after;
        let Some(value) = value_start(line, after) else {
            continue;
        };
        let end = value_end(line, value);
        if end == value {
            continue;
        }
        out.push_str(&line[copied..value]);
        out.push_str(REDACTED);
        copied = end;
        at = end;
    }
    if copied == 0 {
        return Cow::Borrowed(line);
    }
    out.push_str(&line[copied..]);
    Cow::Owned(out)
}

/// The first of [`KEYS`] at or after `from` in the lower-cased line.
fn next_key(lower: &str, from: usize) -> Option<(usize, &'static str)> {
    KEYS.iter()
        .filter_map(|key| Some((from + lower.get(from..)?.find(key)?, *key)))
        .min_by_key(|(start, _)| *start)
}

/// Where the value after a key starts: after `=`, `": "` or `: `, an opening quote, and
/// colour codes; `None` when the key is not followed by a value.
fn value_start(line: &str, mut i: usize) -> Option<usize> {
    let bytes = line.as_bytes();
    i = skip_ansi(bytes, i);
    if bytes.get(i) == Some(&b'"') {
        i += 1;
    }
    match bytes.get(i)? {
        b'=' => i += 1,
        b':' => {
            i += 1;
            while bytes.get(i) == Some(&b' ') {
                i += 1;
            }
        }
        _ => return None,
    }
    i = skip_ansi(bytes, i);
    for prefix in ["Some(", "\""] {
        if line[i..].starts_with(prefix) {
            i += prefix.len();
        }
    }
    Some(i)
}

/// Where a value ends: at a quote, separator, bracket or white space.
fn value_end(line: &str, start: usize) -> usize {
    line[start..]
        .find(|c: char| {
            c.is_whitespace() || matches!(c, '"' | '\'' | '&' | ',' | ';' | ')' | '}' | ']' | '\\')
        })
        .map_or(line.len(), |n| start + n)
}

/// Skips terminal colour codes (`ESC [ ... m`).
fn skip_ansi(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i) == Some(&0x1b) && bytes.get(i + 1) == Some(&b'[') {
        match bytes[i..].iter().position(|&b| b == b'm') {
            Some(m) => i += m + 1,
            None => break,
        }
    }
    i
}

/// Hides the signature of SigV2 Authorization headers: `AWS <key id>:<signature>`.
fn redact_sigv2(line: &str) -> Option<String> {
    const MARK: &str = "AWS ";
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(n) = line[from..].find(MARK) {
        let key_start = from + n + MARK.len();
        from = key_start;
        let rest = &line[key_start..];
        let key_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        if key_len == 0 || !rest[key_len..].starts_with(':') {
            continue;
        }
        let sig = key_start + key_len + 1;
        let end = value_end(line, sig);
        if end > sig {
            out.push_str(&line[copied..sig]);
            out.push_str(REDACTED);
            copied = end;
            from = end;
        }
    }
    (copied > 0).then(|| out + &line[copied..])
}

/// The log writer: stderr, every event redacted.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactingStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingStderr;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingStderr
    }
}

impl Write for RedactingStderr {
    /// The formatter hands over one whole event per call (`write_all` of its buffer).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr().lock().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_headers_lose_their_signature() {
        let line = r#"req=Request { headers: {"authorization": "AWS4-HMAC-SHA256 Credential=bucketload/20261126/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123abcd", "host": "h"} }"#;
        let out = redact(line);
        assert!(!out.contains("0123abcd"), "{out}");
        assert!(out.contains("Credential=bucketload/20261126"), "{out}");
        assert!(out.contains("Signature=<redacted>\""), "{out}");
        assert!(out.contains("\"host\": \"h\""), "{out}");
    }

    #[test]
    fn presigned_urls_and_tokens_lose_their_secrets() {
        let line = "uri: /b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=bucketload%2F20261126&X-Amz-Security-Token=tok%2Fen&X-Amz-Signature=feedbeef&x-id=GetObject";
        let out = redact(line);
        assert!(
            !out.contains("feedbeef") && !out.contains("tok%2Fen"),
            "{out}"
        );
        assert!(
            out.contains("X-Amz-Credential=bucketload%2F20261126"),
            "{out}"
        );
        assert!(out.contains("&x-id=GetObject"), "{out}");
        let header =
            r#"{"x-amz-security-token": "FQoGZXIvYXdzE", "x-amz-date": "20261126T000000Z"}"#;
        let out = redact(header);
        assert!(!out.contains("FQoGZXIvYXdzE"), "{out}");
        assert!(out.contains("20261126T000000Z"), "{out}");
    }

    #[test]
    fn sigv2_and_mismatch_reports_are_hidden() {
        let out = redact(r#"{"authorization": "AWS bucketload:c2lnbmF0dXJl+/="}"#);
        assert!(!out.contains("c2lnbmF0dXJl"), "{out}");
        assert!(out.contains("AWS bucketload:<redacted>"), "{out}");
        let out = redact("signature mismatch signature=\"aaaa\" expected=\"bbbb\"");
        assert!(!out.contains("aaaa") && !out.contains("bbbb"), "{out}");
        let out = redact("\u{1b}[3msignature\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"cccc\"");
        assert!(!out.contains("cccc"), "{out:?}");
        let out = redact("?AWSAccessKeyId=k&Expires=1&Signature=dddd%2B");
        assert!(!out.contains("dddd"), "{out}");
    }

    #[test]
    fn registered_secrets_are_hidden_and_plain_lines_untouched() {
        add_secret("s3cr3t-value-42");
        add_secret("short");
        let out = redact("starting with secret s3cr3t-value-42 and short");
        assert_eq!(out, "starting with secret <redacted> and short");
        let plain = "GET /b/k 200 signature checked";
        assert!(matches!(redact(plain), Cow::Borrowed(_)));
    }
}
