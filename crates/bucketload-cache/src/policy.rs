//! Which entries may be evicted, and when a hit refreshes an entry.
//!
//! Every entry's modification time is its last use. The epoch clock in the
//! shared state (see [`Cache::begin_epoch`](crate::Cache::begin_epoch))
//! turns times into generations.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::state::State;

/// The eviction policy. All processes sharing a directory should use the
/// same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Keep the resident set (the default). Once the cache is full, a new
    /// entry is admitted only by evicting an entry that went unread for
    /// `idle_epochs` whole epochs (least recently used first); if there is
    /// none, the new entry is not stored. On repeated shuffled epochs over
    /// a dataset larger than the cache, a stable subset stays resident and
    /// every epoch hits on it (hit rate ≈ capacity / dataset), where LRU
    /// evicts entries before their reuse.
    ///
    /// `idle_epochs` is 1 to 15; 1 suits a node that reads the whole
    /// dataset every epoch; raise it to about the number of nodes when each
    /// node reads a different share of the dataset every epoch.
    Resident {
        /// Whole epochs an entry must go unread before it may be evicted.
        idle_epochs: u32,
    },
    /// Least recently used: evict the entry read or written longest ago.
    /// Suits workloads without epochs; on shuffled epochs over a dataset
    /// larger than the cache it hits far less than `Resident`.
    Lru,
}

impl Default for Policy {
    fn default() -> Self {
        Self::Resident { idle_epochs: 1 }
    }
}

impl Policy {
    /// Entries last used before this time (ns since the Unix epoch) may be
    /// evicted; `None`: any entry may.
    pub(crate) fn idle_before(&self, state: &State) -> Option<u64> {
        match *self {
            Self::Lru => None,
            Self::Resident { idle_epochs } => Some(
                state
                    .generation
                    .checked_sub(u64::from(idle_epochs))
                    .map_or(0, |g| state.start_of(g)),
            ),
        }
    }

    /// Whether an entry last used at `mtime` may be evicted now.
    pub(crate) fn evictable(&self, mtime: SystemTime, state: &State) -> bool {
        self.idle_before(state).is_none_or(|t| nanos(mtime) < t)
    }

    /// Whether a hit on an entry last used at `mtime` must record the use.
    /// `Resident` records only the first use in each generation, so hits
    /// cost no metadata write most of the time.
    pub(crate) fn touch_on_hit(&self, mtime: SystemTime, state: &State) -> bool {
        match self {
            Self::Lru => true,
            Self::Resident { .. } => nanos(mtime) < state.start_of(state.generation),
        }
    }
}

/// Nanoseconds since the Unix epoch (0 before it).
pub(crate) fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ns: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(ns)
    }

    #[test]
    fn resident_protects_entries_used_last_epoch() {
        let p = Policy::default();
        let mut s = State::default();
        assert!(!p.evictable(at(50), &s), "no epochs yet: keep everything");
        s.begin_epoch(1, 0, 100);
        assert!(!p.evictable(at(150), &s));
        s.begin_epoch(1, 1, 200);
        assert!(!p.evictable(at(150), &s), "used in the previous epoch");
        assert!(p.evictable(at(50), &s), "unused for a whole epoch");
        assert!(p.touch_on_hit(at(150), &s));
        assert!(!p.touch_on_hit(at(250), &s));
        s.begin_epoch(1, 2, 300);
        assert!(p.evictable(at(150), &s));
        assert!(!p.evictable(at(250), &s));
        s.begin_epoch(2, 0, 400);
        assert!(p.evictable(at(350), &s), "a new dataset idles the old one");
    }

    #[test]
    fn resident_idle_epochs() {
        let p = Policy::Resident { idle_epochs: 2 };
        let mut s = State::default();
        for (e, t) in [(0, 100), (1, 200), (2, 300)] {
            s.begin_epoch(1, e, t);
        }
        assert!(!p.evictable(at(150), &s));
        assert!(p.evictable(at(50), &s));
    }

    #[test]
    fn lru_evicts_anything() {
        let s = State::default();
        assert!(Policy::Lru.evictable(at(u64::MAX / 2), &s));
        assert!(Policy::Lru.touch_on_hit(at(0), &s));
    }
}
