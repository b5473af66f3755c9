//! Which process sent a request, from `/proc`: FUSE reports the thread that made the call.

/// `PF_EXITING` in the kernel's task flags: the task is exiting.
const PF_EXITING: u64 = 0x4;
/// `PF_SIGNALED`: the task was killed by a signal.
const PF_SIGNALED: u64 = 0x400;

/// The process (thread group) of thread `tid`; `tid` itself when `/proc` does not know it.
pub(crate) fn process_of(tid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(tid)
}

/// Whether thread `tid` is exiting because a signal killed it (its descriptors are being closed
/// by the kernel, not by the program): the flags field of `/proc/TID/stat`.
pub(crate) fn killed(tid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).unwrap_or_default();
    // `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`; comm may hold spaces.
    let flags = stat
        .rfind(')')
        .and_then(|close| stat[close + 1..].split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok());
    flags.is_some_and(|f| f & PF_EXITING != 0 && f & PF_SIGNALED != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_belong_to_their_process_and_live_ones_are_not_killed() {
        let me = std::process::id();
        let thread = std::thread::spawn(|| {
            let link = std::fs::read_link("/proc/thread-self").unwrap_or_default();
            let tid = link.file_name().and_then(|n| n.to_str()?.parse().ok());
            tid.map(|t: u32| (t, process_of(t), killed(t)))
        });
        let (tid, process, dying) = thread.join().ok().flatten().unwrap_or_default();
        assert_ne!(tid, me);
        assert_eq!(process, me);
        assert!(!dying);
        assert_eq!(process_of(me), me);
        assert!(!killed(me));
        assert_eq!(process_of(u32::MAX), u32::MAX, "unknown: itself");
        assert!(!killed(u32::MAX));
    }
}
