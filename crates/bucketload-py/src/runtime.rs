//! One Tokio runtime per process, created on first use and again in a forked child.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// This process's runtime.
pub(crate) fn runtime() -> PyResult<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(Arc::clone(rt));
    }
    if let Some((_, inherited)) = slot.take() {
        // A fork copied the parent's runtime but not its threads: dropping it would wait
        // for threads that do not exist here. It is left alone.
        std::mem::forget(inherited);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bucketload-io")
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start bucketload's runtime: {e}")))?;
    let rt = Arc::new(rt);
    *slot = Some((pid, Arc::clone(&rt)));
    Ok(rt)
}

/// The process an object was created in; used to refuse use after a fork.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner(u32);

impl Owner {
    pub(crate) fn here() -> Owner {
        Owner(std::process::id())
    }

    /// Fails in a process other than the creator (a forked child).
    pub(crate) fn check(&self, what: &str) -> PyResult<()> {
        if self.0 == std::process::id() {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(format!(
            "this {what} was opened in process {} and cannot be used in process {} (after a \
             fork its connections and threads are not there); open it again in this process",
            self.0,
            std::process::id()
        )))
    }
}

/// A value that belongs to the process that created it. Dropped there as usual; dropped in a
/// forked child it is leaked instead, because dropping would touch threads (Tokio's, rayon's)
/// and connections that only exist in the parent.
pub(crate) struct ForkSafe<T> {
    value: Option<T>,
    owner: Owner,
}

impl<T> ForkSafe<T> {
    pub(crate) fn new(value: T) -> ForkSafe<T> {
        ForkSafe {
            value: Some(value),
            owner: Owner::here(),
        }
    }

    /// The value, in the process that created it; an error naming `what` elsewhere.
    pub(crate) fn get(&self, what: &str) -> PyResult<&T> {
        self.owner.check(what)?;
        self.value.as_ref().ok_or_else(|| gone(what))
    }

    /// The value, mutably, in the process that created it.
    pub(crate) fn get_mut(&mut self, what: &str) -> PyResult<&mut T> {
        self.owner.check(what)?;
        self.value.as_mut().ok_or_else(|| gone(what))
    }
}

fn gone(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!("this {what} was closed"))
}

impl<T> Drop for ForkSafe<T> {
    fn drop(&mut self) {
        if self.owner.0 != std::process::id()
            && let Some(inherited) = self.value.take()
        {
            std::mem::forget(inherited);
        }
    }
}

/// A value behind a lock, owned by its process, that can be taken out once (on close).
pub(crate) struct Slot<T>(std::sync::Mutex<ForkSafe<Option<T>>>);

impl<T> Slot<T> {
    pub(crate) fn new(value: T) -> Slot<T> {
        Slot(std::sync::Mutex::new(ForkSafe::new(Some(value))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ForkSafe<Option<T>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the value out (`None` if it was taken before).
    pub(crate) fn take(&self, what: &str) -> PyResult<Option<T>> {
        Ok(self.lock().get_mut(what)?.take())
    }

    /// Runs `f` on the value (`None` once taken).
    pub(crate) fn with<R>(
        &self,
        what: &str,
        f: impl FnOnce(Option<&mut T>) -> PyResult<R>,
    ) -> PyResult<R> {
        f(self.lock().get_mut(what)?.as_mut())
    }
}
