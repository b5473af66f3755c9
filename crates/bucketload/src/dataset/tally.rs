//! The figures `stats` gives of a one-object-per-sample dataset, gathered as the objects
//! stream past, in memory that does not grow with their number.
//!
//! Counts and bytes are sums; the size percentiles come from a count per distinct size (exact,
//! and small: object sizes repeat); the classes are a count per first folder. The images whose
//! header is sampled are spread evenly over the JPEGs in key order, which is known only once
//! the last one is listed: their keys go to an anonymous temporary file, read once at the end
//! to pick the sample. Only when the keys did not come in key order (a local folder) are they
//! read back whole and sorted.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};

use crate::base::DataKey;
use crate::error::{Error, Result};
use crate::shards::stats::is_jpeg;

use super::stats::SizePercentiles;

/// Counts of objects by size, for exact nearest-rank percentiles.
#[derive(Debug, Default)]
pub(crate) struct SizeCounts {
    counts: BTreeMap<u64, u64>,
    n: u64,
}

impl SizeCounts {
    pub(crate) fn add(&mut self, size: u64) {
        *self.counts.entry(size).or_insert(0) += 1;
        self.n += 1;
    }

    /// Nearest-rank percentiles, as of the sorted list of every size.
    pub(crate) fn percentiles(&self) -> SizePercentiles {
        let rank = |q: f64| -> u64 {
            if self.n == 0 {
                return 0;
            }
            let i = ((q * self.n as f64).ceil() as u64).clamp(1, self.n) - 1;
            self.at(i)
        };
        SizePercentiles {
            p0: self.counts.keys().next().copied().unwrap_or(0),
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: self.counts.keys().next_back().copied().unwrap_or(0),
        }
    }

    /// The size at position `i` of the sorted sizes (`i < n`).
    fn at(&self, i: u64) -> u64 {
        let mut seen = 0;
        for (&size, &count) in &self.counts {
            seen += count;
            if i < seen {
                return size;
            }
        }
        0
    }
}

/// The JPEG keys of a listing, in a temporary file, in the order listed.
pub(crate) struct JpegKeys {
    out: Option<BufWriter<File>>,
    count: u64,
    /// The last key written, while the keys come in key order (`None` once one did not).
    last: Option<String>,
    sorted: bool,
}

impl Default for JpegKeys {
    fn default() -> Self {
        JpegKeys {
            out: None,
            count: 0,
            last: None,
            sorted: true,
        }
    }
}

/// One JPEG: its key and size.
pub(crate) type Jpeg = (DataKey, u64);

impl JpegKeys {
    fn add(&mut self, key: &str, size: u64) -> Result<()> {
        if self.sorted {
            match &mut self.last {
                Some(last) if last.as_str() >= key => {
                    self.sorted = false;
                    self.last = None;
                }
                Some(last) => key.clone_into(last),
                None => self.last = Some(key.to_owned()),
            }
        }
        let out = match &mut self.out {
            Some(out) => out,
            None => self
                .out
                .insert(BufWriter::new(tempfile::tempfile().map_err(spill)?)),
        };
        out.write_all(&size.to_le_bytes()).map_err(spill)?;
        out.write_all(&(key.len() as u64).to_le_bytes())
            .map_err(spill)?;
        out.write_all(key.as_bytes()).map_err(spill)?;
        self.count += 1;
        Ok(())
    }

    /// The JPEGs at `picks` (positions in key order, ascending) among the `count` listed.
    pub(crate) fn pick(self, picks: impl Fn(usize) -> Vec<usize>) -> Result<Vec<Jpeg>> {
        let n = self.count as usize;
        let Some(out) = self.out else {
            return Ok(Vec::new());
        };
        let mut file = out.into_inner().map_err(|e| spill(e.into_error()))?;
        file.rewind().map_err(spill)?;
        let mut records = Records(BufReader::new(file));
        let wanted = picks(n);
        if !self.sorted {
            let mut all = (0..n).map(|_| records.next()).collect::<Result<Vec<_>>>()?;
            all.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(wanted.into_iter().map(|i| all[i].clone()).collect());
        }
        let mut chosen = Vec::with_capacity(wanted.len());
        let mut at = 0;
        for i in wanted {
            while at < i {
                records.skip()?;
                at += 1;
            }
            chosen.push(records.next()?);
            at += 1;
        }
        Ok(chosen)
    }
}

