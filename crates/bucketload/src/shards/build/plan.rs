//! The sharding plan: which samples go into which shard, decided before anything is written.
//!
//! The plan is a pure function of the source listing (keys and sizes) and the options, so every
//! `--part` of a run and every resumed run computes the same one; its digest (SHA-256 of a
//! canonical encoding, 16 hex digits) is recorded in the run file and the manifest so a
//! mismatch is detected instead of mixing shards of two plans.

use std::collections::BTreeMap;
use std::ops::Range;

use bucketload_format::{
    BLOCK, DEFAULT_MODE, DEFAULT_MTIME, PartSpec, class_of_key, encode_header, split_key,
};
use bucketload_store::ETag;
use sha2::{Digest, Sha256};

use super::{Cut, LabelFrom, ShardOptions};
use crate::Setting;
use crate::error::{Error, Result};
use crate::source::permute::SplitMix64;

/// Extension of the label member added to each sample (`<key>.cls`).
pub const LABEL_EXT: &str = "cls";

/// An object of the source dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceObject {
    /// Key relative to the source root; also the member name in the shard.
    pub key: String,
    /// Size in bytes from the listing.
    pub size: u64,
    /// ETag from the manifest or listing, when known: the object is checked against it.
    pub etag: Option<ETag>,
    /// CRC32C from the manifest, when recorded: the object is checked against it.
    pub crc32c: Option<u32>,
}

/// One sample: the source objects sharing a WebDataset key, and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedSample {
    /// WebDataset key (`n01/000123`).
    pub key: String,
    /// Source objects in member order (sorted by key).
    pub members: Vec<SourceObject>,
    /// Class index, when labelled.
    pub class: Option<u32>,
}

impl PlannedSample {
    /// Name of the label member (`<key>.cls`).
    pub fn label_name(&self) -> String {
        format!("{}.{LABEL_EXT}", self.key)
    }

    /// The label member's bytes (class index in ASCII decimal), when labelled.
    pub fn label_bytes(&self) -> Option<Vec<u8>> {
        self.class.map(|c| c.to_string().into_bytes())
    }

    /// Bytes this sample takes in a shard (headers, data, padding) for `sizes` of its members.
    fn tar_bytes(&self) -> Result<u64> {
        let mut total = 0;
        for m in &self.members {
            total += member_bytes(&m.key, m.size)?;
        }
        if let Some(label) = self.label_bytes() {
            total += member_bytes(&self.label_name(), label.len() as u64)?;
        }
        Ok(total)
    }
}

/// The whole plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Samples in shard order.
    pub samples: Vec<PlannedSample>,
    /// Sample ranges of each shard, in shard order.
    pub shards: Vec<Range<usize>>,
    /// Planned size in bytes of each shard (from the listed sizes).
    pub shard_bytes: Vec<u64>,
    /// Class names (sorted; the class index is the position), empty without labels.
    pub classes: Vec<String>,
    /// Digest of the plan: 16 hex digits.
    pub digest: String,
}

impl Plan {
    /// Name of shard `i`: `shard-000007.tar` (at least six digits).
    pub fn shard_name(&self, i: usize) -> String {
        let width = self.shards.len().saturating_sub(1).to_string().len().max(6);
        format!("shard-{i:0width$}.tar")
    }

    /// The shards of slice `part` (contiguous, every slice within one shard of the others).
    pub fn part_shards(&self, part: Option<PartSpec>) -> Range<usize> {
        let n = self.shards.len();
        match part {
            None => 0..n,
            Some(p) => {
                let (i, count) = (p.index as usize, p.count.max(1) as usize);
                (i * n / count)..((i + 1) * n / count)
            }
        }
    }
}

/// Bytes a member of `size` bytes named `name` takes: header(s) plus data padded to 512.
fn member_bytes(name: &str, size: u64) -> Result<u64> {
    let header = encode_header(name, size, DEFAULT_MODE, DEFAULT_MTIME).map_err(|reason| {
        Error::invalid_input(format!(
            "{name:?} cannot be stored in a tar shard: {reason}; rename or leave it out"
        ))
    })?;
    Ok(header.len() as u64 + size.div_ceil(BLOCK as u64) * BLOCK as u64)
}

/// Makes the plan for `objects` (any order; sorted here).
pub fn make_plan(mut objects: Vec<SourceObject>, options: &ShardOptions) -> Result<Plan> {
    if objects.is_empty() {
        return Err(Error::invalid_input(
            "the source holds no objects; nothing to shard",
        ));
    }
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    let mut samples = group(objects);
    let classes = label(&mut samples, options.label_from)?;
    if let Some(seed) = options.seed {
        shuffle(&mut samples, seed);
    }
    let (shards, shard_bytes) = cut(&samples, options.cut)?;
    let digest = digest(&samples, &shards, &classes, options);
    Ok(Plan {
        samples,
        shards,
        shard_bytes,
        classes,
        digest,
    })
}

