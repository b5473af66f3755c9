//! Describes a dataset: counts, per-class counts, size percentiles, image dimensions of a sample,
//! and the request cost of reading it once.
//!
//! One recursive listing gives the keys and sizes. The dimensions come from the JPEG frame header
//! of a deterministic sample of images (evenly spaced in key order), each read with one ranged GET
//! of at most 64 KiB; the sample's GETs run concurrently.

use std::collections::BTreeMap;

use bucketload_store::PriceTable;
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use futures::{StreamExt, TryStreamExt};

use super::jpeg::parse_header;
use super::list::{Entry, list};
use super::{Location, Progress};
use crate::error::Result;

/// Bytes fetched per sampled image: enough for the frame header even behind an EXIF thumbnail.
const HEADER_BYTES: u64 = 64 * 1024;
/// S3 returns at most 1,000 keys per LIST request.
const KEYS_PER_LIST: u64 = 1000;

/// Options of [`stats`].
#[derive(Debug, Clone)]
pub struct StatsOptions {
    sample: usize,
    concurrency: usize,
    prices: PriceTable,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            sample: 32,
            concurrency: 32,
            prices: PriceTable::default(),
        }
    }
}

impl StatsOptions {
    /// Images whose header is read (default 32; 0 skips the dimensions).
    pub fn with_sample(mut self, n: usize) -> Self {
        self.sample = n;
        self
    }

    /// Header GETs in flight (default 32).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Prices of requests and transfer (default: S3 Standard in us-east-1, read in-region).
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }
}

/// Size percentiles in bytes (nearest rank).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    /// Smallest.
    pub p0: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// Dimensions found in the sampled images.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SampledImages {
    /// Images whose header was read.
    pub sampled: usize,
    /// Count per `WIDTHxHEIGHT`.
    pub dimensions: BTreeMap<String, usize>,
    /// Images whose header could not be read, with the reason.
    pub unreadable: Vec<String>,
}

/// Requests and dollars of one pass over the dataset.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CostEstimate {
    /// LIST requests (one per 1,000 keys).
    pub list_requests: u64,
    /// GET requests (one per object).
    pub get_requests: u64,
    /// Price of the requests in USD.
    pub requests_usd: f64,
    /// Price of the transfer in USD (0 when read in the bucket's region).
    pub transfer_usd: f64,
}

/// What [`stats`] found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DatasetStats {
    /// URI of the dataset.
    pub uri: String,
    /// Number of objects.
    pub objects: u64,
    /// Total size in bytes.
    pub bytes: u64,
    /// Objects per class (first folder below the dataset root); objects at the root are not counted.
    pub classes: BTreeMap<String, u64>,
    /// Size percentiles.
    pub sizes: Percentiles,
    /// Image dimensions of a sample.
    pub images: SampledImages,
    /// Cost of reading every object once.
    pub cost: CostEstimate,
}

/// Describes the dataset in `location`.
pub async fn stats(
    location: &Location,
    options: &StatsOptions,
    progress: &dyn Progress,
) -> Result<DatasetStats> {
    let mut objects: Vec<(Path, u64)> = Vec::new();
    let mut listing = list(location, None, true);
    while let Some(entry) = listing.try_next().await? {
        if let Entry::Object(meta) = entry {
            progress.advance(1, meta.size);
            objects.push((meta.location, meta.size));
        }
    }
    progress.finish();
    let mut out = DatasetStats {
        uri: location.to_string(),
        ..DatasetStats::default()
    };
    out.objects = objects.len() as u64;
    out.bytes = objects.iter().map(|(_, s)| s).sum();
    out.classes = class_counts(&objects);
    let mut sizes: Vec<u64> = objects.iter().map(|(_, s)| *s).collect();
    sizes.sort_unstable();
    out.sizes = percentiles(&sizes);
    out.images = sample_images(location, &objects, options).await?;
    out.cost = cost(out.objects, out.bytes, &options.prices);
    Ok(out)
}

fn class_counts(objects: &[(Path, u64)]) -> BTreeMap<String, u64> {
    let mut classes = BTreeMap::new();
    for (key, _) in objects {
        let mut parts = key.parts();
        if let (Some(first), Some(_)) = (parts.next(), parts.next()) {
            *classes.entry(first.as_ref().to_string()).or_insert(0) += 1;
        }
    }
    classes
}

/// Nearest-rank percentiles of sorted `sizes`.
fn percentiles(sorted: &[u64]) -> Percentiles {
    let rank = |q: f64| -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[i]
    };
    Percentiles {
        p0: sorted.first().copied().unwrap_or(0),
        p50: rank(0.5),
        p90: rank(0.9),
        p99: rank(0.99),
        max: sorted.last().copied().unwrap_or(0),
    }
}

