//! The core's [`Error`] and the errno each one becomes.
//!
//! The kernel only carries an errno back to the program, so every error is also logged by the
//! adapter with its full message (which object, what to do).

use bucketload_store::ErrorKind;

/// Linux errno values the core answers with; the FUSE adapter hands them to the kernel.
pub mod errno {
    /// Operation not permitted (a flag of the mount forbids it).
    pub const EPERM: i32 = 1;
    /// No such file or directory.
    pub const ENOENT: i32 = 2;
    /// Input/output error (the store failed).
    pub const EIO: i32 = 5;
    /// Bad file handle.
    pub const EBADF: i32 = 9;
    /// Try again (the store throttled us).
    pub const EAGAIN: i32 = 11;
    /// Out of memory (the mount's `--memory-limit`).
    pub const ENOMEM: i32 = 12;
    /// Permission denied (the store refused the credentials).
    pub const EACCES: i32 = 13;
    /// The file is being written.
    pub const EBUSY: i32 = 16;
    /// The file exists.
    pub const EEXIST: i32 = 17;
    /// Cross-device link: directories are not renamed (`mv` then copies).
    pub const EXDEV: i32 = 18;
    /// Not a directory.
    pub const ENOTDIR: i32 = 20;
    /// Is a directory.
    pub const EISDIR: i32 = 21;
    /// Invalid argument (e.g. a write that is not sequential).
    pub const EINVAL: i32 = 22;
    /// File too large (e.g. renaming an object over 5 GiB).
    pub const EFBIG: i32 = 27;
    /// Read-only file system (`--read-only`).
    pub const EROFS: i32 = 30;
    /// File name too long.
    pub const ENAMETOOLONG: i32 = 36;
    /// Directory not empty.
    pub const ENOTEMPTY: i32 = 39;
    /// Operation not supported by an object store (append, random writes, links).
    pub const ENOTSUP: i32 = 95;
}

/// Errors of the file-system core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The path does not exist in the bucket (or in the manifest that serves listings).
    #[error("{path}: no such file or directory")]
    NotFound {
        /// The path inside the mount.
        path: String,
    },
    /// The operation is refused; `errno` says why to the program, the message to the user.
    #[error("{path}: {reason}")]
    Refused {
        /// The path inside the mount.
        path: String,
        /// The errno returned to the program.
        errno: i32,
        /// What was refused and what to do instead.
        reason: String,
    },
    /// The store failed; the message names the object.
    #[error(transparent)]
    Store(#[from] bucketload_store::Error),
    /// The engine (prefetcher, manifest) failed; the message names the object.
    #[error(transparent)]
    Engine(#[from] bucketload::Error),
    /// The mount configuration is not valid.
    #[error("invalid mount configuration: {0}")]
    Config(String),
}

/// The core's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn refused(path: &str, errno: i32, reason: impl Into<String>) -> Error {
        Error::Refused {
            path: display_path(path),
            errno,
            reason: reason.into(),
        }
    }

    pub(crate) fn not_found(path: &str) -> Error {
        Error::NotFound {
            path: display_path(path),
        }
    }

    /// What this error means to the user: see [`ErrorKind`]. A refusal is invalid input (the
    /// program asked for something the mount does not do); its errno says which.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::Refused { .. } | Error::Config(_) => ErrorKind::InvalidInput,
            Error::Store(e) => e.kind(),
            Error::Engine(e) => e.kind(),
        }
    }

    /// The errno a program sees for this error: a refusal's own, else its kind's.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Refused { errno, .. } => *errno,
            _ => errno_of(self.kind()),
        }
    }
}

/// The errno of each [`ErrorKind`]: the one table the mount answers the kernel from.
pub fn errno_of(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::NotFound => errno::ENOENT,
        ErrorKind::PermissionDenied => errno::EACCES,
        ErrorKind::Throttled => errno::EAGAIN,
        ErrorKind::InvalidInput => errno::EINVAL,
        ErrorKind::Unreachable | ErrorKind::Corrupt | ErrorKind::Store | ErrorKind::Other => {
            errno::EIO
        }
    }
}

/// A path inside the mount as users see it: `/` then the key.
pub(crate) fn display_path(key: &str) -> String {
    format!("/{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_errno() {
        assert_eq!(Error::not_found("a/b").errno(), errno::ENOENT);
        assert_eq!(
            Error::not_found("a/b").to_string(),
            "/a/b: no such file or directory"
        );
        let e = Error::refused("x", errno::EROFS, "the mount is read-only");
        assert_eq!(e.errno(), errno::EROFS);
        let store = bucketload_store::Error::NotFound {
            uri: "s3://b/k".into(),
            what: "object",
            hint: "check".into(),
        };
        assert_eq!(Error::from(store).errno(), errno::ENOENT);
    }

    fn not_found() -> bucketload_store::Error {
        bucketload_store::Error::NotFound {
            uri: "s3://b/k".into(),
            what: "object",
            hint: "check".into(),
        }
    }

    /// Each kind's errno, and errors wrapped by the engine keep their kind's errno (a copy of
    /// a missing object is ENOENT, not EIO).
    #[test]
    fn errnos_follow_the_error_kind() {
        let table = [
            (ErrorKind::NotFound, errno::ENOENT),
            (ErrorKind::PermissionDenied, errno::EACCES),
            (ErrorKind::Unreachable, errno::EIO),
            (ErrorKind::Throttled, errno::EAGAIN),
            (ErrorKind::InvalidInput, errno::EINVAL),
            (ErrorKind::Corrupt, errno::EIO),
            (ErrorKind::Store, errno::EIO),
            (ErrorKind::Other, errno::EIO),
        ];
        assert_eq!(table.len(), ErrorKind::ALL.len());
        for (kind, code) in table {
            assert_eq!(errno_of(kind), code, "{kind:?}");
        }
        let copy = bucketload::Error::Copy {
            src: "s3://b/k".into(),
            dst: "s3://b/l".into(),
            source: not_found(),
        };
        assert_eq!(Error::from(copy).errno(), errno::ENOENT);
        let corrupt = bucketload::Error::Corrupt {
            uri: "s3://b/k".into(),
            reason: "short".into(),
        };
        assert_eq!(Error::from(corrupt).errno(), errno::EIO);
        let config = Error::Config("bad".into());
        assert_eq!(config.errno(), errno::EINVAL);
        let permission = bucketload_store::Error::PermissionDenied {
            uri: "s3://b/k".into(),
            hint: String::new().into(),
            source: "refused".into(),
        };
        assert_eq!(
            Error::from(bucketload::Error::Store(permission)).errno(),
            errno::EACCES
        );
    }
}
