//! Engine errors as the Python package's exceptions (`bucketload.errors`), by the error's
//! [`ErrorKind`]: not-found is a `FileNotFoundError`, refused credentials a `PermissionError`,
//! bad settings a `ValueError`, corrupt data `CorruptDataError`. The CLI's exit codes and the
//! mount's errnos come from the same kinds.

use bucketload::{ErrorKind, Hint};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The class of `bucketload.errors` raised for each kind: the one table of the binding.
pub(crate) fn class(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "NotFoundError",
        ErrorKind::PermissionDenied => "PermissionDeniedError",
        ErrorKind::InvalidInput => "ConfigError",
        ErrorKind::Corrupt => "CorruptDataError",
        ErrorKind::Unreachable | ErrorKind::Throttled | ErrorKind::Store => "StoreError",
        ErrorKind::Other => "BucketloadError",
    }
}

/// A Python exception of `kind` with `message`.
pub(crate) fn raise(kind: ErrorKind, message: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("bucketload.errors")
            .and_then(|m| m.getattr(class(kind)));
        match class {
            Ok(class) => match class.call1((message.clone(),)) {
                Ok(instance) => PyErr::from_value(instance),
                Err(e) => e,
            },
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

/// The messages of `e`'s causes, outermost first, leaving out any its own message (or an outer
/// cause's) already repeats.
fn causes(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut said = e.to_string();
    let mut out = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !said.contains(&text) {
            said.push_str(&text);
            out.push(text);
        }
        next = cause.source();
    }
    out
}

/// [`raise`], with `e`'s causes chained as the exception's `__cause__` (each a
/// `RuntimeError` holding one cause's message), as the CLI prints them after "caused by".
fn raise_from(kind: ErrorKind, e: &(dyn std::error::Error + 'static)) -> PyErr {
    let hints = bucketload::hints(e);
    let top = raise(kind, bucketload::reword(&e.to_string(), &hints, words));
    let chain: Vec<String> = causes(e)
        .iter()
        .map(|cause| bucketload::reword(cause, &hints, words))
        .collect();
    if !chain.is_empty() {
        Python::attach(|py| {
            let mut cause: Option<PyErr> = None;
            for message in chain.into_iter().rev() {
                let err = PyRuntimeError::new_err(message);
                err.set_cause(py, cause.take());
                cause = Some(err);
            }
            top.set_cause(py, cause);
        });
    }
    top
}

/// Python's words for what the user can do: its keyword arguments and environment variables,
/// and the command-line tool's commands for what only they do (indexing, verifying); hints with
/// nothing of Python's to name keep the engine's neutral words.
fn words(hint: &Hint) -> Option<String> {
    use bucketload_format::Hint as F;
    use bucketload_store::Hint as S;
    Some(match hint {
        Hint::Store(S::LowerConcurrency) => {
            "lower concurrency=, set AWS_RETRY_MODE=adaptive, or try later".to_owned()
        }
        Hint::Store(S::CheckBucket) => {
            "create it first or check the bucket name and endpoint=".to_owned()
        }
        Hint::Store(S::CheckCredentials) => {
            "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE".to_owned()
        }
        Hint::Format(F::VerifyShards) => "the shard is corrupt, re-create it or check the \
            dataset with the `bucketload verify` command"
            .to_owned(),
        Hint::Format(F::Reindex) => "re-create it with the `bucketload index` command".to_owned(),
        Hint::Format(F::ReindexOrReshard) => "rebuild it with the `bucketload index` command (or \
            re-create the shards with the `bucketload shard` command)"
            .to_owned(),
        Hint::RefreshManifest { command } => format!(
            "refresh it with the `{command}` command, or read the dataset without it: \
             use_manifest=False"
        ),
        Hint::Format(F::RewriteManifest) => "write it again with the `bucketload manifest` \
            command (one object per sample) or `bucketload shard --overwrite` (shards), or read \
            the dataset without it: use_manifest=False"
            .to_owned(),
        _ => return None,
    })
}

/// `err` with what is missing when `e` is a store's not-found error: the exception's `uri`
/// (the object's or the bucket's) and `what` (`"object"` or `"bucket"`), so that callers can
/// tell them apart without reading the message.
fn with_missing(err: PyErr, e: &bucketload_store::Error) -> PyErr {
    if let bucketload_store::Error::NotFound { uri, what, .. } = e {
        Python::attach(|py| {
            let value = err.value(py);
            // Attributes of a Python exception instance: setting them cannot fail.
            let _ = value.setattr("uri", uri.as_str());
            let _ = value.setattr("what", *what);
        });
    }
    err
}

/// An engine error as a Python exception.
pub(crate) fn engine(e: bucketload::Error) -> PyErr {
    let err = raise_from(e.kind(), &e);
    match &e {
        bucketload::Error::Store(store) => with_missing(err, store),
        _ => err,
    }
}

/// A store error as a Python exception.
pub(crate) fn store(e: bucketload_store::Error) -> PyErr {
    with_missing(raise_from(e.kind(), &e), &e)
}

/// An I/O error as a Python exception; the engine's and the store's errors travel inside
/// `io::Error` (checkpoint streams) and keep their kind.
pub(crate) fn io(e: std::io::Error) -> PyErr {
    let inner = e.get_ref();
    let engine = inner.and_then(|i| i.downcast_ref::<bucketload::Error>());
    let store = inner.and_then(|i| i.downcast_ref::<bucketload_store::Error>());
    let store = store.or(match engine {
        Some(bucketload::Error::Store(store)) => Some(store),
        _ => None,
    });
    let kind = match (engine, store) {
        (Some(engine), _) => engine.kind(),
        (None, Some(store)) => store.kind(),
        (None, None) => ErrorKind::of_io(&e).unwrap_or(ErrorKind::Store),
    };
    let err = raise_from(kind, &e);
    match store {
        Some(store) => with_missing(err, store),
        None => err,
    }
}

/// An image pipeline error as a Python exception.
pub(crate) fn image(e: bucketload_image::Error) -> PyErr {
    raise(bucketload::image_kind(&e), e.to_string())
}
