//! CreateBucket, which object_store does not offer: one SigV4-signed
//! `PUT /<bucket>` (path-style) or `PUT /` on `<bucket>.<host>`
//! (virtual-hosted), with a LocationConstraint outside us-east-1.

use std::time::Instant;

use crate::config::{Addressing, Credentials};
use crate::error::BoxError;
use crate::sigv4::{self, SignParams};
use crate::{Error, Store, StoreConfig};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use object_store::aws::AwsCredential;
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};

/// The URL of the store's bucket (HeadBucket, ListMultipartUploads, CreateSession).
pub(crate) fn bucket_url(store: &Store) -> String {
    bucket_url_of(store.config(), store.uri().bucket())
}

/// The URL of `bucket` as `config` reaches it: a directory bucket on AWS at its zonal
/// endpoint, virtual-hosted; any other bucket, or any bucket at a configured endpoint, as the
/// addressing style says.
pub(crate) fn bucket_url_of(config: &StoreConfig, bucket: &str) -> String {
    let endpoint = match (config.endpoint(), crate::express::zone_of(bucket)) {
        (Some(e), _) => e.trim_end_matches('/').to_owned(),
        (None, Some(zone)) => {
            return format!(
                "{}/",
                crate::express::zonal_endpoint(bucket, zone, config.region())
            );
        }
        (None, None) => format!("https://s3.{}.amazonaws.com", config.region()),
    };
    match config.addressing() {
        Addressing::VirtualHosted => {
            format!("{}/", crate::store::virtual_hosted(&endpoint, bucket))
        }
        _ => format!("{endpoint}/{bucket}"),
    }
}

/// The URL CreateBucket is sent to: the bucket's, but for a directory bucket on AWS, which is
/// created at S3 Express's regional control-plane endpoint.
fn create_url(store: &Store) -> String {
    match (store.endpoint(), store.directory_zone()) {
        (None, Some(_)) => format!(
            "{}/{}",
            crate::express::control_endpoint(store.config().region()),
            store.uri().bucket()
        ),
        _ => bucket_url(store),
    }
}

fn body(region: &str, zone: Option<&str>) -> Bytes {
    if let Some(zone) = zone {
        // A directory bucket: its zone, one copy of the data.
        return Bytes::from(format!(
            "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Location><Name>{zone}</Name><Type>AvailabilityZone</Type></Location>\
             <Bucket><DataRedundancy>SingleAvailabilityZone</DataRedundancy>\
             <Type>Directory</Type></Bucket></CreateBucketConfiguration>"
        ));
    }
    // us-east-1 is the default location and S3 rejects it as a constraint.
    if region == "us-east-1" {
        return Bytes::new();
    }
    Bytes::from(format!(
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
    ))
}

/// CreateBucket. For a directory bucket a control-plane request: signed with the ordinary
/// credentials, without a session.
fn request(store: &Store, creds: Option<&AwsCredential>) -> Result<HttpRequest, Error> {
    let zone = store.directory_zone();
    let payload = body(store.config().region(), zone);
    let mut request = signed(store, Method::PUT, &create_url(store), payload, creds)?;
    if zone.is_some() {
        request
            .extensions_mut()
            .insert(crate::express::ControlPlane);
    }
    Ok(request)
}

/// A request of `method` to `url_text` with `payload`, SigV4-signed with `creds` (from
/// [`Store::signing_credential`]; unsigned when `None`).
pub(crate) fn signed(
    store: &Store,
    method: Method,
    url_text: &str,
    payload: Bytes,
    creds: Option<&AwsCredential>,
) -> Result<HttpRequest, Error> {
    let sha256 = sigv4::sha256_hex(&payload);
    let request = Request {
        method,
        url: url_text,
        headers: HeaderMap::new(),
        body: payload.into(),
        payload_sha256: &sha256,
    };
    signed_request(store, request, creds)
}

