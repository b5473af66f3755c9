//! The engine's vocabulary for the Python package: sizes and checkpoint URIs read in Python
//! exactly as the CLI and the engine read them.

use bucketload::ErrorKind;
use pyo3::prelude::*;

use crate::errors;

/// Bytes of a size: an int, or text such as `"20GiB"`, `"256MB"` or `"1.5G"` (`G`/`GB` =
/// 10⁹, `GiB` = 2³⁰), as `--cache-size` reads it. Raises `ConfigError` (a `ValueError`).
#[pyfunction]
pub fn parse_size(text: &str) -> PyResult<u64> {
    bucketload_store::parse_size(text).map_err(errors::store)
}

/// `(prefix, name)` of a checkpoint URI, so that `prefix + "/" + name` is the URI again and
/// the key is the URI's byte for byte (`s3://b/a//x.pt` → `("s3://b/a", "/x.pt")`). Raises
/// `ConfigError` when the URI names a bucket or the root.
#[pyfunction]
pub fn split_uri(uri: &str) -> PyResult<(String, String)> {
    let (prefix, name) = bucketload::checkpoint::split_uri(uri);
    if name.is_empty() {
        return Err(errors::raise(
            ErrorKind::InvalidInput,
            format!("{uri:?} names no object; write e.g. s3://bucket/checkpoints/epoch-1.pt"),
        ));
    }
    Ok((prefix.to_owned(), name.to_owned()))
}
