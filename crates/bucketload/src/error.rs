//! The engine's error type.
//!
//! Store failures keep the store crate's classification ([`bucketload_store::Error`]: not found,
//! permission denied, unreachable, throttled, ...), mapped with the full URI of the object by
//! `base::Location`; the engine adds its own failures (bad arguments, corrupt data, encoding).

pub use bucketload_store::ErrorKind;

use crate::Setting;

/// A boxed error used as the source of some variants.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A store operation failed; the store error names the object and says what to do.
    #[error(transparent)]
    Store(#[from] bucketload_store::Error),
    /// Copying a large object failed; the source names the part that failed.
    #[error("copying {src} to {dst} failed{}", written_note(source.is_unconfirmed()))]
    Copy {
        /// Full URI of the source.
        src: String,
        /// Full URI of the destination.
        dst: String,
        /// What failed.
        #[source]
        source: bucketload_store::Error,
    },
    /// A shard, index or manifest is malformed; the format error names the object and the byte
    /// offset.
    #[error(transparent)]
    Format(#[from] bucketload_format::Error),
    /// An argument was not valid.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Data read from the store is not what it should be.
    #[error("{uri} is corrupt: {reason}")]
    Corrupt {
        /// Full URI of the object.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Encoding a synthetic image failed.
    #[error("encoding a synthetic JPEG failed: {reason}")]
    Encode {
        /// The encoder's message.
        reason: String,
    },
    /// A local file operation failed.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// What was being done ("write", "rename into place", ...).
        action: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint saved in the background failed, and nobody waited on its handle.
    #[error("the background save of {uri} failed{}: {reason}; save it again", written_note(*unconfirmed))]
    BackgroundSave {
        /// Full URI of the checkpoint.
        uri: String,
        /// The save's error.
        reason: String,
        /// Whether the checkpoint may have been written after all (the store's answer was lost).
        unconfirmed: bool,
    },
    /// An epoch ended before it delivered every sample its plan holds, with no other error:
    /// never a normal end.
    #[error(
        "{dataset}: the epoch ended after {delivered} of its {planned} samples without an error; \
         the data read so far is incomplete, start the epoch again"
    )]
    Incomplete {
        /// The dataset's URI.
        dataset: String,
        /// Samples delivered.
        delivered: u64,
        /// Samples the epoch should have delivered.
        planned: u64,
    },
    /// A dataset whose run record (`_bucketload/run.json`, written by `bucketload shard` before
    /// its first shard) has no manifest beside it: the run that writes the manifest last never
    /// finished, so shards (and samples) are missing.
    #[error(
        "{dataset} is unfinished: its run record {run} plans {planned_shards} shards of \
         {planned_samples} samples, and {found_shards} shards of {found_samples} samples are \
         here, without the manifest a finished run writes last ({} shards, {} samples missing); \
         run the same `bucketload shard` again to finish it (after `--part` runs, each part, then \
         `bucketload merge`), or set {} to read what is here",
        planned_shards.saturating_sub(*found_shards),
        planned_samples.saturating_sub(*found_samples),
        Setting::AllowIncomplete
    )]
    Unfinished {
        /// The dataset's URI.
        dataset: String,
        /// Full URI of the run record.
        run: String,
        /// Shards the run planned.
        planned_shards: u64,
        /// Samples the run planned.
        planned_samples: u64,
        /// Shards found.
        found_shards: u64,
        /// Samples in the shards found.
        found_samples: u64,
    },
    /// The dataset's manifest no longer describes what the store holds: objects were added,
    /// removed or rewritten since it was written.
    #[error("{manifest} is stale: {what}; {}", Hint::RefreshManifest { command: refresh.clone() })]
    StaleManifest {
        /// Full URI of the manifest.
        manifest: String,
        /// What differs, naming objects.
        what: String,
        /// The command that writes the manifest again.
        refresh: String,
        /// [`ErrorKind::NotFound`] when an object it lists is gone, else
        /// [`ErrorKind::Corrupt`].
        kind: ErrorKind,
    },
    /// Decoding or augmenting an image failed, or the image pipeline's settings are invalid.
    #[cfg(feature = "image")]
    #[error(transparent)]
    Image(#[from] bucketload_image::Error),
    /// A background task panicked or was cancelled.
    #[error("a background task failed: {reason}")]
    Task {
        /// Why.
        reason: String,
    },
}

