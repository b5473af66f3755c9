//! bucketload: keeps accelerators fed from object storage.
//!
//! This crate is the engine. Stores come from [`bucketload_store::Store`]; everything here works
//! on its `ObjectStore`. Its modules form layers, each using only the ones below it:
//!
//! 1. [`base`]: a [`Location`](base::Location) (a store, the URI of its root, so that every
//!    error names its object), the [`Progress`](base::Progress) long operations report to, and
//!    listings ([`list_all`](base::list_all) lists a dataset's folders in parallel).
//!    [`source`] (which samples each rank and worker reads, in which order; resuming an epoch
//!    mid-way) and [`panics`] are pure and use nothing else either.
//! 2. [`io`]: reading objects — the prefetching range reader ([`read_range`](io::read_range)),
//!    the disk cache as readers use it ([`DiskCache`](io::DiskCache)), and the checks of what a
//!    store returned against what a dataset's manifest promises. The loader and the mount
//!    (`bucketload-fuse`) both read through it.
//! 3. [`shards`]: tar shards — index shards written by other tools, read and tally their
//!    indexes, shard a dataset, write a dataset's manifest, verify a dataset against it.
//! 4. [`dataset`]: the tools the `bucketload` CLI drives on whole datasets — generate a synthetic
//!    image dataset, describe it, copy it between stores; [`checkpoint`]: save and load training
//!    checkpoints.
//! 5. [`loader`]: a dataset as a stream of samples for this rank and worker: files, streamed
//!    shards or indexed shards, many requests in flight, an optional disk cache.
//! 6. `decode` (with the `image` feature): the loader's samples become image batches through
//!    `bucketload-image`'s pipeline, the same way for the CLI and Python.
//!
//! ```no_run
//! use bucketload::base::{Location, NoProgress};
//! use bucketload::dataset::{GenSpec, generate};
//! use bucketload_store::{Store, StoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("s3://demo/train", &StoreConfig::from_env())?;
//! let spec = GenSpec::builder().with_samples(2000).with_classes(10).with_size(100_000).build()?;
//! let report = generate(&Location::from_store(&store), &spec, &NoProgress).await?;
//! println!("{} objects, {} bytes in {:.1} s", report.objects, report.bytes, report.seconds);
//! # Ok(()) }
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod base;
pub mod checkpoint;
pub mod dataset;
#[cfg(feature = "image")]
pub mod decode;
mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod io;
pub mod loader;
pub mod panics;
mod setting;
pub mod shards;
pub mod source;

#[cfg(feature = "image")]
pub use error::image_kind;
pub use error::{BoxError, Error, ErrorKind, Hint, Result, format_kind, hints, reword};
pub use setting::Setting;
