//! Engine errors as the Python package's exceptions (`bucketload.errors`): not-found is a
//! `FileNotFoundError`, bad settings a `ValueError`, corrupt data `CorruptDataError`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Which exception of `bucketload.errors`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    NotFound,
    Config,
    Corrupt,
    Store,
    Other,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::NotFound => "NotFoundError",
            Kind::Config => "ConfigError",
            Kind::Corrupt => "CorruptDataError",
            Kind::Store => "StoreError",
            Kind::Other => "BucketloadError",
        }
    }
}

/// A Python exception of `kind` with `message`.
pub(crate) fn raise(kind: Kind, message: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("bucketload.errors")
            .and_then(|m| m.getattr(kind.class()));
        match class {
            Ok(class) => match class.call1((message.clone(),)) {
                Ok(instance) => PyErr::from_value(instance),
                Err(e) => e,
            },
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

fn store_kind(e: &bucketload_store::Error) -> Kind {
    use bucketload_store::Error as E;
    match e {
        E::NotFound { .. } => Kind::NotFound,
        E::InvalidUri { .. } | E::InvalidInput { .. } => Kind::Config,
        E::Corrupt { .. } => Kind::Corrupt,
        _ => Kind::Store,
    }
}

/// An engine error as a Python exception.
pub(crate) fn engine(e: bucketload::Error) -> PyErr {
    use bucketload::Error as E;
    let kind = match &e {
        E::Store(s) => store_kind(s),
        E::InvalidInput { .. } => Kind::Config,
        E::Corrupt { .. } | E::Format(_) => Kind::Corrupt,
        _ => Kind::Other,
    };
    raise(kind, e.to_string())
}

/// A store error as a Python exception.
pub(crate) fn store(e: bucketload_store::Error) -> PyErr {
    raise(store_kind(&e), e.to_string())
}

/// An image pipeline error as a Python exception.
pub(crate) fn image(e: bucketload_image::Error) -> PyErr {
    use bucketload_image::Error as E;
    let kind = match &e {
        E::InvalidConfig { .. } => Kind::Config,
        E::ThreadPool(_) => Kind::Other,
        _ => Kind::Corrupt,
    };
    raise(kind, e.to_string())
}
