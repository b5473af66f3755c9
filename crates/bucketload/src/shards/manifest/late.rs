//! Entries that came out of key order, sorted with bounded memory: held in memory up to
//! [`RUN_ENTRIES`], then sorted and written to a temporary file as a run; runs are merged
//! [`FAN_IN`] at a time into longer runs when there are more, and [`Late::into_sorted`]
//! merges the last ones with what is still in memory, one entry per run in memory at a time.
//! A run is a sequence of records (key, size, ETag, CRC32C), read back in order through a
//! buffer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};

use bucketload_format::FileEntry;

use super::{rewound, temp_error, temp_file};
use crate::error::Result;

/// Entries held in memory before they are written out as a run: with keys of ~50 bytes, an
/// ETag and a CRC32C, about 100 MB.
pub(super) const RUN_ENTRIES: usize = 1 << 19;

/// Runs merged at once: as many files open, and 64 × 64 KiB of read buffers.
pub(super) const FAN_IN: usize = 64;

/// Bytes of each run's read buffer.
const READ_BUFFER: usize = 64 << 10;

/// The out-of-order entries of one manifest being written.
#[derive(Debug)]
pub(super) struct Late {
    held: Vec<FileEntry>,
    runs: Vec<File>,
    count: u64,
    run_entries: usize,
    fan_in: usize,
}

impl Late {
    /// Runs of `run_entries`, merged `fan_in` at a time.
    pub(super) fn new(run_entries: usize, fan_in: usize) -> Late {
        Late {
            held: Vec::new(),
            runs: Vec::new(),
            count: 0,
            run_entries: run_entries.max(1),
            fan_in: fan_in.max(2),
        }
    }

    /// Entries taken.
    pub(super) fn len(&self) -> u64 {
        self.count
    }

    pub(super) fn push(&mut self, entry: FileEntry) -> Result<()> {
        self.held.push(entry);
        self.count += 1;
        if self.held.len() >= self.run_entries {
            let mut held = std::mem::take(&mut self.held);
            held.sort_by(|a, b| a.key.cmp(&b.key));
            let run = write_run(held.into_iter().map(Ok))?;
            self.runs.push(run);
            if self.runs.len() >= self.fan_in {
                let runs = std::mem::take(&mut self.runs);
                let merged = Merged::new(runs, Vec::new()).map_err(|e| temp_error("read", e))?;
                self.runs.push(write_run(merged)?);
            }
        }
        Ok(())
    }

    /// Every entry taken, in key order.
    pub(super) fn into_sorted(mut self) -> Result<Merged> {
        self.held.sort_by(|a, b| a.key.cmp(&b.key));
        Merged::new(self.runs, self.held).map_err(|e| temp_error("read", e))
    }
}

/// Writes `entries` (sorted) as a run; the file, read from its start.
fn write_run(entries: impl Iterator<Item = std::io::Result<FileEntry>>) -> Result<File> {
    let mut out = BufWriter::new(temp_file()?);
    for entry in entries {
        let entry = entry.map_err(|e| temp_error("read", e))?;
        encode(&mut out, &entry).map_err(|e| temp_error("write", e))?;
    }
    let file = out
        .into_inner()
        .map_err(|e| temp_error("write", e.into_error()))?;
    rewound(file)
}

fn encode(out: &mut impl Write, entry: &FileEntry) -> std::io::Result<()> {
    put_text(out, &entry.key)?;
    out.write_all(&entry.size.to_le_bytes())?;
    for text in [&entry.etag, &entry.crc32c] {
        match text {
            None => out.write_all(&[0])?,
            Some(text) => {
                out.write_all(&[1])?;
                put_text(out, text)?;
            }
        }
    }
    Ok(())
}

fn put_text(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    let len = u32::try_from(text.len()).map_err(std::io::Error::other)?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(text.as_bytes())
}

/// The next record of a run, or `None` at its end.
fn decode(input: &mut impl Read) -> std::io::Result<Option<FileEntry>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    let key = take_text(input, u32::from_le_bytes(len))?;
    let mut size = [0u8; 8];
    input.read_exact(&mut size)?;
    let mut texts = [None, None];
    for text in &mut texts {
        let mut tag = [0u8; 1];
        input.read_exact(&mut tag)?;
        if tag[0] == 1 {
            input.read_exact(&mut len)?;
            *text = Some(take_text(input, u32::from_le_bytes(len))?);
        }
    }
    let [etag, crc32c] = texts;
    Ok(Some(FileEntry {
        key,
        size: u64::from_le_bytes(size),
        etag,
        crc32c,
    }))
}

