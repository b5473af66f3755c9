//! Error reporting and exit codes.
//!
//! `main` prints `error: <message>` and each cause as `  caused by: <cause>` on stderr, never a
//! backtrace; a panic (a bug) is caught, reported as an error with its message, and exits 1,
//! never Rust's 101. The exit code comes from the first classified error in the chain:
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | success (also when stdout is closed early, e.g. `bucketload ls ... \| head`) |
//! | 1    | any other error |
//! | 2    | usage: unknown command or flag, missing or malformed argument |
//! | 3    | not found: bucket, object, prefix or local file |
//! | 4    | permission denied or bad credentials |
//! | 5    | endpoint unreachable, network failure, or throttled after retries |
//! | 6    | invalid input or data: bad URI, bad size, bad range, corrupt object |
//! | 130  | interrupted by Ctrl-C |

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// Other errors.
pub const OTHER: u8 = 1;
/// Usage errors (clap).
pub const USAGE: u8 = 2;
/// Not found.
pub const NOT_FOUND: u8 = 3;
/// Permission denied / credentials.
pub const PERMISSION: u8 = 4;
/// Unreachable / network.
pub const NETWORK: u8 = 5;
/// Invalid input or data.
pub const INVALID: u8 = 6;
/// Interrupted.
pub const INTERRUPTED: u8 = 130;

/// Shown at the end of `--help`.
pub const EXIT_CODES_HELP: &str = "Exit codes: 0 ok, 1 other error, 2 usage, 3 not found, \
4 permission/credentials, 5 unreachable/network, 6 invalid input/data, 130 interrupted";

/// Prints a clap error (help and version go to stdout with code 0).
pub fn usage(err: clap::Error) -> ExitCode {
    let _ = err.print();
    if err.use_stderr() {
        ExitCode::from(USAGE)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints an interruption.
pub fn interrupted() -> ExitCode {
    eprintln!("error: interrupted");
    ExitCode::from(INTERRUPTED)
}

/// Prints the error chain and picks the exit code.
pub fn report(err: &anyhow::Error) -> ExitCode {
    if is_broken_pipe(err) {
        return ExitCode::SUCCESS;
    }
    let mut stderr = std::io::stderr().lock();
    for line in lines(err) {
        let _ = writeln!(stderr, "{line}");
    }
    ExitCode::from(code_of(err))
}

/// `error: ...` then one `  caused by: ...` per cause, skipping causes whose text the previous
/// line already holds (object_store nests each layer's message inside the next).
fn lines(err: &anyhow::Error) -> Vec<String> {
    let mut out = vec![format!("error: {err}")];
    let mut previous = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !previous.contains(&text) {
            out.push(format!("  caused by: {text}"));
        }
        previous = text;
    }
    out
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == ErrorKind::BrokenPipe)
    })
}

/// The exit code of the first error in the chain that has a meaning.
pub fn code_of(err: &anyhow::Error) -> u8 {
    err.chain().find_map(classify).unwrap_or(OTHER)
}

fn classify(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if let Some(e) = cause.downcast_ref::<bucketload::Error>() {
        return engine_code(e);
    }
    if let Some(e) = cause.downcast_ref::<bucketload_store::Error>() {
        return store_code(e);
    }
    if let Some(e) = cause.downcast_ref::<bucketload_server::Error>() {
        return server_code(e);
    }
    if let Some(e) = cause.downcast_ref::<std::io::Error>() {
        return io_code(e);
    }
    None
}

fn engine_code(err: &bucketload::Error) -> Option<u8> {
    match err {
        bucketload::Error::Store(e) | bucketload::Error::Copy { source: e, .. } => store_code(e),
        bucketload::Error::InvalidInput { .. }
        | bucketload::Error::Corrupt { .. }
        | bucketload::Error::Format(_) => Some(INVALID),
        _ => None,
    }
}

fn store_code(err: &bucketload_store::Error) -> Option<u8> {
    use bucketload_store::Error as E;
    match err {
        E::NotFound { .. } => Some(NOT_FOUND),
        E::PermissionDenied { .. } => Some(PERMISSION),
        E::Unreachable { .. } | E::Throttled { .. } => Some(NETWORK),
        E::InvalidUri { .. } | E::InvalidInput { .. } | E::Corrupt { .. } => Some(INVALID),
        _ => None,
    }
}

fn server_code(err: &bucketload_server::Error) -> Option<u8> {
    use bucketload_server::Error as E;
    match err {
        E::InvalidConfig { .. } | E::InvalidLatency { .. } | E::InvalidFaults { .. } => {
            Some(INVALID)
        }
        _ => None,
    }
}

fn io_code(err: &std::io::Error) -> Option<u8> {
    match err.kind() {
        ErrorKind::NotFound => Some(NOT_FOUND),
        ErrorKind::PermissionDenied => Some(PERMISSION),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset | ErrorKind::TimedOut => {
            Some(NETWORK)
        }
        ErrorKind::InvalidInput | ErrorKind::InvalidData => Some(INVALID),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_first_classified_cause() {
        let nf = bucketload_store::Error::NotFound {
            uri: "s3://b/k".into(),
            what: "object",
            hint: String::new(),
        };
        assert_eq!(
            code_of(&anyhow::Error::new(nf).context("copying")),
            NOT_FOUND
        );
        let engine = bucketload::Error::invalid_input("bad");
        assert_eq!(code_of(&anyhow::Error::new(engine)), INVALID);
        let io = std::io::Error::new(ErrorKind::PermissionDenied, "no");
        assert_eq!(code_of(&anyhow::Error::new(io)), PERMISSION);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), OTHER);
    }

    #[test]
    fn nested_causes_are_printed_once() {
        let inner = std::io::Error::other("connection refused");
        let err = anyhow::Error::new(inner)
            .context("tcp connect: connection refused")
            .context("cannot reach s3://b");
        assert_eq!(
            lines(&err),
            vec![
                "error: cannot reach s3://b",
                "  caused by: tcp connect: connection refused"
            ]
        );
    }

    #[test]
    fn broken_pipe_is_success() {
        let err = anyhow::Error::new(std::io::Error::new(ErrorKind::BrokenPipe, "closed"))
            .context("writing");
        assert!(is_broken_pipe(&err));
        assert_eq!(report(&err), ExitCode::SUCCESS);
    }
}
