//! The one error type of bucketload-image.

/// Why an image could not be decoded or augmented, or a pipeline could not be built.
///
/// Every per-sample variant names the sample `key` (the object key, or the tar member name), so
/// a log line says which file to look at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a decodable image (truncated, garbage, empty, or an unsupported
    /// flavour of a known format).
    #[error(
        "cannot decode image {key}: {reason}; check the file, or skip bad samples (`--skip-corrupt`; `skip_corrupt=True` in Python)"
    )]
    Corrupt {
        /// Key of the sample.
        key: String,
        /// What the decoder reported.
        reason: String,
    },
    /// The header declares more pixels than the configured limit (a decompression bomb, or a
    /// much larger image than the dataset should hold).
    #[error(
        "image {key} is {width}x{height} = {pixels} pixels, above the limit of {limit}; raise max_pixels if the image is genuine"
    )]
    TooLarge {
        /// Key of the sample.
        key: String,
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// `width * height`.
        pixels: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The bytes start with no signature this crate decodes (JPEG and PNG are supported).
    #[error(
        "image {key} is neither JPEG nor PNG (first bytes {magic:02x?}); only JPEG and PNG are decoded"
    )]
    UnknownFormat {
        /// Key of the sample.
        key: String,
        /// Up to the first four bytes.
        magic: Vec<u8>,
    },
    /// A pipeline or transform setting is invalid; lists every problem found.
    #[error("invalid image pipeline configuration: {}", problems.join("; "))]
    InvalidConfig {
        /// One entry per problem.
        problems: Vec<String>,
    },
    /// The decode thread pool could not be started.
    #[error("cannot start the image decode thread pool: {0}")]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
}

impl Error {
    /// The key of the sample this error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Error::Corrupt { key, .. }
            | Error::TooLarge { key, .. }
            | Error::UnknownFormat { key, .. } => Some(key),
            Error::InvalidConfig { .. } | Error::ThreadPool(_) => None,
        }
    }

    pub(crate) fn corrupt(key: &str, reason: impl std::fmt::Display) -> Error {
        Error::Corrupt {
            key: key.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
