//! The native module of bucketload's Python package, `bucketload._native`.
//!
//! Thin bindings over the Rust engine; the Python API (`python/bucketload/`) wraps them. Every
//! call that waits (a request, a batch) releases the GIL. Fork safety: the Tokio runtime and
//! every object holding connections belong to the process that created them; a forked child
//! gets a fresh runtime on first use, and an object created before the fork refuses to work
//! in the child (the Python layer reopens it there), so no thread, runtime or connection is
//! ever used across a fork.

// Python objects: their repr is Python's business, and several hold runtime handles.
#![allow(missing_debug_implementations)]

mod buffer;
mod checkpoint;
mod decoder;
mod errors;
mod loader;
mod runtime;
mod sharding;
mod store;
mod vocab;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_CACHE_SIZE", bucketload_cache::DEFAULT_CAPACITY)?;
    m.add(
        "DEFAULT_INDEX_CACHE",
        bucketload::loader::DEFAULT_INDEX_CACHE,
    )?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<store::NativeStore>()?;
    m.add_class::<loader::NativeLoader>()?;
    m.add_class::<loader::NativeEpoch>()?;
    m.add_class::<checkpoint::NativeCheckpoints>()?;
    m.add_class::<checkpoint::NativeWriter>()?;
    m.add_class::<checkpoint::NativeReader>()?;
    m.add_class::<checkpoint::NativeSaveHandle>()?;
    m.add_class::<checkpoint::NativeSnapshot>()?;
    m.add_class::<decoder::NativeDecoder>()?;
    m.add_function(wrap_pyfunction!(sharding::shard, m)?)?;
    m.add_function(wrap_pyfunction!(sharding::merge, m)?)?;
    m.add_function(wrap_pyfunction!(vocab::parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(vocab::split_uri, m)?)?;
    Ok(())
}
