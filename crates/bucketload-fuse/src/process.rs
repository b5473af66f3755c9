//! Which process sent a request, from `/proc`: FUSE reports the thread that made the call.

/// `PF_EXITING` in the kernel's task flags: the task is exiting.
const PF_EXITING: u64 = 0x4;
/// The fields of `/proc/TID/stat` after `(comm)`, counted from 0: `state` is field 3.
const FLAGS: usize = 9 - 3;
const EXIT_CODE: usize = 52 - 3;

/// The process (thread group) of thread `tid`; `tid` itself when `/proc` does not know it.
pub(crate) fn process_of(tid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(tid)
}

/// Whether thread `tid` is exiting because a signal killed its process: its descriptors are
/// being closed by the kernel, not by the program. The task is exiting (`PF_EXITING`) with a
/// wait status that says "killed by a signal". The status, not `PF_SIGNALED`: when a process
/// exits normally, its other threads are killed and carry that flag, and the last of them to
/// exit closes the files; their status is the process's exit status. `false` when `/proc`
/// does not show the status (another user's process).
pub(crate) fn killed(tid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).unwrap_or_default();
    // `pid (comm) state ...`; comm may hold spaces and parentheses.
    let fields: Vec<&str> = match stat.rfind(')') {
        Some(close) => stat[close + 1..].split_whitespace().collect(),
        None => return false,
    };
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (field(FLAGS), field(EXIT_CODE)) {
        // The low seven bits of a wait status are the signal that ended the process.
        (Some(flags), Some(status)) => flags & PF_EXITING != 0 && status & 0x7f != 0,
        _ => false,
    }
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
