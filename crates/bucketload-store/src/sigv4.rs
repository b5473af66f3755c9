//! A minimal AWS Signature Version 4 signer for the few requests object_store
//! does not make (CreateBucket, the multipart-upload listing and abort, STS AssumeRole,
//! CreateSession) and for every request to an S3 Express directory bucket, which is signed
//! with its session's credentials (see [`crate::express`]). Header-based signing only.
//!
//! <https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html>

use crate::config::Credentials;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use http::Uri;
use http::{HeaderMap, HeaderValue, Method};
use sha2::{Digest, Sha256};

/// Hex SHA-256 of `data`, the `x-amz-content-sha256` value.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// What to sign.
#[derive(Debug)]
pub(crate) struct SignParams<'a> {
    pub(crate) method: &'a Method,
    /// The request's URI, its path exactly as sent (S3 signs it without resolving `.` or
    /// `..` segments).
    pub(crate) url: &'a Uri,
    pub(crate) payload_sha256: &'a str,
    pub(crate) region: &'a str,
    pub(crate) service: &'a str,
    pub(crate) now: DateTime<Utc>,
}

/// The header that carries the credentials' token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenHeader {
    /// `x-amz-security-token`: temporary credentials from STS and the like.
    Security,
    /// `x-amz-s3session-token`: the credentials of an S3 Express session (CreateSession).
    S3Session,
}

impl TokenHeader {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TokenHeader::Security => "x-amz-security-token",
            TokenHeader::S3Session => "x-amz-s3session-token",
        }
    }
}

/// Adds `host`, `x-amz-date`, `x-amz-content-sha256`, the session token and
/// `authorization` to `headers`, signing every header present.
pub(crate) fn sign(
    headers: &mut HeaderMap,
    p: &SignParams<'_>,
    creds: &Credentials,
) -> Result<(), http::header::InvalidHeaderValue> {
    sign_with(headers, p, creds, TokenHeader::Security)
}

/// [`sign`], sending the token in `token_header`.
pub(crate) fn sign_with(
    headers: &mut HeaderMap,
    p: &SignParams<'_>,
    creds: &Credentials,
    token_header: TokenHeader,
) -> Result<(), http::header::InvalidHeaderValue> {
    let amz_date = p.now.format("%Y%m%dT%H%M%SZ").to_string();
    let day = p.now.format("%Y%m%d").to_string();
    headers.insert("host", HeaderValue::from_str(&host(p.url))?);
    headers.insert("x-amz-date", HeaderValue::from_str(&amz_date)?);
    headers.insert(
        "x-amz-content-sha256",
        HeaderValue::from_str(p.payload_sha256)?,
    );
    if let Some(token) = &creds.token {
        headers.insert(token_header.name(), HeaderValue::from_str(token)?);
    }
    let (signed, canonical_headers) = canonical_headers(headers);
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        p.method,
        canonical_path(p.url),
        canonical_query(p.url),
        canonical_headers,
        signed,
        p.payload_sha256
    );
    let scope = format!("{day}/{}/{}/aws4_request", p.region, p.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let key = [day.as_str(), p.region, p.service, "aws4_request"]
        .iter()
        .fold(format!("AWS4{}", creds.secret).into_bytes(), |k, part| {
            hmac(&k, part)
        });
    let signature = hex::encode(hmac(&key, &to_sign));
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        creds.key
    );
    headers.insert("authorization", HeaderValue::from_str(&auth)?);
    Ok(())
}

/// The `Host` header: the URI's host, with its port unless it is the scheme's default.
fn host(url: &Uri) -> String {
    let h = url.host().unwrap_or_default();
    let default = match url.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    match url.port_u16() {
        Some(port) if Some(port) != default => format!("{h}:{port}"),
        _ => h.to_owned(),
    }
}

/// The path is already percent-encoded; S3 signs it as sent.
fn canonical_path(url: &Uri) -> &str {
    match url.path() {
        "" => "/",
        p => p,
    }
}

fn canonical_query(url: &Uri) -> String {
    let query = url.query().unwrap_or_default();
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (uri_encode(&k), uri_encode(&v)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `(signed header names, canonical header block)`.
fn canonical_headers(headers: &HeaderMap) -> (String, String) {
    let mut entries: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            let value = String::from_utf8_lossy(v.as_bytes());
            let collapsed = value.split_whitespace().collect::<Vec<_>>().join(" ");
            (k.as_str().to_ascii_lowercase(), collapsed)
        })
        .collect();
    entries.sort();
    let signed = entries
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let block = entries.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    (signed, block)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// The "GET Object" example of AWS's "Signature Calculations for the
    /// Authorization Header" (Amazon S3 API reference, sig-v4-header-based-auth).
    #[test]
    fn aws_published_get_object_vector() {
        let creds = Credentials {
            key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            token: None,
        };
        let url: Uri = "https://examplebucket.s3.amazonaws.com/test.txt"
            .parse()
            .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("range", HeaderValue::from_static("bytes=0-9"));
        let params = SignParams {
            method: &Method::GET,
            url: &url,
            payload_sha256: &sha256_hex(b""),
            region: "us-east-1",
            service: "s3",
            now: Utc.with_ymd_and_hms(2013, 5, 24, 0, 0, 0).unwrap(),
        };
        sign(&mut headers, &params, &creds).unwrap();
        assert_eq!(
            headers["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// A request to a directory bucket signed with its session's credentials: the token goes
    /// in `x-amz-s3session-token` and the service is `s3express`. The signature is botocore's
    /// (`S3ExpressAuth`, the AWS SDK for Python) for the same request at the same instant.
    #[test]
    fn s3_express_session_vector_matches_botocore() {
        let creds = Credentials {
            key: "ASIASESSIONEXAMPLE".into(),
            secret: "sessionsecret/EXAMPLEKEY".into(),
            token: Some("session-token-EXAMPLE".into()),
        };
        let url: Uri = "https://b--use1-az4--x-s3.s3express-use1-az4.us-east-1.amazonaws.com/k.txt"
            .parse()
            .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("range", HeaderValue::from_static("bytes=0-9"));
        let params = SignParams {
            method: &Method::GET,
            url: &url,
            payload_sha256: &sha256_hex(b""),
            region: "us-east-1",
            service: "s3express",
            now: Utc.with_ymd_and_hms(2013, 5, 24, 0, 0, 0).unwrap(),
        };
        sign_with(&mut headers, &params, &creds, TokenHeader::S3Session).unwrap();
        assert!(!headers.contains_key("x-amz-security-token"));
        assert_eq!(headers["x-amz-s3session-token"], "session-token-EXAMPLE");
        assert_eq!(
            headers["authorization"],
            "AWS4-HMAC-SHA256 Credential=ASIASESSIONEXAMPLE/20130524/us-east-1/s3express/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-s3session-token, \
             Signature=6b24f3eb84712264ccf1a9dbfff101e1adb05f5aeae14e9c898ac30a2d9995d1"
        );
    }

    #[test]
    fn query_is_sorted_and_encoded() {
        let url: Uri = "http://h/b?uploads&prefix=a%20b&list-type=2"
            .parse()
            .unwrap();
        assert_eq!(canonical_query(&url), "list-type=2&prefix=a%20b&uploads=");
    }

    #[test]
    fn paths_are_signed_as_sent() {
        let url: Uri = "http://h:80/b/a/../x/./y".parse().unwrap();
        assert_eq!(canonical_path(&url), "/b/a/../x/./y");
        assert_eq!(host(&url), "h");
        let url: Uri = "https://h:9000/b".parse().unwrap();
        assert_eq!(host(&url), "h:9000");
    }
}
