//! Multipart uploads in progress: ListMultipartUploads and AbortMultipartUpload, which
//! object_store does not offer by upload id. A writer killed mid-upload leaves its parts
//! stored (and billed) until the upload is aborted; these find and remove them.
//!
//! Both are SigV4-signed requests like CreateBucket's. Keys are relative to the store's
//! prefix, as everywhere in [`Store`].

use chrono::{DateTime, Utc};
use http::Method;
use serde::Deserialize;

use crate::bucket::{bucket_url, send_signed};
use crate::{Error, Scheme, Store};

/// Pages of ListMultipartUploads fetched at most (1,000 uploads each).
const MAX_PAGES: usize = 1000;

/// A multipart upload that was started and neither completed nor aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The object's key, relative to the store's prefix.
    pub key: String,
    /// The store's id of the upload.
    pub upload_id: String,
    /// When it was started, if the store said.
    pub initiated: Option<DateTime<Utc>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ListResult {
    upload: Vec<UploadXml>,
    is_truncated: Option<bool>,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct UploadXml {
    key: String,
    upload_id: String,
    initiated: Option<String>,
}

impl Store {
    /// The multipart uploads in progress under `prefix` (relative to the store's prefix).
    /// Only S3 stores have them; other schemes answer an empty list.
    pub async fn list_uploads(&self, prefix: &str) -> Result<Vec<Upload>, Error> {
        if self.uri().scheme() != Scheme::S3 {
            return Ok(Vec::new());
        }
        let full_prefix = self.full_key(prefix);
        let client = self.http_client()?;
        let mut uploads = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..MAX_PAGES {
            let mut url = url::Url::parse(&bucket_url(self)).map_err(|e| self.invalid(&e))?;
            url.query_pairs_mut()
                .append_pair("uploads", "")
                .append_pair("prefix", &full_prefix);
            if let Some((key, id)) = &markers {
                url.query_pairs_mut()
                    .append_pair("key-marker", key)
                    .append_pair("upload-id-marker", id);
            }
            let text = self.send(&client, Method::GET, &url, prefix).await?;
            let page: ListResult = quick_xml::de::from_str(&text).map_err(|e| Error::Other {
                uri: self.uri().join(prefix),
                message: "the store's list of multipart uploads is not valid XML".to_owned(),
                source: Box::new(e),
            })?;
            uploads.extend(page.upload.into_iter().map(|u| {
                Upload {
                    key: self.relative_key(&u.key),
                    upload_id: u.upload_id,
                    initiated: u
                        .initiated
                        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                        .map(|t| t.with_timezone(&Utc)),
                }
            }));
            match (
                page.is_truncated,
                page.next_key_marker,
                page.next_upload_id_marker,
            ) {
                (Some(true), Some(key), Some(id)) => markers = Some((key, id)),
                _ => return Ok(uploads),
            }
        }
        Ok(uploads)
    }

    /// Aborts the multipart upload `upload_id` of `key` (relative to the store's prefix): its
    /// parts are deleted. Aborting an upload that is already gone succeeds.
    pub async fn abort_upload(&self, key: &str, upload_id: &str) -> Result<(), Error> {
        if self.uri().scheme() != Scheme::S3 {
            return Ok(());
        }
        let base = bucket_url(self);
        let object = format!(
            "{}/{}",
            base.trim_end_matches('/'),
            crate::exact::encode_key(&self.full_key(key))
        );
        let mut url = url::Url::parse(&object).map_err(|e| self.invalid(&e))?;
        url.query_pairs_mut().append_pair("uploadId", upload_id);
        let client = self.http_client()?;
        match self.send(&client, Method::DELETE, &url, key).await {
            Ok(_) => Ok(()),
            Err(Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the folder marker of `folder` (relative to the store's prefix, without the
    /// trailing `/`): the key `folder/`, which object_store cannot spell. Deleting a marker
    /// that does not exist succeeds, as S3's DeleteObject does. Stores other than S3 hold no
    /// markers; nothing is sent to them.
    pub async fn delete_folder_marker(&self, folder: &str) -> Result<(), Error> {
        if self.uri().scheme() != Scheme::S3 {
            return Ok(());
        }
        let marker = format!("{folder}/");
        let object = format!(
            "{}/{}",
            bucket_url(self).trim_end_matches('/'),
            crate::exact::encode_key(&self.full_key(&marker))
        );
        let url = url::Url::parse(&object).map_err(|e| self.invalid(&e))?;
        let client = self.http_client()?;
        match self.send(&client, Method::DELETE, &url, &marker).await {
            Ok(_) | Err(Error::NotFound { what: "upload", .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The key in the bucket of `key` relative to the store's prefix.
    fn full_key(&self, key: &str) -> String {
        match self.uri().prefix() {
            "" => key.to_owned(),
            p => format!("{p}/{key}"),
        }
    }

    fn relative_key(&self, full: &str) -> String {
        match self.uri().prefix() {
            "" => full.to_owned(),
            p => full
                .strip_prefix(p)
                .and_then(|k| k.strip_prefix('/'))
                .unwrap_or(full)
                .to_owned(),
        }
    }

    fn invalid(&self, e: &url::ParseError) -> Error {
        Error::InvalidUri {
            uri: self.uri().to_string(),
            reason: format!("bad endpoint: {e}"),
        }
    }

    /// Sends `request`; the body of a 2xx answer, else the error its status means.
    async fn send(
        &self,
        client: &object_store::client::HttpClient,
        method: Method,
        url: &url::Url,
        key: &str,
    ) -> Result<String, Error> {
        let uri = self.uri().join(key);
        let (status, text) = send_signed(self, client, method, url.as_str(), &uri).await?;
        if status.is_success() {
            return Ok(text);
        }
        let source: crate::BoxError = format!("{status}: {text}").into();
        Err(match status.as_u16() {
            404 if text.contains("NoSuchBucket") => Error::NotFound {
                uri,
                what: "bucket",
                hint: "check the bucket name and the endpoint".into(),
            },
            404 => Error::NotFound {
                uri,
                what: "upload",
                hint: "it was completed or aborted already".into(),
            },
            401 | 403 => Error::PermissionDenied {
                uri,
                hint: crate::Hint::CheckCredentials,
                source,
            },
            _ => Error::Other {
                uri,
                message: "the store refused the request".to_owned(),
                source,
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_list_answer_parses() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket><IsTruncated>true</IsTruncated>
  <NextKeyMarker>ck/b.pt</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>
  <Upload><Key>ck/a &amp; b.pt</Key><UploadId>u1</UploadId>
    <Initiated>2026-11-22T10:00:00.000Z</Initiated></Upload>
  <Upload><Key>ck/b.pt</Key><UploadId>u2</UploadId></Upload>
</ListMultipartUploadsResult>"#;
        let r: ListResult = quick_xml::de::from_str(xml).unwrap();
        assert_eq!(r.upload.len(), 2);
        assert_eq!(r.upload[0].key, "ck/a & b.pt");
        assert_eq!(r.upload[1].upload_id, "u2");
        assert_eq!(r.is_truncated, Some(true));
        assert_eq!(r.next_upload_id_marker.as_deref(), Some("u2"));
        let empty: ListResult = quick_xml::de::from_str(
            "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>",
        )
        .unwrap();
        assert!(empty.upload.is_empty());
    }

    #[test]
    fn keys_are_encoded_segment_by_segment() {
        assert_eq!(crate::exact::encode_key("a b/ü.pt"), "a%20b/%C3%BC.pt");
        assert_eq!(crate::exact::encode_key("ck/step-1.pt"), "ck/step-1.pt");
    }
}
