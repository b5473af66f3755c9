//! The shard sample stream: the WebDataset samples of one tar shard, parsed as bytes arrive.
//!
//! Bytes come from [`read_range`](crate::io::read_range) (the prefetching range reader) and are pushed into a
//! [`TarReader`]; consecutive members whose names share a WebDataset key ([`split_key`], the
//! rule of [`bucketload_format::Grouper`]) form one [`ShardSample`]. A sample is complete as
//! soon as the header of the next key is parsed. Parsing is zero-copy when a member lies inside
//! one chunk and one copy otherwise, cheap enough to run on the polling task.
//!
//! A [`ShardSpan`] picks the samples:
//!
//! - the whole shard (`first` 0, `count` `None`, `offset` 0);
//! - samples `first..first + count` starting at byte `offset`, the first header of sample
//!   `first` as given by the shard's index: reading starts there and sample numbers start at
//!   `first`;
//! - without an index (`offset` 0, `first` > 0): reading starts at byte 0 and the first `first`
//!   samples are parsed and dropped.
//!
//! The span has no end offset, and a sample is known to be complete only when the next header
//! (or the end of the archive) is parsed: 512 bytes past its end. Once `count` samples are out
//! the stream drops its reader, which aborts the requests in flight. **Over-read bound:** bytes
//! requested past that point are at most the reader's window, and the window never exceeds
//! `max(first_request, 2 × bytes consumed)` nor `max_window` (see [`read_range`](crate::io::read_range)). A span of
//! `n` bytes therefore requests at most `n + 512 + max(first_request, 2 × (n + 512))` bytes,
//! capped at `n + 512 + max_window`: with the default 1 MiB first request, a span of a few
//! samples costs one ranged GET of about 1 MiB.
//!
//! Back-pressure: a chunk is requested from the reader only when the consumer polls and the
//! parser needs more input. Memory: the reader's window plus one sample being assembled.
//!
//! When reading starts mid-shard, a global PAX header (`g`) at the start of the shard is not
//! seen; bucketload's shards never hold one.

use std::collections::VecDeque;
use std::sync::Arc;

use bucketload_format::{Event, Sample, TarReader, split_key};
use bucketload_store::object_store::path::Path;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};

use crate::base::Location;
use crate::error::{Error, Result};
use crate::io::{Blocks, PrefetchConfig, PrefetchCounters, read_range_with};

/// One WebDataset sample read from a shard.
#[derive(Debug, Clone)]
pub struct ShardSample {
    /// Shard number given by the caller.
    pub shard: usize,
    /// The sample's position in the shard (0-based).
    pub index: u64,
    /// WebDataset key.
    pub key: String,
    /// (extension, data) in shard order.
    pub members: Vec<(String, Bytes)>,
}

/// What part of a shard to read: all of it, or samples `first..first + count` starting at byte
/// `offset` (a sample's first header, from the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSpan {
    /// Shard number, copied into every [`ShardSample`].
    pub shard: usize,
    /// Size of the shard object in bytes.
    pub size: u64,
    /// Number of the first sample to yield.
    pub first: u64,
    /// Samples to yield; `None` reads to the end of the archive.
    pub count: Option<u64>,
    /// Byte offset of sample `first`'s first header, or 0 to read from the start and skip.
    pub offset: u64,
}

impl ShardSpan {
    /// The whole shard `shard` of `size` bytes.
    pub fn whole(shard: usize, size: u64) -> ShardSpan {
        ShardSpan {
            shard,
            size,
            first: 0,
            count: None,
            offset: 0,
        }
    }
}

/// Streams the samples of one shard span, parsing tar as bytes arrive (read_range underneath),
/// grouping members by key. Without an offset (offset 0, first > 0) it reads from the start and
/// skips `first` samples. Stops after `count` samples without reading further. Tar errors name
/// the shard URI and byte offset.
pub fn shard_samples(
    location: Location,
    key: Path,
    span: ShardSpan,
    config: PrefetchConfig,
    counters: Arc<PrefetchCounters>,
) -> BoxStream<'static, Result<ShardSample>> {
    shard_samples_with(location, key, span, config, counters, None)
}