/// Result alias of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an [`Error::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Error {
        Error::InvalidInput {
            message: message.into(),
        }
    }

    /// The store error inside, if this is one.
    pub fn as_store(&self) -> Option<&bucketload_store::Error> {
        match self {
            Error::Store(e) | Error::Copy { source: e, .. } => Some(e),
            _ => None,
        }
    }

    /// What this error means to the user (exit code, Python exception, errno): see
    /// [`ErrorKind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Store(e) | Error::Copy { source: e, .. } => e.kind(),
            Error::Format(e) => format_kind(e),
            Error::InvalidInput { .. } | Error::Unfinished { .. } => ErrorKind::InvalidInput,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::StaleManifest { kind, .. } => *kind,
            Error::Io { source, .. } => io_kind(source),
            #[cfg(feature = "image")]
            Error::Image(e) => image_kind(e),
            Error::BackgroundSave {
                unconfirmed: true, ..
            } => ErrorKind::Store,
            Error::Encode { .. }
            | Error::BackgroundSave { .. }
            | Error::Incomplete { .. }
            | Error::Task { .. } => ErrorKind::Other,
        }
    }

    /// What the user can do about this error, for a front end to word: see [`Hint`].
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::Store(e) | Error::Copy { source: e, .. } => e.hint().map(Hint::Store),
            Error::Format(e) => e.hint().map(Hint::Format),
            Error::StaleManifest { refresh, .. } => Some(Hint::RefreshManifest {
                command: refresh.clone(),
            }),
            _ => None,
        }
    }

    /// Whether a write may have taken effect although it failed: its completion was sent, the
    /// answer was lost and the object could not be checked.
    pub fn is_unconfirmed(&self) -> bool {
        match self {
            Error::BackgroundSave { unconfirmed, .. } => *unconfirmed,
            _ => self
                .as_store()
                .is_some_and(bucketload_store::Error::is_unconfirmed),
        }
    }
}

/// What the user can do about an error of the engine or of the crates below it, as data: each
/// front end words it in its own vocabulary (the CLI names its flags and commands, Python its
/// keyword arguments) with [`reword`]. `Display` says it in the neutral words the error
/// messages hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hint {
    /// The store's advice ([`bucketload_store::Hint`]).
    Store(bucketload_store::Hint),
    /// The shard format's advice ([`bucketload_format::Hint`]).
    Format(bucketload_format::Hint),
    /// A stale manifest: write it again with `command`, or read the dataset without it.
    RefreshManifest {
        /// The command of the tool that writes the manifest again.
        command: String,
    },
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hint::Store(hint) => hint.fmt(f),
            Hint::Format(hint) => hint.fmt(f),
            Hint::RefreshManifest { command } => write!(
                f,
                "refresh it with `{command}`, or read the dataset without its manifest \
                 (turn off {})",
                Setting::UseManifest
            ),
        }
    }
}

/// The hints of `err` and of its causes, outermost first, each once: store and format errors
/// found directly, inside an engine error, or carried by an I/O error.
pub fn hints(err: &(dyn std::error::Error + 'static)) -> Vec<Hint> {
    let mut out = Vec::new();
    for e in causes(err) {
        if let Some(hint) = hint_of(e).filter(|h| !out.contains(h)) {
            out.push(hint);
        }
    }
    out
}

/// `err` and its causes, outermost first, each followed by the error it carries when it is an
/// I/O error (streams of object bytes report store failures as I/O errors).
pub(crate) fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source()).flat_map(|cause| {
        let carried = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        std::iter::once(cause).chain(carried)
    })
}

