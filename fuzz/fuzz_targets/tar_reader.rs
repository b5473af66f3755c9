//! Feeds arbitrary bytes to the tar reader, in chunks whose sizes come from
//! the first input byte; the reader must return members or an error, never
//! panic or loop.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bucketload_format::fuzzing::tar_reader(data);
});
