//! S3 Express One Zone sessions for directory buckets (see [`crate::directory`]).
//!
//! A client first calls CreateSession (`GET /bucket?session`), signed with its ordinary
//! credentials, and gets temporary ones for that bucket: an access key ID, a secret and a
//! token, good for five minutes (`serve --session-ttl`). Every other request to the bucket
//! is signed with them and carries the token in `x-amz-s3session-token`; S3 refuses it once
//! the session has expired (400 `ExpiredToken`), when the token is unknown (400
//! `InvalidToken`), when it was made for another bucket or is read-only and the request
//! writes (403 `AccessDenied`), and when a request comes without a session (403
//! `AccessDenied`). Only the control-plane requests, CreateBucket and DeleteBucket, and the
//! copies (CopyObject, UploadPartCopy, which S3 authorizes with IAM credentials) are signed with
//! the ordinary credentials.
//!
//! The request layer (s3s) checks Signature Version 4 for the service `s3` with the server's
//! one key. So the signature of a directory-bucket request is checked here, against the
//! session's secret (or the server's for CreateSession and the control plane), for the
//! service it names (`s3express`, as the AWS SDKs sign, or `s3`); the request is then signed
//! again with the server's key for `s3`, over the same canonical request, so s3s checks the
//! payload's digest as for any other request.
//!
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateSession.html>

use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderValue, Method, Uri};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How long a session lasts unless the server is told otherwise: S3's five minutes.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(300);

/// The header that carries a session's token.
pub(crate) const SESSION_TOKEN: &str = "x-amz-s3session-token";

/// What to do with a request, decided before the request layer sees it.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Not a directory-bucket request (or one s3s checks as it is): hand it on unchanged.
    Pass,
    /// Checked here; hand it on with this `authorization` (signed again with the server's key).
    Resign(HeaderValue),
    /// Answer CreateSession with this XML.
    Session(String),
    /// Refuse: `(status, code, message)`.
    Refuse(u16, &'static str, String),
}

#[derive(Debug)]
struct Session {
    secret: String,
    token: String,
    bucket: String,
    read_only: bool,
    expires: SystemTime,
}

/// The sessions a server has handed out, and its own key.
#[derive(Debug)]
pub(crate) struct Sessions {
    access_key: String,
    secret_key: String,
    ttl: Duration,
    live: Mutex<HashMap<String, Session>>,
}

/// The parts of a Signature Version 4 `Authorization` header.
#[derive(Debug, PartialEq)]
struct Authorization<'a> {
    key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Option<Authorization<'_>> {
    let rest = value.strip_prefix("AWS4-HMAC-SHA256")?.trim_start();
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (name, v) = part.trim().split_once('=')?;
        match name {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed_headers = Some(v),
            "Signature" => signature = Some(v),
            _ => return None,
        }
    }
    let mut scope = credential?.splitn(5, '/');
    let (key, date, region, service, terminal) = (
        scope.next()?,
        scope.next()?,
        scope.next()?,
        scope.next()?,
        scope.next()?,
    );
    (terminal == "aws4_request").then_some(Authorization {
        key,
        date,
        region,
        service,
        signed_headers: signed_headers?,
        signature: signature?,
    })
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// `%XX` escapes decoded (a `+` stays a `+`, as S3 reads a signed query).
fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// SigV4's URI encoding: every byte but the unreserved ones as `%XX`.
fn uri_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&percent_decode(k)),
                uri_encode(&percent_decode(v)),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical request of a signed request, or `None` when a signed header is missing.
