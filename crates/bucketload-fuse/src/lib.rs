//! The bucket as a file system: `bucketload mount URI DIR`.
//!
//! Two layers, so that the semantics are tested without a kernel:
//!
//! - [`Fs`] — the file system over a [`Store`](bucketload_store::Store): inodes, listings
//!   cached for the metadata TTL (or served by the dataset manifest), reads through the
//!   engine's prefetcher and disk cache ([`bucketload::io`]), writes as uploads completed on
//!   close (a file of at most one part held whole in memory until then, so editors can
//!   rewrite it in place), rename by copy and delete, and a memory budget shared by every
//!   open handle. Every
//!   operation is an `async fn` whose [`Error`] knows its errno.
//! - [`fuse`] — the thin adapter from the kernel's requests ([`fuser`]) to [`Fs`], and
//!   [`fuse::mount`].
//!
//! ```no_run
//! use bucketload_fuse::{Fs, MountConfig};
//! use bucketload_store::{Store, StoreConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Runtime::new()?;
//! let store = Store::open("s3://bucket/train", &StoreConfig::from_env())?;
//! let fs = runtime.block_on(Fs::new(store, MountConfig::default().with_read_only(true)))?;
//! let mounted = bucketload_fuse::fuse::mount(fs, "/mnt/train".as_ref(), runtime.handle().clone())?;
//! mounted.run()?; // until `umount /mnt/train`
//! # Ok(())
//! # }
//! ```
//!
//! What a program sees (and every errno) is written down in `docs/SEMANTICS.md`.

mod config;
mod error;
mod fs;
pub mod fuse;
mod memory;
mod process;
mod read;
mod tree;
mod write;

pub use config::{
    DEFAULT_MAX_THREADS, DEFAULT_MEMORY_LIMIT, DEFAULT_MEMORY_WAIT, DEFAULT_METADATA_TTL,
    DEFAULT_PART_SIZE, DEFAULT_UPLOAD_CONCURRENCY, INDEFINITE, MountConfig,
};
pub use error::{Error, Result, errno};
pub use fs::{DirEntry, Fs, OpenMode};
pub use tree::{Kind, ROOT, Stat};
