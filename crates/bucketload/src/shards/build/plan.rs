//! The sharding plan: which samples go into which shard, decided before anything is written.
//!
//! The plan is a pure function of the source listing (keys and sizes) and the options, so every
//! `--part` of a run and every resumed run computes the same one; its digest (SHA-256 of a
//! canonical encoding, 16 hex digits) is recorded in the run file and the manifest so a
//! mismatch is detected instead of mixing shards of two plans.

use std::collections::BTreeSet;
use std::ops::Range;

use bucketload_format::{
    BLOCK, DEFAULT_MODE, DEFAULT_MTIME, PartSpec, class_of_key, encode_header, split_key,
};
use bucketload_store::ETag;
use sha2::{Digest, Sha256};

use super::table::{ObjectTable, TableBuilder};
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
///
/// Samples are held in an [`ObjectTable`] (a few tens of bytes an object) with the first
/// object of each sample (4 bytes a sample) and, when shuffled, the shuffled order (4 more);
/// [`Plan::sample`] decodes one. Everything else is per shard.
#[derive(Debug)]
pub struct Plan {
    objects: ObjectTable,
    /// First object of every sample, then the number of objects.
    starts: Vec<u32>,
    /// The sample at each position, when shuffled.
    order: Option<Vec<u32>>,
    /// Source objects and their bytes in each shard.
    sources: Vec<(u64, u64)>,
    /// Sample ranges (positions) of each shard, in shard order.
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

    /// Samples in the plan.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Whether the plan has no samples (never: an empty source is refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample at `position` (in shard order), decoded.
    pub fn sample(&self, position: usize) -> PlannedSample {
        let index = self
            .order
            .as_ref()
            .map_or(position, |o| o[position] as usize);
        let objects = self.starts[index] as usize..self.starts[index + 1] as usize;
        let members = self.objects.get(objects);
        let key = split_key(&members[0].key).0.to_owned();
        let class = class_index(&self.classes, &key);
        PlannedSample {
            key,
            members,
            class,
        }
    }

    /// The samples at `positions`, decoded one at a time.
    pub fn samples(&self, positions: Range<usize>) -> impl Iterator<Item = PlannedSample> + '_ {
        positions.map(|p| self.sample(p))
    }

    /// Source objects in shard `i`, and their bytes.
    pub fn shard_sources(&self, i: usize) -> (u64, u64) {
        self.sources[i]
    }

    /// Bytes the plan holds (tables, not the shards' ranges): what a sample costs.
    pub fn heap_bytes(&self) -> usize {
        let order = self.order.as_ref().map_or(0, Vec::capacity);
        self.objects.heap_bytes() + (self.starts.capacity() + order) * 4
    }
}

/// The class index of the sample `key` among `classes` (none without labels).
fn class_index(classes: &[String], key: &str) -> Option<u32> {
    if classes.is_empty() {
        return None;
    }
    let folder = class_of_key(key)?;
    let index = classes.binary_search_by(|c| c.as_str().cmp(folder)).ok()?;
    Some(u32::try_from(index).unwrap_or(u32::MAX))
}

/// Gathers the source's objects, in any order, into a [`Plan`].
#[derive(Debug, Default)]
pub struct PlanBuilder {
    table: TableBuilder,
    objects: u64,
}

impl PlanBuilder {
    /// An empty builder.
    pub fn new() -> PlanBuilder {
        PlanBuilder::default()
    }

    /// Adds one source object.
    pub fn push(&mut self, object: SourceObject) {
        self.objects += 1;
        self.table.push(object);
    }

    /// Objects added.
    pub fn objects(&self) -> u64 {
        self.objects
    }

    /// Makes the plan.
    pub fn finish(self, options: &ShardOptions) -> Result<Plan> {
        if self.objects == 0 {
            return Err(Error::invalid_input(
                "the source holds no objects; nothing to shard",
            ));
        }
        if self.objects >= u64::from(u32::MAX) {
            return Err(Error::invalid_input(format!(
                "the source holds {} objects; a sharding run plans at most {} (split the \
                 source into prefixes and shard each)",
                self.objects,
                u32::MAX - 1
            )));
        }
        let objects = self.table.finish();
        let (starts, labels) = group(&objects);
        let classes = labels.classes(options.label_from)?;
        let order = options.seed.map(|seed| shuffle(starts.len() - 1, seed));
        let mut plan = Plan {
            objects,
            starts,
            order,
            sources: Vec::new(),
            shards: Vec::new(),
            shard_bytes: Vec::new(),
            classes,
            digest: String::new(),
        };
        cut(&mut plan, options.cut)?;
        plan.digest = digest(&plan, options);
        Ok(plan)
    }
}

