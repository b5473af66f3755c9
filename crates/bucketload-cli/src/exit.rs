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
//! | 7    | partial: `cp -r` copied what it could and named each object it could not |
//! | 130  | interrupted by Ctrl-C |

use std::io::Write;

use bucketload::{ErrorKind, Hint, Setting};
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
/// Partial: some objects were done, the others named on stderr.
pub const PARTIAL: u8 = 7;
/// Interrupted.
pub const INTERRUPTED: u8 = 130;

/// Shown at the end of `--help`.
pub const EXIT_CODES_HELP: &str = "Exit codes: 0 ok, 1 other error, 2 usage, 3 not found, \
4 permission/credentials, 5 unreachable/network, 6 invalid input/data, 7 partial (the objects \
left out are named), 130 interrupted";

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
    let hints = bucketload::hints(err.as_ref());
    let mut out = vec![format!("error: {}", say(&err.to_string(), &hints))];
    let mut previous = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !previous.contains(&text) {
            out.push(format!("  caused by: {}", say(&text, &hints)));
        }
        previous = text;
    }
    out
}

/// `err` and its causes on one line, joined by `: ` (for warnings).
pub fn one_line(err: &anyhow::Error) -> String {
    let hints = bucketload::hints(err.as_ref());
    let mut parts = vec![say(&err.to_string(), &hints)];
    let mut previous = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !previous.contains(&text) {
            parts.push(say(&text, &hints));
        }
        previous = text;
    }
    parts.join(": ")
}

/// One line of text from an error message: an S3 XML error body becomes its code and message
/// (`SignatureDoesNotMatch: ...`), and line breaks become spaces.
/// `text` tidied, its hints in the CLI's words.
fn say(text: &str, hints: &[Hint]) -> String {
    let worded = bucketload::reword(text, hints, words);
    tidy(&Setting::reword(&worded, |s| Some(flag(s).to_owned())))
}

/// The CLI's flag for a setting an engine message names.
fn flag(setting: Setting) -> &'static str {
    match setting {
        Setting::Format => "--format",
        Setting::LabelFrom => "--label-from",
        Setting::ShardSize => "--shard-size",
        Setting::SamplesPerShard => "--samples-per-shard",
        Setting::Part => "--part",
        Setting::Overwrite => "--overwrite",
        Setting::Md5 => "--md5",
        Setting::Samples => "--samples",
        Setting::Classes => "--classes",
        Setting::Size => "--size",
        Setting::Concurrency => "--concurrency",
        Setting::Augment => "--augment",
        Setting::ImageSize => "--image-size",
        Setting::Resize => "--resize",
        Setting::Mean => "--mean",
        Setting::Std => "--std",
        Setting::Scale => "--crop-scale",
        Setting::Ratio => "--crop-ratio",
        Setting::UseManifest => "--no-manifest",
        Setting::CheckManifest => "--check-manifest",
        Setting::AllowIncomplete => "--allow-incomplete",
    }
}