/// Groups objects by WebDataset key; samples come out sorted by key, members by object key.
fn group(objects: Vec<SourceObject>) -> Vec<PlannedSample> {
    let mut by_key: BTreeMap<String, Vec<SourceObject>> = BTreeMap::new();
    for object in objects {
        let (key, _) = split_key(&object.key);
        by_key.entry(key.to_owned()).or_default().push(object);
    }
    by_key
        .into_iter()
        .map(|(key, members)| PlannedSample {
            key,
            members,
            class: None,
        })
        .collect()
}

/// Assigns class indexes from folder names; returns the sorted class names.
fn label(samples: &mut [PlannedSample], policy: LabelFrom) -> Result<Vec<String>> {
    let folder_of = |s: &PlannedSample| class_of_key(&s.key).map(str::to_owned);
    let labelled = |s: &PlannedSample| s.members.iter().any(|m| split_key(&m.key).1 == LABEL_EXT);
    let use_folders = match policy {
        LabelFrom::None => false,
        LabelFrom::Folder => true,
        LabelFrom::Auto => samples
            .iter()
            .all(|s| folder_of(s).is_some() && !labelled(s)),
    };
    if !use_folders {
        return Ok(Vec::new());
    }
    let mut classes: Vec<String> = samples.iter().filter_map(folder_of).collect();
    classes.sort();
    classes.dedup();
    for sample in samples.iter_mut() {
        let Some(folder) = folder_of(sample) else {
            return Err(Error::invalid_input(format!(
                "{:?} is not in a class folder, so {} \"folder\" cannot label it; \
                 move it into one or set {} to \"none\"",
                sample.members[0].key,
                Setting::LabelFrom,
                Setting::LabelFrom
            )));
        };
        if let Some(m) = sample
            .members
            .iter()
            .find(|m| split_key(&m.key).1 == LABEL_EXT)
        {
            return Err(Error::invalid_input(format!(
                "{:?} already is a label member; set {} to \"none\" to keep the source's labels",
                m.key,
                Setting::LabelFrom
            )));
        }
        let index = classes.binary_search(&folder).unwrap_or_default();
        sample.class = Some(u32::try_from(index).unwrap_or(u32::MAX));
    }
    Ok(classes)
}

/// Fisher–Yates driven by the source's SplitMix64 seeded with `seed` (the same generator and
/// shuffle as `bucketload::source`'s small permutations): the same seed gives the same order in
/// every version of bucketload.
fn shuffle(samples: &mut [PlannedSample], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..samples.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        samples.swap(i, j);
    }
}

/// Cuts samples into shards; returns the ranges and planned shard sizes.
fn cut(samples: &[PlannedSample], how: Cut) -> Result<(Vec<Range<usize>>, Vec<u64>)> {
    let end_blocks = 2 * BLOCK as u64;
    let (mut shards, mut sizes) = (Vec::new(), Vec::new());
    let (mut start, mut bytes) = (0, end_blocks);
    for (i, sample) in samples.iter().enumerate() {
        let need = sample.tar_bytes()?;
        let full = match how {
            Cut::Samples(n) => (i - start) as u64 >= n,
            Cut::Bytes(limit) => {
                if need + end_blocks > limit {
                    return Err(too_large(sample, need + end_blocks, limit));
                }
                bytes + need > limit
            }
        };
        if full && i > start {
            shards.push(start..i);
            sizes.push(bytes);
            (start, bytes) = (i, end_blocks);
        }
        bytes += need;
    }
    shards.push(start..samples.len());
    sizes.push(bytes);
    Ok((shards, sizes))
}

fn too_large(sample: &PlannedSample, need: u64, limit: u64) -> Error {
    let biggest = sample.members.iter().max_by_key(|m| m.size);
    let name = biggest.map_or(sample.key.as_str(), |m| m.key.as_str());
    let (size, count) = (Setting::ShardSize, Setting::SamplesPerShard);
    Error::invalid_input(format!(
        "sample {:?} ({name:?} and its other members) needs a {need}-byte shard but {size} \
         is {limit}; raise {size} to at least {need}, or cut by count with {count}",
        sample.key
    ))
}