/// What [`signed_request`] sends.
pub(crate) struct Request<'a> {
    pub(crate) method: Method,
    pub(crate) url: &'a str,
    /// Headers besides the signature's; the `x-amz-*` ones are signed too.
    pub(crate) headers: HeaderMap,
    pub(crate) body: HttpRequestBody,
    /// The `x-amz-content-sha256` value: the body's hex SHA-256, or `UNSIGNED-PAYLOAD`.
    pub(crate) payload_sha256: &'a str,
}

/// `request`, SigV4-signed with `creds` (unsigned when `None`).
pub(crate) fn signed_request(
    store: &Store,
    request: Request<'_>,
    creds: Option<&AwsCredential>,
) -> Result<HttpRequest, Error> {
    let Request {
        method,
        url: url_text,
        mut headers,
        body,
        payload_sha256,
    } = request;
    let bucket_uri = store.uri().root().trim_end_matches('/').to_owned();
    let invalid = |reason: String| Error::InvalidUri {
        uri: bucket_uri.clone(),
        reason,
    };
    // Parsed as `http::Uri`, not `Url`: the path goes out and is signed exactly as written
    // (`Url` would resolve `.` and `..` segments, naming another key).
    let url: http::Uri = url_text
        .parse()
        .map_err(|e| invalid(format!("bad endpoint `{url_text}`: {e}")))?;
    let config = store.config();
    if let Some(creds) = creds {
        let creds = Credentials {
            key: creds.key_id.clone(),
            secret: creds.secret_key.clone(),
            token: creds.token.clone(),
        };
        let params = SignParams {
            method: &method,
            url: &url,
            payload_sha256,
            region: config.region(),
            // A directory bucket's data-plane requests are signed again with its session.
            service: match store.directory_zone() {
                Some(_) => "s3express",
                None => "s3",
            },
            now: chrono::Utc::now(),
        };
        sigv4::sign(&mut headers, &params, &creds)
            .map_err(|e| invalid(format!("credentials contain invalid characters: {e}")))?;
    }
    let mut req = http::Request::builder()
        .method(method)
        .uri(url)
        .body(body)
        .map_err(|e| invalid(e.to_string()))?;
    *req.headers_mut() = headers;
    Ok(req)
}

/// Makes sure the bucket exists and is usable. HeadBucket first: a bucket that answers is used
/// as it is, without CreateBucket, because several servers answer CreateBucket on an existing
/// bucket with 409 BucketAlreadyExists (SeaweedFS for a bucket another identity created, MinIO
/// and Ceph in some set-ups) or with 403 (credentials that may write objects but not create
/// buckets). Otherwise CreateBucket; if that says the name is taken, HeadBucket again decides
/// between a bucket that is ours after all (created meanwhile) and one we may not use.
pub(crate) async fn create(store: &Store, client: &HttpClient) -> Result<(), Error> {
    let bucket_uri = store.uri().root().trim_end_matches('/').to_owned();
    let creds = store.signing_credential().await?;
    if head(store, client, &bucket_uri, creds.as_deref())
        .await?
        .is_success()
    {
        return Ok(());
    }
    let make = || request(store, creds.as_deref());
    let (status, text) = execute(store, client, make, &bucket_uri).await?;
    tracing::debug!(bucket = %bucket_uri, %status, "create bucket");
    match classify(status, &text, &bucket_uri) {
        Err(Error::PermissionDenied { .. }) if is_taken(status, &text) => {
            if head(store, client, &bucket_uri, creds.as_deref())
                .await?
                .is_success()
            {
                return Ok(());
            }
            classify(status, &text, &bucket_uri)
        }
        answer => answer,
    }
}

/// The status of a HeadBucket on the store's bucket (retried like CreateBucket).
async fn head(
    store: &Store,
    client: &HttpClient,
    bucket_uri: &str,
    creds: Option<&AwsCredential>,
) -> Result<StatusCode, Error> {
    let make = || signed(store, Method::HEAD, &bucket_url(store), Bytes::new(), creds);
    let (status, _) = execute(store, client, make, bucket_uri).await?;
    tracing::debug!(bucket = %bucket_uri, %status, "head bucket");
    Ok(status)
}

