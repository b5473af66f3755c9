//! The destination before writing: empty, or an earlier run of the same plan to resume.
//!
//! The run file (`_bucketload/run.json`) records the plan digest before the first shard is
//! written. A shard is kept only if it, its index, and the run file agree with the plan: the
//! index's shard size is the object's size and its sample keys are the planned keys in order
//! (an earlier `--skip-missing` run may have left some out). Anything else of ours is rewritten;
//! anything not ours stops the run.
//!
//! The run file is created with a conditional write (`If-None-Match: *` on S3): of runs that
//! start on one empty prefix at the same time, the first claims it, a run of the same plan (another
//! `--part`) goes on beside it, and a run of another plan stops instead of interleaving its
//! shards with the first's.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use bucketload_format::{MANIFEST_PATHS, ShardEntry, ShardIndex};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bucketload_store::{Store, key_path};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::write::Finished;
use super::{PARTS_DIR, Plan, RUN_PATH, ShardOptions};
use crate::Setting;
use crate::base::{DataKey, Location, warn_unaddressable};
use crate::error::{Error, Result};
use crate::shards::index_key;
use crate::shards::manifest::now_rfc3339;

/// Contents of the run file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunFile {
    plan: String,
    source: String,
    shards: u64,
    samples: u64,
    created: String,
}

/// What the destination already holds.
#[derive(Debug, Default)]
pub(super) struct DestState {
    /// Finished shards of this slice, by shard number.
    pub kept: HashMap<usize, Finished>,
}

/// Checks the destination, clears it with `--overwrite`, writes the run file, and finds the
/// finished shards of `part`.
pub(super) async fn prepare(
    dst: &Store,
    plan: &Plan,
    part: Range<usize>,
    options: &ShardOptions,
    source: &str,
) -> Result<DestState> {
    let location = Location::from_store(dst);
    let (mut listing, foreign) = list(dst).await?;
    let run = read_run(dst).await?;
    if let Some((count, first)) = foreign {
        return Err(Error::invalid_input(format!(
            "the destination {} holds {count} objects that `bucketload shard` did not write \
             (e.g. {}); write the shards to an empty prefix",
            dst.uri(),
            location.uri_of(&key_path(&first))
        )));
    }
    let same_plan = run.as_ref().is_some_and(|r| r.plan == plan.digest);
    if !same_plan && !listing.is_empty() {
        if !options.overwrite {
            return Err(other_plan(dst, run.as_ref(), &plan.digest));
        }
        clear(dst, &listing).await?;
        listing.clear();
    }
    if !same_plan {
        let run = RunFile {
            plan: plan.digest.clone(),
            source: source.to_owned(),
            shards: plan.shards.len() as u64,
            samples: plan.len() as u64,
            created: now_rfc3339(),
        };
        claim(dst, &run).await?;
    }
    abort_unfinished(dst, plan, part.clone()).await;
    let kept = finished(dst, plan, part, &listing, options.md5).await?;
    Ok(DestState { kept })
}

/// Aborts the multipart uploads of this run's shards that an earlier, killed run left unfinished
/// (their parts stay stored, and billed, until aborted). Only this run's shards: a run of
/// another `--part` may be writing its own right now. Best effort: a store that cannot list or
/// abort uploads gets a warning, and sharding goes on.
async fn abort_unfinished(dst: &Store, plan: &Plan, part: Range<usize>) {
    let names: HashSet<String> = part.map(|i| plan.shard_name(i)).collect();
    let uploads = match dst.list_uploads("").await {
        Ok(uploads) => uploads,
        Err(e) => {
            tracing::warn!("cannot list unfinished uploads an earlier run may have left: {e}");
            return;
        }
    };
    let mut aborted = 0;
    for upload in uploads.iter().filter(|u| names.contains(&u.key)) {
        match dst.abort_upload(&upload.key, &upload.upload_id).await {
            Ok(()) => aborted += 1,
            Err(e) => tracing::warn!("cannot abort an unfinished upload of {}: {e}", upload.key),
        }
    }
    if aborted > 0 {
        tracing::info!(
            "aborted {aborted} unfinished upload(s) an earlier run left in {}",
            dst.uri()
        );
    }
}

