//! `bucketload mount` through the kernel: the embedded S3 server mounted on a temporary
//! directory, read and written with coreutils and std::fs, checked through the S3 API.
//! Needs /dev/fuse and fusermount3 (scripts/setup.sh installs fuse3); fails, never skips,
//! without them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path as Key;
use common::Fixture;

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) ^ (i >> 11) as u8)
        .collect()
}

fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: mount tests need FUSE (run the container with --device /dev/fuse)"
    );
    let found = Command::new("fusermount3").arg("--version").output();
    assert!(
        found.is_ok(),
        "fusermount3 is missing: install the Debian package fuse3 (scripts/setup.sh does)"
    );
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mounts").unwrap()
}

fn is_mounted(dir: &Path) -> bool {
    let dir = dir.to_str().unwrap();
    mounts()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(dir) && l.contains("bucketload"))
}

/// Polls `done` every 10 ms for up to 30 s.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A mount of `uri` on a fresh directory, unmounted on drop.
struct Mount {
    dir: PathBuf,
    child: Option<Child>,
}

impl Mount {
    /// `bucketload mount` in the background (the command returns once mounted).
    fn background(fx: &Fixture, uri: &str, extra: &[&str]) -> Mount {
        require_fuse();
        let dir = fx.work_path(&format!("mnt-{}", uri.replace(['/', ':'], "_")));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        let out = fx
            .command()
            .args(["mount", uri, dir.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount failed: {out:#?}");
        assert!(
            is_mounted(&dir),
            "not in /proc/self/mounts after mount returned"
        );
        Mount { dir, child: None }
    }

    /// `bucketload mount --foreground` as a child process of the test.
    fn foreground(fx: &Fixture, uri: &str, extra: &[&str]) -> Mount {
        require_fuse();
        let dir = fx.work_path(&format!("fg-{}", uri.replace(['/', ':'], "_")));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        let child = fx
            .command()
            .args(["mount", "--foreground", uri, dir.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut mount = Mount {
            dir,
            child: Some(child),
        };
        let dir = mount.dir.clone();
        wait_until("the foreground mount appears", || {
            if let Some(status) = mount.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("mount exited early: {status}");
            }
            is_mounted(&dir)
        });
        mount
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn unmount(&mut self) {
        if is_mounted(&self.dir) {
            let status = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .status()
                .unwrap();
            assert!(status.success(), "fusermount3 -u failed");
        }
        let dir = self.dir.clone();
        wait_until("the mount is gone", || !is_mounted(&dir));
        if let Some(mut child) = self.child.take() {
            let status = child.wait().unwrap();
            assert!(status.success(), "the mount process exited with {status}");
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mounted(&self.dir) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.dir)
                .status();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(out.status.success(), "{cmd} {args:?} failed: {out:#?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn coreutils_and_std_read_list_and_write_through_the_mount() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-rw/data");
    let os = store.object_store();
    let big = pattern(20 << 20, 1);
    fx.block_on(async {
        os.put(&Key::from("hello.txt"), "hello, mount\n".into())
            .await
            .unwrap();
        os.put(&Key::from("nested/deep/big.bin"), big.clone().into())
            .await
            .unwrap();
        for i in 0..50 {
            let key = Key::from(format!("many/{i:03}.txt"));
            os.put(&key, format!("{i}\n").into()).await.unwrap();
        }
    });
    let mut m = Mount::background(&fx, "s3://mount-rw/data", &["--part-size", "5MiB"]);

    assert_eq!(
        sh("cat", &[m.path("hello.txt").to_str().unwrap()]),
        "hello, mount\n"
    );
    assert_eq!(std::fs::read(m.path("nested/deep/big.bin")).unwrap(), big);
    let ls = sh("ls", &[m.path("many").to_str().unwrap()]);
    assert_eq!(ls.lines().count(), 50);
    assert_eq!(ls.lines().next(), Some("000.txt"));
    let du = sh("du", &["-sb", m.path("nested").to_str().unwrap()]);
    let bytes: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(bytes, 20 << 20, "{du}");
    let err = std::fs::read(m.path("absent.txt")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);

    // A new file: no object until close, the whole object after.
    let body = pattern(11 << 20, 2);
    {
        use std::io::Write;
        std::fs::create_dir(m.path("out")).unwrap();
        let mut f = std::fs::File::create(m.path("out/ckpt.bin")).unwrap();
        f.write_all(&body).unwrap();
        let seen = fx.block_on(os.head(&Key::from("out/ckpt.bin")));
        assert!(seen.is_err(), "object visible before close");
    }
    let got = fx.block_on(async {
        os.get(&Key::from("out/ckpt.bin"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
    });
    assert_eq!(got, body);
    assert_eq!(std::fs::read(m.path("out/ckpt.bin")).unwrap(), body);

    // Rename of a closed file (checkpoint tools finalise this way).
    std::fs::rename(m.path("out/ckpt.bin"), m.path("out/final.bin")).unwrap();
    assert!(fx.block_on(os.head(&Key::from("out/ckpt.bin"))).is_err());
    assert_eq!(std::fs::read(m.path("out/final.bin")).unwrap(), body);
    assert_eq!(
        fx.block_on(os.head(&Key::from("out/final.bin")))
            .unwrap()
            .size,
        body.len() as u64
    );
    // Without --allow-delete, rm is refused with EPERM and the object stays.
    let err = std::fs::remove_file(m.path("hello.txt")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(1), "{err}");
    // Appending is not supported.
    let err = std::fs::OpenOptions::new()
        .append(true)
        .open(m.path("hello.txt"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(95), "{err}");

    m.unmount();
    assert!(!is_mounted(&m.dir));
}

#[test]
fn sigterm_unmounts_cleanly_and_read_only_refuses_writes() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-ro");
    fx.block_on(store.object_store().put(&Key::from("a.txt"), "a".into()))
        .unwrap();
    let mut m = Mount::foreground(&fx, "s3://mount-ro", &["--read-only"]);
    assert_eq!(std::fs::read_to_string(m.path("a.txt")).unwrap(), "a");
    let err = std::fs::write(m.path("b.txt"), "b").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "EROFS: {err}");
    let pid = m.child.as_ref().unwrap().id().to_string();
    // The shell's builtin `kill`: no procps needed.
    sh("sh", &["-c", &format!("kill -TERM {pid}")]);
    let status = m.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "SIGTERM exit: {status}");
    assert!(!is_mounted(&m.dir), "stale mount after SIGTERM");
}

#[test]
fn sigkill_mid_write_leaves_no_object_and_no_stale_mount() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-kill");
    let os = store.object_store();
    let mut m = Mount::foreground(&fx, "s3://mount-kill", &["--part-size", "5MiB"]);
    let path = m.path("partial.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    {
        use std::io::Write;
        // Two parts uploaded, a third being filled: the upload is under way.
        f.write_all(&pattern(12 << 20, 3)).unwrap();
    }
    let mut child = m.child.take().unwrap();
    child.kill().unwrap(); // SIGKILL, by PID
    child.wait().unwrap();
    drop(f);
    let dir = m.dir.clone();
    wait_until("fusermount3 removes the dead mount", || !is_mounted(&dir));
    let listed: Vec<_> = fx.block_on(async {
        use futures::TryStreamExt;
        os.list(None).try_collect::<Vec<_>>().await.unwrap()
    });
    assert!(
        listed.is_empty(),
        "a partial object became visible: {listed:?}"
    );
    assert!(fx.block_on(os.head(&Key::from("partial.bin"))).is_err());
}

/// The processes whose parent is `parent` and whose name is `name` (from /proc: no procps).
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after its `)`.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if &stat[open + 1..close] == name && ppid == Some(parent.to_string().as_str()) {
            found.push(pid);
        }
    }
    found
}

/// With `fusermount3`'s own watcher gone too (it can also miss: its check races with the
/// kernel aborting the connection), the mount's watchdog unmounts the dead mount.
#[test]
fn the_watchdog_unmounts_a_dead_mount_when_fusermount3_does_not() {
    let fx = Fixture::start();
    let os = fx.store("s3://mount-watchdog").object_store();
    let mut m = Mount::foreground(&fx, "s3://mount-watchdog", &[]);
    std::fs::write(m.path("kept.txt"), "kept").unwrap();
    let child = m.child.take().unwrap();
    let watchers = children_named(child.id(), "fusermount3");
    assert_eq!(watchers.len(), 1, "one auto_unmount watcher: {watchers:?}");
    assert_eq!(
        children_named(child.id(), "bucketload").len(),
        1,
        "one watchdog"
    );
    // The watcher first, so that only the watchdog is left to act; both by PID.
    sh("sh", &["-c", &format!("kill -KILL {}", watchers[0])]);
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
    let dir = m.dir.clone();
    wait_until("the watchdog removes the dead mount", || !is_mounted(&dir));
    assert!(fx.block_on(os.head(&Key::from("kept.txt"))).is_ok());
}

#[test]
fn mount_errors_name_the_problem() {
    let fx = Fixture::start();
    require_fuse();
    let run = fx.run(&["mount", "s3://mount-errors", "/nonexistent/dir"]);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        run.error_line().contains("create the directory first"),
        "{run:#?}"
    );
    let dir = fx.work_path("empty");
    std::fs::create_dir_all(&dir).unwrap();
    let run = fx.run(&["mount", "s3://no-such-bucket-here", dir.to_str().unwrap()]);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(run.stderr.contains("no-such-bucket-here"), "{run:#?}");
    assert!(!is_mounted(&dir));
}
