//! One worker's samples: its share of the rank's spans, through the shuffle buffer for streams.
//!
//! The shuffle buffer is simulated on local indices, not on sample bytes: the output order is a
//! pure function of the plan, the order and the worker, so a worker restarted at position `p`
//! replays the first `p` steps (a few nanoseconds each, no I/O) and knows exactly which samples
//! the buffer held at that point. Those are read again first (see [`WorkerIter::reads`]).

use std::ops::Range;
use std::sync::Arc;

use super::partition::{RankSeq, coalesce, join, spans_len};
use super::permute::SplitMix64;
use super::{SampleRef, WorkItem};

/// The samples one worker of one rank yields in one epoch, in order.
///
/// Made by [`EpochProgress::worker`](super::EpochProgress::worker); it starts where that worker's recorded
/// position left off. The iterator is exact-size: [`len`](ExactSizeIterator::len) is what is
/// left.
#[derive(Debug)]
pub struct WorkerIter {
    seq: Arc<RankSeq>,
    worker: u32,
    arrivals: Arrivals,
    buffer: Option<ShuffleBuffer>,
    /// Read plan at creation: samples the buffer held, then the spans not yet read.
    start_pending: Vec<u64>,
    start_rest: Vec<Range<u64>>,
    position: u64,
    end: u64,
}

impl WorkerIter {
    /// A worker over `spans` (local indices of `seq`), moved to `position`; `buffer` is the
    /// shuffle buffer's capacity and RNG key (streams with a buffer only).
    pub(crate) fn new(
        seq: Arc<RankSeq>,
        worker: u32,
        spans: Vec<Range<u64>>,
        buffer: Option<(usize, u64)>,
        position: u64,
    ) -> WorkerIter {
        let end = spans_len(&spans);
        let mut it = WorkerIter {
            seq,
            worker,
            arrivals: Arrivals::new(spans),
            buffer: buffer.map(|(capacity, key)| ShuffleBuffer::new(capacity, key)),
            start_pending: Vec::new(),
            start_rest: Vec::new(),
            position: 0,
            end,
        };
        it.advance(position.min(end));
        it.start_pending = it.pending();
        it.start_rest = it.arrivals.rest();
        it
    }

    fn advance(&mut self, n: u64) {
        match &mut self.buffer {
            None => self.arrivals.skip(n),
            Some(buffer) => {
                for _ in 0..n {
                    buffer.next(&mut self.arrivals);
                }
            }
        }
        self.position += n;
    }

    fn pending(&self) -> Vec<u64> {
        let mut held = self.buffer.as_ref().map_or(Vec::new(), |b| b.held.clone());
        held.sort_unstable();
        held
    }

    /// The worker's number.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// Samples this worker has yielded this epoch (since the last change of worker count),
    /// counting those before a restore.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The shard ranges to read, in this order, to produce the samples from where this
    /// iterator was created; `None` for random-access plans, whose samples are read one by one.
    ///
    /// A restored worker first re-reads the samples its shuffle buffer held when the state was
    /// saved (often single samples: merge neighbouring ranges of one shard into one sequential
    /// read and skip what is not listed), then continues with whole ranges. Reading ahead only
    /// until the next sample yielded by the iterator has arrived keeps at most
    /// `shuffle_buffer + 1` samples in memory.
    pub fn reads(&self) -> Option<Vec<WorkItem>> {
        let RankSeq::Stream(rank) = &*self.seq else {
            return None;
        };
        let spans = coalesce(&self.start_pending).into_iter();
        let spans = spans.chain(self.start_rest.iter().cloned());
        Some(spans.flat_map(|span| rank.reads(span)).collect())
    }

    /// The local indices this worker has not yielded yet, as sorted spans.
    pub(crate) fn remaining_spans(&self) -> Vec<Range<u64>> {
        let mut spans = coalesce(&self.pending());
        spans.extend(self.arrivals.rest());
        join(spans)
    }

    fn next_local(&mut self) -> Option<u64> {
        match &mut self.buffer {
            None => self.arrivals.next(),
            Some(buffer) => buffer.next(&mut self.arrivals),
        }
    }
}

impl Iterator for WorkerIter {
    type Item = SampleRef;

    fn next(&mut self) -> Option<SampleRef> {
        let local = self.next_local()?;
        self.position += 1;
        Some(self.seq.sample(local))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.end - self.position).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl ExactSizeIterator for WorkerIter {}

/// Local indices in span order.
#[derive(Debug)]
struct Arrivals {
    spans: Vec<Range<u64>>,
    /// Index of the current span; `next` is the next index inside it.
    span: usize,
    next: u64,
}

impl Arrivals {
    fn new(spans: Vec<Range<u64>>) -> Arrivals {
        let next = spans.first().map_or(0, |s| s.start);
        Arrivals {
            spans,
            span: 0,
            next,
        }
    }

