//! The store's public [`Error`] and the mapping from `object_store` errors.
//!
//! object_store reports S3 failures as `Generic` errors whose source chain holds
//! a retry error with the HTTP status, so classification looks at the variant
//! first, then at the status, then at the transport error kind.

use crate::ErrorKind;
use crate::credentials::CredentialError;
use object_store::client::{HttpError, HttpErrorKind};
use std::error::Error as StdError;

/// A boxed error kept as the cause of an [`Error`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Errors returned by the store layer.
///
/// Every variant names the object (or endpoint) concerned and, where the user
/// can act, says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object, or its bucket, does not exist.
    #[error("{uri}: {what} not found; {hint}")]
    NotFound {
        /// Full URI of the object or bucket.
        uri: String,
        /// "object" or "bucket".
        what: &'static str,
        /// What to check.
        hint: Hint,
    },
    /// The credentials were refused or do not allow the operation.
    #[error("{uri}: permission denied; {hint}")]
    PermissionDenied {
        /// Full URI of the object or bucket.
        uri: String,
        /// What to check.
        hint: Hint,
        /// The store's answer.
        #[source]
        source: BoxError,
    },
    /// The server asked us to slow down and retries did not get through.
    #[error("{uri}: throttled by the server{tried}; {}", Hint::LowerConcurrency)]
    Throttled {
        /// Full URI of the object or bucket.
        uri: String,
        /// How long it was retried.
        tried: Tries,
        /// The store's answer.
        #[source]
        source: BoxError,
    },
    /// A URI could not be parsed or names an unsupported scheme.
    #[error("invalid store uri `{uri}`: {reason}")]
    InvalidUri {
        /// The URI as given.
        uri: String,
        /// Why it was refused.
        reason: String,
    },
    /// The endpoint could not be reached.
    #[error("{uri}: cannot reach {endpoint}{tried}; is the endpoint right and the server up?")]
    Unreachable {
        /// Full URI of the object or bucket.
        uri: String,
        /// How long it was retried.
        tried: Tries,
        /// The endpoint tried.
        endpoint: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// Data came back short or otherwise wrong.
    #[error("{uri}: corrupt or short data: {detail}")]
    Corrupt {
        /// Full URI of the object.
        uri: String,
        /// What was wrong, e.g. the byte range.
        detail: String,
    },
    /// A value given by the user is not valid.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What was wrong and what is expected.
        message: String,
    },
    /// An upload was sent in full and its completion failed, but whether the object was made
    /// is unknown: the answer was lost and the check that followed failed too.
    #[error(
        "{uri}: the upload was sent but whether it took effect is unknown ({failure}; checking the \
         object failed too: {check}); {}",
        Hint::CheckWritten {
            uri: uri.as_str().into()
        }
    )]
    Unconfirmed {
        /// Full URI of the object.
        uri: String,
        /// Why the completion failed.
        failure: Box<Error>,
        /// Why the check failed.
        check: Box<Error>,
    },
    /// Any other failure; the cause says more.
    #[error("{uri}: {message}")]
    Other {
        /// Full URI of the object or bucket.
        uri: String,
        /// Short description of the operation that failed.
        message: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

/// What the user can do about an error, as data: each front end words it in its own vocabulary
/// (the CLI names its flags and commands, Python its keyword arguments, see [`Error::hint`]).
/// `Display` says it in words that name neither, as the errors' own messages do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hint {
    /// Throttled: send fewer requests at once, retry adaptively, or try later.
    LowerConcurrency,
    /// An object is missing: list `listing` (its bucket or folder) to check the key.
    CheckKey {
        /// What to list: the bucket root, or the folder of the key.
        listing: Box<str>,
    },
    /// Whether a write took effect is unknown: look at `uri` before writing it again.
    CheckWritten {
        /// Full URI of the object.
        uri: Box<str>,
    },
    /// A bucket is missing: create it, or check its name and the endpoint.
    CheckBucket,
    /// Credentials were refused: check the AWS access key variables or the profile.
    CheckCredentials,
    /// A bucket's name is taken by another account, or these credentials may not use it.
    BucketTaken,
    /// No AWS credentials were found anywhere: set them, choose a profile, or read a public
    /// bucket unsigned.
    NoCredentials,
    /// Advice that names no flag, argument or command.
    Text(Box<str>),
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hint::LowerConcurrency => f.write_str(
                "reduce the number of requests in flight, retry in adaptive mode, or try later",
            ),
            Hint::CheckKey { listing } => write!(f, "check the key by listing {listing}"),
            Hint::CheckWritten { uri } => {
                write!(f, "look whether {uri} exists before writing it again")
            }
            Hint::CheckBucket => {
                f.write_str("create it first or check the bucket name and the endpoint")
            }
            Hint::CheckCredentials => f.write_str(CREDENTIALS_HINT),
            Hint::BucketTaken => write!(
                f,
                "the bucket exists but these credentials may not use it (another account owns \
                 the name?): choose another bucket name, or {CREDENTIALS_HINT}"
            ),
            Hint::NoCredentials => f.write_str(NO_CREDENTIALS_HINT),
            Hint::Text(text) => f.write_str(text),
        }
    }
}

