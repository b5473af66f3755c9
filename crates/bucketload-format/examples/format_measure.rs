//! Measures reader throughput and index size / parse time.
//!
//! ```text
//! cargo run -p bucketload-format --release --example format_measure
//! ```
//!
//! 1. Builds a 256 MiB shard of 100 KB members in memory and parses it,
//!    pushed in 8 MiB chunks (as ranged GETs deliver it) and in 64 KiB
//!    chunks.
//! 2. Builds an index of 1M samples (`.jpg` + `.cls`) and compares the
//!    binary format with JSON Lines for size, encode and parse time.

use std::time::Instant;

use bucketload_format::{IndexMember, IndexSample, ShardIndex, TarReader, TarWriter};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

fn build_shard() -> Bytes {
    let member = vec![0x5au8; 100_000];
    let mut out = Vec::with_capacity(270 << 20);
    let mut w = TarWriter::new("bench.tar");
    let mut i = 0;
    while out.len() < 256 << 20 {
        w.append(&mut out, &format!("n{:02}/{i:08}.jpg", i % 100), &member)
            .expect("append");
        i += 1;
    }
    w.finish(&mut out).expect("finish");
    Bytes::from(out)
}

fn parse(shard: &Bytes, chunk: usize) -> (usize, f64) {
    parse_with(shard, chunk, |_| {})
}

fn parse_with(shard: &Bytes, chunk: usize, mut on_member: impl FnMut(&Bytes)) -> (usize, f64) {
    let started = Instant::now();
    let mut r = TarReader::new("bench.tar");
    let mut members = 0;
    let mut at = 0;
    while at < shard.len() {
        let end = (at + chunk).min(shard.len());
        r.push(shard.slice(at..end));
        at = end;
        while let Some(m) = r.next_member().expect("valid") {
            on_member(&m.data);
            members += 1;
        }
    }
    r.finish_input();
    while r.next_member().expect("valid").is_some() {}
    (members, started.elapsed().as_secs_f64())
}

#[derive(Serialize, Deserialize)]
struct JsonMember {
    ext: String,
    header_offset: u64,
    data_offset: u64,
    size: u64,
    crc32c: u32,
}

#[derive(Serialize, Deserialize)]
struct JsonSample {
    key: String,
    members: Vec<JsonMember>,
}

fn build_index(samples: usize) -> ShardIndex {
    let mut out = Vec::with_capacity(samples);
    let mut offset = 0u64;
    for i in 0..samples {
        let member = |ext: &str, size: u64, offset: &mut u64| {
            let m = IndexMember {
                ext: ext.into(),
                header_offset: *offset,
                data_offset: *offset + 512,
                size,
                crc32c: i as u32,
            };
            *offset += 512 + size.div_ceil(512) * 512;
            m
        };
        let members = vec![
            member("jpg", 110_000 + (i as u64 % 1000), &mut offset),
            member("cls", 3, &mut offset),
        ];
        out.push(IndexSample {
            key: format!("n{:08}/{i:08}", i % 1000),
            members,
        });
    }
    ShardIndex {
        shard_size: offset + 1024,
        shard_crc32c: 1,
        shard_md5: [0; 16],
        samples: out,
    }
}

fn measure_index() {
    let index = build_index(1_000_000);
    let t = Instant::now();
    let binary = index.to_bytes("bench.idx").expect("encode");
    let bin_encode = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let parsed = ShardIndex::parse("bench.idx", &binary).expect("parse");
    let bin_parse = t.elapsed().as_secs_f64();
    assert_eq!(parsed.samples.len(), 1_000_000);

    let t = Instant::now();
    let mut jsonl = Vec::new();
    for s in &index.samples {
        let members = s.members.iter().map(|m| JsonMember {
            ext: m.ext.clone(),
            header_offset: m.header_offset,
            data_offset: m.data_offset,
            size: m.size,
            crc32c: m.crc32c,
        });
        let sample = JsonSample {
            key: s.key.clone(),
            members: members.collect(),
        };
        serde_json::to_writer(&mut jsonl, &sample).expect("json");
        jsonl.push(b'\n');
    }
    let json_encode = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut n = 0;
    for line in jsonl.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let _: JsonSample = serde_json::from_slice(line).expect("json");
        n += 1;
    }
    let json_parse = t.elapsed().as_secs_f64();
    assert_eq!(n, 1_000_000);
    println!("index, 1M samples x 2 members:");
    println!(
        "  binary      {:>6.1} MB  encode {:>6.0} ms  parse {:>6.0} ms",
        mb(binary.len()),
        bin_encode * 1e3,
        bin_parse * 1e3
    );
    println!(
        "  JSON Lines  {:>6.1} MB  encode {:>6.0} ms  parse {:>6.0} ms",
        mb(jsonl.len()),
        json_encode * 1e3,
        json_parse * 1e3
    );
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn main() {
    let shard = build_shard();
    for chunk in [8 << 20, 64 << 10] {
        let mut best = f64::MAX;
        let mut members = 0;
        for _ in 0..5 {
            let (m, secs) = parse(&shard, chunk);
            members = m;
            best = best.min(secs);
        }
        println!(
            "reader: {} MiB shard, {members} members of 100 KB, {} KiB chunks: {:.0} MB/s (best of 5, {:.1} ms)",
            shard.len() >> 20,
            chunk >> 10,
            mb(shard.len()) / best,
            best * 1e3
        );
    }
    let mut best = f64::MAX;
    let mut crc = 0u32;
    for _ in 0..5 {
        let (_, secs) = parse_with(&shard, 8 << 20, |data| {
            crc = crc.wrapping_add(crc32c::crc32c(data))
        });
        best = best.min(secs);
    }
    println!(
        "reader + CRC32C of every member, 8 MiB chunks: {:.0} MB/s (best of 5, checksum sum {crc:08x})",
        mb(shard.len()) / best
    );
    measure_index();
}
