//! MD5 of many request bodies at once, in SIMD lanes.
//!
//! Every object and part written gets the MD5 of its bytes (its ETag), and one MD5 stream is
//! strictly sequential: on its own it runs at about 0.6–0.7 GB/s per core, most of the
//! server's CPU while a client uploads parts in parallel. Independent streams can share a
//! CPU's SIMD lanes instead (16 with AVX-512, 8 with AVX2): `md5_many` hashes 8 streams at
//! about 3 GB/s and 16 at about 5 GB/s on one core.
//!
//! Those rates hold only for groups of exactly 8 or 16 streams fed blocks of equal length; fed
//! unequal lengths, or 5 streams, the crate is slower than hashing alone. And a client's parts
//! seldom arrive at the same instant: a writer that fills one part after another sends them
//! in turn, keeping many in flight only because it does not wait for each answer.
//!
//! So a body's chunks are kept (shared `Bytes`, not copies) rather than hashed as they
//! arrive, and hashed in groups:
//!
//! - Whenever a stream holds another [`GATHER`] bytes, and 8 streams hold at least
//!   [`LEAST_IN_LANES`] each, the 16 (or 8) holding the most are hashed together: the same
//!   number of whole 64-byte blocks of each, as many as the least of them holds. The rest
//!   waits for the next group.
//! - A finished body ([`LaneStream::digest`]) hashes what remains of it alone, at once.
//!   Waiting for a group was tried (10 and 250 ms): it cost the client more time than it
//!   saved the server, since the client's next parts wait for the answer.
//! - Memory is bounded: a stream holding [`MOST_PER_STREAM`], or all streams together
//!   holding [`MOST_HELD`], is hashed at once, alone if need be.
//!
//! The thread that forms a group hashes it while the other request threads go on receiving.
//! A stream being hashed is marked busy, so no two threads hash the same stream.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use md5_many::{Md5Many, Md5State};

/// A stream tries to form a group each time it holds this many more bytes.
const GATHER: usize = 1 << 20;
/// The least a group hashes of each stream.
const LEAST_IN_LANES: usize = 128 << 10;
/// A stream holding this much is hashed at once.
const MOST_PER_STREAM: usize = 32 << 20;
/// All streams holding this much together: the stream adding to it is hashed at once.
const MOST_HELD: usize = 512 << 20;

/// Which streams [`Lanes::hash_pending`] may hash.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Take {
    /// A group, if one can be formed.
    Group,
    /// A group, or else the calling stream alone.
    GroupOrOwn,
    /// The calling stream alone.
    Own,
}

/// The streams being hashed, shared by every request of one server.
pub(crate) struct Lanes {
    engine: Md5Many,
    streams: Mutex<Streams>,
    /// Signalled when a busy stream's state is back.
    returned: Condvar,
}

#[derive(Default)]
struct Streams {
    slots: Vec<Stream>,
    free: Vec<usize>,
    /// Bytes held by every stream.
    held: usize,
}

#[derive(Default)]
struct Stream {
    state: Md5State,
    pending: VecDeque<Bytes>,
    pending_len: usize,
    /// Taken by a thread hashing it; its state and pending bytes are with that thread.
    busy: bool,
    /// Dropped while busy: freed when its state comes back.
    dropped: bool,
}

impl fmt::Debug for Lanes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lanes")
            .field("lanes", &self.engine.lanes())
            .finish_non_exhaustive()
    }
}

impl Default for Lanes {
    fn default() -> Self {
        Self {
            engine: Md5Many::new(),
            streams: Mutex::default(),
            returned: Condvar::new(),
        }
    }
}

impl Lanes {
    fn lock(&self) -> MutexGuard<'_, Streams> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new, empty MD5 stream.
    pub(crate) fn stream(self: &Arc<Self>) -> LaneStream {
        let mut streams = self.lock();
        let id = match streams.free.pop() {
            Some(id) => id,
            None => {
                streams.slots.push(Stream::default());
                streams.slots.len() - 1
            }
        };
        streams.slots[id] = Stream::default();
        LaneStream {
            lanes: Arc::clone(self),
            id,
        }
    }