/// The CLI's words for what the user can do: its flags and commands.
fn words(hint: &Hint) -> Option<String> {
    use bucketload_format::Hint as F;
    use bucketload_store::Hint as S;
    Some(match hint {
        Hint::Store(S::LowerConcurrency) => {
            "lower --concurrency, pass --retry-mode adaptive, or try later".to_owned()
        }
        Hint::Store(S::CheckKey { listing }) => {
            format!("check the key with `bucketload ls {listing}`")
        }
        Hint::Store(S::CheckWritten { uri }) => {
            format!("look with `bucketload ls {uri}` before writing it again")
        }
        Hint::Store(S::CheckBucket) => {
            "create it first or check the bucket name and --endpoint".to_owned()
        }
        Hint::Store(S::CheckCredentials) => {
            "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --profile".to_owned()
        }
        Hint::Store(S::BucketTaken) => "the bucket exists but these credentials may not use it \
            (another account owns the name?): choose another bucket name, or check \
            AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --profile"
            .to_owned(),
        Hint::Store(S::NoCredentials) => "no credentials were found in AWS_ACCESS_KEY_ID/\
            AWS_SECRET_ACCESS_KEY, ~/.aws, web identity or container settings (instance \
            metadata was tried); set them, pass --profile, or --no-sign-request for a public \
            bucket"
            .to_owned(),
        Hint::Format(F::VerifyShards) => {
            "the shard is corrupt, re-create it or run `bucketload verify`".to_owned()
        }
        Hint::Format(F::Reindex) => "re-create it with `bucketload index`".to_owned(),
        Hint::Format(F::ReindexOrReshard) => "rebuild it with `bucketload index` (or re-create \
            the shards with `bucketload shard`)"
            .to_owned(),
        Hint::RefreshManifest { command } => {
            format!("refresh it with `{command}`, or read the dataset without it: --no-manifest")
        }
        Hint::Format(F::RewriteManifest) => "write it again with `bucketload manifest` (one \
            object per sample) or `bucketload shard --overwrite` (shards), or read the dataset \
            without it: --no-manifest"
            .to_owned(),
        _ => return None,
    })
}

fn tidy(text: &str) -> String {
    let mut out = text.to_owned();
    while let Some(start) = out.find("<?xml").or_else(|| out.find("<Error>")) {
        let end = out[start..]
            .find("</Error>")
            .map_or(out.len(), |e| start + e + "</Error>".len());
        let body = &out[start..end];
        let summary = match (element(body, "Code"), element(body, "Message")) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_owned(),
            (None, Some(message)) => message.to_owned(),
            (None, None) => "(an XML error body)".to_owned(),
        };
        out.replace_range(start..end, &summary);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of `<name>...</name>` in `xml`, if present.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&format!("</{name}>"))?;
    Some(xml[start..start + len].trim())
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The exit code of the first error in the chain that has a meaning.
pub fn code_of(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<crate::cmd::cp::PartialCopy>().is_some() {
        return PARTIAL;
    }
    kind_of(err).map_or(OTHER, code)
}

/// The kind of the first error in the chain whose kind says more than "other".
pub fn kind_of(err: &anyhow::Error) -> Option<ErrorKind> {
    err.chain()
        .filter_map(classify)
        .find(|k| *k != ErrorKind::Other)
}

/// The exit code of each [`ErrorKind`]: the documented table of docs/CLI.md.
pub fn code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::NotFound => NOT_FOUND,
        ErrorKind::PermissionDenied => PERMISSION,
        ErrorKind::Unreachable | ErrorKind::Throttled => NETWORK,
        ErrorKind::InvalidInput | ErrorKind::Corrupt => INVALID,
        ErrorKind::Store | ErrorKind::Other => OTHER,
    }
}

/// The kind of one error of the chain, if it is one of ours or an OS error.
fn classify(cause: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    if let Some(e) = cause.downcast_ref::<bucketload::Error>() {
        return Some(e.kind());
    }
    if let Some(e) = cause.downcast_ref::<bucketload_store::Error>() {
        return Some(e.kind());
    }
    if let Some(e) = cause.downcast_ref::<bucketload_image::Error>() {
        return Some(bucketload::image_kind(e));
    }
    if let Some(e) = cause.downcast_ref::<bucketload_fuse::Error>() {
        return Some(e.kind());
    }
    if let Some(e) = cause.downcast_ref::<bucketload_cache::Error>() {
        return Some(cache_kind(e));
    }
    if let Some(e) = cause.downcast_ref::<bucketload_server::Error>() {
        return Some(server_kind(e));
    }
    cause
        .downcast_ref::<std::io::Error>()
        .and_then(ErrorKind::of_io)
}

fn server_kind(err: &bucketload_server::Error) -> ErrorKind {
    use bucketload_server::Error as E;
    match err {
        E::InvalidConfig { .. } | E::InvalidLatency { .. } | E::InvalidFaults { .. } => {
            ErrorKind::InvalidInput
        }
        _ => ErrorKind::Other,
    }
}

