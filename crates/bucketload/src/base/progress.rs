//! Progress of long operations (listing, copying, indexing, sharding): the tools report to a
//! [`Progress`]; the CLI draws bars from it, the Python binding and the tests ignore it.

/// Receives progress of a long operation. Implementations must be cheap: `advance` is called once
/// per object from many tasks.
pub trait Progress: Send + Sync {
    /// The expected totals, when known.
    fn set_total(&self, objects: u64, bytes: Option<u64>) {
        let _ = (objects, bytes);
    }
    /// `objects` more objects of `bytes` bytes in total are done.
    fn advance(&self, objects: u64, bytes: u64);
    /// The operation starts again from nothing (what was counted is void; the total unknown).
    fn restart(&self) {}
    /// The operation is over (successfully or not).
    fn finish(&self) {}
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn advance(&self, _objects: u64, _bytes: u64) {}
}