fn is_taken(status: StatusCode, body: &str) -> bool {
    status == StatusCode::CONFLICT && body.contains("BucketAlreadyExists")
}

/// Sends the request `make` builds (signed anew for every attempt); the answer's status and
/// body text. Transport errors, cut bodies, 5xx and 429 answers are retried with the store's
/// backoff (see [`crate::store::backoff_config`]) within its `max_retries` and
/// `retry_timeout`, as object_store retries its own requests. Every request sent this way is
/// idempotent (CreateBucket, ListMultipartUploads, AbortMultipartUpload): a retry after a
/// lost answer finds the bucket owned, the same list, or the upload gone. `uri` names the
/// object or bucket in errors.
pub(crate) async fn execute(
    store: &Store,
    client: &HttpClient,
    make: impl Fn() -> Result<HttpRequest, Error>,
    uri: &str,
) -> Result<(StatusCode, String), Error> {
    let answer = execute_answer(store, client, make, uri).await?;
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    Ok((answer.status, text))
}

/// An answer read whole.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// [`execute`], keeping the answer's headers and its body as bytes.
pub(crate) async fn execute_answer(
    store: &Store,
    client: &HttpClient,
    make: impl Fn() -> Result<HttpRequest, Error>,
    uri: &str,
) -> Result<Answer, Error> {
    let config = store.config();
    let start = Instant::now();
    let mut backoff = crate::store::backoff_config().init_backoff;
    let mut attempt = 0;
    loop {
        let outcome = send_once(store, client, make()?, uri).await;
        let transient = match &outcome {
            Ok(Answer { status, .. }) => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
            Err(e) => e.is_retryable_transport(),
        };
        let exhausted =
            attempt >= config.max_retries() || start.elapsed() + backoff > config.retry_timeout();
        if !transient || exhausted {
            return match outcome {
                Err(e) if attempt > 0 => Err(e.with_tries(attempt, start.elapsed())),
                other => other,
            };
        }
        tracing::debug!(%uri, attempt, "retrying a failed request");
        tokio::time::sleep(backoff).await;
        backoff = crate::store::next_backoff(backoff);
        attempt += 1;
    }
}

/// Sends a request of `method` to `url` without a body, signed with the store's credentials
/// and retried as [`execute`] does; the answer's status and body text.
pub(crate) async fn send_signed(
    store: &Store,
    client: &HttpClient,
    method: Method,
    url: &str,
    uri: &str,
) -> Result<(StatusCode, String), Error> {
    let creds = store.signing_credential().await?;
    let request = || signed(store, method.clone(), url, Bytes::new(), creds.as_deref());
    execute(store, client, request, uri).await
}

