//! [`MountConfig`]: what a mount may do and how much it may hold.

use std::sync::Arc;
use std::time::Duration;

use bucketload::loader::Cache;

use crate::error::{Error, Result};

/// Default metadata TTL: 1 s, like Mountpoint. Listings and lookups younger than this are
/// trusted; raise it (or use `indefinite`) for data that does not change under the mount.
pub const DEFAULT_METADATA_TTL: Duration = Duration::from_secs(1);
/// Default FUSE worker threads: 16 requests served at once (a 16-worker DataLoader).
pub const DEFAULT_MAX_THREADS: usize = 16;
/// Default memory limit across every open handle: 1 GiB, sixteen 64 MiB read windows.
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;
/// Default wait of a writer or a whole-file read for memory before `ENOMEM`: long enough for
/// other handles' uploads and reads to finish, short enough that a program stuck behind idle
/// handles gets an error rather than a hang.
pub const DEFAULT_MEMORY_WAIT: Duration = Duration::from_secs(60);
/// Default part size of uploads and largest prefetch GET: 8 MiB (S3's guidance).
pub const DEFAULT_PART_SIZE: u64 = 8 << 20;
/// Default parts uploaded at once per file being written.
pub const DEFAULT_UPLOAD_CONCURRENCY: usize = 8;
/// A metadata TTL that never runs out (`--metadata-ttl indefinite`).
pub const INDEFINITE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How a mount behaves. Setters never fail; [`MountConfig::validate`] reports every problem.
#[derive(Debug, Clone)]
pub struct MountConfig {
    pub(crate) read_only: bool,
    pub(crate) allow_delete: bool,
    pub(crate) allow_overwrite: bool,
    pub(crate) metadata_ttl: Duration,
    pub(crate) max_threads: usize,
    pub(crate) part_size: u64,
    pub(crate) memory_limit: u64,
    pub(crate) memory_wait: Duration,
    pub(crate) upload_concurrency: usize,
    pub(crate) cache: Option<Arc<Cache>>,
    pub(crate) use_manifest: bool,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            allow_delete: false,
            allow_overwrite: false,
            metadata_ttl: DEFAULT_METADATA_TTL,
            max_threads: DEFAULT_MAX_THREADS,
            part_size: DEFAULT_PART_SIZE,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            memory_wait: DEFAULT_MEMORY_WAIT,
            upload_concurrency: DEFAULT_UPLOAD_CONCURRENCY,
            cache: None,
            use_manifest: true,
            uid: 0,
            gid: 0,
        }
    }
}

impl MountConfig {
    /// Refuses every change to the bucket with `EROFS` (default: false).
    pub fn with_read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Lets `unlink` delete objects (default: false, `EPERM`).
    pub fn with_allow_delete(mut self, yes: bool) -> Self {
        self.allow_delete = yes;
        self
    }

    /// Lets `open(O_TRUNC)` and `rename` replace existing objects (default: false, `EPERM`).
    pub fn with_allow_overwrite(mut self, yes: bool) -> Self {
        self.allow_overwrite = yes;
        self
    }

    /// How long listings and lookups are trusted (default: [`DEFAULT_METADATA_TTL`]).
    pub fn with_metadata_ttl(mut self, ttl: Duration) -> Self {
        self.metadata_ttl = ttl;
        self
    }

    /// FUSE requests served at once (default: [`DEFAULT_MAX_THREADS`]).
    pub fn with_max_threads(mut self, n: usize) -> Self {
        self.max_threads = n;
        self
    }

    /// Upload part size and largest prefetch GET (default: [`DEFAULT_PART_SIZE`]).
    pub fn with_part_size(mut self, bytes: u64) -> Self {
        self.part_size = bytes;
        self
    }

    /// Memory for buffers across every open handle (default: [`DEFAULT_MEMORY_LIMIT`]).
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// How long a writer or a whole-file read waits for memory before failing with `ENOMEM`
    /// (default: [`DEFAULT_MEMORY_WAIT`]).
    pub fn with_memory_wait(mut self, wait: Duration) -> Self {
        self.memory_wait = wait;
        self
    }

    /// Parts uploaded at once per file (default: [`DEFAULT_UPLOAD_CONCURRENCY`]).
    pub fn with_upload_concurrency(mut self, n: usize) -> Self {
        self.upload_concurrency = n;
        self
    }

    /// The loader's disk cache, shared with it (default: none).
    pub fn with_cache(mut self, cache: Arc<Cache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Serves listings from the dataset manifest (`_bucketload/manifest.bin`, else
    /// `_bucketload/manifest.json`) when the mounted prefix has one
    /// (default: true).
    pub fn with_manifest(mut self, yes: bool) -> Self {
        self.use_manifest = yes;
        self
    }

    /// Owner of every file and directory (default: 0, 0; the CLI uses its own ids).
    pub fn with_owner(mut self, uid: u32, gid: u32) -> Self {
        self.uid = uid;
        self.gid = gid;
        self
    }

    /// The FUSE worker threads.
    pub fn max_threads(&self) -> usize {
        self.max_threads
    }

    /// The metadata TTL.
    pub fn metadata_ttl(&self) -> Duration {
        self.metadata_ttl
    }

    /// Whether the mount is read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Checks every setting and reports every problem at once.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if self.max_threads == 0 {
            problems.push("--max-threads must be at least 1".to_owned());
        }
        // S3 refuses parts under 5 MiB (except the last) and over 5 GiB.
        if !(5 << 20..=5 << 30).contains(&self.part_size) {
            problems.push(format!(
                "--part-size {} is outside S3's limits; use 5MiB to 5GiB",
                self.part_size
            ));
        }
        // A writer needs one part being filled and one being sent.
        if self.memory_limit < 2 * self.part_size {
            problems.push(format!(
                "--memory-limit {} is less than two parts of {} bytes; raise it or lower --part-size",
                self.memory_limit, self.part_size
            ));
        }
        if self.upload_concurrency == 0 {
            problems.push("upload concurrency must be at least 1".to_owned());
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(Error::Config(problems.join("; "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_reports_every_problem() {
        let bad = MountConfig::default()
            .with_max_threads(0)
            .with_part_size(1024)
            .with_memory_limit(1);
        let text = bad
            .validate()
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string());
        assert!(text.contains("--max-threads"), "{text}");
        assert!(text.contains("--part-size"), "{text}");
        assert!(text.contains("--memory-limit"), "{text}");
        assert!(MountConfig::default().validate().is_ok());
    }
}
