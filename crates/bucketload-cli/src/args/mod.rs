//! Groups of flags shared by several commands.

pub mod ckpt;
pub mod loader;
pub mod store;

/// A time to trust what the store said: `indefinite` (a century), `minimal` or `0` (none), or a
/// duration such as `1s` or `10m`.
pub fn parse_ttl(s: &str) -> Result<std::time::Duration, String> {
    match s {
        "indefinite" => Ok(bucketload_fuse::INDEFINITE),
        "minimal" | "0" => Ok(std::time::Duration::ZERO),
        _ => humantime::parse_duration(s).map_err(|e| format!("{e}; e.g. 1s, 10m or indefinite")),
    }
}
