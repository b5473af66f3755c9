//! Keys byte for byte: which object a key names, and how to address it.
//!
//! An S3 key is any string of bytes; object_store's [`Path`] spells only some of them (no
//! empty segment, no `/` at either end, no control character, no `.` or `..` segment) and
//! [`Path::from`] silently rewrites the others (`ü` → `%C3%BC`, `a//b` → `a/b`). So every
//! object bucketload reads or writes by name goes through [`Store::object`]: the store's own
//! `ObjectStore` with [`Path::parse`] when that spells the key exactly, else the store of that
//! one key ([`Store::exact_key`]), which signs its requests itself. The key is the URI's prefix
//! as the user wrote it (`s3://b/a//c/` is the folder `a//c/`) followed by the name.
//!
//! Keys with `.` or `..` segments (`a/../b`) are no exception: object_store's client
//! (reqwest, through `url`) would resolve them in every URL it sends, so they always take the
//! exact-key path, which sends the path as encoded. Only local folders and memory stores refuse
//! them ([`unaddressable`]): a file system resolves them.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use crate::{Error, Scheme, Store};

/// Why object_store's [`Path`] cannot spell `key` byte for byte, `None` when it can. The
/// reason is a phrase completing "the key …".
pub fn unspellable(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("is empty")
    } else if key.starts_with('/') {
        Some("starts with `/`")
    } else if key.ends_with('/') {
        Some("ends with `/`")
    } else if key.contains("//") {
        Some("has an empty segment (`//`)")
    } else if key.split('/').any(|s| s == "." || s == "..") {
        Some("has a `.` or `..` segment")
    } else if key.chars().any(|c| c.is_ascii_control()) {
        Some("holds a control character (a tab, a line break, …)")
    } else {
        None
    }
}

/// Why a local folder or memory store cannot name `key`, `None` when it can: a key with a `.`
/// or `..` segment, which a file system resolves. S3 stores address every key. The reason
/// completes "the key …".
pub fn unaddressable(key: &str) -> Option<&'static str> {
    key.split('/').any(|s| s == "." || s == "..").then_some(
        "has a `.` or `..` segment, which a local folder resolves to another file; name the \
             object without it",
    )
}

/// `key` as a [`Path`] when that spells it byte for byte.
pub(crate) fn spelled(key: &str) -> Option<Path> {
    match unspellable(key) {
        None => Path::parse(key).ok(),
        Some(_) => None,
    }
}

/// The key prefix of `uri` exactly as written (`s3://b/a//c/` → `a//c/`), as a folder: empty,
/// or ending in `/`.
pub(crate) fn written_folder(uri: &str) -> String {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    match rest.split_once('/').map_or("", |(_, prefix)| prefix) {
        "" => String::new(),
        p if p.ends_with('/') => p.to_owned(),
        p => format!("{p}/"),
    }
}

/// One object of a store, addressed byte for byte: see the module docs.
#[derive(Clone)]
pub struct Object {
    store: Arc<dyn ObjectStore>,
    path: Path,
    uri: String,
    owner: Store,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object").field("uri", &self.uri).finish()
    }
}

impl Object {
    /// The object store to send the object's requests to.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The object's path in [`Object::store`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The object's full URI, its key as written.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Maps an error of a request about this object into an [`Error`] naming it.
    pub fn map_error(&self, err: object_store::Error) -> Error {
        self.owner.map_error_at(err, &self.uri)
    }
}

