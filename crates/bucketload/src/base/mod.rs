//! The base layer: what every other module of the engine uses, importing none of them.
//!
//! - [`Location`]: a store with the URI of its root and its endpoint, so that every error names
//!   the object it is about. Every tool, the loader and the mount work on one.
//! - [`Progress`]: what long operations report to ([`NoProgress`] ignores it).
//! - [`list`] and [`list_all`]: listings that sort every key into what it is for a dataset
//!   (object, folder, or an unreadable key with an empty segment); [`list_all`] lists the
//!   folders of a dataset in parallel, [`list_all_keys`] keeps every key as the store holds it.
//! - [`DataKey`]: a key as the store holds it, read by [`Location::get_key`].

mod key;
mod list;
mod location;
mod progress;

pub use key::DataKey;
pub use list::{
    Entry, KeyedObject, ListReport, for_each_key, list, list_all, list_all_keys, list_each,
};
pub(crate) use list::{list_in_order, lists_in_key_order, warn_unaddressable};
pub use location::{Location, ManifestRead};
pub use progress::{NoProgress, Progress};
