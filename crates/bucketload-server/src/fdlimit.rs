//! The open-file limit: raised to its hard maximum once per process, and the connection cap
//! derived from it.

use std::sync::OnceLock;

/// Descriptors kept for everything but connections: the runtime, the listener, the log,
/// the root lock, and files opened outside requests.
const RESERVED_FDS: u64 = 64;
/// Descriptors one connection may hold at once: its socket, the object file a GET streams
/// (kept open by its memory map for `sendfile`) and the temporary file an upload writes.
const FDS_PER_CONNECTION: u64 = 3;
/// Largest derived connection cap: far above what one process of this server can keep busy,
/// and a bound on memory when the open-file limit is huge.
const MAX_DERIVED_CONNECTIONS: u64 = 16_384;

/// The open-file limit before and after raising it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FdLimit {
    pub(crate) before: Option<u64>,
    pub(crate) now: Option<u64>,
}

impl FdLimit {
    /// The default connection cap: what the limit leaves after [`RESERVED_FDS`], at
    /// [`FDS_PER_CONNECTION`] each, at least 1 and at most [`MAX_DERIVED_CONNECTIONS`].
    pub(crate) fn connections(&self) -> usize {
        let fds = self.now.unwrap_or(u64::MAX);
        let n = fds.saturating_sub(RESERVED_FDS) / FDS_PER_CONNECTION;
        n.clamp(1, MAX_DERIVED_CONNECTIONS) as usize
    }

    /// How the start log says it: "open-file limit 1024 raised to 524288" or "... 1024".
    pub(crate) fn describe(&self) -> String {
        let show = |n: Option<u64>| n.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        if self.before == self.now {
            format!("open-file limit {}", show(self.now))
        } else {
            format!(
                "open-file limit {} raised to {}",
                show(self.before),
                show(self.now)
            )
        }
    }
}

/// Raises the soft open-file limit to the hard one (once per process; Go's runtime does the
/// same at start) and tells both values.
pub(crate) fn raise() -> FdLimit {
    static RAISED: OnceLock<FdLimit> = OnceLock::new();
    *RAISED.get_or_init(|| {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let before = limit.current;
        if limit.current != limit.maximum {
            let raised = rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            if let Err(e) = setrlimit(Resource::Nofile, raised) {
                tracing::debug!(error = %e, "cannot raise the open-file limit");
            }
        }
        FdLimit {
            before,
            now: getrlimit(Resource::Nofile).current,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_cap_follows_the_limit() {
        let at = |n| FdLimit {
            before: Some(n),
            now: Some(n),
        };
        assert_eq!(at(128).connections(), 21);
        assert_eq!(at(1024).connections(), 320);
        assert_eq!(at(10).connections(), 1);
        assert_eq!(at(1 << 30).connections(), 16_384);
        assert_eq!(
            FdLimit {
                before: Some(1024),
                now: None
            }
            .describe(),
            "open-file limit 1024 raised to unlimited"
        );
    }
}
