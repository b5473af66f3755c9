//! Checkpoints in a local directory: written to a hidden temporary file beside the final name,
//! `fsync`ed, renamed over the name, and the directory `fsync`ed — so the name holds either the
//! old checkpoint or the whole new one, even across a power cut.

use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::{Error, Result};

/// Marks the temporary file of a save in progress: `.<name>.partial-<pid>-<nanos>`.
pub(super) const PARTIAL_MARK: &str = ".partial-";

/// The directory of a local checkpoint URI (`file:///dir` or a path); `None` for other schemes.
pub(super) fn local_dir(uri: &str) -> Result<Option<PathBuf>> {
    let path = match uri.strip_prefix("file://") {
        // As the store crate reads them: `file:///abs` or `file://localhost/abs`.
        Some(rest) => match rest.strip_prefix("localhost").unwrap_or(rest) {
            abs if abs.starts_with('/') => PathBuf::from(abs),
            _ => {
                return Err(Error::invalid_input(format!(
                    "`{uri}`: file URIs need an absolute path, e.g. file:///data/ckpt"
                )));
            }
        },
        None if uri.contains("://") => return Ok(None),
        None => PathBuf::from(uri),
    };
    let absolute = std::path::absolute(&path)
        .map_err(|e| io_error(&path, "resolve the checkpoint directory", e))?;
    Ok(Some(absolute))
}

pub(super) fn io_error(path: &Path, action: &str, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        action: action.to_owned(),
        source,
    }
}

/// A save in progress to a local directory; dropping it unfinished, or after a failure (a
/// failed write, fsync or rename), removes the temporary file.
#[derive(Debug)]
pub(super) struct LocalWriter {
    file: Option<std::fs::File>,
    temp: PathBuf,
    dest: PathBuf,
    /// The temporary file was renamed into place or removed: nothing is left to clean up.
    settled: bool,
}

impl LocalWriter {
    pub(super) async fn create(dir: &Path, name: &str) -> Result<LocalWriter> {
        let dest = dir.join(name);
        let parent = dest.parent().unwrap_or(dir).to_path_buf();
        let file_name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let temp = parent.join(format!(
            ".{file_name}{PARTIAL_MARK}{}-{nanos}",
            std::process::id()
        ));
        let t = temp.clone();
        let file = blocking(move || {
            std::fs::create_dir_all(&parent)
                .map_err(|e| io_error(&parent, "create the checkpoint directory", e))?;
            std::fs::File::create(&t).map_err(|e| io_error(&t, "create", e))
        })
        .await?;
        Ok(LocalWriter {
            file: Some(file),
            temp,
            dest,
            settled: false,
        })
    }

    pub(super) async fn write(&mut self, data: &Bytes) -> Result<()> {
        let mut file = self.file.take().ok_or_else(|| gone(&self.dest))?;
        let (data, temp) = (data.clone(), self.temp.clone());
        let file = blocking(move || {
            file.write_all(&data)
                .map_err(|e| io_error(&temp, "write", e))?;
            Ok(file)
        })
        .await?;
        self.file = Some(file);
        Ok(())
    }

    pub(super) async fn finish(mut self) -> Result<()> {
        let file = self.file.take().ok_or_else(|| gone(&self.dest))?;
        let (temp, dest) = (self.temp.clone(), self.dest.clone());
        let done = blocking(move || {
            file.sync_all().map_err(|e| io_error(&temp, "fsync", e))?;
            drop(file);
            std::fs::rename(&temp, &dest).map_err(|e| io_error(&dest, "rename into place", e))?;
            if let Some(parent) = dest.parent() {
                // The rename is durable once the directory is.
                std::fs::File::open(parent)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| io_error(parent, "fsync the directory", e))?;
            }
            Ok(())
        })
        .await;
        self.settled = done.is_ok();
        done
    }

    pub(super) async fn abort(mut self) -> Result<()> {
        self.file = None;
        let temp = self.temp.clone();
        let removed = blocking(move || match std::fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(&temp, "remove", e)),
            _ => Ok(()),
        })
        .await;
        self.settled = removed.is_ok();
        removed
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        // Unfinished, or failed on the way: the temporary file must not stay behind.
        if !self.settled {
            self.file = None;
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

fn gone(dest: &Path) -> Error {
    Error::invalid_input(format!(
        "the save of {} failed earlier; start a new save",
        dest.display()
    ))
}

/// Runs blocking file work on the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task {
            reason: e.to_string(),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_uris_are_directories() {
        assert_eq!(
            local_dir("file:///tmp/ck").unwrap(),
            Some(PathBuf::from("/tmp/ck"))
        );
        assert!(local_dir("s3://b/ck").unwrap().is_none());
        assert!(local_dir("ck").unwrap().unwrap().is_absolute());
    }

    #[tokio::test]
    async fn a_dropped_save_leaves_the_old_checkpoint_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.pt"), b"old").unwrap();
        let mut w = LocalWriter::create(dir.path(), "c.pt").await.unwrap();
        w.write(&Bytes::from_static(b"new but unfinished"))
            .await
            .unwrap();
        drop(w);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        assert_eq!(std::fs::read(dir.path().join("c.pt")).unwrap(), b"old");
        let mut w = LocalWriter::create(dir.path(), "c.pt").await.unwrap();
        w.write(&Bytes::from_static(b"new")).await.unwrap();
        w.finish().await.unwrap();
        assert_eq!(std::fs::read(dir.path().join("c.pt")).unwrap(), b"new");
    }
}
