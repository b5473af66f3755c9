//! What the indexes of a dataset's shards add up to: samples per shard, member bytes per sample,
//! classes (the folders of the sample keys), member extensions, the shards without an index, and
//! where the JPEG members lie, for the dataset tools' `stats` to describe a shard dataset.

use std::collections::BTreeMap;

use bucketload_format::{ShardIndex, class_of_key};
use bucketload_store::object_store::path::Path;

use super::indexes::{ShardSamples, sample_bytes};
use crate::base::Location;

/// What the indexes of a dataset's shards add up to.
#[derive(Debug, Default)]
pub(crate) struct IndexTally {
    /// Samples of each indexed shard.
    pub(crate) samples: Vec<u64>,
    /// Member data bytes of each sample.
    pub(crate) sample_bytes: Vec<u64>,
    pub(crate) classes: BTreeMap<String, u64>,
    pub(crate) extensions: BTreeMap<String, u64>,
    /// Full URIs of the shards without an index.
    pub(crate) unindexed: Vec<String>,
    /// The JPEG members of the indexed shards, in shard order.
    pub(crate) images: Vec<ImageMember>,
}

/// A JPEG member of a shard: `size` bytes at `offset` in the shard `shard`; `name` is how
/// reports name it.
#[derive(Debug, Clone)]
pub(crate) struct ImageMember {
    pub(crate) shard: Path,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) name: String,
}

impl IndexTally {
    pub(crate) fn of(location: &Location, shards: &[ShardSamples]) -> IndexTally {
        let mut tally = IndexTally::default();
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
        self.images.extend(image_members(location, key, index));
    }
}

/// The JPEG members of the shard `key`, in shard order.
pub(crate) fn image_members(
    location: &Location,
    key: &Path,
    index: &ShardIndex,
) -> Vec<ImageMember> {
    let uri = location.uri_of(key);
    index
        .samples
        .iter()
        .flat_map(|sample| sample.members.iter().map(move |m| (sample, m)))
        .filter(|(_, m)| is_jpeg(&m.ext))
        .map(|(sample, m)| ImageMember {
            shard: key.clone(),
            offset: m.data_offset,
            size: m.size,
            name: format!("{uri} member {}.{}", sample.key, m.ext),
        })
        .collect()
}

/// Whether a key (`a/1.jpg`) or a member extension (`jpg`) names a JPEG.
pub(crate) fn is_jpeg(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit('.').next().unwrap_or_default();
    ext == "jpg" || ext == "jpeg"
}