/// [`shard_samples`] whose ranged GETs go through the loader's disk cache when `blocks` is
/// given.
pub(crate) fn shard_samples_with(
    location: Location,
    key: Path,
    span: ShardSpan,
    config: PrefetchConfig,
    counters: Arc<PrefetchCounters>,
    blocks: Option<Blocks>,
) -> BoxStream<'static, Result<ShardSample>> {
    let uri = location.uri_of(&key);
    if span.offset > span.size {
        let e = Error::invalid_input(format!(
            "{uri}: span offset {} is past the shard's {} bytes; re-read the shard's index",
            span.offset, span.size
        ));
        return stream::once(async move { Err(e) }).boxed();
    }
    if span.count == Some(0) {
        return stream::empty().boxed();
    }
    let range = span.offset..span.size;
    let bytes = read_range_with(location, key, range, config, counters, blocks);
    let state = Samples::new(uri, span, bytes);
    stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
    .boxed()
}

/// A member whose data is arriving.
struct OpenMember {
    ext: String,
    size: u64,
    pieces: Vec<Bytes>,
    got: u64,
}

/// The pieces of a member's data as one buffer; no copy when there is one piece.
fn concat(mut pieces: Vec<Bytes>, len: u64) -> Bytes {
    if pieces.len() == 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut all = bytes::BytesMut::with_capacity(len as usize);
    pieces.iter().for_each(|p| all.extend_from_slice(p));
    all.freeze()
}

/// The state of one [`shard_samples`] stream.
struct Samples {
    uri: String,
    span: ShardSpan,
    /// The byte stream; `None` once the archive ended or enough samples were read.
    bytes: Option<BoxStream<'static, Result<Bytes>>>,
    tar: TarReader,
    /// The group being assembled and its member whose data is arriving.
    group: Option<Sample>,
    open: Option<OpenMember>,
    /// Finished groups not yet handed out.
    ready: VecDeque<Sample>,
    /// Number of the next group completed.
    next_index: u64,
    /// Samples handed out.
    yielded: u64,
    /// True once the end-of-archive blocks were read, the input ended or parsing failed.
    input_done: bool,
    /// A parser error to report after the samples finished before it.
    broken: Option<Error>,
    failed: bool,
}

impl Samples {
    fn new(uri: String, span: ShardSpan, bytes: BoxStream<'static, Result<Bytes>>) -> Samples {
        // Sample numbers count from `first` when reading starts at its offset.
        let next_index = if span.offset > 0 { span.first } else { 0 };
        Samples {
            tar: TarReader::new(uri.clone()),
            uri,
            span,
            bytes: Some(bytes),
            group: None,
            open: None,
            ready: VecDeque::new(),
            next_index,
            yielded: 0,
            input_done: false,
            broken: None,
            failed: false,
        }
    }

    async fn next(&mut self) -> Option<Result<ShardSample>> {
        if self.failed || self.span.count.is_some_and(|c| self.yielded >= c) {
            return None;
        }
        match self.fill().await {
            Ok(Some(sample)) => Some(Ok(self.emit(sample))),
            Ok(None) => self.short().map(Err),
            Err(e) => {
                self.failed = true;
                self.bytes = None;
                Some(Err(e))
            }
        }
    }

    /// Hands out `sample`; drops the reader once the last wanted sample is out.
    fn emit(&mut self, sample: Sample) -> ShardSample {
        self.yielded += 1;
        if self.span.count.is_some_and(|c| self.yielded >= c) {
            self.bytes = None;
        }
        let index = self.span.first + self.yielded - 1;
        ShardSample {
            shard: self.span.shard,
            index,
            key: sample.key,
            members: sample.members,
        }
    }

    /// An error if the shard ended before `count` samples.
    fn short(&mut self) -> Option<Error> {
        let count = self.span.count?;
        self.failed = true;
        Some(Error::Corrupt {
            uri: self.uri.clone(),
            reason: format!(
                "expected {count} samples from sample {}, found {}; \
                 the index does not match the shard: re-create it with `bucketload index`",
                self.span.first, self.yielded
            ),
        })
    }

