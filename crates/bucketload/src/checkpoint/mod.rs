//! Checkpoints to object storage: parallel, atomic, optionally in the background.
//!
//! Open a [`Checkpoints`] on a URI prefix (`s3://bucket/run-7/`, `file:///ckpt/run-7` or a local
//! path) and save named checkpoints into it:
//!
//! - [`Checkpoints::writer`] takes a byte stream (what `torch.save` writes) and uploads it as a
//!   multipart upload, [`CheckpointConfig::parts_in_flight`] parts of
//!   [`CheckpointConfig::part_size`] at once, each with a CRC64-NVME checksum the store verifies
//!   and retried on its own. Memory is bounded by `(parts_in_flight + 1) × part_size`.
//! - The object appears only when [`CheckpointWriter::finish`] completes the upload. An error,
//!   [`CheckpointWriter::abort`], or dropping the writer unfinished aborts the upload: no partial
//!   object is ever visible, and an older checkpoint under the same name stays intact.
//! - Local targets write a hidden temporary file beside the checkpoint, `fsync` it, rename it
//!   over the name and `fsync` the directory: the same all-or-nothing guarantee.
//! - [`Checkpoints::save_background`] returns as soon as the upload is started: the caller waits
//!   only for a free slot ([`CheckpointConfig::max_background_saves`]); the returned
//!   [`SaveHandle`] waits or polls. A failure is reported by the handle and, if nobody waited on
//!   the handle, by the next save.
//! - [`Checkpoints::reader`] opens a checkpoint for parallel ranged GETs pinned to the version it
//!   found ([`CheckpointReader::read_all`] fills one buffer as fast as the store allows;
//!   [`CheckpointReader::into_blocking`] gives `std::io::Read + Seek` with read-ahead for
//!   `torch.load`).
//! - [`Checkpoints::list`], [`Checkpoints::keep_last`] (retention), and
//!   [`Checkpoints::orphaned_uploads`] / [`Checkpoints::abort_orphans`] (uploads left behind by
//!   a killed writer) keep the prefix tidy.
//!
//! ```no_run
//! # async fn run() -> bucketload::Result<()> {
//! use bucketload::checkpoint::{CheckpointConfig, Checkpoints};
//! use bucketload_store::StoreConfig;
//!
//! let ckpt = Checkpoints::open("s3://ckpt/run-7", &StoreConfig::from_env(),
//!                              CheckpointConfig::default())?;
//! let saved = ckpt.save("step-1000.pt", bytes::Bytes::from(vec![0u8; 1 << 20])).await?;
//! let back = ckpt.reader("step-1000.pt").await?.read_all().await?;
//! assert_eq!(back.len() as u64, saved.bytes);
//! # Ok(()) }
//! ```
//!
//! The blocking adapters ([`CheckpointWriter::into_blocking`],
//! [`CheckpointReader::into_blocking`], [`SaveHandle::wait_blocking`]) run the async work on a
//! runtime handle and must be used from a thread that is not a runtime worker (a Python thread,
//! `spawn_blocking`).

mod background;
mod local;
mod reader;
mod retention;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;

use std::borrow::Cow;

use bucketload_store::{Scheme, Store, StoreConfig};
use bytes::Bytes;

use crate::{Error, Result};
pub use background::SaveHandle;
pub use reader::{BlockingReader, CheckpointReader};
pub use retention::{CheckpointInfo, Orphan};
pub use writer::{BlockingWriter, CheckpointWriter};

/// Default bytes per part: large enough that per-request overhead is small, small enough that
/// a retried part costs little.
pub const DEFAULT_PART_SIZE: u64 = 16 << 20;
/// Default parts uploaded (or ranged GETs read) at once per checkpoint.
pub const DEFAULT_PARTS_IN_FLIGHT: usize = 16;
/// Default background saves running at once; another waits for a slot.
pub const DEFAULT_MAX_BACKGROUND_SAVES: usize = 2;
/// Unfinished saves younger than this are left alone by default when orphans are cleaned up
/// ([`Checkpoints::abort_orphans`]): they may be saves still running.
pub const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// How checkpoints are written and read; every setter states its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    part_size: u64,
    parts_in_flight: usize,
    max_background_saves: usize,
    checksums: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            part_size: DEFAULT_PART_SIZE,
            parts_in_flight: DEFAULT_PARTS_IN_FLIGHT,
            max_background_saves: DEFAULT_MAX_BACKGROUND_SAVES,
            checksums: true,
        }
    }
}