fn canonical_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    signed_headers: &str,
) -> Option<String> {
    let mut canonical_headers = String::new();
    for name in signed_headers.split(';') {
        let mut values = Vec::new();
        for value in headers.get_all(name) {
            let text = value.to_str().ok()?;
            values.push(text.split_whitespace().collect::<Vec<_>>().join(" "));
        }
        if values.is_empty() {
            return None;
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let payload = headers
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("UNSIGNED-PAYLOAD");
    Some(format!(
        "{method}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{payload}",
        uri.path(),
        canonical_query(uri.query().unwrap_or("")),
    ))
}

/// The signature of `canonical` for this scope and secret.
fn signature(canonical: &str, amz_date: &str, scope: (&str, &str, &str), secret: &str) -> String {
    let (date, region, service) = scope;
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date);
    let k_region = hmac(&k_date, region);
    let k_service = hmac(&k_region, service);
    let k_signing = hmac(&k_service, "aws4_request");
    hex::encode(hmac(&k_signing, &string_to_sign))
}

/// A 40-character secret or a 20-character key from `draw` (upper-case letters and digits
/// for keys, as S3's look).
fn random_text(len: usize, alphabet: &[u8], draw: &mut dyn FnMut() -> u64) -> String {
    (0..len)
        .map(|_| alphabet[(draw() % alphabet.len() as u64) as usize] as char)
        .collect()
}

const KEY_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const SECRET_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn iso8601(t: SystemTime) -> String {
    let mut out = Vec::new();
    let _ = s3s::dto::Timestamp::from(t).format(s3s::dto::TimestampFormat::DateTime, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The bucket a path-style request names, if any.
fn bucket_of(uri: &Uri) -> Option<&str> {
    let bucket = uri.path().trim_start_matches('/').split('/').next()?;
    (!bucket.is_empty()).then_some(bucket)
}

fn has_param(uri: &Uri, name: &str) -> bool {
    uri.query()
        .unwrap_or("")
        .split('&')
        .any(|p| p.split('=').next() == Some(name))
}

fn refuse(status: u16, code: &'static str, message: impl Into<String>) -> Verdict {
    Verdict::Refuse(status, code, message.into())
}

impl Sessions {
    pub(crate) fn new(access_key: String, secret_key: String, ttl: Duration) -> Self {
        Self {
            access_key,
            secret_key,
            ttl,
            live: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Decides what becomes of a request: see [`Verdict`]. `draw` gives random numbers for
    /// new sessions' credentials.
    pub(crate) fn verdict(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        now: SystemTime,
        draw: &mut dyn FnMut() -> u64,
    ) -> Verdict {
        let Some(bucket) = bucket_of(uri) else {
            return Verdict::Pass;
        };
        if !crate::directory::is_directory_bucket(bucket) {
            return Verdict::Pass;
        }
        if has_param(uri, "X-Amz-Signature") || has_param(uri, "X-Amz-Credential") {
            return refuse(
                501,
                "NotImplemented",
                format!(
                    "presigned URLs for the directory bucket {bucket} are not implemented by bucketload serve; sign the request with a session from CreateSession"
                ),
            );
        }
        let Some(auth_value) = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return refuse(
                403,
                "AccessDenied",
                format!("anonymous requests to the directory bucket {bucket} are refused"),
            );
        };
        let Some(auth) = parse_authorization(auth_value) else {
            return Verdict::Pass; // SigV2 or a malformed header: s3s refuses it as it is.
        };
        if !matches!(auth.service, "s3" | "s3express") {
            return refuse(
                400,
                "AuthorizationHeaderMalformed",
                format!(
                    "the credential scope names the service {:?}; a directory bucket takes s3express",
                    auth.service
                ),
            );
        }
        if headers
            .get("x-amz-content-sha256")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("STREAMING-AWS4-HMAC-SHA256"))
        {
            return refuse(
                501,
                "NotImplemented",
                "chunk-signed payloads (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) on directory buckets are not implemented by bucketload serve; send the payload's SHA-256 or UNSIGNED-PAYLOAD",
            );
        }
        let Some(amz_date) = headers.get("x-amz-date").and_then(|v| v.to_str().ok()) else {
            return refuse(
                403,
                "AccessDenied",
                "a request to a directory bucket must carry x-amz-date",
            );
        };
        let Some(canonical) = canonical_request(method, uri, headers, auth.signed_headers) else {
            return refuse(
                403,
                "SignatureDoesNotMatch",
                "a header named in SignedHeaders is missing or not text",
            );
        };
        let scope = (auth.date, auth.region, auth.service);
        let token = headers.get(SESSION_TOKEN).and_then(|v| v.to_str().ok());
        let create_session = *method == Method::GET && has_param(uri, "session");
        let path_rest = uri.path().trim_start_matches('/')[bucket.len()..].trim_start_matches('/');
        let control_plane = matches!(*method, Method::PUT | Method::DELETE)
            && path_rest.is_empty()
            && uri.query().unwrap_or("").is_empty();
        // CopyObject and UploadPartCopy are signed with the ordinary credentials, not a
        // session, as S3 documents (the AWS SDKs open no session for them); a session works too.
        let copy = *method == Method::PUT && headers.contains_key("x-amz-copy-source");

        let resign = |canonical: &str| -> Verdict {
            let signature = signature(
                canonical,
                amz_date,
                (auth.date, auth.region, "s3"),
                &self.secret_key,
            );
            let value = format!(
                "AWS4-HMAC-SHA256 Credential={}/{}/{}/s3/aws4_request, SignedHeaders={}, Signature={signature}",
                self.access_key, auth.date, auth.region, auth.signed_headers
            );
            match HeaderValue::from_str(&value) {
                Ok(v) => Verdict::Resign(v),
                Err(_) => refuse(400, "InvalidRequest", "malformed Authorization header"),
            }
        };
        let check_own_key = || -> Option<Verdict> {
            if auth.key != self.access_key {
                return Some(refuse(
                    403,
                    "InvalidAccessKeyId",
                    "The AWS Access Key Id you provided does not exist in our records.",
                ));
            }
            (signature(&canonical, amz_date, scope, &self.secret_key) != auth.signature).then(
                || {
                    refuse(
                        403,
                        "SignatureDoesNotMatch",
                        "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
                    )
                },
            )
        };

        if token.is_none() && (create_session || control_plane || copy) {
            if let Some(refused) = check_own_key() {
                return refused;
            }
            if !create_session {
                return resign(&canonical);
            }
            let read_only = match headers
                .get("x-amz-create-session-mode")
                .map(|v| v.to_str().unwrap_or(""))
            {
                None | Some("ReadWrite") => false,
                Some("ReadOnly") => true,
                Some(other) => {
                    return refuse(
                        400,
                        "InvalidArgument",
                        format!(
                            "x-amz-create-session-mode must be ReadWrite or ReadOnly, not {other:?}"
                        ),
                    );
                }
            };
            return Verdict::Session(self.create(bucket, read_only, now, draw));
        }
        let Some(token) = token else {
            return refuse(
                403,
                "AccessDenied",
                format!(
                    "requests to the directory bucket {bucket} must be signed with a session: call CreateSession (s3express:CreateSession) and send its token in {SESSION_TOKEN}"
                ),
            );
        };
        let mut live = self.lock();
        let Some(session) = live.get(auth.key) else {
            return refuse(
                400,
                "InvalidToken",
                "The provided token is malformed or otherwise invalid.",
            );
        };
        if session.token != token {
            return refuse(
                400,
                "InvalidToken",
                "The provided token is malformed or otherwise invalid.",
            );
        }
        if now >= session.expires {
            live.remove(auth.key);
            return refuse(400, "ExpiredToken", "The provided token has expired.");
        }
        if session.bucket != bucket {
            return refuse(
                403,
                "AccessDenied",
                format!(
                    "the session was made for the directory bucket {}, not {bucket}",
                    session.bucket
                ),
            );
        }
        if signature(&canonical, amz_date, scope, &session.secret) != auth.signature {
            return refuse(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
            );
        }
        let reads = matches!(*method, Method::GET | Method::HEAD);
        if session.read_only && !reads {
            return refuse(
                403,
                "AccessDenied",
                format!("the session for {bucket} is ReadOnly; this request writes"),
            );
        }
        drop(live);
        resign(&canonical)
    }

    /// A new session for `bucket`, as CreateSession's XML answer.
    fn create(
        &self,
        bucket: &str,
        read_only: bool,
        now: SystemTime,
        draw: &mut dyn FnMut() -> u64,
    ) -> String {
        let key = format!("ASIA{}", random_text(16, KEY_ALPHABET, draw));
        let secret = random_text(40, SECRET_ALPHABET, draw);
        let token = random_text(96, SECRET_ALPHABET, draw);
        let expires = now + self.ttl;
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateSessionResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Credentials><SessionToken>{}</SessionToken><SecretAccessKey>{}</SecretAccessKey><AccessKeyId>{key}</AccessKeyId><Expiration>{}</Expiration></Credentials></CreateSessionResult>",
            xml_escape(&token),
            xml_escape(&secret),
            iso8601(expires)
        );
        let mut live = self.lock();
        // Sessions long expired are forgotten, so the table holds only recent ones.
        live.retain(|_, s| s.expires + self.ttl.max(Duration::from_secs(60)) > now);
        live.insert(
            key,
            Session {
                secret,
                token,
                bucket: bucket.to_owned(),
                read_only,
                expires,
            },
        );
        xml
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// AWS's published example: GET /test.txt with a range, signed for s3.
    /// <https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html>
    #[test]
    fn aws_published_get_object_vector() {
        let mut headers = HeaderMap::new();
        headers.insert("host", "examplebucket.s3.amazonaws.com".parse().unwrap());
        headers.insert("range", "bytes=0-9".parse().unwrap());
        headers.insert(
            "x-amz-content-sha256",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
                .parse()
                .unwrap(),
        );
        headers.insert("x-amz-date", "20130524T000000Z".parse().unwrap());
        let uri: Uri = "/test.txt".parse().unwrap();
        let canonical = canonical_request(
            &Method::GET,
            &uri,
            &headers,
            "host;range;x-amz-content-sha256;x-amz-date",
        )
        .unwrap();
        assert_eq!(
            signature(
                &canonical,
                "20130524T000000Z",
                ("20130524", "us-east-1", "s3"),
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
            ),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn authorization_header_parts() {
        let a = parse_authorization(
            "AWS4-HMAC-SHA256 Credential=K/20261207/us-east-1/s3express/aws4_request, SignedHeaders=host;x-amz-date, Signature=ab",
        )
        .unwrap();
        assert_eq!(
            (
                a.key,
                a.date,
                a.region,
                a.service,
                a.signed_headers,
                a.signature
            ),
            (
                "K",
                "20261207",
                "us-east-1",
                "s3express",
                "host;x-amz-date",
                "ab"
            )
        );
        assert!(parse_authorization("AWS K:sig").is_none());
    }

    #[test]
    fn query_is_decoded_sorted_and_encoded() {
        assert_eq!(
            canonical_query("prefix=a%2Fb&list-type=2&session"),
            "list-type=2&prefix=a%2Fb&session="
        );
        assert_eq!(canonical_query("k=%E2%9C%93+x"), "k=%E2%9C%93%2Bx");
    }
}
