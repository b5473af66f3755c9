//! Store URIs: `s3://bucket/prefix`, `gs://`, `az://`, `file:///abs`, plain
//! local paths and `mem://name`.

use crate::Error;
use std::fmt;
use std::path::PathBuf;

/// The accepted schemes, listed in error messages.
pub const ACCEPTED_SCHEMES: &str = "s3://bucket[/prefix], gs://bucket[/prefix], az://container[/prefix], abfs[s]://container@account.dfs.core.windows.net[/prefix], https://account.blob.core.windows.net/container[/prefix], file:///abs/path, /abs/path, ./rel/path, mem://[name]";

/// The kind of backend a URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// Amazon S3 or an S3-compatible server.
    S3,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage.
    Azure,
    /// A local directory.
    File,
    /// A named in-process memory store.
    Memory,
}

impl Scheme {
    /// The URI scheme, e.g. `"s3"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
            Scheme::File => "file",
            Scheme::Memory => "mem",
        }
    }
}

/// A parsed store URI.
///
/// For `s3`, `gs` and `az` the bucket is the container and the prefix is the
/// key prefix; for `file` the bucket is empty and the prefix is the absolute
/// directory; for `mem` the bucket is the store's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreUri {
    scheme: Scheme,
    bucket: String,
    prefix: String,
    /// The Azure storage account a URI names (`abfs://c@account.dfs.core.windows.net/…`,
    /// `https://account.blob.core.windows.net/c/…`); otherwise the environment's.
    account: Option<String>,
}

impl StoreUri {
    /// Parses a URI or a local path (relative paths are made absolute against
    /// the current directory).
    pub fn parse(uri: &str) -> Result<StoreUri, Error> {
        let invalid = |reason: String| Error::InvalidUri {
            uri: uri.to_owned(),
            reason,
        };
        let Some((scheme, rest)) = uri.split_once("://") else {
            return local_path(uri).map_err(invalid);
        };
        let mut account = None;
        let mut rest = rest.to_owned();
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "s3" | "s3a" => Scheme::S3,
            "gs" | "gcs" => Scheme::Gcs,
            "az" | "azure" | "adl" => Scheme::Azure,
            // abfs[s]://container@account.dfs.core.windows.net/path (also .blob.)
            "abfs" | "abfss" => {
                let (authority, path) = rest.split_once('/').unwrap_or((&rest, ""));
                if let Some((container, host)) = authority.split_once('@') {
                    account = Some(azure_account(host).map_err(invalid)?);
                    rest = format!("{container}/{path}");
                }
                Scheme::Azure
            }
            // https://account.blob.core.windows.net/container/path (or .dfs.)
            "https" | "http" => {
                let (host, path) = rest.split_once('/').unwrap_or((&rest, ""));
                if !(host.ends_with(".blob.core.windows.net")
                    || host.ends_with(".dfs.core.windows.net"))
                {
                    return Err(invalid(format!(
                        "an HTTP URL names an object store only as https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH; use one of {ACCEPTED_SCHEMES}"
                    )));
                }
                account = Some(azure_account(host).map_err(invalid)?);
                rest = path.to_owned();
                Scheme::Azure
            }
            "file" => return file_uri(&rest).map_err(invalid),
            "mem" | "memory" => Scheme::Memory,
            other => {
                return Err(invalid(format!(
                    "unsupported scheme `{other}`; use one of {ACCEPTED_SCHEMES}"
                )));
            }
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((&rest, ""));
        if bucket.is_empty() && scheme != Scheme::Memory {
            return Err(invalid(format!(
                "missing bucket name; use {}://bucket[/prefix]",
                scheme.as_str()
            )));
        }
        let name_char = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
        if scheme != Scheme::Memory && !bucket.chars().all(name_char) {
            return Err(invalid(
                "a bucket name holds only letters, digits, `-`, `.` and `_`".to_owned(),
            ));
        }
        // S3's limit (and Azure's for containers); GCS allows up to 222 with dots.
        let longest = if scheme == Scheme::Gcs { 222 } else { 63 };
        if bucket.len() > longest {
            return Err(invalid(format!(
                "a bucket name holds at most {longest} characters, this one {}",
                bucket.len()
            )));
        }
        // S3 keys below such a prefix are listed and addressed as written (see
        // `Store::object`); object_store's Azure and GCS clients would resolve the segments.
        if scheme != Scheme::S3 && prefix.split('/').any(|s| s == "." || s == "..") {
            return Err(invalid(
                "the prefix has a `.` or `..` segment, which this store's HTTP client resolves \
                 in every URL, so no request can name a key below it; write the prefix without \
                 them"
                    .to_owned(),
            ));
        }
        Ok(StoreUri {
            scheme,
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
            account,
        })
    }