    /// The next wanted sample, parsing more input as needed; `None` at the end of the shard.
    async fn fill(&mut self) -> Result<Option<Sample>> {
        loop {
            while let Some(sample) = self.ready.pop_front() {
                let index = self.next_index;
                self.next_index += 1;
                if index >= self.span.first {
                    return Ok(Some(sample));
                }
            }
            if let Some(e) = self.broken.take() {
                return Err(e);
            }
            if self.input_done {
                return Ok(None);
            }
            self.parse();
            if self.ready.is_empty() && !self.input_done {
                self.feed().await?;
            }
        }
    }

    /// Parses what is buffered into finished groups. A group is finished as soon as the header
    /// of a member with another key is parsed, before that member's data arrives. A parser
    /// error is kept in `broken` until the groups finished before it are handed out.
    fn parse(&mut self) {
        loop {
            let event = match self.tar.next_event() {
                Ok(Some(event)) => event,
                Ok(None) => return,
                Err(e) => {
                    self.broken = Some(self.rebase(e));
                    self.input_done = true;
                    self.bytes = None;
                    return;
                }
            };
            match event {
                Event::Member(header) => self.start_member(&header.name, header.size),
                Event::Data(data) => self.member_data(data),
                Event::Entry(_) => {}
                Event::End => return self.end_input(),
            }
        }
    }

    /// A member starts: closes the current group if the key changes.
    fn start_member(&mut self, name: &str, size: u64) {
        let (key, ext) = split_key(name);
        if self.group.as_ref().is_some_and(|g| g.key != key) {
            self.ready.extend(self.group.take());
        }
        let group = self.group.get_or_insert_with(|| Sample {
            key: key.to_owned(),
            members: Vec::new(),
        });
        if size == 0 {
            group.members.push((ext.to_owned(), Bytes::new()));
            return;
        }
        self.open = Some(OpenMember {
            ext: ext.to_owned(),
            size,
            pieces: Vec::new(),
            got: 0,
        });
    }

    /// A slice of the open member's data; completes the member when all of it is in.
    fn member_data(&mut self, data: Bytes) {
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.got += data.len() as u64;
        open.pieces.push(data);
        if open.got < open.size {
            return;
        }
        if let (Some(open), Some(group)) = (self.open.take(), self.group.as_mut()) {
            group
                .members
                .push((open.ext, concat(open.pieces, open.got)));
        }
    }

    /// Pushes the next chunk into the parser, or declares the end of input.
    async fn feed(&mut self) -> Result<()> {
        let Some(bytes) = self.bytes.as_mut() else {
            return Ok(());
        };
        match bytes.next().await {
            Some(chunk) => self.tar.push(chunk?),
            None => {
                self.tar.finish_input();
                // An archive cut short fails here, naming the offset where it ends.
                self.parse();
                if self.broken.is_none() {
                    self.end_input();
                }
            }
        }
        Ok(())
    }

    /// No more input: the last group is complete.
    fn end_input(&mut self) {
        self.input_done = true;
        self.bytes = None;
        self.ready.extend(self.group.take());
    }

    /// Turns a parser error into the engine's, with offsets counted from the shard's start.
    fn rebase(&self, e: bucketload_format::Error) -> Error {
        Error::Format(rebase(e, self.span.offset))
    }
}