    /// Hashes whole blocks of the streams holding the most, together, or of stream `own`
    /// alone, as `take` allows (see the module).
    fn hash_pending(&self, own: usize, take: Take) {
        let mut taken: Vec<(usize, Md5State, Vec<Bytes>)> = Vec::new();
        {
            let mut streams = self.lock();
            let mut holding: Vec<(usize, usize)> = streams
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.busy && !s.dropped && s.pending_len >= 64)
                .map(|(id, s)| (id, s.pending_len))
                .collect();
            holding.sort_by_key(|&(_, len)| std::cmp::Reverse(len));
            let enough = holding
                .iter()
                .take_while(|&&(_, len)| len >= LEAST_IN_LANES)
                .count();
            let group: usize = match (take, enough) {
                (Take::Own, _) => 0,
                (_, n) if n >= 16 => 16,
                (_, n) if n >= 8 => 8,
                _ => 0,
            };
            let chosen: Vec<(usize, usize)> = match group {
                0 if take == Take::Group => Vec::new(),
                0 => holding
                    .iter()
                    .filter(|&&(id, _)| id == own)
                    .map(|&(id, len)| (id, len & !63))
                    .collect(),
                _ => {
                    let least = holding[group - 1].1 & !63;
                    holding[..group]
                        .iter()
                        .map(|&(id, _)| (id, least))
                        .collect()
                }
            };
            for (id, len) in chosen {
                let stream = &mut streams.slots[id];
                stream.busy = true;
                stream.pending_len -= len;
                let chunks = take_front(&mut stream.pending, len);
                taken.push((id, stream.state, chunks));
                streams.held -= len;
            }
        }
        if taken.is_empty() {
            return;
        }
        let mut states: Vec<Md5State> = taken.iter().map(|(_, state, _)| *state).collect();
        if let [state] = &mut states[..] {
            for chunk in &taken[0].2 {
                state.update(chunk);
            }
        } else {
            let lanes: Vec<&[Bytes]> = taken.iter().map(|(_, _, c)| &c[..]).collect();
            self.hash_group(&mut states, &lanes);
        }
        let mut streams = self.lock();
        for ((id, _, _), state) in taken.iter().zip(states) {
            let stream = &mut streams.slots[*id];
            stream.busy = false;
            if stream.dropped {
                let held = stream.pending_len;
                *stream = Stream::default();
                streams.held -= held;
                streams.free.push(*id);
            } else {
                stream.state = state;
            }
        }
        drop(streams);
        self.returned.notify_all();
    }
}

/// The first `len` bytes of `pending`, split off without copying.
fn take_front(pending: &mut VecDeque<Bytes>, mut len: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    while len > 0 {
        let Some(front) = pending.front_mut() else {
            break;
        };
        if front.len() <= len {
            len -= front.len();
            out.extend(pending.pop_front());
        } else {
            out.push(front.split_to(len));
            len = 0;
        }
    }
    out
}

/// How much of each lane one call of the SIMD kernel hashes.
const STEP: usize = 64 << 10;

/// A lane's chunks, read in steps of equal length: a step inside one chunk is that chunk's
/// bytes; one across chunks is copied into a small buffer, reused.
struct Cursor<'a> {
    chunks: &'a [Bytes],
    chunk: usize,
    at: usize,
    scratch: Vec<u8>,
}

impl<'a> Cursor<'a> {
    fn new(chunks: &'a [Bytes]) -> Self {
        Self {
            chunks,
            chunk: 0,
            at: 0,
            scratch: Vec::new(),
        }
    }

    /// Moves past the next `n` bytes; they must be there.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let left = self.chunks[self.chunk].len() - self.at;
            if n < left {
                self.at += n;
                return;
            }
            n -= left;
            self.chunk += 1;
            self.at = 0;
        }
    }

    /// Makes the next `n` bytes contiguous; [`Cursor::step`] then returns them.
    fn prepare(&mut self, n: usize) {
        let current = &self.chunks[self.chunk];
        if current.len() - self.at >= n {
            return;
        }
        self.scratch.clear();
        let (mut chunk, mut at) = (self.chunk, self.at);
        while self.scratch.len() < n {
            let piece = &self.chunks[chunk][at..];
            let take = piece.len().min(n - self.scratch.len());
            self.scratch.extend_from_slice(&piece[..take]);
            chunk += 1;
            at = 0;
        }
    }

    fn step(&self, n: usize) -> &[u8] {
        let current = &self.chunks[self.chunk][self.at..];
        if current.len() >= n {
            &current[..n]
        } else {
            &self.scratch[..n]
        }
    }
}

