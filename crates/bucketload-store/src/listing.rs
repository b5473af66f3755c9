//! Listings that keep every key exactly as the store holds it.
//!
//! object_store turns each listed key into a `Path`, which drops a trailing `/` (the folder
//! marker `a/b/` that the S3 console and many tools create comes back as an object `a/b`,
//! which then cannot be read) and refuses a key with an empty segment (`a//b`), failing the
//! whole listing. So S3 stores are listed here with ListObjectsV2 directly, SigV4-signed like
//! CreateBucket; other schemes are listed through object_store (local folders and memory
//! stores cannot hold such keys). Either way the answer is a stream of [`ListPage`]s of raw
//! keys relative to the store's prefix; [`Listed::kind`] says what each key is.

use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use http::{Method, StatusCode};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use serde::Deserialize;
use std::sync::Arc;

use crate::bucket::{bucket_url, send_signed};
use crate::metrics::RequestKind;
use crate::{Error, Scheme, Store};

/// Keys per page of a listing (the most S3 returns).
const PAGE: usize = 1000;

/// One object of a listing, its key as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The key relative to the store's prefix (the folder marker of the prefix itself is `""`).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// The ETag, as the store sent it.
    pub e_tag: Option<String>,
    /// When it was last written.
    pub last_modified: DateTime<Utc>,
}

/// What a listed key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListedKind {
    /// An object that can be read: its metadata.
    Object(ObjectMeta),
    /// A folder marker: a key ending in `/` (whatever its size), as the S3 console, `aws s3api
    /// put-object --key dir/` and many tools create. It is a folder, not an object.
    Folder,
    /// A key object_store's paths cannot spell (`a//b`, `/a`, a tab, a `.` segment; see
    /// [`crate::unspellable`]): listings and datasets cannot address it, single objects can
    /// ([`Store::object`]).
    Unaddressable,
}

impl Listed {
    /// What the key is.
    pub fn kind(&self) -> ListedKind {
        if self.key.is_empty() || self.key.ends_with('/') {
            return ListedKind::Folder;
        }
        match Path::parse(&self.key) {
            Ok(location) if location.as_ref() == self.key => ListedKind::Object(ObjectMeta {
                location,
                last_modified: self.last_modified,
                size: self.size,
                e_tag: self.e_tag.clone(),
                version: None,
            }),
            _ => ListedKind::Unaddressable,
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The objects, in key order (local folders: in directory order).
    pub objects: Vec<Listed>,
    /// With a delimiter: the folders one level down, relative to the store's prefix, each
    /// ending in `/` (`a/`, or `a//` for a folder with an empty name).
    pub prefixes: Vec<String>,
}

/// Lists `prefix` of `store` through object_store: for stores that cannot hold folder
/// markers or empty segments. `prefix` is `""` or ends in `/`, as in [`Store::list_pages`].
pub fn list_object_store(
    store: Arc<dyn ObjectStore>,
    prefix: &str,
    delimiter: bool,
) -> BoxStream<'static, object_store::Result<ListPage>> {
    let path = (!prefix.is_empty()).then(|| Path::from(prefix));
    let listed = |meta: ObjectMeta| Listed {
        key: meta.location.to_string(),
        size: meta.size,
        e_tag: meta.e_tag,
        last_modified: meta.last_modified,
    };
    if !delimiter {
        return store
            .list(path.as_ref())
            .map_ok(listed)
            .try_chunks(PAGE)
            .map_ok(|objects| ListPage {
                objects,
                prefixes: Vec::new(),
            })
            .map_err(|e| e.1)
            .boxed();
    }
    stream::once(async move {
        let result = store.list_with_delimiter(path.as_ref()).await?;
        Ok(ListPage {
            objects: result.objects.into_iter().map(listed).collect(),
            prefixes: result
                .common_prefixes
                .into_iter()
                .map(|p| format!("{p}/"))
                .collect(),
        })
    })
    .boxed()
}

impl Store {
    /// Lists the keys below `prefix` (relative to the store's prefix: `""` for all of it, or a
    /// folder such as `a/b/`), page by page, every key as the store holds it (see
    /// [`Listed::kind`]). With `delimiter`, keys below the next `/` are rolled up into
    /// [`ListPage::prefixes`], as `aws s3 ls` shows them.
    ///
    /// Each page is one request, counted as a LIST in [`Store::metrics`]; failed requests are
    /// retried as object_store retries its own.
    pub fn list_pages(
        &self,
        prefix: &str,
        delimiter: bool,
    ) -> BoxStream<'static, Result<ListPage, Error>> {
        if self.uri().scheme() != Scheme::S3 {
            let store = self.clone();
            let key = Path::from(prefix);
            return list_object_store(self.object_store(), prefix, delimiter)
                .map_err(move |e| store.map_error(e, &key))
                .boxed();
        }
        let store = self.clone();
        let prefix = prefix.to_owned();
        // The state: the continuation token of the next page; None once the last page came.
        stream::try_unfold(Some(None::<String>), move |token| {
            let store = store.clone();
            let prefix = prefix.clone();
            async move {
                let Some(token) = token else {
                    return Ok(None);
                };
                let (page, next) = store.list_page(&prefix, delimiter, token).await?;
                Ok(Some((page, next.map(Some))))
            }
        })
        .boxed()
    }

