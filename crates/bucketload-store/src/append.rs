//! Appending to an object of an S3 Express One Zone directory bucket: a PutObject with
//! `x-amz-write-offset-bytes`, which the store takes only when the offset is the object's
//! current size. Two writers appending at the same offset cannot interleave: one is refused
//! with `InvalidWriteOffset` and its bytes go nowhere.
//!
//! An append whose answer is lost and which is then sent again meets its own effect: the
//! object has grown, and the second attempt is refused for its offset. So after a refusal that
//! follows an attempt without an answer, the object's size decides: `offset + len` means the
//! first attempt took effect, anything else that nothing was appended.
//!
//! <https://docs.aws.amazon.com/AmazonS3/latest/userguide/directory-buckets-objects-append.html>

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use object_store::ObjectStoreExt;
use object_store::client::HttpRequestBody;
use object_store::path::Path;

use crate::bucket::{Answer, Request, bucket_url, send_once, signed_request};
use crate::{Error, Scheme, Store};

/// What an append made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The object's size after the append.
    pub size: u64,
    /// Its ETag after the append, as the store sent it.
    pub e_tag: Option<String>,
}

/// Whether `bucket` is named as an S3 Express One Zone directory bucket, `base--zone--x-s3`.
pub fn is_directory_bucket(bucket: &str) -> bool {
    crate::express::zone_of(bucket).is_some()
}

fn error_code(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let start = text.find("<Code>")? + "<Code>".len();
    let end = text[start..].find("</Code>")? + start;
    Some(text[start..end].to_owned())
}

impl Store {
    /// Whether the store's bucket is an S3 Express One Zone directory bucket.
    pub fn is_directory_bucket(&self) -> bool {
        self.uri().scheme() == Scheme::S3 && is_directory_bucket(self.uri().bucket())
    }

    /// Appends `data` to the object `key` (relative to the bucket, spelled exactly) of a
    /// directory bucket, where the object is `offset` bytes long now. A wrong offset (the
    /// object changed since its size was read) appends nothing and is an error naming the
    /// object; so is any bucket but a directory bucket, which cannot append.
    pub async fn append(&self, key: &str, offset: u64, data: Bytes) -> Result<Appended, Error> {
        let uri = format!("s3://{}/{key}", self.uri().bucket());
        if !self.is_directory_bucket() {
            return Err(Error::InvalidInput {
                message: format!(
                    "{uri}: only S3 Express One Zone directory buckets (named base--zone--x-s3) \
                     append to an object; write the whole object instead"
                ),
            });
        }
        let url = format!(
            "{}/{}",
            bucket_url(self).trim_end_matches('/'),
            crate::exact::encode_key(key)
        );
        let len = data.len() as u64;
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-write-offset-bytes", HeaderValue::from(offset));
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        let sha256 = if self.config().sign_payload() {
            crate::sigv4::sha256_hex(&data)
        } else {
            "UNSIGNED-PAYLOAD".to_owned()
        };
        let creds = self.signing_credential().await?;
        let client = self.exact_http_client()?;
        let config = self.config();
        let start = Instant::now();
        let mut backoff = crate::store::backoff_config().init_backoff;
        let mut attempt = 0;
        // Whether an attempt may have taken effect without its answer reaching us.
        let mut unanswered = false;
        loop {
            let request = signed_request(
                self,
                Request {
                    method: Method::PUT,
                    url: &url,
                    headers: headers.clone(),
                    body: HttpRequestBody::from(data.clone()),
                    payload_sha256: &sha256,
                },
                creds.as_deref(),
            )?;
            let outcome = send_once(self, &client, request, &uri).await;
            match outcome {
                Ok(Answer {
                    status, headers, ..
                }) if status.is_success() => {
                    let e_tag = headers
                        .get("etag")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    return Ok(Appended {
                        size: offset + len,
                        e_tag,
                    });
                }
                Ok(Answer { status, body, .. })
                    if status == StatusCode::BAD_REQUEST
                        && error_code(&body).as_deref() == Some("InvalidWriteOffset") =>
                {
                    if unanswered && let Some(done) = self.took_effect(key, offset + len).await {
                        return Ok(done);
                    }
                    return Err(Error::Other {
                        uri,
                        message: format!(
                            "nothing appended: the object is no longer {offset} bytes long \
                             (another writer appended to it or replaced it); read it again"
                        ),
                        source: String::from_utf8_lossy(&body).into_owned().into(),
                    });
                }
                Ok(Answer { status, body, .. })
                    if !(status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS) =>
                {
                    let source: crate::BoxError =
                        format!("{status}: {}", String::from_utf8_lossy(&body)).into();
                    let path = Path::from(key);
                    let err = match status {
                        StatusCode::NOT_FOUND => object_store::Error::NotFound {
                            path: key.to_owned(),
                            source,
                        },
                        StatusCode::FORBIDDEN => object_store::Error::PermissionDenied {
                            path: key.to_owned(),
                            source,
                        },
                        _ => object_store::Error::Generic {
                            store: "S3 (append)",
                            source,
                        },
                    };
                    return Err(self.map_error(err, &path));
                }
                Ok(_) => unanswered = true,
                Err(e) if e.is_retryable_transport() => unanswered = true,
                Err(e) => return Err(e),
            }
            let exhausted = attempt >= config.max_retries()
                || start.elapsed() + backoff > config.retry_timeout();
            if exhausted {
                return Err(Error::Other {
                    uri,
                    message: format!(
                        "the append was not answered after {} attempts; the object may or may \
                         not hold it: read its size",
                        attempt + 1
                    ),
                    source: "no answer".into(),
                });
            }
            tracing::debug!(%uri, attempt, "retrying an append");
            tokio::time::sleep(backoff).await;
            backoff = crate::store::next_backoff(backoff);
            attempt += 1;
        }
    }

    /// After an unanswered append was refused on a later attempt: whether the object is now
    /// `size` bytes long, the size the append would have made.
    async fn took_effect(&self, key: &str, size: u64) -> Option<Appended> {
        let exact = self.exact_key(key).ok()?;
        let meta = exact.head(&Path::from(key)).await.ok()?;
        (meta.size == size).then_some(Appended {
            size,
            e_tag: meta.e_tag,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_bucket_names() {
        assert!(is_directory_bucket("train--use1-az4--x-s3"));
        assert!(is_directory_bucket("a--usw2-lax1-az1--x-s3"));
        for name in ["train", "train--x-s3", "--use1-az4--x-s3", "t--USE1--x-s3"] {
            assert!(!is_directory_bucket(name), "{name}");
        }
    }

    #[test]
    fn error_codes_are_read() {
        let body = b"<Error><Code>InvalidWriteOffset</Code><Message>m</Message></Error>";
        assert_eq!(error_code(body).as_deref(), Some("InvalidWriteOffset"));
        assert_eq!(error_code(b"nothing"), None);
    }
}