impl From<String> for Hint {
    fn from(text: String) -> Hint {
        Hint::Text(text.into())
    }
}

impl From<&str> for Hint {
    fn from(text: &str) -> Hint {
        Hint::Text(text.into())
    }
}

/// How many times, over how long, a failed request was retried; shown in error messages as
/// " after 7 retries over 12.5 s" (nothing when it was not retried).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tries {
    /// Retries after the first attempt.
    pub retries: u32,
    /// Milliseconds from the first attempt to giving up.
    pub millis: u32,
}

impl Tries {
    /// `retries` retries over `elapsed`.
    pub fn new(retries: usize, elapsed: std::time::Duration) -> Tries {
        Tries {
            retries: u32::try_from(retries).unwrap_or(u32::MAX),
            millis: u32::try_from(elapsed.as_millis()).unwrap_or(u32::MAX),
        }
    }
}

impl std::fmt::Display for Tries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.retries == 0 {
            return Ok(());
        }
        let noun = if self.retries == 1 {
            "retry"
        } else {
            "retries"
        };
        let secs = f64::from(self.millis) / 1000.0;
        write!(f, " after {} {noun} over {secs:.1} s", self.retries)
    }
}

/// How a failure is classified for metrics and error mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    NotFound,
    Permission,
    Throttled,
    Server,
    Network,
    Other,
}

impl Error {
    /// Maps an `object_store` error about `uri` into an [`Error`].
    ///
    /// `endpoint` is used for unreachable-endpoint messages; `list_hint` is the
    /// URI a user could list to check the key.
    pub fn from_object_store(
        err: object_store::Error,
        uri: &str,
        endpoint: &str,
        list_hint: &str,
    ) -> Error {
        if let Some(e) = credential_error(&err) {
            // The source's own line says which source failed and what to do.
            return Error::PermissionDenied {
                uri: uri.to_owned(),
                hint: e.to_string().into(),
                source: Box::new(e),
            };
        }
        if let Some(e) = crate::express::session_error(&err).filter(|e| e.is_refusal()) {
            // Names the directory bucket and the permission CreateSession needs.
            let e = e.clone();
            return Error::PermissionDenied {
                uri: uri.to_owned(),
                hint: session_hint(&e),
                source: Box::new(e),
            };
        }
        if let object_store::Error::NotSupported { source } = &err
            && let Some(refused) = source.downcast_ref::<crate::keys::Refused>()
        {
            return Error::InvalidInput {
                message: format!("{uri}: {refused}"),
            };
        }
        if let Some(replaced) = find_cause::<crate::resume::Replaced>(&err) {
            return Error::Corrupt {
                uri: uri.to_owned(),
                detail: replaced.to_string(),
            };
        }
        if is_invalid_range(&err) {
            return Error::InvalidInput {
                message: format!(
                    "{uri}: the requested byte range is outside the object; \
                     check its size"
                ),
            };
        }
        match classify(&err) {
            ErrorClass::NotFound => not_found(&err, uri, list_hint),
            ErrorClass::Permission => Error::PermissionDenied {
                uri: uri.to_owned(),
                hint: credentials_hint(uri),
                source: Box::new(err),
            },
            ErrorClass::Throttled => Error::Throttled {
                uri: uri.to_owned(),
                tried: retried(&chain_text(&err)),
                source: Box::new(err),
            },
            ErrorClass::Network => Error::Unreachable {
                uri: uri.to_owned(),
                endpoint: endpoint.to_owned(),
                tried: retried(&chain_text(&err)),
                source: Box::new(err),
            },
            ErrorClass::Server | ErrorClass::Other => Error::Other {
                uri: uri.to_owned(),
                message: "request failed".to_owned(),
                source: Box::new(err),
            },
        }
    }