    /// One ListObjectsV2 request; the page and the continuation token of the next one.
    async fn list_page(
        &self,
        prefix: &str,
        delimiter: bool,
        token: Option<String>,
    ) -> Result<(ListPage, Option<String>), Error> {
        let store_prefix = self.key_folder().to_owned();
        let mut url = url::Url::parse(&bucket_url(self)).map_err(|e| Error::InvalidUri {
            uri: self.uri().to_string(),
            reason: format!("bad endpoint: {e}"),
        })?;
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("list-type", "2")
                .append_pair("prefix", &format!("{store_prefix}{prefix}"));
            if delimiter {
                query.append_pair("delimiter", "/");
            }
            if let Some(token) = &token {
                query.append_pair("continuation-token", token);
            }
        }
        let uri = self.uri().join(prefix);
        let client = self.http_client()?;
        let sent = async {
            let (status, text) =
                send_signed(self, &client, Method::GET, url.as_str(), &uri).await?;
            self.check_list_answer(status, text, &uri)
        };
        let text = crate::metered::metered_raw(self.metrics(), RequestKind::List, sent).await?;
        let answer: ListAnswer = quick_xml::de::from_str(&text).map_err(|e| Error::Other {
            uri: uri.clone(),
            message: "the store's listing is not valid XML".to_owned(),
            source: Box::new(e),
        })?;
        let relative = |key: String| match key.strip_prefix(&store_prefix) {
            Some(rest) => rest.to_owned(),
            None => key,
        };
        let objects = answer
            .contents
            .into_iter()
            .map(|c| Listed {
                key: relative(c.key),
                size: c.size,
                e_tag: c.e_tag,
                last_modified: c
                    .last_modified
                    .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                    .map_or(DateTime::UNIX_EPOCH, |t| t.with_timezone(&Utc)),
            })
            .collect();
        let prefixes = answer
            .common_prefixes
            .into_iter()
            .map(|p| relative(p.prefix))
            .collect();
        let next = match answer.is_truncated {
            Some(true) => answer.next_continuation_token,
            _ => None,
        };
        Ok((ListPage { objects, prefixes }, next))
    }

    /// The answer text of a successful listing, else the error its status means.
    fn check_list_answer(
        &self,
        status: StatusCode,
        text: String,
        uri: &str,
    ) -> Result<String, Error> {
        if status.is_success() {
            return Ok(text);
        }
        let source: crate::BoxError = format!("{status}: {text}").into();
        Err(match status {
            StatusCode::NOT_FOUND if text.contains("NoSuchBucket") => Error::NotFound {
                uri: self.uri().root().trim_end_matches('/').to_owned(),
                what: "bucket",
                hint: crate::Hint::CheckBucket,
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Error::PermissionDenied {
                uri: uri.to_owned(),
                hint: match self.config().has_credentials() || self.config().anonymous() {
                    true => crate::Hint::CheckCredentials,
                    false => crate::Hint::NoCredentials,
                },
                source,
            },
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => Error::Throttled {
                uri: uri.to_owned(),
                tried: crate::Tries::default(),
                source,
            },
            _ => Error::Other {
                uri: uri.to_owned(),
                message: "request failed".to_owned(),
                source,
            },
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ListAnswer {
    contents: Vec<Contents>,
    common_prefixes: Vec<CommonPrefix>,
    is_truncated: Option<bool>,
    next_continuation_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Contents {
    key: String,
    size: u64,
    last_modified: Option<String>,
    #[serde(rename = "ETag")]
    e_tag: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct CommonPrefix {
    prefix: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn listed(key: &str) -> Listed {
        Listed {
            key: key.to_owned(),
            size: 0,
            e_tag: None,
            last_modified: DateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn keys_are_objects_folders_or_unaddressable() {
        for key in ["", "a/", "a/b/", "a//", "a//b/"] {
            assert_eq!(listed(key).kind(), ListedKind::Folder, "{key:?}");
        }
        for key in ["a//b", "/a", "a/./b"] {
            assert_eq!(listed(key).kind(), ListedKind::Unaddressable, "{key:?}");
        }
        match listed("a/b.jpg").kind() {
            ListedKind::Object(meta) => assert_eq!(meta.location.as_ref(), "a/b.jpg"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_list_answer_parses() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix>data/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>
  <IsTruncated>true</IsTruncated><NextContinuationToken>t2</NextContinuationToken>
  <Contents><Key>data/</Key><LastModified>2026-11-22T10:00:00.000Z</LastModified>
    <ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>0</Size></Contents>
  <Contents><Key>data/a &amp; b.jpg</Key><Size>8</Size></Contents>
  <CommonPrefixes><Prefix>data/c//</Prefix></CommonPrefixes>
</ListBucketResult>"#;
        let a: ListAnswer = quick_xml::de::from_str(xml).unwrap();
        assert_eq!(a.contents.len(), 2);
        assert_eq!(a.contents[0].key, "data/");
        assert_eq!(
            a.contents[0].e_tag.as_deref(),
            Some("\"d41d8cd98f00b204e9800998ecf8427e\"")
        );
        assert_eq!(a.contents[1].key, "data/a & b.jpg");
        assert_eq!(a.contents[1].size, 8);
        assert_eq!(a.common_prefixes[0].prefix, "data/c//");
        assert_eq!(a.next_continuation_token.as_deref(), Some("t2"));
    }
}