/// Adds `base` to the byte offset of a tar error (the parser counts from where reading began).
fn rebase(mut e: bucketload_format::Error, base: u64) -> bucketload_format::Error {
    use bucketload_format::Error as F;
    match &mut e {
        F::HeaderChecksum { offset, .. }
        | F::Truncated { offset, .. }
        | F::BadNumber { offset, .. }
        | F::UnsafeName { offset, .. }
        | F::BadExtendedHeader { offset, .. }
        | F::Malformed { offset, .. }
        | F::UnsupportedEntry { offset, .. }
        | F::ExtendedHeaderTooLarge { offset, .. }
        | F::Io { offset, .. } => *offset += base,
        _ => {}
    }
    e
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn rebase_shifts_parser_offsets() {
        let e = bucketload_format::Error::Truncated {
            shard: "s3://b/s.tar".into(),
            offset: 512,
            what: "x".into(),
        };
        let e = rebase(e, 10_240);
        assert_eq!(e.offset(), Some(10_752));
        assert!(e.to_string().contains("s3://b/s.tar at byte 10752"), "{e}");
    }

    /// A shard of samples `000000`..: a 3000-byte `jpg` and a `cls` each; with its bytes and the
    /// offset of every sample's first header.
    fn shard(n: usize) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        let mut w = bucketload_format::TarWriter::new("t.tar");
        let mut starts = Vec::new();
        for i in 0..n {
            let jpg = vec![i as u8; 3000];
            starts.push(
                w.append(&mut out, &format!("{i:06}.jpg"), &jpg)
                    .unwrap()
                    .header_offset,
            );
            w.append(&mut out, &format!("{i:06}.cls"), i.to_string().as_bytes())
                .unwrap();
        }
        w.finish(&mut out).unwrap();
        (out, starts)
    }

    /// Feeds `bytes` in `chunk`-byte pieces, then pends forever: a sample that needs more input
    /// than given never comes.
    fn samples(bytes: &[u8], chunk: usize, span: ShardSpan) -> Vec<Result<ShardSample>> {
        let pieces: Vec<Result<Bytes>> = bytes
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let input = stream::iter(pieces).chain(stream::pending()).boxed();
        let state = Samples::new("mem://b/t.tar".into(), span, input);
        let out = stream::unfold(state, |mut s| async move { Some((s.next().await?, s)) });
        let mut out = out.boxed();
        let mut got = Vec::new();
        while let Some(Some(item)) = out.next().now_or_never() {
            got.push(item);
        }
        got
    }

    #[test]
    fn a_sample_is_complete_one_header_after_its_end() {
        let (bytes, starts) = shard(4);
        let span = ShardSpan {
            count: Some(2),
            ..ShardSpan::whole(0, bytes.len() as u64)
        };
        for chunk in [1, 100, 512, 4096] {
            // Up to and including the header of sample 2: samples 0 and 1 are out.
            let upto = starts[2] as usize + 512;
            let got = samples(&bytes[..upto], chunk, span);
            let keys: Vec<_> = got
                .iter()
                .map(|s| s.as_ref().unwrap().key.clone())
                .collect();
            assert_eq!(keys, ["000000", "000001"], "chunk {chunk}");
            let one = got[1].as_ref().unwrap();
            assert_eq!(
                one.members[0],
                ("jpg".to_owned(), Bytes::from(vec![1u8; 3000]))
            );
            assert_eq!(one.members[1], ("cls".to_owned(), Bytes::from_static(b"1")));
            // One byte less and sample 1 is not known to be complete.
            let got = samples(&bytes[..upto - 1], chunk, span);
            assert_eq!(got.len(), 1, "chunk {chunk}");
        }
    }

    #[test]
    fn skipped_samples_are_parsed_but_not_yielded() {
        let (bytes, starts) = shard(5);
        let size = bytes.len() as u64;
        let skip = ShardSpan {
            first: 3,
            ..ShardSpan::whole(2, size)
        };
        let at = ShardSpan {
            offset: starts[3],
            ..skip
        };
        for span in [skip, at] {
            let got = samples(&bytes[span.offset as usize..], 700, span);
            let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
            let ids: Vec<_> = got
                .iter()
                .map(|s| (s.shard, s.index, s.key.as_str()))
                .collect();
            assert_eq!(ids, [(2, 3, "000003"), (2, 4, "000004")]);
        }
    }

    #[test]
    fn whole_span_reads_everything() {
        let s = ShardSpan::whole(3, 4096);
        assert_eq!(
            (s.shard, s.size, s.first, s.count, s.offset),
            (3, 4096, 0, None, 0)
        );
    }
}
