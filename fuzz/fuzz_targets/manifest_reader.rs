//! Reads arbitrary bytes as a dataset manifest (format 1 or 2), and re-encodes whatever reads.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bucketload_format::fuzzing::manifest_reader(data);
});