impl CheckpointConfig {
    /// Bytes per multipart part and per ranged GET. Default 16 MiB; at least 5 MiB (S3's
    /// minimum part).
    pub fn with_part_size(mut self, bytes: u64) -> Self {
        self.part_size = bytes;
        self
    }

    /// Parts uploaded, or ranged GETs read, at once per checkpoint. Default 16.
    pub fn with_parts_in_flight(mut self, n: usize) -> Self {
        self.parts_in_flight = n;
        self
    }

    /// Background saves running at once. Default 2.
    pub fn with_max_background_saves(mut self, n: usize) -> Self {
        self.max_background_saves = n;
        self
    }

    /// CRC64-NVME checksum of every part, verified by the store. Default on.
    pub fn with_checksums(mut self, yes: bool) -> Self {
        self.checksums = yes;
        self
    }

    /// Bytes per part.
    pub fn part_size(&self) -> u64 {
        self.part_size
    }

    /// Parts in flight.
    pub fn parts_in_flight(&self) -> usize {
        self.parts_in_flight
    }

    /// Background saves at once.
    pub fn max_background_saves(&self) -> usize {
        self.max_background_saves
    }

    fn validate(&self) -> Result<()> {
        if self.part_size < 5 << 20 {
            return Err(Error::invalid_input(format!(
                "checkpoint part size {} is below S3's 5 MiB minimum; use at least 5MiB",
                self.part_size
            )));
        }
        if self.parts_in_flight == 0 || self.max_background_saves == 0 {
            return Err(Error::invalid_input(
                "checkpoint parts in flight and background saves must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Where checkpoints go.
#[derive(Debug, Clone)]
enum Target {
    /// An object store (S3 and compatible, GCS, Azure, memory).
    Object(Store),
    /// A local directory: temporary file, fsync, rename.
    Local(PathBuf),
}

/// A prefix of named checkpoints; cheap to clone (clones share background saves).
#[derive(Debug, Clone)]
pub struct Checkpoints {
    target: Target,
    uri: String,
    /// For S3: the key prefix exactly as the URI spells it (`a//b` in `s3://bucket/a//b`);
    /// checkpoint keys are this, a `/` unless it ends with one, and the name.
    key_prefix: Option<String>,
    config: CheckpointConfig,
    background: Arc<background::Background>,
}

/// One finished save.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// The checkpoint's name under the prefix.
    pub name: String,
    /// Its full URI.
    pub uri: String,
    /// Bytes written.
    pub bytes: u64,
    /// Seconds from the first byte to the checkpoint being durable and visible.
    pub seconds: f64,
}

impl Saved {
    /// Bytes per second of the save.
    pub fn bytes_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl Checkpoints {
    /// Opens the checkpoint prefix `uri`. No request is sent.
    pub fn open(uri: &str, store: &StoreConfig, config: CheckpointConfig) -> Result<Checkpoints> {
        config.validate()?;
        let background = Arc::new(background::Background::new(config.max_background_saves));
        if let Some(dir) = local::local_dir(uri)? {
            return Ok(Checkpoints {
                uri: format!("file://{}", dir.display()),
                key_prefix: None,
                target: Target::Local(dir),
                config,
                background,
            });
        }
        let inflight = config.parts_in_flight * config.max_background_saves;
        let store_config = store
            .clone()
            .with_checksums(config.checksums)
            .with_part_size(config.part_size)
            .with_concurrency(store.concurrency().max(inflight));
        let store = Store::open(uri, &store_config)?;
        let key_prefix = match store.uri().scheme() {
            Scheme::S3 => Some(exact_prefix(uri).to_owned()),
            _ => None,
        };
        Ok(Checkpoints {
            uri: store.uri().to_string(),
            key_prefix,
            target: Target::Object(store),
            config,
            background,
        })
    }

    /// The prefix's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The configuration.
    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    /// The store, for object-store targets (its metrics count the checkpoint requests).
    pub fn store(&self) -> Option<&Store> {
        match &self.target {
            Target::Object(store) => Some(store),
            Target::Local(_) => None,
        }
    }

    /// The full URI of checkpoint `name`.
    pub fn uri_of(&self, name: &str) -> String {
        match (&self.target, &self.key_prefix) {
            (Target::Object(store), Some(_)) => {
                format!("s3://{}/{}", store.uri().bucket(), self.exact_key(name))
            }
            _ => format!("{}/{}", self.uri.trim_end_matches('/'), name),
        }
    }

    /// The S3 key of checkpoint `name`, byte for byte: the prefix as the URI spelled it, a
    /// `/` unless it is empty or ends with one, and the name.
    fn exact_key(&self, name: &str) -> String {
        match self.key_prefix.as_deref() {
            None | Some("") => name.to_owned(),
            Some(prefix) if prefix.ends_with('/') => format!("{prefix}{name}"),
            Some(prefix) => format!("{prefix}/{name}"),
        }
    }

    /// Checkpoint `name` in `store`, its key byte for byte ([`Store::object`]).
    fn object(&self, store: &Store, name: &str) -> Result<bucketload_store::Object> {
        Ok(store.object(name)?)
    }

    /// Starts writing checkpoint `name`. Fails first with the error of an earlier background
    /// save that nobody waited for.
    pub async fn writer(&self, name: &str) -> Result<CheckpointWriter> {
        let name = self.check_name(name)?;
        self.background.take_failure()?;
        writer::CheckpointWriter::open(self, &name).await
    }

    /// Writes `data` as checkpoint `name` and waits until it is durable and visible.
    pub async fn save(&self, name: &str, data: Bytes) -> Result<Saved> {
        self.save_chunks(name, vec![data]).await
    }

    /// Writes `chunks`, one after the other, as checkpoint `name` and waits until it is
    /// durable and visible (the chunks go into the parts as they are, without a copy).
    pub async fn save_chunks(&self, name: &str, chunks: Vec<Bytes>) -> Result<Saved> {
        let mut writer = self.writer(name).await?;
        for chunk in chunks {
            writer.write(chunk).await?;
        }
        writer.finish().await
    }

    /// Starts saving `data` as checkpoint `name` in the background and returns once the upload
    /// has started (waiting first while `max_background_saves` saves run). `data` is the
    /// snapshot: `Bytes` never change, so the caller may go on training.
    pub async fn save_background(&self, name: &str, data: Bytes) -> Result<SaveHandle> {
        self.save_background_chunks(name, vec![data]).await
    }

    /// [`Checkpoints::save_background`] of a snapshot held in several chunks, saved one after
    /// the other (e.g. what a serialiser wrote, gathered without concatenating it).
    pub async fn save_background_chunks(
        &self,
        name: &str,
        chunks: Vec<Bytes>,
    ) -> Result<SaveHandle> {
        let name = self.check_name(name)?;
        self.background.take_failure()?;
        let permit = self.background.slot().await?;
        let ckpt = self.clone();
        let name = name.into_owned();
        Ok(self
            .background
            .spawn(permit, self.uri_of(&name), async move {
                ckpt.save_chunks(&name, chunks).await
            }))
    }

    /// Waits for every background save started so far; the first failure, if any.
    pub async fn wait_background(&self) -> Result<()> {
        self.background.wait_all().await
    }

    /// Opens checkpoint `name` for reading.
    pub async fn reader(&self, name: &str) -> Result<CheckpointReader> {
        let name = self.check_name(name)?;
        reader::CheckpointReader::open(self, &name).await
    }

    /// Reads checkpoint `name` whole into one buffer.
    pub async fn load(&self, name: &str) -> Result<Bytes> {
        self.reader(name).await?.read_all().await
    }

    /// The name to use for checkpoint `name`: on S3 the key's tail as given (it may hold
    /// empty segments, or end with `/`, as S3 keys may); in a local directory a relative
    /// path, empty segments dropped (as the file system reads them).
    fn check_name<'a>(&self, name: &'a str) -> Result<Cow<'a, str>> {
        // A local directory would resolve `.` and `..`; S3 keys hold them as written.
        let dots = self.key_prefix.is_none() && name.split('/').any(|s| s == "." || s == "..");
        let name = match self.key_prefix {
            Some(_) => Cow::Borrowed(name),
            None if name.split('/').any(str::is_empty) => Cow::Owned(
                name.split('/')
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("/"),
            ),
            None => Cow::Borrowed(name),
        };
        if name.is_empty() || dots {
            return Err(Error::invalid_input(format!(
                "checkpoint name {name:?} must be a relative key like `step-100.pt` or \
                 `run/step-100.pt` (not empty, no `.` or `..` segments)"
            )));
        }
        Ok(name)
    }
}

/// The key prefix of the S3 URI `uri` exactly as written: what follows `s3://bucket/`.
fn exact_prefix(uri: &str) -> &str {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    rest.split_once('/').map_or("", |(_, prefix)| prefix)
}

/// Splits a checkpoint URI into the prefix to open and the name under it, so that
/// `prefix + "/" + name` is the URI again: `s3://b/run/step-1.pt` → (`s3://b/run`,
/// `step-1.pt`), `s3://b/a//x.pt` → (`s3://b/a`, `/x.pt`), `s3://b/a/x/` → (`s3://b/a`,
/// `x/`), `./x.pt` → (`.`, `x.pt`), `x.pt` → (`.`, `x.pt`). The name is empty when the URI
/// names a bucket or the root.
pub fn split_uri(uri: &str) -> (&str, &str) {
    let trimmed = uri.trim_end_matches('/');
    match trimmed.rfind('/') {
        // Keep `scheme://bucket` whole: it names no checkpoint.
        Some(i) if trimmed[..i].ends_with(':') || trimmed[..i].ends_with(":/") => (uri, ""),
        Some(i) => match trimmed[..i].trim_end_matches('/') {
            "" => ("/", uri.trim_start_matches('/')),
            head => (head, &uri[head.len() + 1..]),
        },
        None => (".", uri),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(uri: &str) -> Checkpoints {
        Checkpoints::open(uri, &StoreConfig::default(), CheckpointConfig::default()).unwrap()
    }

    #[test]
    fn names_are_relative_keys() {
        let local = open("/tmp/ckpt-names");
        for good in ["step-1.pt", "run/step-1.pt", "a b.pt"] {
            assert_eq!(local.check_name(good).unwrap(), good);
        }
        assert_eq!(local.check_name("a//b/").unwrap(), "a/b");
        assert_eq!(local.check_name("/abs").unwrap(), "abs");
        for bad in ["", "/", "../up", "a/./b"] {
            assert!(local.check_name(bad).is_err(), "{bad}");
        }
        let s3 = open("s3://b/run");
        for exact in ["/x.pt", "dir/", "a//b"] {
            assert_eq!(s3.check_name(exact).unwrap(), exact);
        }
        // `a/../b` passes here; the store refuses it saying why (see `Store::object`).
        assert!(s3.check_name("").is_err());
    }

    #[test]
    fn s3_keys_are_the_uri_byte_for_byte() {
        for (uri, key) in [
            ("s3://b/run/step-1.pt", "run/step-1.pt"),
            ("s3://b/a//x.pt", "a//x.pt"),
            ("s3://b/a/x/", "a/x/"),
            ("s3://b//x.pt", "/x.pt"),
            ("s3://b/x.pt", "x.pt"),
            ("s3://b/a//c/x.pt", "a//c/x.pt"),
        ] {
            let (prefix, name) = split_uri(uri);
            assert_eq!(format!("{prefix}/{name}"), uri);
            let ckpt = open(prefix);
            assert_eq!(ckpt.exact_key(name), key, "{uri}");
            assert_eq!(ckpt.uri_of(name), uri);
        }
        // A prefix opened with its trailing `/` is a folder, as without.
        assert_eq!(open("s3://b/run/").exact_key("x.pt"), "run/x.pt");
        assert_eq!(open("s3://b/").exact_key("x.pt"), "x.pt");
    }

    #[test]
    fn uris_split_into_prefix_and_name() {
        assert_eq!(split_uri("s3://b"), ("s3://b", ""));
        assert_eq!(split_uri("s3://b/"), ("s3://b/", ""));
        assert_eq!(split_uri("/x.pt"), ("/", "x.pt"));
        assert_eq!(split_uri("x.pt"), (".", "x.pt"));
        assert_eq!(split_uri("./x.pt"), (".", "x.pt"));
        assert_eq!(split_uri("file:///tmp/x.pt"), ("file:///tmp", "x.pt"));
    }

    #[test]
    fn configs_below_s3s_minimum_are_refused() {
        let c = CheckpointConfig::default().with_part_size(1 << 20);
        let err = Checkpoints::open("mem://c", &StoreConfig::default(), c).unwrap_err();
        assert!(err.to_string().contains("5 MiB"), "{err}");
        let c = CheckpointConfig::default().with_parts_in_flight(0);
        assert!(Checkpoints::open("mem://c", &StoreConfig::default(), c).is_err());
    }
}