fn cache_kind(err: &bucketload_cache::Error) -> ErrorKind {
    use bucketload_cache::Error as E;
    match err {
        E::InvalidConfig { .. } => ErrorKind::InvalidInput,
        _ => ErrorKind::Other,
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
            hint: String::new().into(),
        };
        assert_eq!(
            code_of(&anyhow::Error::new(nf).context("copying")),
            NOT_FOUND
        );
        let engine = bucketload::Error::invalid_input("bad");
        assert_eq!(code_of(&anyhow::Error::new(engine)), INVALID);
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no");
        assert_eq!(code_of(&anyhow::Error::new(io)), PERMISSION);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), OTHER);
    }

    /// The documented table of docs/CLI.md, kind by kind; and a store error inside an engine
    /// error keeps its code (a failed copy of a missing object is 3, not 1).
    #[test]
    fn codes_follow_the_documented_table() {
        let table = [
            (ErrorKind::NotFound, 3),
            (ErrorKind::PermissionDenied, 4),
            (ErrorKind::Unreachable, 5),
            (ErrorKind::Throttled, 5),
            (ErrorKind::InvalidInput, 6),
            (ErrorKind::Corrupt, 6),
            (ErrorKind::Store, 1),
            (ErrorKind::Other, 1),
        ];
        assert_eq!(table.len(), ErrorKind::ALL.len());
        for (kind, exit) in table {
            assert_eq!(code(kind), exit, "{kind:?}");
        }
        let image = bucketload_image::Error::UnknownFormat {
            key: "k.jpg".into(),
            magic: vec![0, 1],
        };
        assert_eq!(
            code_of(&anyhow::Error::new(image).context("decoding")),
            INVALID
        );
        let partial = crate::cmd::cp::PartialCopy { not_copied: 2 };
        assert_eq!(code_of(&anyhow::Error::new(partial)), PARTIAL);
    }

    /// Hints come as data from the engine's crates and are printed in the CLI's words, also
    /// inside an engine error and under a context.
    #[test]
    fn hints_name_the_cli_flags_and_commands() {
        let missing = bucketload_store::Error::NotFound {
            uri: "s3://b/k".into(),
            what: "object",
            hint: bucketload_store::Hint::CheckKey {
                listing: "s3://b/".into(),
            },
        };
        let err = anyhow::Error::new(bucketload::Error::from(missing)).context("copying");
        assert_eq!(
            one_line(&err),
            "copying: s3://b/k: object not found; check the key with `bucketload ls s3://b/`"
        );
        let corrupt = bucketload_format::Error::CorruptIndex {
            index: "s.idx".into(),
            offset: 8,
            reason: "bad magic".into(),
        };
        assert_eq!(
            lines(&anyhow::Error::new(corrupt)),
            vec![
                "error: s.idx at byte 8: corrupt shard index: bad magic; re-create it with \
                 `bucketload index`"
            ]
        );
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
    fn xml_error_bodies_become_code_and_message() {
        let text = "Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\" \
                    encoding=\"UTF-8\"?>\n<Error>\n  <Code>SignatureDoesNotMatch</Code>\n  \
                    <Message>The signature does not match</Message>\n</Error>";
        assert_eq!(
            tidy(text),
            "Server returned non-2xx status code: 403 Forbidden: SignatureDoesNotMatch: The \
             signature does not match"
        );
        assert_eq!(
            tidy("403: <Error><Code>AccessDenied</Code></Error>"),
            "403: AccessDenied"
        );
        assert_eq!(
            tidy("cut <?xml version=\"1.0\"?><Err"),
            "cut (an XML error body)"
        );
        assert_eq!(tidy("plain\ntext"), "plain text");
    }

    #[test]
    fn broken_pipe_is_success() {
        let err = anyhow::Error::new(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "closed",
        ))
        .context("writing");
        assert!(is_broken_pipe(&err));
        assert_eq!(report(&err), ExitCode::SUCCESS);
    }
}