/// `n` indices evenly spaced over `0..len` (all of them when `n >= len`).
fn spread(len: usize, n: usize) -> Vec<usize> {
    let n = n.min(len);
    (0..n).map(|i| i * len / n).collect()
}

fn is_jpeg(key: &Path) -> bool {
    let lower = key.as_ref().to_ascii_lowercase();
    lower.ends_with(".jpg") || lower.ends_with(".jpeg")
}

async fn sample_images(
    location: &Location,
    objects: &[(Path, u64)],
    options: &StatsOptions,
) -> Result<SampledImages> {
    let mut jpegs: Vec<&(Path, u64)> = objects.iter().filter(|(k, _)| is_jpeg(k)).collect();
    jpegs.sort_by(|a, b| a.0.cmp(&b.0));
    let chosen: Vec<&(Path, u64)> = spread(jpegs.len(), options.sample)
        .into_iter()
        .map(|i| jpegs[i])
        .collect();
    let results: Vec<Result<(String, std::result::Result<String, String>)>> =
        futures::stream::iter(chosen)
            .map(|(key, size)| read_dimensions(location, key, *size))
            .buffered(options.concurrency)
            .collect()
            .await;
    let mut images = SampledImages::default();
    for result in results {
        let (uri, dims) = result?;
        images.sampled += 1;
        match dims {
            Ok(d) => *images.dimensions.entry(d).or_insert(0) += 1,
            Err(reason) => images.unreadable.push(format!("{uri}: {reason}")),
        }
    }
    Ok(images)
}

/// Reads the header of one image: `Ok((uri, Ok("WxH")))`, or `Ok((uri, Err(reason)))` for a file
/// that is not a readable JPEG; store failures are errors.
async fn read_dimensions(
    location: &Location,
    key: &Path,
    size: u64,
) -> Result<(String, std::result::Result<String, String>)> {
    let uri = location.uri_of(key);
    if size == 0 {
        return Ok((uri, Err("empty file".to_string())));
    }
    let end = size.min(HEADER_BYTES);
    let head = location
        .store()
        .get_range(key, 0..end)
        .await
        .map_err(|e| location.error(key, e))?;
    let dims = parse_header(&head)
        .map(|i| format!("{}x{}", i.width, i.height))
        .map_err(|e| e.to_string());
    Ok((uri, dims))
}

/// LIST is priced as a write-tier request and GET as a read-tier one, as S3 does.
fn cost(objects: u64, bytes: u64, prices: &PriceTable) -> CostEstimate {
    let list_requests = objects.div_ceil(KEYS_PER_LIST).max(1);
    let requests_usd = list_requests as f64 / 1000.0 * prices.write_per_1000
        + objects as f64 / 1000.0 * prices.read_per_1000;
    let transfer_usd = if prices.in_region {
        0.0
    } else {
        bytes as f64 / 1e9 * prices.transfer_out_per_gb
    };
    CostEstimate {
        list_requests,
        get_requests: objects,
        requests_usd,
        transfer_usd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let sizes: Vec<u64> = (1..=100).collect();
        assert_eq!(
            percentiles(&sizes),
            Percentiles {
                p0: 1,
                p50: 50,
                p90: 90,
                p99: 99,
                max: 100
            }
        );
        assert_eq!(
            percentiles(&[7]),
            Percentiles {
                p0: 7,
                p50: 7,
                p90: 7,
                p99: 7,
                max: 7
            }
        );
        assert_eq!(percentiles(&[]), Percentiles::default());
    }

    #[test]
    fn sample_is_evenly_spread_and_bounded() {
        assert_eq!(spread(10, 5), vec![0, 2, 4, 6, 8]);
        assert_eq!(spread(3, 32), vec![0, 1, 2]);
        assert!(spread(0, 4).is_empty());
    }

    #[test]
    fn classes_are_first_folders() {
        let objs = vec![
            (Path::from("a/1.jpg"), 1),
            (Path::from("a/b/2.jpg"), 1),
            (Path::from("top.jpg"), 1),
        ];
        let c = class_counts(&objs);
        assert_eq!(c.len(), 1);
        assert_eq!(c["a"], 2);
    }

    #[test]
    fn cost_counts_one_list_per_thousand_keys() {
        let prices = PriceTable::default();
        let c = cost(2001, 2_000_000_000, &prices);
        assert_eq!((c.list_requests, c.get_requests), (3, 2001));
        assert!((c.requests_usd - (3.0 * 0.000005 + 2001.0 * 0.0000004)).abs() < 1e-12);
        assert_eq!(c.transfer_usd, 0.0);
        let out = PriceTable {
            in_region: false,
            ..PriceTable::default()
        };
        assert!((cost(1, 2_000_000_000, &out).transfer_usd - 0.18).abs() < 1e-9);
        assert_eq!(cost(0, 0, &prices).list_requests, 1);
    }
}
