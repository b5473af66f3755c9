//! Arbitrary bytes as the index of a small real shard, read through the indexed loader: errors
//! are fine, a panic (caught or not) or an epoch that ends short without an error is not.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bucketload::fuzzing::index_loader(data);
});
