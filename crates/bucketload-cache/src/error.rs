//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong in the cache.
///
/// A cache error never loses data: the object is still in the store. A
/// loader that gets an error from [`Cache::get`](crate::Cache::get) or
/// [`Cache::insert`](crate::Cache::insert) reads the object from the store
/// and carries on. Corrupt or stale entries are not errors: they are misses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration given to [`CacheBuilder`](crate::CacheBuilder) is
    /// invalid; every problem found is listed.
    #[error("invalid cache configuration: {}", problems.join("; "))]
    InvalidConfig {
        /// One message per problem.
        problems: Vec<String>,
    },
    /// The bytes offered to [`Cache::insert`](crate::Cache::insert) do not
    /// agree with the object version or range they are filed under.
    #[error("cannot cache {store}/{key}: {reason}")]
    InvalidInput {
        /// Store identity (dataset or bucket URI).
        store: String,
        /// Object key.
        key: String,
        /// What is inconsistent.
        reason: String,
    },
    /// A file-system operation in the cache directory failed.
    #[error(
        "cache {op} failed on {}; check that the cache directory is on a local, writable file system with free space",
        path.display()
    )]
    Io {
        /// What was being done (`open`, `read`, `write`, `rename`, `lock`, ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An [`Error::Io`] for `op` on `path`.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