    /// The Azure storage account the URI names, if it names one.
    pub fn account(&self) -> Option<&str> {
        self.account.as_deref()
    }

    /// The backend kind.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The bucket (or container, or memory store name); empty for `file`.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix (for `file`, the absolute directory), without
    /// leading or trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The local directory of a `file` URI.
    pub fn local_dir(&self) -> Option<PathBuf> {
        (self.scheme == Scheme::File).then(|| PathBuf::from(format!("/{}", self.prefix)))
    }

    /// The full URI of `key`, a path relative to this URI's prefix.
    pub fn join(&self, key: &str) -> String {
        let base = self.to_string();
        let key = key.trim_start_matches('/');
        match (base.ends_with('/'), key.is_empty()) {
            (_, true) => base,
            (true, false) => format!("{base}{key}"),
            (false, false) => format!("{base}/{key}"),
        }
    }

    /// The URI of the bucket root, with a trailing `/` (for `ls` hints).
    pub fn root(&self) -> String {
        match self.scheme {
            Scheme::File => "file:///".to_owned(),
            _ => format!("{}/", self.container_uri()),
        }
    }

    /// `scheme://bucket`, or for an Azure container of a named account
    /// `abfs://container@account.dfs.core.windows.net`.
    fn container_uri(&self) -> String {
        match &self.account {
            Some(account) => format!("abfs://{}@{account}.dfs.core.windows.net", self.bucket),
            None => format!("{}://{}", self.scheme.as_str(), self.bucket),
        }
    }
}

impl fmt::Display for StoreUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::File => write!(f, "file:///{}", self.prefix),
            _ if self.prefix.is_empty() => write!(f, "{}", self.container_uri()),
            _ => write!(f, "{}/{}", self.container_uri(), self.prefix),
        }
    }
}

/// The account of an Azure host name (`account.dfs.core.windows.net`).
fn azure_account(host: &str) -> Result<String, String> {
    let account = host.split('.').next().unwrap_or_default();
    let valid = (3..=24).contains(&account.len())
        && account
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !valid || !host.contains(".core.windows.net") {
        return Err(format!(
            "`{host}` is not an Azure storage host (ACCOUNT.dfs.core.windows.net or \
             ACCOUNT.blob.core.windows.net, the account 3-24 lower-case letters and digits)"
        ));
    }
    Ok(account.to_owned())
}

fn file_uri(rest: &str) -> Result<StoreUri, String> {
    // `file:///abs` leaves `/abs`; `file://localhost/abs` is also accepted.
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return Err("file URIs need an absolute path, e.g. file:///data/train".to_owned());
    }
    local_path(path)
}

