//! `shard` and `merge` for the Python package: one slice of a sharding run, and the merge of
//! the slices' manifests (how `bucketload.ray.shard` fans the work out over Ray tasks).

use bucketload::base::NoProgress;
use bucketload::shards::{Cut, LabelFrom, ShardOptions, merge_parts, shard_dataset};
use bucketload_format::{ManifestFormat, PartSpec};
use bucketload_store::{Store, StoreConfig};
use pyo3::prelude::*;

use crate::errors;
use crate::runtime::runtime;
use crate::store::store_config;
use bucketload::ErrorKind;

fn json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value)
        .map_err(|e| errors::raise(ErrorKind::Other, format!("cannot encode the report: {e}")))
}

/// `manifest_format=1` (JSON) or `2` (binary).
fn manifest_format_of(version: u32) -> PyResult<ManifestFormat> {
    ManifestFormat::from_version(version).ok_or_else(|| {
        errors::raise(
            ErrorKind::InvalidInput,
            format!(
                "manifest_format={version} is not a manifest format; use 1 (JSON) or 2 (binary)"
            ),
        )
    })
}

fn open(uri: &str, endpoint: Option<String>, region: Option<String>) -> PyResult<Store> {
    open_with(uri, store_config(endpoint, region))
}

fn open_with(uri: &str, config: StoreConfig) -> PyResult<Store> {
    Store::open(uri, &config).map_err(errors::store)
}

/// Shards the one-object-per-sample dataset `src` into `dst` (slice `part` = `(i, n)` only,
/// when given); returns the report as JSON. See `bucketload shard`.
#[pyfunction]
#[pyo3(signature = (
    src, dst, *, shard_size=None, samples_per_shard=None, seed=None, label_from="auto",
    part=None, md5=false, overwrite=false, concurrency=None, endpoint=None, region=None,
    use_manifest=true, manifest_format=2,
))]
#[allow(clippy::too_many_arguments)]
pub fn shard(
    py: Python<'_>,
    src: &str,
    dst: &str,
    shard_size: Option<u64>,
    samples_per_shard: Option<u64>,
    seed: Option<u64>,
    label_from: &str,
    part: Option<(u32, u32)>,
    md5: bool,
    overwrite: bool,
    concurrency: Option<usize>,
    endpoint: Option<String>,
    region: Option<String>,
    use_manifest: bool,
    manifest_format: u32,
) -> PyResult<String> {
    let manifest_format = manifest_format_of(manifest_format)?;
    // The engine's GETs in flight, unless asked for another number; the source store allows
    // as many at once.
    let gets = concurrency.unwrap_or(bucketload::shards::DEFAULT_GETS_IN_FLIGHT);
    let cut = match (shard_size, samples_per_shard) {
        (Some(_), Some(_)) => {
            return Err(errors::raise(
                ErrorKind::InvalidInput,
                "give shard_size or samples_per_shard, not both".to_owned(),
            ));
        }
        (_, Some(n)) => Cut::Samples(n),
        (Some(bytes), None) => Cut::Bytes(bytes),
        (None, None) => Cut::Bytes(bucketload::shards::DEFAULT_SHARD_SIZE),
    };
    let label_from: LabelFrom = label_from.parse().map_err(errors::engine)?;
    let options = ShardOptions::builder()
        .with_cut(cut)
        .with_seed(seed)
        .with_label_from(label_from)
        .with_part(part.map(|(index, count)| PartSpec { index, count }))
        .with_md5(md5)
        .with_overwrite(overwrite)
        .with_gets_in_flight(gets)
        .with_source_manifest(use_manifest)
        .with_manifest_format(manifest_format)
        .build()
        .map_err(errors::engine)?;
    let rt = runtime()?;
    let _guard = rt.enter();
    let src = open_with(
        src,
        store_config(endpoint.clone(), region.clone()).with_concurrency(gets),
    )?;
    let dst = open(dst, endpoint, region)?;
    let report = py.detach(|| rt.block_on(shard_dataset(&src, &dst, &options, &NoProgress)));
    json(&report.map_err(errors::engine)?)
}

/// Stitches the manifests of every slice under `dst` into the dataset's manifest; returns
/// the report as JSON. See `bucketload merge`.
#[pyfunction]
#[pyo3(signature = (dst, *, endpoint=None, region=None, manifest_format=2))]
pub fn merge(
    py: Python<'_>,
    dst: &str,
    endpoint: Option<String>,
    region: Option<String>,
    manifest_format: u32,
) -> PyResult<String> {
    let format = manifest_format_of(manifest_format)?;
    let rt = runtime()?;
    let _guard = rt.enter();
    let dst = open(dst, endpoint, region)?;
    let report = py.detach(|| rt.block_on(merge_parts(&dst, format)));
    json(&report.map_err(errors::engine)?)
}