/// Makes the plan for `objects` (any order; sorted here).
pub fn make_plan(
    objects: impl IntoIterator<Item = SourceObject>,
    options: &ShardOptions,
) -> Result<Plan> {
    let mut builder = PlanBuilder::new();
    objects.into_iter().for_each(|o| builder.push(o));
    builder.finish(options)
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

/// What one pass over the samples found about labels.
#[derive(Debug, Default)]
struct Labels {
    /// Folder names of the samples.
    folders: BTreeSet<String>,
    /// Every sample sits in a folder and none has a label member.
    all_foldered_unlabelled: bool,
    /// The first sample that folder labels cannot label, and why.
    problem: Option<Error>,
}

impl Labels {
    /// Looks at one sample's key and members.
    fn add(&mut self, key: &str, members: &[String]) {
        let labelled = members.iter().find(|m| split_key(m).1 == LABEL_EXT);
        let folder = class_of_key(key);
        self.all_foldered_unlabelled &= folder.is_some() && labelled.is_none();
        if let Some(folder) = folder
            && !self.folders.contains(folder)
        {
            self.folders.insert(folder.to_owned());
        }
        if self.problem.is_some() {
            return;
        }
        self.problem = match (folder, labelled) {
            (None, _) => Some(Error::invalid_input(format!(
                "{:?} is not in a class folder, so {} \"folder\" cannot label it; \
                 move it into one or set {} to \"none\"",
                members[0],
                Setting::LabelFrom,
                Setting::LabelFrom
            ))),
            (Some(_), Some(m)) => Some(Error::invalid_input(format!(
                "{m:?} already is a label member; set {} to \"none\" to keep the source's labels",
                Setting::LabelFrom
            ))),
            _ => None,
        };
    }

    /// The sorted class names `policy` gives, or why it cannot label the samples.
    fn classes(self, policy: LabelFrom) -> Result<Vec<String>> {
        let use_folders = match policy {
            LabelFrom::None => false,
            LabelFrom::Folder => match self.problem {
                Some(problem) => return Err(problem),
                None => true,
            },
            LabelFrom::Auto => self.all_foldered_unlabelled,
        };
        Ok(match use_folders {
            true => self.folders.into_iter().collect(),
            false => Vec::new(),
        })
    }
}

/// Groups the table's objects by WebDataset key (they are sorted by it): the first object of
/// every sample, then the number of objects; and what labels the samples can take.
fn group(objects: &ObjectTable) -> (Vec<u32>, Labels) {
    let mut starts = Vec::new();
    let mut labels = Labels {
        all_foldered_unlabelled: true,
        ..Labels::default()
    };
    let (mut key, mut members) = (String::new(), Vec::<String>::new());
    for (i, object) in objects.iter().enumerate() {
        let sample = split_key(&object.key).0;
        if members.is_empty() || sample != key {
            if !members.is_empty() {
                labels.add(&key, &members);
            }
            (key, members) = (sample.to_owned(), Vec::new());
            // The builder refuses u32::MAX objects or more.
            starts.push(i as u32);
        }
        members.push(object.key);
    }
    labels.add(&key, &members);
    starts.push(objects.len() as u32);
    (starts, labels)
}

/// Fisher–Yates driven by the source's SplitMix64 seeded with `seed` (the same generator and
/// shuffle as `bucketload::source`'s small permutations): the same seed gives the same order in
/// every version of bucketload.
fn shuffle(samples: usize, seed: u64) -> Vec<u32> {
    // The builder refuses u32::MAX objects or more, so samples too.
    let mut order: Vec<u32> = (0..samples as u32).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..samples).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// Cuts the plan's samples into shards: their ranges, planned sizes and source objects.
fn cut(plan: &mut Plan, how: Cut) -> Result<()> {
    let end_blocks = 2 * BLOCK as u64;
    let (mut start, mut bytes, mut sources) = (0, end_blocks, (0, 0));
    let (mut shards, mut sizes, mut objects) = (Vec::new(), Vec::new(), Vec::new());
    for (i, sample) in plan.samples(0..plan.len()).enumerate() {
        let need = sample.tar_bytes()?;
        let full = match how {
            Cut::Samples(n) => (i - start) as u64 >= n,
            Cut::Bytes(limit) => {
                if need + end_blocks > limit {
                    return Err(too_large(&sample, need + end_blocks, limit));
                }
                bytes + need > limit
            }
        };
        if full && i > start {
            shards.push(start..i);
            sizes.push(bytes);
            objects.push(sources);
            (start, bytes, sources) = (i, end_blocks, (0, 0));
        }
        bytes += need;
        sources.0 += sample.members.len() as u64;
        sources.1 += sample.members.iter().map(|m| m.size).sum::<u64>();
    }
    shards.push(start..plan.len());
    sizes.push(bytes);
    objects.push(sources);
    (plan.shards, plan.shard_bytes, plan.sources) = (shards, sizes, objects);
    Ok(())
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
fn digest(plan: &Plan, options: &ShardOptions) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"bucketload shard plan v1");
    field(format!("{:?} {:?}", options.cut, options.seed).as_bytes());
    for class in &plan.classes {
        field(class.as_bytes());
    }
    for shard in &plan.shards {
        field(format!("shard {}..{}", shard.start, shard.end).as_bytes());
    }
    for sample in plan.samples(0..plan.len()) {
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
        let keys: Vec<_> = plan.samples(0..plan.len()).map(|s| s.key).collect();
        assert_eq!(keys, ["a/1", "b/1", "b/2"]);
        assert_eq!(plan.sample(0).members.len(), 2);
        assert_eq!(plan.classes, ["a", "b"]);
        let classes: Vec<_> = plan.samples(0..plan.len()).map(|s| s.class).collect();
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
        let order = |p: &Plan| {
            p.samples(0..p.len())
                .map(|s| s.key.clone())
                .collect::<Vec<_>>()
        };
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
        assert!(auto.classes.is_empty() && auto.samples(0..auto.len()).all(|s| s.class.is_none()));
        let labelled = objects(&[("a/1.jpg", 1), ("a/1.cls", 1)]);
        let err = make_plan(labelled.clone(), &o).unwrap_err().to_string();
        assert!(err.contains("a/1.cls"), "{err}");
        let kept = make_plan(labelled, &options(Cut::Samples(5))).unwrap();
        assert!(kept.classes.is_empty() && kept.sample(0).members.len() == 2);
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

    /// Plans made before the plan was held compactly: same samples, shards and digests, so a
    /// run started by an earlier version resumes.
    #[test]
    fn plans_and_digests_are_those_of_earlier_versions() {
        let objs = objects(&[
            ("b/2.jpg", 10),
            ("a/1.json", 5),
            ("a/1.jpg", 10),
            ("a/1-b.jpg", 7),
            ("a/1.x/y.jpg", 3),
            ("a/1.txt", 4),
            ("b/1.jpg", 10),
            ("c/0.jpg", 1 << 12),
        ]);
        let sorted = [
            "a/1=a/1.jpg+a/1.json+a/1.txt:Some(1)",
            "a/1-b=a/1-b.jpg:Some(1)",
            "a/1.x/y=a/1.x/y.jpg:Some(0)",
            "b/1=b/1.jpg:Some(2)",
            "b/2=b/2.jpg:Some(2)",
            "c/0=c/0.jpg:Some(3)",
        ];
        let shuffled = [5, 4, 1, 3, 0, 2].map(|i| sorted[i]);
        let cases = [
            (
                Cut::Samples(2),
                None,
                "dcbc4a53e8cd3712",
                vec![0..2, 2..4, 4..6],
                vec![7168, 5120, 8704],
                sorted,
            ),
            (
                Cut::Samples(3),
                Some(7),
                "3f7b7c9ce90ee1c0",
                vec![0..3, 3..6],
                vec![10752, 9216],
                shuffled,
            ),
            (
                Cut::Bytes(8192),
                None,
                "8339a5506072bb5e",
                vec![0..2, 2..5, 5..6],
                vec![7168, 7168, 6656],
                sorted,
            ),
        ];
        for (cut, seed, digest, shards, bytes, order) in cases {
            let o = ShardOptions::builder()
                .with_cut(cut)
                .with_seed(seed)
                .build()
                .unwrap();
            // Listed in two orders: the plan does not depend on it.
            for objs in [objs.clone(), objs.iter().rev().cloned().collect()] {
                let plan = make_plan(objs, &o).unwrap();
                let got: Vec<String> = plan
                    .samples(0..plan.len())
                    .map(|s| {
                        let m: Vec<&str> = s.members.iter().map(|m| m.key.as_str()).collect();
                        format!("{}={}:{:?}", s.key, m.join("+"), s.class)
                    })
                    .collect();
                assert_eq!(got, order, "{cut:?} {seed:?}");
                assert_eq!(plan.shards, shards);
                assert_eq!(plan.shard_bytes, bytes);
                assert_eq!(plan.digest, digest, "{cut:?} {seed:?}");
            }
        }
    }

    #[test]
    fn a_plan_keeps_at_most_64_bytes_a_sample() {
        let objs = (0..200_000u64).map(|i| SourceObject {
            key: format!("class_{:04}/sample_{i:08}.jpg", i % 1000),
            size: 645,
            etag: Some(ETag::parse(&format!(
                "{:032x}",
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ))),
            crc32c: None,
        });
        let o = ShardOptions::builder().with_seed(Some(1)).build().unwrap();
        let plan = make_plan(objs, &o).unwrap();
        let per_sample = plan.heap_bytes() / plan.len();
        assert!(per_sample <= 64, "{per_sample} bytes a sample");
    }
}