/// What a sharding run wrote below `dst` (key → size; a few objects a shard), streamed from
/// the listing, and how many other objects there are with the first of them by key.
pub(super) async fn list(dst: &Store) -> Result<(HashMap<String, u64>, Option<(u64, String)>)> {
    let location = Location::from_store(dst);
    let mut listing = crate::base::list_each(&location);
    let (mut ours, mut foreign) = (HashMap::new(), None::<(u64, String)>);
    while let Some(object) = listing.try_next().await? {
        let key = match object.key {
            DataKey::Path(path) => path.to_string(),
            DataKey::Raw(key) => {
                // Never a name of ours: left out, as the shard tools read through paths.
                warn_unaddressable(&location, &key);
                continue;
            }
        };
        if is_ours(&key) {
            ours.insert(key, object.size);
            continue;
        }
        foreign = Some(match foreign {
            None => (1, key),
            Some((n, first)) => (n + 1, first.min(key)),
        });
    }
    Ok((ours, foreign))
}

/// Whether a sharding run writes objects named `key`.
pub(super) fn is_ours(key: &str) -> bool {
    let shard_like = |k: &str| {
        k.strip_prefix("shard-")
            .and_then(|rest| rest.strip_suffix(".tar"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    MANIFEST_PATHS.contains(&key)
        || key == RUN_PATH
        || key.starts_with(&format!("{PARTS_DIR}/"))
        || shard_like(key)
        || key.strip_suffix(".idx").is_some_and(shard_like)
}

async fn read_run(dst: &Store) -> Result<Option<RunFile>> {
    let location = Location::from_store(dst);
    let key = Path::from(RUN_PATH);
    let get = match dst.object_store().get(&key).await {
        Ok(get) => get,
        Err(bucketload_store::object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(location.error(&key, e)),
    };
    let bytes = get.bytes().await.map_err(|e| location.error(&key, e))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Corrupt {
            uri: location.uri_of(&key),
            reason: format!(
                "{e}; delete it, or set {} to start over",
                Setting::Overwrite
            ),
        })
}

/// What a run record plans: shards and samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Planned {
    pub(crate) shards: u64,
    pub(crate) samples: u64,
}

/// The plan of the run record at the root of `location`, if there is one.
pub(crate) async fn planned(location: &Location) -> Result<Option<Planned>> {
    let key = Path::from(RUN_PATH);
    let get = match location.store().get(&key).await {
        Ok(get) => get,
        Err(bucketload_store::object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(location.error(&key, e)),
    };
    let bytes = get.bytes().await.map_err(|e| location.error(&key, e))?;
    let run: RunFile = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
        uri: location.uri_of(&key),
        reason: format!("{e}; it is the record of a `bucketload shard` run"),
    })?;
    Ok(Some(Planned {
        shards: run.shards,
        samples: run.samples,
    }))
}

fn other_plan(dst: &Store, run: Option<&RunFile>, digest: &str) -> Error {
    let what = match run {
        Some(r) => format!(
            "shards of another plan ({} from {}, started {})",
            r.plan, r.source, r.created
        ),
        None => "shards of an unknown run (no run file)".to_owned(),
    };
    Error::invalid_input(format!(
        "the destination {} holds {what}, but this run's plan is {digest}: the source listing or \
         the options changed since. Shard into an empty prefix, or set {} to delete those \
         shards and start over",
        dst.uri(),
        Setting::Overwrite
    ))
}

/// Deletes an earlier run's objects, the manifest first so no reader follows it to a deleted
/// shard.
async fn clear(dst: &Store, listing: &HashMap<String, u64>) -> Result<()> {
    let location = Location::from_store(dst);
    let mut keys: Vec<&String> = listing.keys().collect();
    keys.sort_by_key(|k| {
        (
            !MANIFEST_PATHS.contains(&k.as_str()),
            k.as_str() == RUN_PATH,
            k.as_str(),
        )
    });
    tracing::info!(objects = keys.len(), "deleting an earlier run's objects");
    for key in keys {
        let path = key_path(key);
        dst.delete_key(&path)
            .await
            .map_err(|e| location.error(&path, e))?;
    }
    Ok(())
}

/// Sends of the run file's conditional write whose connection broke. object_store sends a
/// conditional PUT again only when it was not sent; one whose answer was lost may have taken
/// effect, and sending it again is safe here: "already exists" is then checked against the run
/// file like a concurrent run's. Five: a lost answer is rare, five in a row is a broken link.
const CLAIM_ATTEMPTS: u32 = 5;

/// Whether a write failed in transit (its connection broke or timed out, so its answer is lost,
/// maybe after it took effect), rather than being refused.
fn lost_answer(e: &bucketload_store::object_store::Error) -> bool {
    use bucketload_store::object_store::client::{HttpError, HttpErrorKind};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(http) = c.downcast_ref::<HttpError>() {
            return matches!(
                http.kind(),
                HttpErrorKind::Interrupted | HttpErrorKind::Timeout | HttpErrorKind::Request
            );
        }
        cause = c.source();
    }
    false
}