/// Reads the records [`JpegKeys::add`] wrote.
struct Records(BufReader<File>);

impl Records {
    fn u64(&mut self) -> Result<u64> {
        let mut word = [0u8; 8];
        self.0.read_exact(&mut word).map_err(spill)?;
        Ok(u64::from_le_bytes(word))
    }

    fn next(&mut self) -> Result<Jpeg> {
        let size = self.u64()?;
        let mut key = vec![0u8; self.u64()? as usize];
        self.0.read_exact(&mut key).map_err(spill)?;
        let key = String::from_utf8(key).map_err(|e| spill(std::io::Error::other(e)))?;
        Ok((DataKey::new(&key), size))
    }

    fn skip(&mut self) -> Result<()> {
        let _size = self.u64()?;
        let len = self.u64()?;
        self.0.seek_relative(len as i64).map_err(spill)
    }
}

fn spill(source: std::io::Error) -> Error {
    Error::Io {
        path: std::env::temp_dir().display().to_string(),
        action: "keep the listed JPEG keys in a temporary file (set TMPDIR to a folder with \
                 room)"
            .to_owned(),
        source,
    }
}

/// What `stats` counts of the objects of a files dataset.
#[derive(Default)]
pub(crate) struct FilesTally {
    pub(crate) objects: u64,
    pub(crate) bytes: u64,
    pub(crate) sizes: SizeCounts,
    /// Objects per first folder below the root.
    pub(crate) classes: BTreeMap<String, u64>,
    pub(crate) jpegs: JpegKeys,
}

impl FilesTally {
    pub(crate) fn add(&mut self, key: &DataKey, size: u64) -> Result<()> {
        self.objects += 1;
        self.bytes += size;
        self.sizes.add(size);
        let key = key.as_str();
        if let Some((first, _)) = key.split_once('/') {
            match self.classes.get_mut(first) {
                Some(count) => *count += 1,
                None => {
                    self.classes.insert(first.to_owned(), 1);
                }
            }
        }
        if is_jpeg(key) {
            self.jpegs.add(key, size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_counts_give_the_percentiles_of_the_sorted_sizes() {
        let mut sizes: Vec<u64> = (0..1000u64).map(|i| (i * 7919) % 311).collect();
        let mut counts = SizeCounts::default();
        sizes.iter().for_each(|&s| counts.add(s));
        sizes.sort_unstable();
        let want = super::super::stats::percentiles(&sizes);
        assert_eq!(counts.percentiles(), want);
        assert_eq!(
            SizeCounts::default().percentiles(),
            SizePercentiles::default()
        );
    }

    #[test]
    fn jpeg_keys_pick_by_position_in_key_order_whatever_the_listing_order() {
        for order in [false, true] {
            let mut keys: Vec<String> = (0..50).map(|i| format!("c/{i:03}.jpg")).collect();
            if order {
                keys.reverse();
            }
            let mut jpegs = JpegKeys::default();
            for (i, key) in keys.iter().enumerate() {
                jpegs.add(key, i as u64).unwrap();
            }
            let picked = jpegs.pick(|n| vec![0, n / 2, n - 1]).unwrap();
            let names: Vec<&str> = picked.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names,
                ["c/000.jpg", "c/025.jpg", "c/049.jpg"],
                "reversed: {order}"
            );
        }
        assert!(JpegKeys::default().pick(|_| vec![]).unwrap().is_empty());
    }
}