impl Lanes {
    /// Hashes `lanes[i]` (all of one length, a multiple of 64) into `states[i]`, in steps of
    /// equal length through the SIMD kernel.
    fn hash_group(&self, states: &mut [Md5State], lanes: &[&[Bytes]]) {
        let total: usize = lanes[0].iter().map(Bytes::len).sum();
        let mut cursors: Vec<Cursor<'_>> = lanes.iter().map(|chunks| Cursor::new(chunks)).collect();
        let mut done = 0;
        while done < total {
            let n = STEP.min(total - done);
            for cursor in &mut cursors {
                cursor.prepare(n);
            }
            let inputs: Vec<&[u8]> = cursors.iter().map(|c| c.step(n)).collect();
            self.engine.update_many(states, &inputs);
            for cursor in &mut cursors {
                cursor.advance(n);
            }
            done += n;
        }
    }
}

/// The MD5 of one body, hashed in lanes with the others (see the module).
pub(crate) struct LaneStream {
    lanes: Arc<Lanes>,
    id: usize,
}

impl fmt::Debug for LaneStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneStream").field("id", &self.id).finish()
    }
}

impl LaneStream {
    /// Appends `chunk` (kept, not copied, until it is hashed).
    pub(crate) fn update(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        let take = {
            let mut streams = self.lanes.lock();
            streams.held += chunk.len();
            let held = streams.held;
            let stream = &mut streams.slots[self.id];
            let before = stream.pending_len;
            stream.pending_len += chunk.len();
            stream.pending.push_back(chunk);
            if stream.busy {
                None
            } else if stream.pending_len >= MOST_PER_STREAM || held >= MOST_HELD {
                Some(Take::GroupOrOwn)
            } else if stream.pending_len / GATHER > before / GATHER {
                Some(Take::Group)
            } else {
                None
            }
        };
        if let Some(take) = take {
            self.lanes.hash_pending(self.id, take);
        }
    }

    /// The MD5 of every byte appended so far; more may follow.
    pub(crate) fn digest(&self) -> [u8; 16] {
        let mut streams = self.lanes.lock();
        loop {
            let stream = &streams.slots[self.id];
            if stream.busy {
                streams = self
                    .lanes
                    .returned
                    .wait(streams)
                    .unwrap_or_else(PoisonError::into_inner);
            } else if stream.pending_len >= 64 {
                drop(streams);
                self.lanes.hash_pending(self.id, Take::Own);
                streams = self.lanes.lock();
            } else {
                // Less than a block: hashed into a copy, so the stream stays block-aligned.
                let mut state = stream.state;
                for chunk in &stream.pending {
                    state.update(chunk);
                }
                return state.finalize();
            }
        }
    }
}

impl Drop for LaneStream {
    fn drop(&mut self) {
        let mut streams = self.lanes.lock();
        let stream = &mut streams.slots[self.id];
        if stream.busy {
            stream.dropped = true;
        } else {
            let held = stream.pending_len;
            *stream = Stream::default();
            streams.held -= held;
            streams.free.push(self.id);
        }
    }
}

/// The MD5 of a body being written: in lanes with other bodies, or alone (bodies copied
/// from files already stored, and objects assembled from parts, whose MD5 is not used).
#[derive(Debug)]
pub(crate) enum BodyMd5 {
    Alone(Md5State),
    Lanes(LaneStream),
}

impl BodyMd5 {
    pub(crate) fn alone() -> Self {
        Self::Alone(Md5State::new())
    }

    pub(crate) fn update(&mut self, chunk: Bytes) {
        match self {
            Self::Alone(state) => state.update(&chunk),
            Self::Lanes(stream) => stream.update(chunk),
        }
    }

    pub(crate) fn update_slice(&mut self, bytes: &[u8]) {
        match self {
            Self::Alone(state) => state.update(bytes),
            Self::Lanes(stream) => stream.update(Bytes::copy_from_slice(bytes)),
        }
    }

