//! Parses arbitrary bytes as a shard index, and re-encodes whatever parses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bucketload_format::fuzzing::index_parser(data);
});