    fn next(&mut self) -> Option<u64> {
        loop {
            let span = self.spans.get(self.span)?;
            if self.next < span.end {
                self.next += 1;
                return Some(self.next - 1);
            }
            self.span += 1;
            self.next = self.spans.get(self.span).map_or(0, |s| s.start);
        }
    }

    fn skip(&mut self, mut n: u64) {
        while n > 0 {
            let Some(span) = self.spans.get(self.span) else {
                return;
            };
            let step = n.min(span.end - self.next);
            self.next += step;
            n -= step;
            if self.next == span.end {
                self.span += 1;
                self.next = self.spans.get(self.span).map_or(0, |s| s.start);
            }
        }
    }

    fn rest(&self) -> Vec<Range<u64>> {
        let Some(current) = self.spans.get(self.span) else {
            return Vec::new();
        };
        let mut rest = vec![self.next..current.end];
        rest.extend(self.spans[self.span + 1..].iter().cloned());
        join(rest)
    }
}

/// Samples a shuffle buffer holds when it yields its first one (or its capacity, if smaller):
/// WebDataset's default `initial`, small enough that the first batch comes after a few hundred
/// samples rather than a full buffer, large enough that the first samples out are not the first
/// ones read.
pub(crate) const INITIAL_HELD: usize = 100;

/// A shuffle buffer over local indices that yields from the start and grows to its capacity.
///
/// Before yield `k` (from 0) it fills to `held(k) = min(capacity, INITIAL_HELD + k)` samples;
/// the next arrival then competes with them and a uniformly chosen one of the `held(k) + 1` is
/// yielded. So each yield reads two samples until the buffer is full (after
/// `capacity - INITIAL_HELD` yields), then one; yield `k` is one of the first
/// `held(k) + k + 1` samples read; at the end the held samples drain in random order.
#[derive(Debug)]
struct ShuffleBuffer {
    capacity: usize,
    /// Samples to hold before the next yield: grows by one per yield up to `capacity`.
    target: usize,
    held: Vec<u64>,
    rng: SplitMix64,
}

impl ShuffleBuffer {
    fn new(capacity: usize, key: u64) -> ShuffleBuffer {
        ShuffleBuffer {
            capacity,
            target: capacity.min(INITIAL_HELD),
            held: Vec::new(),
            rng: SplitMix64::new(key),
        }
    }

    fn next(&mut self, arrivals: &mut Arrivals) -> Option<u64> {
        while self.held.len() < self.target {
            match arrivals.next() {
                Some(local) => self.held.push(local),
                None => return self.drain(),
            }
        }
        let Some(local) = arrivals.next() else {
            return self.drain();
        };
        let pick = self.rng.below(self.held.len() as u64 + 1) as usize;
        let out = match self.held.get_mut(pick) {
            Some(slot) => std::mem::replace(slot, local),
            None => local,
        };
        self.target = (self.target + 1).min(self.capacity);
        Some(out)
    }