    pub(crate) fn digest(&self) -> [u8; 16] {
        match self {
            Self::Alone(state) => state.finalize(),
            Self::Lanes(stream) => stream.digest(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::{Digest, Md5};
    use rand::{Rng, SeedableRng};

    /// Bodies of awkward lengths, cut into chunks of random lengths, fed from several threads
    /// at once: every digest is the reference MD5 of its body.
    #[test]
    fn streams_hashed_together_match_md5_of_each() {
        let lanes = Arc::new(Lanes::default());
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let lengths = [
            0usize,
            1,
            55,
            56,
            63,
            64,
            65,
            4_000_000,
            3 << 20,
            (1 << 20) + 17,
        ];
        let bodies: Vec<Vec<u8>> = (0..24)
            .map(|i| {
                let len = lengths[i % lengths.len()] + rng.random_range(0..3) * (i % 2);
                (0..len).map(|_| rng.random()).collect()
            })
            .collect();
        std::thread::scope(|scope| {
            for (i, body) in bodies.iter().enumerate() {
                let lanes = Arc::clone(&lanes);
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
                    let mut md5 = BodyMd5::Lanes(lanes.stream());
                    let mut at = 0;
                    while at < body.len() {
                        let n = rng.random_range(1..=300_000).min(body.len() - at);
                        let chunk = Bytes::copy_from_slice(&body[at..at + n]);
                        if n % 3 == 0 {
                            md5.update_slice(&chunk);
                        } else {
                            md5.update(chunk);
                        }
                        at += n;
                        if rng.random_range(0..50) == 0 {
                            // A digest mid-way changes nothing that follows.
                            assert_eq!(md5.digest(), <[u8; 16]>::from(Md5::digest(&body[..at])));
                        }
                    }
                    assert_eq!(
                        md5.digest(),
                        <[u8; 16]>::from(Md5::digest(body)),
                        "body {i}"
                    );
                });
            }
        });
        // Dropped streams are reused.
        let again = lanes.stream();
        assert!(again.id < 24);
    }

    #[test]
    fn streams_holding_enough_are_hashed_together() {
        for count in [8usize, 16, 20] {
            let lanes = Arc::new(Lanes::default());
            let bodies: Vec<Vec<u8>> = (0..count)
                .map(|i| {
                    (0..(GATHER + 1000 * i))
                        .map(|b| (b * 31 + i) as u8)
                        .collect()
                })
                .collect();
            let mut streams: Vec<LaneStream> = (0..count).map(|_| lanes.stream()).collect();
            // Each holds 300,001 bytes (odd, so the blocks cut through chunks), in two chunks.
            for (stream, body) in streams.iter_mut().zip(&bodies) {
                stream.update(Bytes::copy_from_slice(&body[..100_000]));
                stream.update(Bytes::copy_from_slice(&body[100_000..300_001]));
            }
            // The last one fills up: the group holding the most goes through the lanes.
            let last = count - 1;
            streams[last].update(Bytes::copy_from_slice(&bodies[last][300_001..]));
            let hashed = {
                let all = lanes.lock();
                (0..count)
                    .filter(|&id| all.slots[streams[id].id].state.bytes_hashed() > 0)
                    .count()
            };
            assert_eq!(hashed, count.min(16), "{count} streams");
            for (i, stream) in streams.iter_mut().enumerate().take(last) {
                stream.update(Bytes::copy_from_slice(&bodies[i][300_001..]));
            }
            for (stream, body) in streams.iter().zip(&bodies) {
                assert_eq!(stream.digest(), <[u8; 16]>::from(Md5::digest(body)));
            }
        }
    }

    #[test]
    fn a_stream_dropped_midway_leaves_the_others_right() {
        let lanes = Arc::new(Lanes::default());
        let body = vec![9u8; 3 << 20];
        let mut kept = lanes.stream();
        let mut dropped = lanes.stream();
        kept.update(Bytes::copy_from_slice(&body[..1 << 19]));
        dropped.update(Bytes::copy_from_slice(&body[..(1 << 20) + 3]));
        drop(dropped);
        let mut reused = lanes.stream();
        reused.update(Bytes::from_static(b"abc"));
        kept.update(Bytes::copy_from_slice(&body[1 << 19..]));
        assert_eq!(kept.digest(), <[u8; 16]>::from(Md5::digest(&body)));
        assert_eq!(reused.digest(), <[u8; 16]>::from(Md5::digest(b"abc")));
    }
}