async fn send_once(
    store: &Store,
    client: &HttpClient,
    request: HttpRequest,
    uri: &str,
) -> Result<Answer, Error> {
    let endpoint = store
        .endpoint()
        .map_or_else(|| bucket_url(store), str::to_owned);
    let unreachable = |e: BoxError| Error::Unreachable {
        uri: uri.to_owned(),
        tried: crate::error::Tries::default(),
        endpoint: endpoint.clone(),
        source: e,
    };
    let response =
        client.execute(request).await.map_err(|e| {
            match crate::express::session_error(&e).filter(|s| s.is_refusal()) {
                Some(refused) => Error::PermissionDenied {
                    uri: uri.to_owned(),
                    hint: crate::error::session_hint(refused),
                    source: Box::new(refused.clone()),
                },
                None => unreachable(Box::new(e)),
            }
        })?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().bytes().await;
    let body = body.map_err(|e| unreachable(Box::new(e)))?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

fn classify(status: StatusCode, body: &str, bucket_uri: &str) -> Result<(), Error> {
    if status.is_success() || body.contains("BucketAlreadyOwnedByYou") {
        return Ok(());
    }
    let answer = || -> crate::error::BoxError { format!("{status}: {body}").into() };
    Err(match status {
        _ if is_taken(status, body) => Error::PermissionDenied {
            uri: bucket_uri.to_owned(),
            hint: crate::Hint::BucketTaken,
            source: answer(),
        },
        StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => Error::PermissionDenied {
            uri: bucket_uri.to_owned(),
            hint: crate::Hint::CheckCredentials,
            source: answer(),
        },
        _ => Error::Other {
            uri: bucket_uri.to_owned(),
            message: "cannot create the bucket".to_owned(),
            source: answer(),
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::StoreConfig;

    #[test]
    fn urls_follow_addressing() {
        let c = StoreConfig::default().with_endpoint("http://127.0.0.1:9000/");
        let s = Store::open("s3://bkt/x", &c).unwrap();
        assert_eq!(bucket_url(&s), "http://127.0.0.1:9000/bkt");
        let c = StoreConfig::default().with_endpoint("http://s3.internal:9000/");
        let s = Store::open("s3://bkt", &c.with_addressing(Addressing::VirtualHosted)).unwrap();
        assert_eq!(bucket_url(&s), "http://bkt.s3.internal:9000/");
        let c = StoreConfig::default().with_region("eu-west-1");
        let s = Store::open("s3://bkt", &c).unwrap();
        assert_eq!(bucket_url(&s), "https://bkt.s3.eu-west-1.amazonaws.com/");
    }

    /// A directory bucket on AWS: its zonal endpoint, virtual-hosted whatever the addressing,
    /// and CreateBucket at S3 Express's control plane; at a configured endpoint, as any bucket.
    #[test]
    fn directory_buckets_reach_their_zone() {
        let c = StoreConfig::default()
            .with_region("us-west-2")
            .with_credentials("AKIDEXAMPLE", "secret", None);
        let s = Store::open("s3://t--usw2-az1--x-s3/p", &c).unwrap();
        let zonal = "https://t--usw2-az1--x-s3.s3express-usw2-az1.us-west-2.amazonaws.com/";
        assert_eq!(bucket_url(&s), zonal);
        let s = Store::open(
            "s3://t--usw2-az1--x-s3",
            &c.clone().with_addressing(Addressing::Path),
        )
        .unwrap();
        assert_eq!(bucket_url(&s), zonal);
        assert_eq!(
            create_url(&s),
            "https://s3express-control.us-west-2.amazonaws.com/t--usw2-az1--x-s3"
        );
        let request = request(&s, None).unwrap();
        assert!(
            request
                .extensions()
                .get::<crate::express::ControlPlane>()
                .is_some()
        );
        let body = String::from_utf8_lossy(request.body().as_bytes().unwrap()).into_owned();
        assert!(
            body.contains("<Name>usw2-az1</Name><Type>AvailabilityZone</Type>"),
            "{body}"
        );
        assert!(s.to_string().starts_with("s3://t--usw2-az1--x-s3"));
        let c = c.with_endpoint("http://127.0.0.1:9000");
        let s = Store::open("s3://t--usw2-az1--x-s3", &c).unwrap();
        assert_eq!(bucket_url(&s), "http://127.0.0.1:9000/t--usw2-az1--x-s3");
        assert_eq!(create_url(&s), bucket_url(&s));
    }

    #[test]
    fn location_constraint_outside_us_east_1() {
        assert!(body("us-east-1", None).is_empty());
        let b = body("eu-west-1", None);
        assert!(String::from_utf8_lossy(&b).contains("<LocationConstraint>eu-west-1<"));
    }

    #[test]
    fn answers_are_classified() {
        assert!(classify(StatusCode::OK, "", "s3://b").is_ok());
        let owned = "<Error><Code>BucketAlreadyOwnedByYou</Code></Error>";
        assert!(classify(StatusCode::CONFLICT, owned, "s3://b").is_ok());
        let taken = "<Error><Code>BucketAlreadyExists</Code></Error>";
        let err = classify(StatusCode::CONFLICT, taken, "s3://b").unwrap_err();
        assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("s3://b: permission denied; the bucket exists but"),
            "{err}"
        );
        let err = classify(StatusCode::FORBIDDEN, "", "s3://b").unwrap_err();
        assert!(matches!(err, Error::PermissionDenied { .. }));
    }
}