/// The hint of one error, if it is one of the engine's, the store's or the format's.
fn hint_of(e: &(dyn std::error::Error + 'static)) -> Option<Hint> {
    if let Some(e) = e.downcast_ref::<Error>() {
        return e.hint();
    }
    if let Some(e) = e.downcast_ref::<bucketload_store::Error>() {
        return e.hint().map(Hint::Store);
    }
    e.downcast_ref::<bucketload_format::Error>()
        .and_then(bucketload_format::Error::hint)
        .map(Hint::Format)
}

/// `text`, a message of an error with `hints`, with each hint's neutral words replaced by the
/// front end's `words` for it; a hint `words` leaves alone (`None`) keeps its neutral words.
pub fn reword(text: &str, hints: &[Hint], words: impl Fn(&Hint) -> Option<String>) -> String {
    hints
        .iter()
        .fold(text.to_owned(), |text, hint| match words(hint) {
            Some(own) => text.replace(&hint.to_string(), &own),
            None => text,
        })
}

/// The kind of an image pipeline error: bytes that are not a usable image are corrupt data,
/// a bad setting is invalid input.
#[cfg(feature = "image")]
pub fn image_kind(err: &bucketload_image::Error) -> ErrorKind {
    use bucketload_image::Error as E;
    match err {
        E::InvalidConfig { .. } => ErrorKind::InvalidInput,
        E::ThreadPool(_) => ErrorKind::Other,
        _ => ErrorKind::Corrupt,
    }
}

/// The kind of a shard, index or manifest error: corrupt data, except a writer given a bad
/// member (invalid input) and failed reads (the cause's kind).
pub fn format_kind(err: &bucketload_format::Error) -> ErrorKind {
    use bucketload_format::Error as F;
    match err {
        F::InvalidMember { .. } => ErrorKind::InvalidInput,
        F::WriterState { .. } => ErrorKind::Other,
        F::Io { source, .. } | F::ManifestIo { source, .. } => io_kind(source),
        _ => ErrorKind::Corrupt,
    }
}

/// The kind of an I/O error, looking first for a store error it carries (streams of object
/// bytes report store failures as I/O errors).
fn io_kind(err: &std::io::Error) -> ErrorKind {
    if let Some(store) = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<bucketload_store::Error>())
    {
        return store.kind();
    }
    if let Some(engine) = err.get_ref().and_then(|e| e.downcast_ref::<Error>()) {
        return engine.kind();
    }
    ErrorKind::of_io(err).unwrap_or(ErrorKind::Other)
}

/// What a failed write left: nothing, or (when its outcome is unknown) perhaps the whole object.
fn written_note(unconfirmed: bool) -> &'static str {
    match unconfirmed {
        true => " (it may have been written whole: check before writing again)",
        false => " (nothing was written)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_not_found() -> bucketload_store::Error {
        bucketload_store::Error::NotFound {
            uri: "s3://b/k".into(),
            what: "object",
            hint: String::new().into(),
        }
    }

    /// Wrapped errors keep the kind of what they wrap: a copy, a shard read whose stream
    /// failed, a local I/O error.
    #[test]
    fn kinds_see_through_wrappers() {
        let copy = Error::Copy {
            src: "a".into(),
            dst: "b".into(),
            source: store_not_found(),
        };
        assert_eq!(copy.kind(), ErrorKind::NotFound);
        let read = bucketload_format::Error::Io {
            shard: "s3://b/s.tar".into(),
            offset: 512,
            source: std::io::Error::other(store_not_found()),
        };
        assert_eq!(Error::from(read).kind(), ErrorKind::NotFound);
        let truncated = bucketload_format::Error::Truncated {
            shard: "s".into(),
            offset: 0,
            what: "a header".into(),
        };
        assert_eq!(Error::from(truncated).kind(), ErrorKind::Corrupt);
        let io = Error::Io {
            path: "/x".into(),
            action: "write".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(io.kind(), ErrorKind::PermissionDenied);
        let save = Error::BackgroundSave {
            uri: "s3://b/c".into(),
            reason: "lost".into(),
            unconfirmed: true,
        };
        assert_eq!(save.kind(), ErrorKind::Store);
    }
}
