//! Groups of flags shared by several commands.

pub mod ckpt;
pub mod loader;
pub mod store;