    /// True for a transport failure worth retrying: anything but a connection refused by an
    /// endpoint that has never answered (see [`crate::CONNECT_GRACE`]).
    pub(crate) fn is_retryable_transport(&self) -> bool {
        let Error::Unreachable { source, .. } = self else {
            return false;
        };
        let mut cause: Option<&(dyn StdError + 'static)> = Some(source.as_ref());
        while let Some(e) = cause {
            if e.is::<crate::http::NeverAnswered>() {
                return false;
            }
            cause = e.source();
        }
        true
    }

    /// This error, saying it came after `retries` retries over `elapsed`.
    pub(crate) fn with_tries(self, retries: usize, elapsed: std::time::Duration) -> Error {
        let text = Tries::new(retries, elapsed);
        match self {
            Error::Unreachable {
                uri,
                endpoint,
                source,
                ..
            } => Error::Unreachable {
                uri,
                endpoint,
                tried: text,
                source,
            },
            Error::Throttled { uri, source, .. } => Error::Throttled {
                uri,
                tried: text,
                source,
            },
            other => other,
        }
    }

    /// True if a write failed in a way that may have taken effect: see [`Error::Unconfirmed`].
    pub fn is_unconfirmed(&self) -> bool {
        matches!(self, Error::Unconfirmed { .. })
    }

    /// True if this error means the object or bucket does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// What the user can do about this error, for a front end to word in its own vocabulary
    /// (the message says it in neutral words).
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::NotFound { hint, .. } | Error::PermissionDenied { hint, .. } => {
                Some(hint.clone())
            }
            Error::Throttled { .. } => Some(Hint::LowerConcurrency),
            Error::Unconfirmed { uri, .. } => Some(Hint::CheckWritten {
                uri: uri.as_str().into(),
            }),
            _ => None,
        }
    }

    /// What this error means to the user: see [`ErrorKind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Throttled { .. } => ErrorKind::Throttled,
            Error::Unreachable { .. } => ErrorKind::Unreachable,
            Error::InvalidUri { .. } | Error::InvalidInput { .. } => ErrorKind::InvalidInput,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Unconfirmed { .. } | Error::Other { .. } => ErrorKind::Store,
        }
    }
}

/// What an error message needs to know about the object: its URI, the
/// endpoint (for unreachable errors) and the bucket root (for `ls` hints).
#[derive(Debug, Clone)]
pub(crate) struct ErrorContext {
    pub(crate) uri: String,
    pub(crate) endpoint: String,
    pub(crate) root: String,
    /// False when no credential source but instance metadata was configured; refusals then
    /// say that nothing was found.
    pub(crate) has_credentials: bool,
}

/// What to check when the store refuses our credentials ([`Hint::CheckCredentials`]).
const CREDENTIALS_HINT: &str = "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile";
/// … when Google Cloud Storage refuses them.
pub(crate) const GCS_CREDENTIALS_HINT: &str = "check GOOGLE_APPLICATION_CREDENTIALS (a \
service-account or authorized-user JSON file) or GOOGLE_SERVICE_ACCOUNT_KEY, and the account's \
access to the bucket";
/// … when Azure Blob Storage refuses them.
pub(crate) const AZURE_CREDENTIALS_HINT: &str = "check AZURE_STORAGE_ACCOUNT_NAME with \
AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or AZURE_STORAGE_CONNECTION_STRING";

/// What to do when a directory bucket refuses to open a session: the refusal itself, naming the
/// bucket and the permission, then which credentials to check.
pub(crate) fn session_hint(e: &crate::express::SessionError) -> Hint {
    format!("{e}; {CREDENTIALS_HINT}, and that they allow s3express:CreateSession").into()
}

/// The credential variables of the store `uri` names.
pub(crate) fn credentials_hint(uri: &str) -> Hint {
    let scheme = uri
        .split_once("://")
        .map_or("", |(s, _)| s)
        .to_ascii_lowercase();
    match scheme.as_str() {
        "gs" | "gcs" => GCS_CREDENTIALS_HINT.into(),
        "az" | "azure" | "abfs" | "abfss" | "adl" => AZURE_CREDENTIALS_HINT.into(),
        "https" if uri.contains(".core.windows.net") => AZURE_CREDENTIALS_HINT.into(),
        _ => Hint::CheckCredentials,
    }
}

/// What to do when no credentials were configured at all ([`Hint::NoCredentials`]).
const NO_CREDENTIALS_HINT: &str = "no credentials were found in AWS_ACCESS_KEY_ID/\
AWS_SECRET_ACCESS_KEY, ~/.aws, web identity or container settings (instance metadata was tried); \
set them, choose a profile, or send unsigned requests for a public bucket";

