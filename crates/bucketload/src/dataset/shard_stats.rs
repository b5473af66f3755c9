//! [`stats`](super::stats) of a shard dataset: from its manifest (one GET) or from the `.idx` of
//! each shard (one GET each, many in flight).
//!
//! Reading a shard dataset once costs one streaming GET per shard; reading its samples in random
//! order costs one GET per index and one ranged GET per sample. Both are priced.

use std::collections::BTreeMap;

use bucketload_format::{DatasetKind, Manifest, ShardIndex, class_of_key};
use bucketload_store::object_store::path::Path;
use bucketload_store::{PriceTable, key_path};

use super::Location;
use super::indexes::{ShardSamples, read_all_indexes, read_index, sample_bytes};
use super::stats::{
    ClassesFrom, CostEstimate, DatasetStats, KEYS_PER_LIST, Probe, RandomAccessCost, ShardStats,
    StatsFrom, StatsOptions, cost, is_jpeg, manifest_classes, percentiles_of, sample_images,
};
use crate::error::Result;
use crate::shards::ShardObject;

/// Describes a shard dataset from its manifest. Images are sampled from the first shard (one
/// more GET for its index), when it has one.
pub(crate) async fn from_manifest(
    location: &Location,
    manifest: Manifest,
    options: &StatsOptions,
) -> Result<DatasetStats> {
    let mut out = DatasetStats::empty(
        location.to_string(),
        DatasetKind::Shards,
        StatsFrom::Manifest,
    );
    let bytes: Vec<u64> = manifest.shards.iter().map(|s| s.bytes).collect();
    out.objects = manifest.shards.len() as u64;
    out.samples = manifest.samples;
    out.bytes = manifest.bytes;
    out.sizes = percentiles_of(bytes);
    out.shards = Some(ShardStats {
        count: out.objects,
        samples_per_shard: percentiles_of(manifest.shards.iter().map(|s| s.samples).collect()),
        bytes_per_shard: out.sizes,
        ..ShardStats::default()
    });
    out.classes = manifest_classes(&manifest);
    out.classes_from = (!out.classes.is_empty()).then_some(ClassesFrom::Manifest);
    if let Some(first) = manifest.shards.first().filter(|_| options.sample > 0) {
        let key = key_path(&first.name);
        if let Some(index) = read_index(location, &key).await? {
            out.images =
                sample_images(location, image_probes(location, &key, &index), options).await?;
        }
    }
    let prices = &options.prices;
    out.cost = shard_cost(0, 1, out.objects, out.samples, out.bytes, prices);
    out.parameters = Some(manifest.parameters);
    Ok(out)
}

/// Describes a shard dataset without manifest from the indexes of `shards`, found in the
/// recursive listing `objects`.
pub(crate) async fn from_indexes(
    location: &Location,
    objects: &[(Path, u64)],
    shards: Vec<ShardObject>,
    options: &StatsOptions,
) -> Result<DatasetStats> {
    let mut out = DatasetStats::empty(
        location.to_string(),
        DatasetKind::Shards,
        StatsFrom::Indexes,
    );
    let read = read_all_indexes(location, shards, options.concurrency).await?;
    out.objects = read.len() as u64;
    out.bytes = read.iter().map(|s| s.size).sum();
    out.sizes = percentiles_of(read.iter().map(|s| s.size).collect());
    let tally = Tally::of(location, &read);
    out.samples = tally.samples.iter().sum();
    out.classes_from = (!tally.classes.is_empty()).then_some(ClassesFrom::KeyFolder);
    out.classes = tally.classes;
    let indexed = tally.samples.len() as u64;
    out.shards = Some(ShardStats {
        count: out.objects,
        indexes_read: indexed,
        unindexed: tally.unindexed,
        samples_per_shard: percentiles_of(tally.samples),
        bytes_per_shard: out.sizes,
        sample_bytes: (indexed > 0).then(|| percentiles_of(tally.sample_bytes)),
        extensions: tally.extensions,
    });
    out.images = sample_images(location, tally.images, options).await?;
    let list_requests = (objects.len() as u64).div_ceil(KEYS_PER_LIST).max(1);
    let prices = &options.prices;
    out.cost = shard_cost(
        list_requests,
        0,
        out.objects,
        out.samples,
        out.bytes,
        prices,
    );
    Ok(out)
}

/// What the indexes of a dataset's shards add up to.
#[derive(Debug, Default)]
struct Tally {
    /// Samples of each indexed shard.
    samples: Vec<u64>,
    /// Member data bytes of each sample.
    sample_bytes: Vec<u64>,
    classes: BTreeMap<String, u64>,
    extensions: BTreeMap<String, u64>,
    unindexed: Vec<String>,
    images: Vec<Probe>,
}

impl Tally {
    fn of(location: &Location, shards: &[ShardSamples]) -> Tally {
        let mut tally = Tally::default();
        for shard in shards {
            match &shard.index {
                Some(index) => tally.add(location, &shard.key, index),
                None => tally.unindexed.push(location.uri_of(&shard.key)),
            }
        }
        tally
    }

    fn add(&mut self, location: &Location, key: &Path, index: &ShardIndex) {
        self.samples.push(index.samples.len() as u64);
        for sample in &index.samples {
            self.sample_bytes.push(sample_bytes(sample));
            if let Some(class) = class_of_key(&sample.key) {
                *self.classes.entry(class.to_owned()).or_default() += 1;
            }
            for member in &sample.members {
                *self.extensions.entry(member.ext.clone()).or_default() += 1;
            }
        }
        self.images.extend(image_probes(location, key, index));
    }
}

