//! Deterministic test bytes, and one object's bytes read back.

use bucketload_store::Store;
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;

/// The whole of the object at `key` in `store`, read with one GET through its object store
/// (retries and metrics included). Panics naming the key when the read fails.
pub async fn get_whole(store: &Store, key: &Path) -> Vec<u8> {
    let got = store.object_store().get(key).await;
    let got = got.unwrap_or_else(|e| panic!("GET {key}: {e}"));
    let bytes = got.bytes().await;
    bytes
        .unwrap_or_else(|e| panic!("reading {key}: {e}"))
        .to_vec()
}

/// `len` bytes from a xorshift generator seeded by `seed`: no run of a few bytes repeats
/// within megabytes, so a misplaced, shifted or repeated chunk cannot compare equal, and
/// different seeds give different bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    // Any non-zero state works; the seed flips whole bytes of a fixed odd constant, which
    // cannot make it zero.
    let mut x = 0x9E37_79B9u32 ^ (u32::from(seed) * 0x0101_0101);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_and_nothing_repeats_nearby() {
        assert_ne!(pattern(64, 1), pattern(64, 2));
        assert_eq!(pattern(64, 3), pattern(64, 3));
        let bytes = pattern(1 << 20, 0);
        let window = &bytes[1000..1016];
        let found = bytes.windows(16).filter(|w| *w == window).count();
        assert_eq!(found, 1);
    }
}