impl Store {
    /// The object named `name`, relative to the URI's prefix as written (see the module docs):
    /// `s3://b/a` and `s3://b/a/` name `a/<name>`, `s3://b/a//` names `a//<name>`. Local
    /// folders and memory stores read `a//b` as `a/b`, as file systems do, and refuse `.` and
    /// `..` segments. A name only S3 stores can hold is [`Error::InvalidInput`] naming the
    /// object and why.
    pub fn object(&self, name: &str) -> Result<Object, Error> {
        let key = format!("{}{name}", self.key_folder());
        let uri = self.key_uri(&key);
        let refused = |why: &str| Error::InvalidInput {
            message: format!("{uri}: the key {why}"),
        };
        let (store, path) = match self.uri().scheme() {
            Scheme::File | Scheme::Memory => {
                if let Some(why) = unaddressable(&key) {
                    return Err(refused(why));
                }
                (self.object_store(), crate::key_path(name))
            }
            _ => match (self.prefix_spelled(), spelled(name)) {
                (true, Some(path)) => (self.object_store(), path),
                _ if self.uri().scheme() != Scheme::S3 => {
                    let why = unspellable(&key).unwrap_or("cannot be spelled");
                    return Err(refused(&format!(
                        "{why}, which only S3 stores can address; name the object without it"
                    )));
                }
                _ => (self.exact_key(&key)?, crate::key_path(&key)),
            },
        };
        Ok(Object {
            store,
            path,
            uri,
            owner: self.clone(),
        })
    }

    /// `s3://bucket/key`, the key exactly as given (for other schemes, the URI of the object
    /// relative to the store's prefix).
    pub(crate) fn key_uri(&self, key: &str) -> String {
        let uri = self.uri();
        match uri.scheme() {
            Scheme::File | Scheme::Memory => {
                uri.join(key.strip_prefix(self.key_folder()).unwrap_or(key))
            }
            _ => format!("{}{key}", uri.root()),
        }
    }
}

/// The [`ObjectStore`] of a store whose prefix its paths cannot spell (`s3://b/a//c/`,
/// `s3://b/tab\t/`): every request fails saying so, instead of going to another key. Single
/// objects there are still addressed through [`Store::object`].
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) reason: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    fn error(&self) -> object_store::Error {
        object_store::Error::NotSupported {
            source: Box::new(Refused {
                reason: self.reason.clone(),
            }),
        }
    }
}

#[async_trait]
impl ObjectStore for Refused {
    async fn put_opts(
        &self,
        _: &Path,
        _: PutPayload,
        _: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.error())
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.error())
    }

    async fn get_opts(&self, _: &Path, _: GetOptions) -> object_store::Result<GetResult> {
        Err(self.error())
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let err = self.reason.clone();
        locations
            .map(move |_| {
                Err(Refused {
                    reason: err.clone(),
                }
                .error())
            })
            .boxed()
    }

    fn list(&self, _: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let err = self.error();
        stream::once(async move { Err(err) }).boxed()
    }

    async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
        Err(self.error())
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
        Err(self.error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_path_cannot_spell_are_named_with_their_reason() {
        for key in ["a/ü/x", "a%41/#~[]{}^|<>\"\\*", "x y", "a.b/..c/.d"] {
            assert_eq!(unspellable(key), None, "{key}");
            assert_eq!(spelled(key).unwrap().as_ref(), key);
        }
        let cases = [
            ("", "is empty"),
            ("/a", "starts with `/`"),
            ("a/", "ends with `/`"),
            ("a//b", "has an empty segment (`//`)"),
            ("a/./b", "has a `.` or `..` segment"),
            ("..", "has a `.` or `..` segment"),
            ("a\tb", "holds a control character (a tab, a line break, …)"),
            ("a\rb", "holds a control character (a tab, a line break, …)"),
            (
                "a\u{7f}",
                "holds a control character (a tab, a line break, …)",
            ),
        ];
        for (key, why) in cases {
            assert_eq!(unspellable(key), Some(why), "{key:?}");
        }
        assert!(unaddressable("a/../b").is_some() && unaddressable("a//b").is_none());
        assert!(unaddressable("a..b/.c").is_none());
    }

    #[test]
    fn the_folder_is_the_prefix_as_written() {
        assert_eq!(written_folder("s3://b"), "");
        assert_eq!(written_folder("s3://b/"), "");
        assert_eq!(written_folder("s3://b/a"), "a/");
        assert_eq!(written_folder("s3://b/a/"), "a/");
        assert_eq!(written_folder("s3://b/a//"), "a//");
        assert_eq!(written_folder("s3://b//lead"), "/lead/");
        assert_eq!(written_folder("s3://b/ü/x"), "ü/x/");
    }
}