fn local_path(path: &str) -> Result<StoreUri, String> {
    if path.is_empty() {
        return Err(format!("empty path; use one of {ACCEPTED_SCHEMES}"));
    }
    let path = PathBuf::from(path);
    let abs = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot resolve a relative path: {e}"))?
            .join(path)
    };
    let text = abs
        .to_str()
        .ok_or_else(|| "the path is not valid UTF-8".to_owned())?;
    // `..` climbs lexically, as the shell would for `cd`.
    let mut normal: Vec<&str> = Vec::new();
    for c in text.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                normal.pop();
            }
            c => normal.push(c),
        }
    }
    Ok(StoreUri {
        scheme: Scheme::File,
        bucket: String::new(),
        prefix: normal.join("/"),
        account: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn s3_with_and_without_prefix() {
        let u = StoreUri::parse("s3://bkt/a/b/").unwrap();
        assert_eq!(
            (u.scheme(), u.bucket(), u.prefix()),
            (Scheme::S3, "bkt", "a/b")
        );
        assert_eq!(u.to_string(), "s3://bkt/a/b");
        assert_eq!(u.join("k.jpg"), "s3://bkt/a/b/k.jpg");
        assert_eq!(u.root(), "s3://bkt/");
        let u = StoreUri::parse("s3://bkt").unwrap();
        assert_eq!(u.prefix(), "");
        assert_eq!(u.join("k"), "s3://bkt/k");
    }

    #[test]
    fn azure_urls_as_azure_users_paste_them() {
        for (text, shown) in [
            (
                "abfs://data@acct1.dfs.core.windows.net/train/x",
                "abfs://data@acct1.dfs.core.windows.net/train/x",
            ),
            (
                "abfss://data@acct1.dfs.core.windows.net/train/x",
                "abfs://data@acct1.dfs.core.windows.net/train/x",
            ),
            (
                "https://acct1.blob.core.windows.net/data/train/x",
                "abfs://data@acct1.dfs.core.windows.net/train/x",
            ),
            ("az://data/train/x", "az://data/train/x"),
            ("abfs://data/train/x", "az://data/train/x"),
        ] {
            let u = StoreUri::parse(text).unwrap();
            assert_eq!(
                (u.scheme(), u.bucket(), u.prefix()),
                (Scheme::Azure, "data", "train/x"),
                "{text}"
            );
            assert_eq!(u.to_string(), shown, "{text}");
            // What is shown parses back to the same store.
            assert_eq!(StoreUri::parse(&u.to_string()).unwrap(), u);
        }
        let u = StoreUri::parse("abfss://data@acct1.dfs.core.windows.net/").unwrap();
        assert_eq!(u.account(), Some("acct1"));
        assert_eq!(u.root(), "abfs://data@acct1.dfs.core.windows.net/");
        assert!(StoreUri::parse("https://example.com/x").is_err());
        assert!(StoreUri::parse("abfs://data@Not_An_Account.dfs.core.windows.net/x").is_err());
    }

    #[test]
    fn file_and_local_paths() {
        let u = StoreUri::parse("file:///tmp/data/").unwrap();
        assert_eq!(u.scheme(), Scheme::File);
        assert_eq!(u.local_dir().unwrap(), PathBuf::from("/tmp/data"));
        assert_eq!(u.to_string(), "file:///tmp/data");
        assert_eq!(u.join("x"), "file:///tmp/data/x");
        let u = StoreUri::parse("/tmp/./d").unwrap();
        assert_eq!(u.to_string(), "file:///tmp/d");
        let u = StoreUri::parse("./rel").unwrap();
        let cwd = std::env::current_dir().unwrap().join("rel");
        assert_eq!(u.local_dir().unwrap(), cwd);
    }

    #[test]
    fn memory_and_cloud() {
        let u = StoreUri::parse("mem://shared").unwrap();
        assert_eq!((u.scheme(), u.bucket()), (Scheme::Memory, "shared"));
        assert_eq!(StoreUri::parse("mem://").unwrap().bucket(), "");
        assert_eq!(StoreUri::parse("gs://b/p").unwrap().scheme(), Scheme::Gcs);
        assert_eq!(StoreUri::parse("az://c").unwrap().scheme(), Scheme::Azure);
    }

    #[test]
    fn wrong_scheme_lists_accepted_ones() {
        let err = StoreUri::parse("ftp://host/x").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ftp://host/x"), "{text}");
        assert!(text.contains("s3://bucket"), "{text}");
        assert!(matches!(err, Error::InvalidUri { .. }));
        assert!(StoreUri::parse("s3://").is_err());
        assert!(StoreUri::parse("file://rel").is_err());
    }

    #[test]
    fn bucket_names_and_dot_segments_are_checked() {
        for bad in [
            "s3://de mo/x",
            "s3://b\u{e9}/x",
            "gs://a?b",
            "gs://b/../x",
            "az://c/a/./x",
        ] {
            let err = StoreUri::parse(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidUri { .. }), "{bad}: {err}");
        }
        assert!(StoreUri::parse("s3://my-bucket_1.x/a..b/c").is_ok());
        // S3 keys below them are addressed as written.
        assert!(StoreUri::parse("s3://b/../x").is_ok());
        assert!(StoreUri::parse("s3://b/a/./x").is_ok());
        assert!(StoreUri::parse(&format!("s3://{}", "a".repeat(63))).is_ok());
        assert!(StoreUri::parse(&format!("s3://{}", "a".repeat(64))).is_err());
        assert!(StoreUri::parse("mem://any name").is_ok());
    }

    #[test]
    fn local_dot_dot_climbs() {
        let u = StoreUri::parse("/tmp/a/../b/..").unwrap();
        assert_eq!(u.to_string(), "file:///tmp");
        let u = StoreUri::parse("file:///tmp/a/../../../x").unwrap();
        assert_eq!(u.to_string(), "file:///x");
    }
}

/// The [`Path`](object_store::path::Path) of an object key, taken as is.
///
/// `Path::from` percent-encodes every non-ASCII byte and some reserved characters
/// (`ü.jpg` → `%C3%BC.jpg`), which names another object; keys that come from listings,
/// manifests or the command line go through this instead. Keys object_store cannot represent
/// as they are (empty, `.` or `..` segments, `//`) fall back to `Path::from`.
pub fn key_path(key: &str) -> object_store::path::Path {
    object_store::path::Path::parse(key).unwrap_or_else(|_| object_store::path::Path::from(key))
}

#[cfg(test)]
mod key_path_tests {
    use super::key_path;

    #[test]
    fn keys_keep_unicode_spaces_and_percent_signs() {
        for key in ["a/ünï.txt", "a/with space.jpg", "a/100%.bin", "plain"] {
            assert_eq!(key_path(key).as_ref(), key);
        }
        assert_eq!(key_path("a//b").as_ref(), "a/b");
    }
}