impl ErrorContext {
    /// Context naming only a key, when the store's URI is unknown.
    pub(crate) fn key(key: &str) -> Self {
        ErrorContext {
            uri: key.to_owned(),
            endpoint: "the store".to_owned(),
            root: String::new(),
            has_credentials: true,
        }
    }

    /// Maps `err` about this object, naming it `label` (e.g. URI and range).
    pub(crate) fn map_as(&self, err: object_store::Error, label: &str) -> Error {
        let root = match self.root.as_str() {
            "" => label,
            r => r,
        };
        let err = Error::from_object_store(err, label, &self.endpoint, root);
        match err {
            // A directory bucket that refused a session says so itself: credentials were found
            // (instance metadata) and used.
            Error::PermissionDenied { uri, source, .. }
                if !self.has_credentials
                    && crate::express::session_error(source.as_ref()).is_none() =>
            {
                Error::PermissionDenied {
                    uri,
                    hint: Hint::NoCredentials,
                    source,
                }
            }
            // Fetching credentials from instance metadata failed: say that no
            // credentials were configured rather than blaming the endpoint.
            Error::Unreachable { uri, source, .. }
                if !self.has_credentials
                    && chain_text(source.as_ref()).contains("169.254.169.254") =>
            {
                Error::PermissionDenied {
                    uri,
                    hint: Hint::NoCredentials,
                    source,
                }
            }
            other => other,
        }
    }

    pub(crate) fn map(&self, err: object_store::Error) -> Error {
        self.map_as(err, &self.uri)
    }
}

fn not_found(err: &object_store::Error, uri: &str, list_hint: &str) -> Error {
    if mentions(err, "NoSuchBucket") {
        let bucket = list_hint.trim_end_matches('/');
        return Error::NotFound {
            uri: bucket.to_owned(),
            what: "bucket",
            hint: Hint::CheckBucket,
        };
    }
    Error::NotFound {
        uri: uri.to_owned(),
        what: "object",
        hint: Hint::CheckKey {
            listing: list_hint.into(),
        },
    }
}

/// The first cause of type `T` in `err`'s chain.
fn find_cause<T: StdError + 'static>(err: &object_store::Error) -> Option<&T> {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        cause = e.source();
    }
    None
}

/// Classifies an `object_store` error.
pub(crate) fn classify(err: &object_store::Error) -> ErrorClass {
    use object_store::Error as E;
    if credential_error(err).is_some()
        || crate::express::session_error(err).is_some_and(|e| e.is_refusal())
    {
        return ErrorClass::Permission;
    }
    match err {
        E::NotFound { .. } => return ErrorClass::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => return ErrorClass::Permission,
        _ => {}
    }
    if let Some(class) = status_class(err) {
        return class;
    }
    if let Some(kind) = http_error_kind(err) {
        return match kind {
            HttpErrorKind::Connect | HttpErrorKind::Timeout => ErrorClass::Network,
            HttpErrorKind::Request | HttpErrorKind::Interrupted => ErrorClass::Network,
            _ => ErrorClass::Other,
        };
    }
    ErrorClass::Other
}

