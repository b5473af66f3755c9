//! Background saves: a bounded number run at once; each has a [`SaveHandle`]; a failure nobody
//! waited for is reported by the next save.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::Saved;
use crate::{Error, Result};

/// What a background save leaves for the next save to report.
#[derive(Debug)]
struct Shared {
    uri: String,
    /// Someone waited on the handle (so saw the outcome).
    observed: AtomicBool,
    /// The error's message and whether its outcome is unknown, once failed.
    failure: Mutex<Option<(String, bool)>>,
    finished: AtomicBool,
}

/// The background saves of one [`Checkpoints`](super::Checkpoints) and its clones.
#[derive(Debug)]
pub(super) struct Background {
    slots: Arc<Semaphore>,
    limit: u32,
    saves: Mutex<Vec<Arc<Shared>>>,
}

impl Background {
    pub(super) fn new(limit: usize) -> Background {
        let limit = u32::try_from(limit.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(1);
        Background {
            slots: Arc::new(Semaphore::new(limit as usize)),
            limit,
            saves: Mutex::new(Vec::new()),
        }
    }

    /// Waits for a free slot.
    pub(super) async fn slot(&self) -> Result<OwnedSemaphorePermit> {
        Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|e| Error::Task {
                reason: e.to_string(),
            })
    }

    /// Runs `save` on the runtime, holding `permit` until it ends.
    pub(super) fn spawn(
        &self,
        permit: OwnedSemaphorePermit,
        uri: String,
        save: impl Future<Output = Result<Saved>> + Send + 'static,
    ) -> SaveHandle {
        let shared = Arc::new(Shared {
            uri,
            observed: AtomicBool::new(false),
            failure: Mutex::new(None),
            finished: AtomicBool::new(false),
        });
        let mut saves = self.saves.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget saves that ended well; failures stay until reported.
        saves.retain(|s| {
            !s.finished.load(Ordering::Acquire)
                || lock(&s.failure).is_some() && !s.observed.load(Ordering::Acquire)
        });
        saves.push(Arc::clone(&shared));
        drop(saves);
        let record = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            let outcome = save.await;
            if let Err(e) = &outcome {
                tracing::warn!(uri = %record.uri, error = %e, "background checkpoint save failed");
                *lock(&record.failure) = Some((e.to_string(), e.is_unconfirmed()));
            }
            record.finished.store(true, Ordering::Release);
            drop(permit);
            outcome
        });
        SaveHandle { task, shared }
    }

    /// The first failure of a background save that nobody waited for, as an error (once).
    pub(super) fn take_failure(&self) -> Result<()> {
        let saves = self.saves.lock().unwrap_or_else(PoisonError::into_inner);
        for s in saves.iter() {
            if s.observed.load(Ordering::Acquire) {
                continue;
            }
            if let Some((reason, unconfirmed)) = lock(&s.failure).clone() {
                s.observed.store(true, Ordering::Release);
                return Err(Error::BackgroundSave {
                    uri: s.uri.clone(),
                    reason,
                    unconfirmed,
                });
            }
        }
        Ok(())
    }

    /// Waits until no background save runs; then reports an unobserved failure, if any.
    pub(super) async fn wait_all(&self) -> Result<()> {
        let all = self
            .slots
            .acquire_many(self.limit)
            .await
            .map_err(|e| Error::Task {
                reason: e.to_string(),
            })?;
        drop(all);
        self.take_failure()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A checkpoint being saved in the background.
#[derive(Debug)]
pub struct SaveHandle {
    task: JoinHandle<Result<Saved>>,
    shared: Arc<Shared>,
}

impl SaveHandle {
    /// Whether the save has ended (either way).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// The checkpoint's full URI.
    pub fn uri(&self) -> &str {
        &self.shared.uri
    }

    /// Waits for the save; its outcome is reported here and not again by the next save.
    pub async fn wait(self) -> Result<Saved> {
        self.shared.observed.store(true, Ordering::Release);
        self.task.await.map_err(|e| Error::Task {
            reason: format!("the background save of {}: {e}", self.shared.uri),
        })?
    }

    /// [`SaveHandle::wait`] from a thread outside the runtime.
    pub fn wait_blocking(self, runtime: &tokio::runtime::Handle) -> Result<Saved> {
        runtime.block_on(self.wait())
    }
}
