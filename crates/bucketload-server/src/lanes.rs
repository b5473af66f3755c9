//! MD5 of many request bodies at once, in SIMD lanes.
//!
//! Every object and part written gets the MD5 of its bytes (its ETag), and one MD5 stream is
//! strictly sequential: on its own it runs at about 0.6–0.7 GB/s per core, most of the
//! server's CPU while a client uploads parts in parallel. Independent streams can share a
//! CPU's SIMD lanes instead (16 with AVX-512, 8 with AVX2): `md5_many` hashes 8 streams at
//! about 3 GB/s and 16 at about 5 GB/s on one core.
//!
//! So a body's chunks are not hashed as they arrive: each stream keeps its chunks (shared
//! `Bytes`, not copies) until it holds [`GATHER`] bytes. Then the request thread that got
//! there hashes what *every* stream is holding, together, and hands each stream its new
//! state; meanwhile the others go on receiving. A stream being hashed is marked busy, so no
//! two threads ever hash the same stream. [`LaneStream::digest`] hashes what remains.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use md5_many::{Md5Many, Md5State};

/// Bytes a stream holds before it hashes, with whatever the others hold.
const GATHER: usize = 1 << 20;

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
}

#[derive(Default)]
struct Stream {
    state: Md5State,
    pending: Vec<Bytes>,
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

    /// Hashes the bytes every stream not already being hashed holds, together.
    fn hash_pending(&self) {
        let mut taken = Vec::new();
        {
            let mut streams = self.lock();
            for (id, stream) in streams.slots.iter_mut().enumerate() {
                if !stream.busy && !stream.dropped && !stream.pending.is_empty() {
                    stream.busy = true;
                    stream.pending_len = 0;
                    taken.push((id, stream.state, std::mem::take(&mut stream.pending)));
                }
            }
        }
        if taken.is_empty() {
            return;
        }
        let mut states: Vec<Md5State> = taken.iter().map(|(_, state, _)| *state).collect();
        let rounds = taken.iter().map(|(_, _, chunks)| chunks.len()).max();
        for round in 0..rounds.unwrap_or(0) {
            let inputs: Vec<&[u8]> = taken
                .iter()
                .map(|(_, _, chunks)| chunks.get(round).map_or(&[][..], |c| &c[..]))
                .collect();
            self.engine.update_many(&mut states, &inputs);
        }
        let mut streams = self.lock();
        for ((id, _, _), state) in taken.iter().zip(states) {
            let stream = &mut streams.slots[*id];
            stream.busy = false;
            if stream.dropped {
                *stream = Stream::default();
                streams.free.push(*id);
            } else {
                stream.state = state;
            }
        }
        drop(streams);
        self.returned.notify_all();
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
        let full = {
            let mut streams = self.lanes.lock();
            let stream = &mut streams.slots[self.id];
            stream.pending_len += chunk.len();
            stream.pending.push(chunk);
            stream.pending_len >= GATHER && !stream.busy
        };
        if full {
            self.lanes.hash_pending();
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
            } else if stream.pending.is_empty() {
                return stream.state.finalize();
            } else {
                drop(streams);
                self.lanes.hash_pending();
                streams = self.lanes.lock();
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
            *stream = Stream::default();
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