/// The JPEG members of the shard `key`, in shard order, as places to read a header from.
fn image_probes(location: &Location, key: &Path, index: &ShardIndex) -> Vec<Probe> {
    let uri = location.uri_of(key);
    index
        .samples
        .iter()
        .flat_map(|sample| sample.members.iter().map(move |m| (sample, m)))
        .filter(|(_, m)| is_jpeg(&m.ext))
        .map(|(sample, m)| Probe {
            key: key.clone(),
            start: m.data_offset,
            size: m.size,
            name: format!("{uri} member {}.{}", sample.key, m.ext),
        })
        .collect()
}

/// One pass: `manifest` GETs (0 or 1) and one streaming GET per shard; and the random-access
/// alternative: the same plus one ranged GET per sample (each index is read once in place of
/// its shard).
fn shard_cost(
    list_requests: u64,
    manifest: u64,
    shards: u64,
    samples: u64,
    bytes: u64,
    prices: &PriceTable,
) -> CostEstimate {
    let mut estimate = cost(list_requests, manifest + shards, bytes, prices);
    let random = manifest + shards + samples;
    estimate.random_access = Some(RandomAccessCost {
        get_requests: random,
        requests_usd: cost(list_requests, random, bytes, prices).requests_usd,
    });
    estimate
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bucketload_format::{ShardIndexBuilder, TarWriter};
    use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, memory::InMemory};

    use super::*;
    use crate::dataset::{NoProgress, stats};

    /// A shard of `samples` (`<class>/<n>.txt` + `.cls`, data `n` bytes long) and its index.
    fn shard(samples: &[(&str, usize)]) -> (Vec<u8>, Vec<u8>) {
        let (mut tar, mut writer) = (Vec::new(), TarWriter::new("s.tar"));
        let mut index = ShardIndexBuilder::new();
        for (class, n) in samples {
            for (ext, data) in [("txt", vec![b'x'; *n]), ("cls", b"0".to_vec())] {
                let name = format!("{class}/{n:04}.{ext}");
                let at = writer.append(&mut tar, &name, &data).unwrap();
                index.add(&name, at, &data);
            }
        }
        let summary = writer.finish(&mut tar).unwrap();
        let idx = index.finish(&summary).to_bytes("s.tar.idx").unwrap();
        (tar, idx)
    }

    #[tokio::test]
    async fn indexes_give_samples_classes_and_extensions_and_name_unindexed_shards() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let shards = [
            shard(&[("a", 1), ("a", 2), ("b", 3)]),
            shard(&[("b", 4)]),
            shard(&[("a", 5), ("a", 6)]),
        ];
        for (i, (tar, idx)) in shards.iter().enumerate() {
            let key = format!("{i}.tar");
            store
                .put(&Path::from(key.as_str()), tar.clone().into())
                .await
                .unwrap();
            if i != 2 {
                let idx_key = Path::from(format!("{key}.idx"));
                store.put(&idx_key, idx.clone().into()).await.unwrap();
            }
        }
        store
            .put(&Path::from("README"), vec![1].into())
            .await
            .unwrap();
        let loc = Location::new(store, "mem://d", "memory");
        let options = StatsOptions::default();
        let s = stats(&loc, &options, &NoProgress).await.unwrap();
        assert_eq!((s.kind, s.from), (DatasetKind::Shards, StatsFrom::Indexes));
        assert_eq!((s.objects, s.samples), (3, 4));
        let want: u64 = shards.iter().map(|(t, _)| t.len() as u64).sum();
        assert_eq!(s.bytes, want);
        assert_eq!(
            s.classes,
            BTreeMap::from([("a".into(), 2), ("b".into(), 2)])
        );
        assert_eq!(s.classes_from, Some(ClassesFrom::KeyFolder));
        let sh = s.shards.unwrap();
        assert_eq!((sh.count, sh.indexes_read), (3, 2));
        assert_eq!(sh.unindexed, ["mem://d/2.tar"]);
        assert_eq!((sh.samples_per_shard.p0, sh.samples_per_shard.max), (1, 3));
        let bytes = sh.sample_bytes.unwrap();
        assert_eq!((bytes.p0, bytes.max), (2, 5));
        assert_eq!(
            sh.extensions,
            BTreeMap::from([("cls".into(), 4), ("txt".into(), 4)])
        );
        // One listing of 6 objects; 3 streaming GETs; 3 index + 4 sample GETs at random.
        assert_eq!((s.cost.list_requests, s.cost.get_requests), (1, 3));
        assert_eq!(s.cost.random_access.unwrap().get_requests, 7);
        assert_eq!(s.images.sampled, 0);
    }

    #[test]
    fn random_access_reads_every_index_and_sample() {
        let prices = PriceTable::default();
        // From a manifest: 1 + 3 GETs in a pass; 1 + 3 indexes + 30 samples at random.
        let c = shard_cost(0, 1, 3, 30, 3000, &prices);
        assert_eq!((c.list_requests, c.get_requests), (0, 4));
        assert_eq!(c.random_access.unwrap().get_requests, 34);
        // From a listing: 3 GETs in a pass; 3 indexes + 20 samples at random.
        let c = shard_cost(1, 0, 3, 20, 3000, &prices);
        assert_eq!(c.get_requests, 3);
        let random = c.random_access.unwrap();
        assert_eq!(random.get_requests, 23);
        let want = 0.000005 + 23.0 * 0.0000004;
        assert!((random.requests_usd - want).abs() < 1e-12, "{random:?}");
    }
}