/// Creates the run file only if there is none: a run file that appeared since the listing
/// belongs to a run that started at the same time — fine if it has this plan, else an error.
/// A store that cannot write conditionally gets the run file unconditionally (with a warning).
async fn claim(dst: &Store, run: &RunFile) -> Result<()> {
    use bucketload_store::object_store::{Error as StoreError, PutMode, PutOptions};
    let key = Path::from(RUN_PATH);
    let json = PutPayload::from(serde_json::to_vec_pretty(run).unwrap_or_default());
    let create = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let location = Location::from_store(dst);
    let mut attempt = 1;
    let answer = loop {
        let answer = dst
            .object_store()
            .put_opts(&key, json.clone(), create.clone())
            .await;
        match answer {
            Err(e) if attempt < CLAIM_ATTEMPTS && lost_answer(&e) => {
                tracing::info!("the run file's write lost its answer ({e}); sending it again");
                attempt += 1;
            }
            answer => break answer,
        }
    };
    match answer {
        Ok(_) => Ok(()),
        Err(StoreError::AlreadyExists { .. } | StoreError::Precondition { .. }) => {
            match read_run(dst).await? {
                Some(theirs) if theirs.plan == run.plan => Ok(()),
                theirs => Err(Error::invalid_input(format!(
                    "another `bucketload shard` run started writing to {} at the same time: {}",
                    dst.uri(),
                    other_plan(dst, theirs.as_ref(), &run.plan)
                ))),
            }
        }
        Err(StoreError::NotImplemented { .. }) => {
            tracing::warn!(
                "{} cannot write conditionally: two runs started on it at once could mix their shards",
                dst.uri()
            );
            dst.object_store()
                .put(&key, json)
                .await
                .map_err(|e| location.error(&key, e))?;
            Ok(())
        }
        Err(e) => Err(location.error(&key, e)),
    }
}

/// The shards of `part` that an earlier run finished, checked against the plan.
async fn finished(
    dst: &Store,
    plan: &Plan,
    part: Range<usize>,
    listing: &HashMap<String, u64>,
    md5: bool,
) -> Result<HashMap<usize, Finished>> {
    let candidates: Vec<(usize, String, u64)> = part
        .filter_map(|i| {
            let name = plan.shard_name(i);
            let size = *listing.get(&name)?;
            listing
                .contains_key(index_key(&Path::from(name.as_str())).as_ref())
                .then_some((i, name, size))
        })
        .collect();
    futures::stream::iter(candidates)
        .map(|(i, name, size)| async move {
            let kept = check_shard(dst, plan, i, &name, size, md5).await?;
            Ok::<_, Error>(kept.map(|f| (i, f)))
        })
        .buffer_unordered(32)
        .try_filter_map(|x| futures::future::ready(Ok(x)))
        .try_collect()
        .await
}

