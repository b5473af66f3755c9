//! Panics at the engine's boundaries (its tasks, threads and the streams it hands out) become
//! [`Error::Task`]s carrying the panic's message and what was running, so that a bug shows as
//! an error where the caller looks, never as a stream or channel that ends early.

use std::any::Any;
use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use crate::{Error, Result};

/// The message of a panic's payload (`panic!` gives a `&str` or a `String`).
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        return (*s).to_owned();
    }
    match payload.downcast_ref::<String>() {
        Some(s) => s.clone(),
        None => "a panic without a message".to_owned(),
    }
}

/// The error of a panic in `what` (a sentence part naming the work and its object).
pub fn error(what: impl Display, payload: &(dyn Any + Send)) -> Error {
    Error::Task {
        reason: format!(
            "{what} panicked: {}; this is a bug in bucketload, please report it",
            message(payload)
        ),
    }
}

/// Runs `future`; a panic in it becomes the error of [`error`].
pub async fn catch<T>(what: impl Display, future: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(error(what, payload.as_ref())),
    }
}

/// Runs `f`; a panic in it becomes the error of [`error`].
pub fn catch_sync<T>(what: impl Display, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(error(what, payload.as_ref())),
    }
}

/// The error of a Tokio task that did not finish: its panic, or its cancellation.
pub fn join_error(what: impl Display, e: tokio::task::JoinError) -> Error {
    match e.try_into_panic() {
        Ok(payload) => error(what, payload.as_ref()),
        Err(e) => Error::Task {
            reason: format!("{what} was cancelled: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        let got: Result<()> = catch_sync("reading s3://b/k", || panic!("boom {}", 7));
        let e = got.unwrap_err().to_string();
        assert!(e.contains("reading s3://b/k panicked: boom 7"), "{e}");
    }

    #[tokio::test]
    async fn a_panicking_task_is_an_error() {
        let task = tokio::spawn(async { panic!("static text") });
        let e = join_error("the task", task.await.unwrap_err()).to_string();
        assert!(e.contains("the task panicked: static text"), "{e}");
    }
}
