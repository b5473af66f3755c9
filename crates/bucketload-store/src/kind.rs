//! [`ErrorKind`]: what a failure means to the user, whichever crate reported it.
//!
//! Every error type of bucketload has a `kind()` returning one of these; the CLI's exit code,
//! the Python exception class and the mount's errno are each derived from the kind by one
//! small table (in `bucketload-cli/src/exit.rs`, `bucketload-py/src/errors.rs` and
//! `bucketload-fuse/src/error.rs`), so the three always agree. It lives in the store crate,
//! the lowest layer the engine, the mount, the CLI and the Python binding share.

/// What a failure means: the category the CLI, Python and the mount each translate.
///
/// Deliberately exhaustive: a new kind must be given its exit code, exception and errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The bucket, object, prefix or local file does not exist (exit 3, `NotFoundError`,
    /// `ENOENT`).
    NotFound,
    /// The credentials were refused or do not allow the operation (exit 4,
    /// `PermissionDeniedError`, `EACCES`).
    PermissionDenied,
    /// The endpoint could not be reached or the connection failed (exit 5, `StoreError`,
    /// `EIO`).
    Unreachable,
    /// The server kept throttling after retries (exit 5, `StoreError`, `EAGAIN`).
    Throttled,
    /// A value given by the user is not valid: URI, size, range, setting (exit 6,
    /// `ConfigError`, `EINVAL`).
    InvalidInput,
    /// Data is not what it should be: a corrupt shard, index, manifest or image, or an object
    /// that changed (exit 6, `CorruptDataError`, `EIO`).
    Corrupt,
    /// The store answered something unexpected, or a write's outcome is unknown (exit 1,
    /// `StoreError`, `EIO`).
    Store,
    /// Anything else: a local failure or a bug (exit 1, `BucketloadError`, `EIO`).
    Other,
}

impl ErrorKind {
    /// Every kind, for tables and tests.
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::NotFound,
        ErrorKind::PermissionDenied,
        ErrorKind::Unreachable,
        ErrorKind::Throttled,
        ErrorKind::InvalidInput,
        ErrorKind::Corrupt,
        ErrorKind::Store,
        ErrorKind::Other,
    ];

    /// The kind of an operating-system error, or `None` when its kind says nothing more than
    /// "it failed".
    pub fn of_io(err: &std::io::Error) -> Option<ErrorKind> {
        use std::io::ErrorKind as Io;
        Some(match err.kind() {
            Io::NotFound => ErrorKind::NotFound,
            Io::PermissionDenied => ErrorKind::PermissionDenied,
            Io::ConnectionRefused
            | Io::ConnectionReset
            | Io::ConnectionAborted
            | Io::NotConnected
            | Io::TimedOut => ErrorKind::Unreachable,
            Io::InvalidInput => ErrorKind::InvalidInput,
            Io::InvalidData | Io::UnexpectedEof => ErrorKind::Corrupt,
            _ => return None,
        })
    }
}