/// SHA-256 over a canonical encoding of everything that decides the shards' bytes.
fn digest(
    samples: &[PlannedSample],
    shards: &[Range<usize>],
    classes: &[String],
    options: &ShardOptions,
) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"bucketload shard plan v1");
    field(format!("{:?} {:?}", options.cut, options.seed).as_bytes());
    for class in classes {
        field(class.as_bytes());
    }
    for shard in shards {
        field(format!("shard {}..{}", shard.start, shard.end).as_bytes());
    }
    for sample in samples {
        field(format!("sample {} {:?}", sample.key, sample.class).as_bytes());
        for m in &sample.members {
            field(m.key.as_bytes());
            field(&m.size.to_le_bytes());
        }
    }
    hex::encode(&h.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(keys: &[(&str, u64)]) -> Vec<SourceObject> {
        keys.iter()
            .map(|(k, s)| SourceObject {
                key: (*k).to_owned(),
                size: *s,
                etag: None,
                crc32c: None,
            })
            .collect()
    }

    fn options(cut: Cut) -> ShardOptions {
        ShardOptions::builder().with_cut(cut).build().unwrap()
    }

    #[test]
    fn members_sharing_a_key_form_one_labelled_sample() {
        let objs = objects(&[
            ("b/2.jpg", 10),
            ("a/1.json", 5),
            ("a/1.jpg", 10),
            ("b/1.jpg", 10),
        ]);
        let plan = make_plan(objs, &options(Cut::Samples(2))).unwrap();
        let keys: Vec<_> = plan.samples.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["a/1", "b/1", "b/2"]);
        assert_eq!(plan.samples[0].members.len(), 2);
        assert_eq!(plan.classes, ["a", "b"]);
        let classes: Vec<_> = plan.samples.iter().map(|s| s.class).collect();
        assert_eq!(classes, [Some(0), Some(1), Some(1)]);
        assert_eq!(plan.shards, vec![0..2, 2..3]);
        assert_eq!(plan.shard_name(1), "shard-000001.tar");
    }

    #[test]
    fn byte_cut_counts_headers_padding_and_end_blocks() {
        // Each sample: 512 header + 512 data + label (512 + 512) = 2048; end blocks 1024.
        let objs = objects(&[("a/1.jpg", 100), ("a/2.jpg", 512), ("a/3.jpg", 1)]);
        let plan = make_plan(objs, &options(Cut::Bytes(1024 + 2 * 2048))).unwrap();
        assert_eq!(plan.shards, vec![0..2, 2..3]);
        assert_eq!(plan.shard_bytes, vec![1024 + 2 * 2048, 1024 + 2048]);
    }

    #[test]
    fn a_sample_larger_than_the_shard_size_is_refused_by_name() {
        let objs = objects(&[("a/1.jpg", 10), ("a/big.jpg", 1 << 20)]);
        let err = make_plan(objs, &options(Cut::Bytes(64 << 10)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a/big.jpg") && err.contains("`shard_size`"),
            "{err}"
        );
    }

    #[test]
    fn shuffles_are_seeded_and_change_the_digest() {
        let objs: Vec<_> = (0..50)
            .map(|i| SourceObject {
                key: format!("c/{i:03}.jpg"),
                size: 1,
                etag: None,
                crc32c: None,
            })
            .collect();
        let seeded = |seed| {
            let o = ShardOptions::builder()
                .with_cut(Cut::Samples(10))
                .with_seed(Some(seed))
                .build()
                .unwrap();
            make_plan(objs.clone(), &o).unwrap()
        };
        let (a, b, c) = (seeded(1), seeded(1), seeded(2));
        let order = |p: &Plan| p.samples.iter().map(|s| s.key.clone()).collect::<Vec<_>>();
        assert_eq!(order(&a), order(&b));
        assert_ne!(order(&a), order(&c));
        assert_eq!(a.digest, b.digest);
        assert_ne!(a.digest, c.digest);
        let unshuffled = make_plan(objs, &options(Cut::Samples(10))).unwrap();
        assert_ne!(order(&a), order(&unshuffled));
        let mut sorted = order(&a);
        sorted.sort();
        assert_eq!(sorted, order(&unshuffled));
    }

    #[test]
    fn folder_labels_need_folders_and_no_existing_label() {
        let top = objects(&[("a/1.jpg", 1), ("top.jpg", 1)]);
        let o = ShardOptions::builder()
            .with_label_from(LabelFrom::Folder)
            .build()
            .unwrap();
        let err = make_plan(top.clone(), &o).unwrap_err().to_string();
        assert!(err.contains("top.jpg") && err.contains("`label_from` to \"none\""));
        let auto = make_plan(top, &options(Cut::Samples(5))).unwrap();
        assert!(auto.classes.is_empty() && auto.samples.iter().all(|s| s.class.is_none()));
        let labelled = objects(&[("a/1.jpg", 1), ("a/1.cls", 1)]);
        let err = make_plan(labelled.clone(), &o).unwrap_err().to_string();
        assert!(err.contains("a/1.cls"), "{err}");
        let kept = make_plan(labelled, &options(Cut::Samples(5))).unwrap();
        assert!(kept.classes.is_empty() && kept.samples[0].members.len() == 2);
    }

    #[test]
    fn parts_split_shards_contiguously_and_completely() {
        let objs: Vec<_> = (0..10)
            .map(|i| SourceObject {
                key: format!("{i}.bin"),
                size: 1,
                etag: None,
                crc32c: None,
            })
            .collect();
        let plan = make_plan(objs, &options(Cut::Samples(1))).unwrap();
        let mut all = Vec::new();
        for index in 0..3 {
            all.extend(plan.part_shards(Some(PartSpec { index, count: 3 })));
        }
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}
