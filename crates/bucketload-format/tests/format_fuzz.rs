//! Stable-toolchain fuzzing of the tar reader and index parser: seeded
//! random and mutated inputs through the same entry points as the
//! cargo-fuzz targets in `fuzz/`. Deterministic (fixed seed) and bounded in
//! time; `--ignored` runs a longer pass.

use std::time::{Duration, Instant};

use bucketload_format::{ShardIndexBuilder, TarWriter, encode_header, fuzzing};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn seed_shards() -> Vec<Vec<u8>> {
    let sets: Vec<Vec<(String, Vec<u8>)>> = vec![
        vec![],
        vec![
            ("a.jpg".into(), b"abc".to_vec()),
            ("a.cls".into(), b"1".to_vec()),
        ],
        vec![(
            format!("{}/{}.bin", "d".repeat(150), "f".repeat(99)),
            vec![1; 600],
        )],
        vec![
            ("x".repeat(300), vec![2; 1]),
            ("é/ü.txt".into(), Vec::new()),
        ],
    ];
    let mut out = Vec::new();
    for set in sets {
        let mut shard = Vec::new();
        let mut w = TarWriter::new("seed.tar").with_mtime(1_700_000_000);
        for (name, data) in &set {
            w.append(&mut shard, name, data).expect("append");
        }
        w.finish(&mut shard).expect("finish");
        out.push(shard);
    }
    let mut big = encode_header("huge.bin", 9 << 30, 0o644, 0).expect("header");
    big.extend_from_slice(&[0; 2048]);
    out.push(big);
    out
}

fn seed_indexes() -> Vec<Vec<u8>> {
    seed_shards()
        .into_iter()
        .take(4)
        .enumerate()
        .map(|(i, _)| {
            let mut shard = Vec::new();
            let mut w = TarWriter::new("seed.tar");
            let mut b = ShardIndexBuilder::new();
            for j in 0..i * 3 {
                let name = format!("k{}.e{}", j / 2, j % 2);
                let loc = w.append(&mut shard, &name, &[j as u8; 9]).expect("append");
                b.add(&name, loc, &[j as u8; 9]);
            }
            let summary = w.finish(&mut shard).expect("finish");
            b.finish(&summary).to_bytes("seed.idx").expect("encode")
        })
        .collect()
}

const INTERESTING: &[u8] = b"\0 0178x\n=\x80\xff/.L";

fn mutate(rng: &mut ChaCha8Rng, input: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..=4) {
        let len = input.len();
        match rng.random_range(0..7) {
            0 if len > 0 => input[rng.random_range(0..len)] ^= 1 << rng.random_range(0..8),
            1 if len > 0 => {
                input[rng.random_range(0..len)] =
                    INTERESTING[rng.random_range(0..INTERESTING.len())]
            }
            2 if len > 0 => input.truncate(rng.random_range(0..len)),
            3 if len >= 512 => {
                let at = rng.random_range(0..len / 512) * 512;
                let block = input[at..at + 512].to_vec();
                input.splice(at..at, block);
            }
            4 if len > 0 => {
                // Overwrite a numeric header field with random octal-ish text.
                let at = rng.random_range(0..len);
                for b in input.iter_mut().skip(at).take(12) {
                    *b = b"01234567 \0"[rng.random_range(0..10)];
                }
            }
            5 => {
                let at = rng.random_range(0..=len);
                let extra: Vec<u8> = (0..rng.random_range(1..64)).map(|_| rng.random()).collect();
                input.splice(at..at, extra);
            }
            _ => {
                *input = (0..rng.random_range(0..2048))
                    .map(|_| rng.random())
                    .collect()
            }
        }
    }
}

fn fix_index_crc(input: &mut [u8]) {
    if input.len() >= 4 {
        let body = input.len() - 4;
        let crc = crc32c::crc32c(&input[..body]);
        input[body..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Returns how many inputs ran before `budget` or `runs` was reached.
fn fuzz(seeds: &[Vec<u8>], runs: usize, budget: Duration, index: bool) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6275_636b_6574);
    let started = Instant::now();
    for i in 0..runs {
        if started.elapsed() > budget {
            return i;
        }
        let mut input = seeds[rng.random_range(0..seeds.len())].clone();
        mutate(&mut rng, &mut input);
        if index {
            if rng.random_bool(0.7) {
                fix_index_crc(&mut input);
            }
            input.insert(0, 0);
            fuzzing::index_parser(&input);
        } else {
            input.insert(0, rng.random());
            fuzzing::tar_reader(&input);
        }
    }
    runs
}

#[test]
fn seeds_are_valid() {
    for shard in seed_shards().iter().take(4) {
        let mut input = vec![3];
        input.extend_from_slice(shard);
        fuzzing::tar_reader(&input);
    }
    for index in seed_indexes() {
        let mut input = vec![0];
        input.extend_from_slice(&index);
        assert!(fuzzing::index_parser(&input));
        input[0] = 1;
        assert!(fuzzing::index_parser(&input));
        input[2] ^= 1;
        assert!(!fuzzing::index_parser(&input));
    }
}

#[test]
fn tar_reader_survives_mutated_shards() {
    let ran = fuzz(&seed_shards(), 100_000, Duration::from_secs(60), false);
    assert!(ran >= 10_000, "only {ran} inputs ran in the time budget");
}

#[test]
fn index_parser_survives_mutated_indexes() {
    let ran = fuzz(&seed_indexes(), 100_000, Duration::from_secs(60), true);
    assert!(ran >= 10_000, "only {ran} inputs ran in the time budget");
}

#[test]
#[ignore = "long fuzz pass; run with --release -- --ignored"]
fn long_fuzz_pass() {
    let tar = fuzz(&seed_shards(), 5_000_000, Duration::from_secs(120), false);
    let idx = fuzz(&seed_indexes(), 5_000_000, Duration::from_secs(120), true);
    println!("tar_reader: {tar} inputs, index_parser: {idx} inputs");
}
