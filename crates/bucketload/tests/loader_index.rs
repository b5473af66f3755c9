//! Crafted shard indexes (a valid CRC, a layout that does not describe the shard) through the
//! indexed loader: each is an error naming the index or the shard, never a panic and never an
//! epoch that ends early without an error.
#![allow(clippy::unwrap_used)]

mod loader_support;

use bucketload::loader::{Delivery, Format, Loader};
use bucketload::source::Order;
use bucketload_format::{Hint, IndexMember, ShardIndex};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use futures::TryStreamExt;
use loader_support::{TestData, keys};

const SHARD: &str = "shard-000000.tar";
const INDEX: &str = "shard-000000.tar.idx";

async fn get(data: &TestData, key: &str) -> bytes::Bytes {
    let store = data.store("shards");
    let got = store.object_store().get(&Path::from(key)).await.unwrap();
    got.bytes().await.unwrap()
}

/// Rewrites the first shard's index through `craft`, with a valid checksum.
async fn rewrite_index(data: &TestData, craft: impl FnOnce(&mut ShardIndex)) {
    let mut index = ShardIndex::parse(INDEX, &get(data, INDEX).await).unwrap();
    craft(&mut index);
    let bytes = index.to_bytes(INDEX).unwrap();
    let store = data.store("shards");
    let put = PutPayload::from(bytes);
    store
        .object_store()
        .put(&Path::from(INDEX), put)
        .await
        .unwrap();
}

/// Opens the indexed loader and reads one epoch: the error, or the samples it delivered.
async fn read(data: &TestData, delivery: Delivery) -> Result<usize, String> {
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_order(Order::sequential())
        .with_delivery(delivery);
    let loader = Loader::open(config.build().unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let samples: Vec<_> = loader
        .epoch(0)
        .unwrap()
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    samples.iter().for_each(|s| data.check(s));
    Ok(samples.len())
}

fn member(index: &mut ShardIndex, sample: usize, member: usize) -> &mut IndexMember {
    &mut index.samples[sample].members[member]
}

/// How a crafted index is made from a good one.
type Craft = Box<dyn Fn(&mut ShardIndex)>;

/// Every crafted layout: name and how to craft it from a good index.
fn crafts() -> Vec<(&'static str, Craft)> {
    vec![
        (
            "members out of order",
            Box::new(|i| i.samples[0].members.reverse()),
        ),
        ("samples out of order", Box::new(|i| i.samples.swap(0, 1))),
        (
            "samples overlapping",
            Box::new(|i| i.samples[1] = i.samples[0].clone()),
        ),
        (
            "duplicate member",
            Box::new(|i| {
                let first = i.samples[0].members[0].clone();
                i.samples[0].members.insert(1, first);
            }),
        ),
        (
            "data offset past the end",
            Box::new(|i| {
                let end = i.shard_size;
                member(i, 5, 1).data_offset = end + 512;
            }),
        ),
        (
            "size past the end",
            Box::new(|i| member(i, 0, 0).size = i.shard_size),
        ),
        (
            "huge size",
            Box::new(|i| member(i, 0, 0).size = u64::MAX - 4),
        ),
        ("zero size", Box::new(|i| member(i, 0, 0).size = 0)),
        (
            "header after data",
            Box::new(|i| {
                let m = member(i, 0, 0);
                m.header_offset = m.data_offset - 1;
            }),
        ),
        (
            "unaligned header",
            Box::new(|i| member(i, 2, 0).header_offset += 3),
        ),
        (
            "sample without members",
            Box::new(|i| i.samples[3].members.clear()),
        ),
        (
            "larger shard",
            Box::new(|i| {
                i.shard_size += 4096;
                member(i, 5, 1).data_offset += 2048;
            }),
        ),
        ("smaller shard", Box::new(|i| i.shard_size -= 1024)),
    ]
}

#[tokio::test]
async fn a_crafted_index_is_an_error_naming_it() {
    for (name, craft) in crafts() {
        for delivery in [Delivery::Completion, Delivery::Strict] {
            let data = TestData::shards(12, 6).await;
            rewrite_index(&data, &craft).await;
            let err = match read(&data, delivery).await {
                Ok(n) => panic!("{name} ({delivery:?}): {n} samples and no error"),
                Err(e) => e,
            };
            assert!(err.contains(SHARD), "{name}: {err}");
            assert!(!err.contains("panic"), "{name}: {err}");
        }
    }
}

#[tokio::test]
async fn an_index_out_of_order_names_the_index_and_the_remedy() {
    let data = TestData::shards(12, 6).await;
    rewrite_index(&data, |i| i.samples[0].members.reverse()).await;
    let err = read(&data, Delivery::Strict).await.unwrap_err();
    assert!(err.contains(INDEX), "{err}");
    // The remedy, in the neutral words each front end replaces with its own.
    assert!(err.contains(&Hint::ReindexOrReshard.to_string()), "{err}");
}

#[tokio::test]
async fn an_index_whose_shard_size_differs_names_both_sizes() {
    let data = TestData::shards(12, 6).await;
    let size = get(&data, SHARD).await.len() as u64;
    rewrite_index(&data, |i| i.shard_size -= 512).await;
    let err = read(&data, Delivery::Strict).await.unwrap_err();
    assert!(err.contains(INDEX), "{err}");
    assert!(err.contains(&size.to_string()), "{err}");
    assert!(err.contains(&(size - 512).to_string()), "{err}");
}

#[tokio::test]
async fn a_good_index_still_reads_every_sample() {
    let data = TestData::shards(12, 6).await;
    rewrite_index(&data, |_| {}).await;
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();
    let config = data.loader("shards").with_format(Format::Indexed);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let samples: Vec<_> = loader.epoch(0).unwrap().try_collect().await.unwrap();
    samples.iter().for_each(|s| data.check(s));
    assert_eq!(keys(&samples), expected);
}

/// The cargo-fuzz target `index_loader`'s entry point on the stable toolchain: the good index,
/// then seeded mutations of it (bits flipped, bytes and runs overwritten, the end cut), most
/// with their checksum fixed so they reach the layout checks. Errors are fine; a panic, caught
/// or not, or a short epoch without an error fails.
#[test]
fn mutated_indexes_through_the_loader_never_panic() {
    use rand::{Rng, SeedableRng};
    let (_, good) = bucketload::fuzzing::seed();
    for flags in [1u8, 3] {
        let input: Vec<u8> = std::iter::once(flags).chain(good.iter().copied()).collect();
        assert_eq!(
            bucketload::fuzzing::index_loader(&input),
            Some(6),
            "the good index"
        );
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20);
    let mut read = 0;
    for _ in 0..300 {
        let mut index = good.clone();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..index.len());
            match rng.random_range(0..4) {
                0 => index[at] ^= 1 << rng.random_range(0..8),
                1 => index[at] = rng.random(),
                2 => {
                    let end = (at + 8).min(index.len());
                    index[at..end].iter_mut().for_each(|b| *b = rng.random());
                }
                _ => index.truncate(at.max(1)),
            }
        }
        let flags: u8 = rng.random::<u8>() | u8::from(rng.random_bool(0.9));
        let input: Vec<u8> = std::iter::once(flags).chain(index).collect();
        read += usize::from(bucketload::fuzzing::index_loader(&input).is_some());
    }
    assert!(read < 300, "some mutations must be refused");
}