/// How long object_store retried, from its retry error's text ("in 2.3s, after 4 retries,
/// max_retries: …"); none when it did not retry.
fn retried(chain: &str) -> Tries {
    let Some(at) = chain.find(", after ") else {
        return Tries::default();
    };
    let count = chain[at + ", after ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse::<usize>().ok());
    let elapsed = chain[..at]
        .rfind(" in ")
        .and_then(|i| parse_debug_duration(&chain[i + " in ".len()..at]));
    match (count, elapsed) {
        (Some(n), Some(d)) => Tries::new(n, d),
        _ => Tries::default(),
    }
}

/// Parses a `Duration`'s `Debug` text: `2.5s`, `310.2ms`, `12µs`, `80ns`.
fn parse_debug_duration(text: &str) -> Option<std::time::Duration> {
    let units = [("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, *scale)))?;
    let value = number.parse::<f64>().ok()?;
    std::time::Duration::try_from_secs_f64(value * scale).ok()
}

/// True for a range that starts past the end of the object: HTTP 416 from S3-compatible
/// stores, `InvalidGetRange` from the local and memory stores.
fn is_invalid_range(err: &object_store::Error) -> bool {
    let text = chain_text(err);
    text.contains("status code: 416")
        || text.contains("status: 416")
        || text.contains("<Code>InvalidRange</Code>")
        || text.contains("Wanted range starting at")
        || text.contains("StartTooLarge")
}

/// Finds the HTTP status of a failed request in the source chain, if any.
///
/// object_store's retry error is private; its `Display` carries
/// "Server returned non-2xx status code: 503 Service Unavailable", which is
/// the stable, documented part we read.
fn status_class(err: &object_store::Error) -> Option<ErrorClass> {
    let text = chain_text(err);
    let code = text
        .split("status code: ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse::<u16>().ok())?;
    Some(match code {
        404 => ErrorClass::NotFound,
        401 | 403 => ErrorClass::Permission,
        429 | 503 if text.contains("SlowDown") || code == 429 => ErrorClass::Throttled,
        500..=599 => ErrorClass::Server,
        _ => ErrorClass::Other,
    })
}

/// The failure of a credential source (credential_process, STS, container endpoint), if
/// that is why the request failed.
fn credential_error(err: &object_store::Error) -> Option<CredentialError> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(c) = e.downcast_ref::<CredentialError>() {
            return Some(c.clone());
        }
        source = e.source();
    }
    None
}

/// The kind of the innermost HTTP error in the chain (the connector may wrap the transport's
/// error to stop object_store retrying it; the wrapped kind says what happened).
pub(crate) fn http_error_kind(err: &object_store::Error) -> Option<HttpErrorKind> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    let mut kind = None;
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<HttpError>() {
            kind = Some(h.kind());
        }
        source = e.source();
    }
    kind
}

fn mentions(err: &object_store::Error, needle: &str) -> bool {
    chain_text(err).contains(needle)
}

/// The `Display` of an error and all its sources, joined.
pub(crate) fn chain_text(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_uri_and_hint() {
        let err = object_store::Error::NotFound {
            path: "k".into(),
            source: "missing".into(),
        };
        let mapped = Error::from_object_store(err, "s3://b/k", "http://x", "s3://b/");
        assert!(mapped.is_not_found());
        assert_eq!(
            mapped.to_string(),
            "s3://b/k: object not found; check the key by listing s3://b/"
        );
        assert_eq!(
            mapped.hint(),
            Some(Hint::CheckKey {
                listing: "s3://b/".into()
            })
        );
    }

    /// The advice is data, for each front end to word; the message names no flag.
    #[test]
    fn throttled_carries_its_hint_as_data() {
        let err = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 503 Service Unavailable: SlowDown".into(),
        };
        let mapped = Error::from_object_store(err, "s3://b/k", "http://x", "s3://b/");
        assert_eq!(mapped.hint(), Some(Hint::LowerConcurrency));
        let message = mapped.to_string();
        assert!(
            message.ends_with(&format!("; {}", Hint::LowerConcurrency)),
            "{message}"
        );
        assert!(!message.contains("--"), "{message}");
    }

    #[test]
    fn generic_with_status_is_classified() {
        let err = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 403 Forbidden: AccessDenied".into(),
        };
        assert_eq!(classify(&err), ErrorClass::Permission);
        let err = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 503 Service Unavailable: SlowDown".into(),
        };
        assert_eq!(classify(&err), ErrorClass::Throttled);
        let err = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 500 Internal Server Error".into(),
        };
        assert_eq!(classify(&err), ErrorClass::Server);
    }

    #[test]
    fn retried_failures_say_how_long() {
        let chain = "Generic S3 error: Error performing GET http://h/b/k in 12.5s, after 7 \
                     retries, max_retries: 100, retry_timeout: 60s  - HTTP error";
        assert_eq!(retried(chain).to_string(), " after 7 retries over 12.5 s");
        assert_eq!(
            retried("Error performing GET http://h in 310ms - x").to_string(),
            ""
        );
        let d = parse_debug_duration("310.5ms").unwrap();
        assert_eq!(d.as_micros(), 310_500);
        assert_eq!(Tries::new(1, d).to_string(), " after 1 retry over 0.3 s");
    }

    #[test]
    fn no_such_bucket_names_the_bucket() {
        let err = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 404 Not Found: <Code>NoSuchBucket</Code>"
                .into(),
        };
        let mapped = Error::from_object_store(err, "s3://b/k", "http://x", "s3://b/");
        assert_eq!(
            mapped.to_string(),
            "s3://b: bucket not found; create it first or check the bucket name and the endpoint"
        );
        assert_eq!(mapped.hint(), Some(Hint::CheckBucket));
    }
}