/// Reads shard `i`'s index; `Some` if it matches the plan (and has an MD5 if `md5` is asked
/// for).
async fn check_shard(
    dst: &Store,
    plan: &Plan,
    i: usize,
    name: &str,
    size: u64,
    md5: bool,
) -> Result<Option<Finished>> {
    let location = Location::from_store(dst);
    let key = index_key(&Path::from(name));
    let get = dst.object_store().get(&key).await;
    let bytes = match get {
        Ok(get) => get.bytes().await.map_err(|e| location.error(&key, e))?,
        Err(bucketload_store::object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(location.error(&key, e)),
    };
    let Ok(index) = ShardIndex::parse(&location.uri_of(&key), &bytes) else {
        tracing::warn!(index = %location.uri_of(&key), "unreadable index; the shard is redone");
        return Ok(None);
    };
    let positions = plan.shards[i].clone();
    let planned: Vec<String> = plan.samples(positions.clone()).map(|s| s.key).collect();
    let planned: Vec<&str> = planned.iter().map(String::as_str).collect();
    let keys: Vec<String> = index.samples.iter().map(|s| s.key.clone()).collect();
    if index.shard_size != size || !is_subsequence(&keys, &planned) {
        tracing::warn!(shard = name, "does not match the plan; it is redone");
        return Ok(None);
    }
    if md5 && index.md5().is_none() {
        tracing::info!(
            shard = name,
            "has no MD5 and the run asks for one; it is redone"
        );
        return Ok(None);
    }
    let summary = bucketload_format::ShardSummary {
        size: index.shard_size,
        crc32c: index.shard_crc32c,
        md5: index.shard_md5,
        members: index.member_count(),
    };
    let entry = ShardEntry::from_summary(name, key.to_string(), keys.len() as u64, &summary);
    let held: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let left_out = positions
        .zip(&planned)
        .filter(|(_, key)| !held.contains(**key))
        .map(|(p, _)| p)
        .collect();
    Ok(Some(Finished { entry, left_out }))
}

/// Whether `keys` appear in `planned` in the same order (some may be left out).
fn is_subsequence(keys: &[String], planned: &[&str]) -> bool {
    let set: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let kept: Vec<&str> = planned
        .iter()
        .copied()
        .filter(|k| set.contains(k))
        .collect();
    kept.len() == keys.len() && kept.iter().zip(keys).all(|(a, b)| *a == b.as_str())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(plan: &str) -> RunFile {
        RunFile {
            plan: plan.to_owned(),
            source: "s3://src/".to_owned(),
            shards: 1,
            samples: 1,
            created: now_rfc3339(),
        }
    }

    #[tokio::test]
    async fn only_one_plan_claims_a_destination() {
        let server = bucketload_test_support::EmbeddedServer::start().await;
        let bucket = server.bucket().await;
        let dst = Store::open(&format!("s3://{bucket}/shards"), &server.store_config()).unwrap();
        claim(&dst, &run("plan-a")).await.unwrap();
        // Another --part of the same plan goes on; another plan stops, and the run file stays.
        claim(&dst, &run("plan-a")).await.unwrap();
        let err = claim(&dst, &run("plan-b")).await.unwrap_err().to_string();
        assert!(
            err.contains("at the same time") && err.contains("plan-a"),
            "{err}"
        );
        assert_eq!(read_run(&dst).await.unwrap().unwrap().plan, "plan-a");
        // The same on a local directory.
        let dir = tempfile::tempdir().unwrap();
        let local = Store::open(dir.path().to_str().unwrap(), &server.store_config()).unwrap();
        claim(&local, &run("plan-a")).await.unwrap();
        assert!(claim(&local, &run("plan-b")).await.is_err());
    }

    #[test]
    fn only_shards_indexes_and_bookkeeping_are_ours() {
        for key in [
            "shard-000000.tar",
            "shard-1234567.tar.idx",
            "_bucketload/manifest.json",
            "_bucketload/manifest.bin",
            "_bucketload/run.json",
            "_bucketload/parts/part-00000-of-00002.json",
        ] {
            assert!(is_ours(key), "{key}");
        }
        for key in [
            "shard-.tar",
            "shard-0a.tar",
            "data/shard-000000.tar",
            "x.jpg",
        ] {
            assert!(!is_ours(key), "{key}");
        }
    }

    #[test]
    fn kept_shards_may_have_left_samples_out_but_not_reordered_them() {
        let planned = ["a", "b", "c"];
        let keys = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(is_subsequence(&keys(&["a", "b", "c"]), &planned));
        assert!(is_subsequence(&keys(&["a", "c"]), &planned));
        assert!(!is_subsequence(&keys(&["c", "a"]), &planned));
        assert!(!is_subsequence(&keys(&["a", "x"]), &planned));
    }
}
