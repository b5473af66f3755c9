//! Logging on stderr, secrets redacted, and panics logged as one line.

use crate::redact;

/// The most s3s may log unless RUST_LOG names it (see [`init`]).
const S3S_CAP: &str = "s3s=info";

/// Logs go to stderr; quiet by default so command output stays clean. Colours only on a
/// terminal: a log redirected to a file or a pipe holds plain text.
pub fn init(verbose: u8) {
    // s3s prints whole requests at debug (headers, presigned query strings) and the
    // signature it expected on a mismatch: it stays at info unless RUST_LOG names it, and
    // every line is redacted anyway (see `redact`).
    let default = match verbose {
        0 => "warn",
        1 => "info,bucketload=info",
        _ => "debug,hyper=info,h2=info,rustls=info,s3s=info",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) => {
            let filter = tracing_subscriber::EnvFilter::new(&directives);
            if directives.contains("s3s") {
                filter
            } else {
                filter.add_directive(S3S_CAP.parse().expect("S3S_CAP is a valid directive"))
            }
        }
        Err(_) => tracing_subscriber::EnvFilter::new(default),
    };
    for name in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] {
        if let Ok(value) = std::env::var(name) {
            redact::add_secret(&value);
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(redact::RedactingStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// A panic (a bug, caught and reported as an error with its message) is logged as one line with
/// where it happened, not printed with a backtrace: the user sees `error: …`, as for any other
/// failure. `RUST_BACKTRACE` set brings the default report back, for debugging.
pub fn quiet_panics() {
    if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, "panic: {}", bucketload::panics::message(info.payload()));
    }));
}
