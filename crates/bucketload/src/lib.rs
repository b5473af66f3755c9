//! bucketload: keeps accelerators fed from object storage.
//!
//! This crate is the engine. It holds the [`dataset`] tools that the `bucketload` CLI drives
//! (generate a synthetic image dataset, list it, describe it and copy it between stores) and the
//! [`shards`] tools (index tar shards written by other tools, write a dataset's manifest).
//! The loader's [`source`] decides which samples each rank and worker reads, in which order,
//! and resumes an epoch mid-way; the [`loader`] fetches them (files, streamed shards or indexed
//! shards, many requests in flight, an optional disk cache) as a stream of samples.
//! Stores come from [`bucketload_store::Store`]; every tool works on its `ObjectStore`.
//!
//! ```no_run
//! use bucketload::dataset::{GenSpec, Location, NoProgress, generate};
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

pub mod checkpoint;
pub mod dataset;
#[cfg(feature = "image")]
pub mod decode;
mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod loader;
pub mod panics;
pub mod shards;
pub mod source;

pub use error::{BoxError, Error, ErrorKind, Hint, Result, format_kind, hints, reword};