    fn drain(&mut self) -> Option<u64> {
        if self.held.is_empty() {
            return None;
        }
        let pick = self.rng.below(self.held.len() as u64) as usize;
        Some(self.held.swap_remove(pick))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::partition::{Layout, RandomRank, StreamRank, cycle_starts};
    use crate::source::permute::Permutation;

    fn files(n: u64) -> Arc<RankSeq> {
        Arc::new(RankSeq::Random(RandomRank {
            total: n,
            world: 1,
            rank: 0,
            len: n,
            perm: Permutation::identity(n),
            left: None,
            layout: Layout::Files,
        }))
    }

    fn indices(it: WorkerIter) -> Vec<u64> {
        it.map(|s| match s {
            SampleRef::File { index } => index,
            SampleRef::Shard { sample, .. } => sample,
        })
        .collect()
    }

    #[test]
    fn arrivals_walk_and_skip_spans() {
        let mut a = Arrivals::new(vec![2..4, 7..9]);
        a.skip(3);
        assert_eq!(a.rest(), vec![8..9]);
        assert_eq!(a.next(), Some(8));
        assert_eq!(a.next(), None);
        assert!(a.rest().is_empty());
    }

    #[test]
    fn without_buffer_the_order_is_the_span_order() {
        let it = WorkerIter::new(files(10), 0, vec![1..3, 6..8], None, 1);
        assert_eq!(it.len(), 3);
        assert_eq!(indices(it), vec![2, 6, 7]);
    }

    #[test]
    fn buffer_shuffles_a_permutation_and_restarts_exactly() {
        let full = indices(WorkerIter::new(files(50), 0, vec![0..50], Some((8, 3)), 0));
        let mut sorted = full.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(full, sorted);
        for p in [0, 1, 7, 8, 9, 30, 49, 50] {
            let tail = indices(WorkerIter::new(files(50), 0, vec![0..50], Some((8, 3)), p));
            assert_eq!(tail, full[p as usize..]);
        }
    }

    #[test]
    fn buffer_displacement_is_bounded_by_what_was_read() {
        // Output k can only be a sample among the first capacity + k + 1 arrivals.
        let out = indices(WorkerIter::new(
            files(200),
            0,
            vec![0..200],
            Some((10, 5)),
            0,
        ));
        assert!(out.iter().enumerate().all(|(k, &x)| x <= 10 + k as u64));
    }

    /// Samples read from the worker's spans so far (all spans start at 0 in these tests).
    fn arrived(it: &WorkerIter, total: u64) -> u64 {
        it.arrivals.rest().first().map_or(total, |r| r.start)
    }

    #[test]
    fn a_large_buffer_yields_its_first_sample_after_the_initial_fill() {
        let mut it = WorkerIter::new(files(5_000), 0, vec![0..5_000], Some((1_000, 7)), 0);
        assert_eq!(arrived(&it, 5_000), 0);
        let first = it.next().unwrap();
        let SampleRef::File { index } = first else {
            panic!("files plan")
        };
        assert!(index <= INITIAL_HELD as u64);
        assert_eq!(arrived(&it, 5_000), INITIAL_HELD as u64 + 1);
    }

    #[test]
    fn a_large_buffer_grows_by_one_sample_per_yield_to_its_capacity() {
        let (capacity, total) = (400_u64, 3_000_u64);
        let held = |k: u64| capacity.min(INITIAL_HELD as u64 + k);
        let mut it = WorkerIter::new(files(total), 0, vec![0..total], Some((400, 11)), 0);
        let mut out = Vec::new();
        for k in 0..total {
            let SampleRef::File { index } = it.next().unwrap() else {
                panic!("files plan")
            };
            // Yield k is one of the first held(k) + k + 1 samples read, and that many were read.
            assert!(index <= held(k) + k, "yield {k} was sample {index}");
            assert_eq!(
                arrived(&it, total),
                (held(k) + k + 1).min(total),
                "yield {k}"
            );
            out.push(index);
        }
        assert!(it.next().is_none());
        out.sort_unstable();
        assert_eq!(out, (0..total).collect::<Vec<_>>());
    }

    #[test]
    fn a_growing_buffer_restarts_exactly() {
        let spans = vec![0..700, 900..1_500];
        let full = indices(WorkerIter::new(
            files(1_500),
            0,
            spans.clone(),
            Some((250, 3)),
            0,
        ));
        assert_eq!(full.len(), 1_300);
        for p in [0, 1, 99, 100, 101, 149, 150, 151, 640, 1_299, 1_300] {
            let it = WorkerIter::new(files(1_500), 0, spans.clone(), Some((250, 3)), p);
            assert_eq!(indices(it), full[p as usize..], "restart at {p}");
        }
    }

    #[test]
    fn remaining_spans_hold_the_buffer_and_the_unread_tail() {
        let mut it = WorkerIter::new(files(30), 0, vec![0..30], Some((4, 9)), 0);
        let first: Vec<_> = (&mut it).take(5).collect();
        let remaining = it.remaining_spans();
        assert_eq!(spans_len(&remaining), 25);
        // Nine samples arrived (4 to fill, 5 more): the tail from 9 on is unread.
        let last = remaining.last().unwrap();
        assert!(last.start <= 9 && last.end == 30, "{remaining:?}");
        for s in first {
            let SampleRef::File { index } = s else {
                panic!("files plan")
            };
            assert!(!remaining.iter().any(|r| r.contains(&index)));
        }
    }

    #[test]
    fn reads_start_with_the_held_samples() {
        let perm = Permutation::identity(2);
        let starts = cycle_starts(&[6, 6], &perm);
        let seq = Arc::new(RankSeq::Stream(StreamRank::new(
            &[6, 6],
            &perm,
            &starts,
            &[0..12],
        )));
        let fresh = WorkerIter::new(seq.clone(), 0, vec![0..12], Some((3, 1)), 0);
        let reads = fresh.reads().unwrap();
        assert_eq!(reads.len(), 2);
        let restored = WorkerIter::new(seq, 0, vec![0..12], Some((3, 1)), 4);
        let reads = restored.reads().unwrap();
        let count: u64 = reads.iter().map(|r| r.samples.end - r.samples.start).sum();
        assert_eq!(count, 8);
        assert_eq!(reads.last().map(|r| r.samples.clone()), Some(1..6));
        assert!(
            WorkerIter::new(files(3), 0, vec![0..3], None, 0)
                .reads()
                .is_none()
        );
    }
}