fn take_text(input: &mut impl Read, len: u32) -> std::io::Result<String> {
    let mut bytes = vec![0; len as usize];
    input.read_exact(&mut bytes)?;
    String::from_utf8(bytes).map_err(std::io::Error::other)
}

/// Runs and the entries still in memory (each sorted), merged in key order.
#[derive(Debug)]
pub(super) struct Merged {
    sources: Vec<Source>,
    /// The next key of each source that has one, smallest first.
    heads: BinaryHeap<Reverse<(String, usize)>>,
    next: Vec<Option<FileEntry>>,
}

#[derive(Debug)]
enum Source {
    Run(BufReader<File>),
    Held(std::vec::IntoIter<FileEntry>),
}

impl Source {
    fn pull(&mut self) -> std::io::Result<Option<FileEntry>> {
        match self {
            Source::Run(input) => decode(input),
            Source::Held(entries) => Ok(entries.next()),
        }
    }
}

impl Merged {
    fn new(runs: Vec<File>, held: Vec<FileEntry>) -> std::io::Result<Merged> {
        let mut sources: Vec<Source> = runs
            .into_iter()
            .map(|f| Source::Run(BufReader::with_capacity(READ_BUFFER, f)))
            .collect();
        sources.push(Source::Held(held.into_iter()));
        let mut merged = Merged {
            next: (0..sources.len()).map(|_| None).collect(),
            sources,
            heads: BinaryHeap::new(),
        };
        for i in 0..merged.sources.len() {
            merged.refill(i)?;
        }
        Ok(merged)
    }

    fn refill(&mut self, source: usize) -> std::io::Result<()> {
        if let Some(entry) = self.sources[source].pull()? {
            self.heads.push(Reverse((entry.key.clone(), source)));
            self.next[source] = Some(entry);
        }
        Ok(())
    }

    /// The key the next entry has, if any.
    pub(super) fn peek_key(&self) -> Option<&str> {
        self.heads.peek().map(|Reverse((key, _))| key.as_str())
    }
}

impl Iterator for Merged {
    type Item = std::io::Result<FileEntry>;

    fn next(&mut self) -> Option<std::io::Result<FileEntry>> {
        let Reverse((_, source)) = self.heads.pop()?;
        let entry = self.next[source].take()?;
        Some(self.refill(source).map(|()| entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(key: &str, n: u64) -> FileEntry {
        FileEntry {
            key: key.to_owned(),
            size: n,
            etag: n.is_multiple_of(2).then(|| format!("{n:032x}")),
            crc32c: n.is_multiple_of(3).then(|| format!("{n:08x}")),
        }
    }

    #[test]
    fn many_runs_and_merges_come_back_sorted_and_whole() {
        // 1,000 keys in a scrambled order, runs of 7 merged 4 at a time: runs of runs.
        let mut late = Late::new(7, 4);
        let mut expected = Vec::new();
        for i in 0..1000u64 {
            let n = (i * 7919) % 1000;
            let entry = file(&format!("k/{n:04}.jpg"), n);
            expected.push(entry.clone());
            late.push(entry).unwrap();
        }
        assert_eq!(late.len(), 1000);
        assert!(
            late.runs.len() < 4,
            "runs are merged as they reach the fan-in"
        );
        expected.sort_by(|a, b| a.key.cmp(&b.key));
        let got: Vec<FileEntry> = late.into_sorted().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn peek_shows_the_next_key() {
        let mut late = Late::new(2, 2);
        for key in ["c", "a", "d", "b", "e"] {
            late.push(file(key, 1)).unwrap();
        }
        let mut merged = late.into_sorted().unwrap();
        assert_eq!(merged.peek_key(), Some("a"));
        let keys: Vec<String> = merged.by_ref().map(|e| e.unwrap().key).collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e"]);
        assert_eq!(merged.peek_key(), None);
    }
}
