//! The entry point shared by the cargo-fuzz target `index_loader` in `fuzz/` and the stable
//! test `loader_index`: arbitrary index bytes for a small real shard, read through the indexed
//! loader. The loader may refuse the index or fail a sample; it must never panic, and an epoch
//! that ends without an error must hold every sample its plan promised.

use std::sync::atomic::{AtomicU64, Ordering};

use bucketload_format::{ShardIndexBuilder, TarWriter};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bucketload_store::{Store, StoreConfig};
use futures::TryStreamExt;

use crate::loader::{Delivery, Format, Loader, LoaderConfig};
use crate::source::Order;
use crate::{Error, Result};

/// Key of the shard (its index is `shard.tar.idx`).
const SHARD: &str = "shard.tar";

/// A small real shard (six samples of a `jpg` and a `cls` member, of several sizes) and its
/// index: the seed that fuzzing mutates.
pub fn seed() -> (Vec<u8>, Vec<u8>) {
    let mut shard = Vec::new();
    let mut writer = TarWriter::new(SHARD).with_mtime(1_700_000_000);
    let mut index = ShardIndexBuilder::new();
    for i in 0..6u8 {
        let image = vec![i; 100 + 300 * usize::from(i)];
        let label = [b'0' + i % 3];
        for (name, data) in [
            (format!("k{i}.jpg"), &image[..]),
            (format!("k{i}.cls"), &label),
        ] {
            let at = writer
                .append(&mut shard, &name, data)
                .expect("a short name fits");
            index.add(&name, at, data);
        }
    }
    let summary = writer
        .finish(&mut shard)
        .expect("the writer was used in order");
    let index = index.finish(&summary).to_bytes("seed.idx");
    (shard, index.expect("short keys and two members encode"))
}

/// Reads `data` as the index of [`seed`]'s shard with the indexed loader, in a memory store of
/// its own. The first byte's bit 0 gives the rest a correct trailer CRC first (so mutations
/// reach the layout behind it), bit 1 asks for strict delivery. Returns the samples read, or
/// the loader's error; panics only if the loader panicked (caught as an [`Error::Task`]) or
/// an epoch without an error held fewer samples than planned.
pub fn index_loader(data: &[u8]) -> Option<usize> {
    let (&flags, rest) = data.split_first()?;
    let mut index = rest.to_vec();
    if flags & 1 == 1 && index.len() >= 4 {
        let body = index.len() - 4;
        let crc = crc32c::crc32c(&index[..body]);
        index[body..].copy_from_slice(&crc.to_le_bytes());
    }
    let delivery = match flags & 2 {
        0 => Delivery::Completion,
        _ => Delivery::Strict,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime without drivers starts");
    match runtime.block_on(read(index, delivery)) {
        Ok(samples) => Some(samples),
        Err(e @ Error::Task { .. }) => panic!("the loader failed as a bug: {e}"),
        Err(_) => None,
    }
}

async fn read(index: Vec<u8>, delivery: Delivery) -> Result<usize> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    // `mem://` stores live as long as the process: calls cycle through a few names (each call
    // writes both objects first) instead of adding a store per input.
    let name = format!(
        "fuzz-index-loader-{}",
        CALLS.fetch_add(1, Ordering::Relaxed) % 4
    );
    let store = Store::open(&format!("mem://{name}"), &StoreConfig::default())?;
    let (shard, _) = seed();
    for (key, bytes) in [(SHARD.to_owned(), shard), (format!("{SHARD}.idx"), index)] {
        let key = Path::from(key);
        let put = store
            .object_store()
            .put(&key, PutPayload::from(bytes))
            .await;
        put.map_err(|e| store.map_error(e, &key))?;
    }
    let config = LoaderConfig::for_store(store)
        .with_format(Format::Indexed)
        .with_order(Order::shuffled(1))
        .with_delivery(delivery)
        .with_coalescing(4, 1024)
        .build()?;
    let loader = Loader::open(config).await?;
    let planned = loader.samples_per_epoch()?;
    let samples: Vec<_> = loader.epoch(0)?.try_collect().await?;
    assert_eq!(
        samples.len() as u64,
        planned,
        "an epoch ended short without an error"
    );
    Ok(samples.len())
}
