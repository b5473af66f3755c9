//! `bucketload mount` through the kernel: the embedded S3 server mounted on a temporary
//! directory, read and written with coreutils and std::fs, checked through the S3 API.
//! Needs /dev/fuse and fusermount3 (scripts/setup.sh installs fuse3); fails, never skips,
//! without them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path as Key;
use bucketload_test_support::{pattern, venv_python};
use common::{Fixture, ServeProcess, free_port, wait_until};

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

/// Runs `script` with `bash -c` in `dir`.
fn bash(dir: &Path, script: &str) -> std::process::Output {
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Runs `script` with `bash -c` in `dir`; it must succeed.
fn bash_ok(dir: &Path, script: &str) {
    let out = bash(dir, script);
    assert!(out.status.success(), "`{script}` failed: {out:#?}");
}

/// Runs `script` with `bash -c` in `dir`; it must fail, and its stderr is returned.
fn bash_fails(dir: &Path, script: &str) -> String {
    let out = bash(dir, script);
    assert!(!out.status.success(), "`{script}` succeeded: {out:#?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The object's bytes read through the S3 API (not through the mount), if it exists.
fn object(fx: &Fixture, store: &bucketload_store::Store, key: &str) -> Option<Vec<u8>> {
    fx.block_on(async {
        match store.object_store().get(&Key::from(key)).await {
            Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
            Err(bucketload_store::object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("GET {key}: {e}"),
        }
    })
}

/// Shell redirection, dd, tee and Python write exactly the bytes written; an existing file is
/// replaced only by the complete new content.
#[test]
fn shell_redirection_dd_tee_and_python_write_exactly_the_bytes() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-shell");
    let os = store.object_store();
    fx.block_on(async {
        os.put(&Key::from("y.txt"), "old content\n".into())
            .await
            .unwrap();
        os.put(&Key::from("keep.txt"), "keep\n".into())
            .await
            .unwrap();
    });
    let big = pattern((12 << 20) + 5, 4);
    let big_path = fx.work_path("big.bin");
    std::fs::write(&big_path, &big).unwrap();
    let small = pattern((1 << 20) + 7, 5);
    let small_path = fx.work_path("small.bin");
    std::fs::write(&small_path, &small).unwrap();
    let (big_path, small_path) = (big_path.to_str().unwrap(), small_path.to_str().unwrap());
    let mut m = Mount::background(
        &fx,
        "s3://mount-shell",
        &["--part-size", "5MiB", "--allow-overwrite"],
    );
    let dir = m.dir.clone();
    let get = |key: &str| object(&fx, &store, key);

    bash_ok(&dir, "echo new > y.txt");
    assert_eq!(get("y.txt").unwrap(), b"new\n");
    assert_eq!(std::fs::read(m.path("y.txt")).unwrap(), b"new\n");
    bash_ok(&dir, "echo hello > x.txt");
    assert_eq!(get("x.txt").unwrap(), b"hello\n");
    bash_ok(&dir, &format!("cat {big_path} > cat.bin"));
    assert_eq!(get("cat.bin").unwrap(), big);
    bash_ok(&dir, "(printf 'one '; printf 'two\\n') > sub.txt");
    assert_eq!(get("sub.txt").unwrap(), b"one two\n");
    bash_ok(&dir, "exec 3>fd3.txt; echo a >&3; echo b >&3; exec 3>&-");
    assert_eq!(get("fd3.txt").unwrap(), b"a\nb\n");
    bash_ok(
        &dir,
        &format!("dd if={big_path} of=dd.bin bs=1M status=none"),
    );
    assert_eq!(get("dd.bin").unwrap(), big);
    bash_ok(
        &dir,
        &format!("dd if={small_path} of=dd512.bin status=none"),
    );
    assert_eq!(get("dd512.bin").unwrap(), small);
    bash_ok(
        &dir,
        &format!("dd if={small_path} of=dd.bin bs=64K conv=fsync status=none"),
    );
    assert_eq!(get("dd.bin").unwrap(), small, "replaced by dd");
    // conv=notrunc modifies the object in place (it is under one part).
    bash_ok(&dir, "printf XY | dd of=keep.txt conv=notrunc status=none");
    assert_eq!(get("keep.txt").unwrap(), b"XYep\n");
    bash_ok(&dir, "printf tee-data | tee tee.txt > /dev/null");
    assert_eq!(get("tee.txt").unwrap(), b"tee-data");
    let py = "open('py.txt', 'w').write('python\\n')";
    let out = Command::new(venv_python())
        .args(["-c", py])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:#?}");
    assert_eq!(get("py.txt").unwrap(), b"python\n");
    // Nothing written: the empty object is made when the kernel releases the file, just
    // after close returned.
    bash_ok(&dir, ": > empty.txt");
    wait_until("the empty object appears", || get("empty.txt").is_some());
    assert_eq!(get("empty.txt").unwrap(), b"");
    assert_eq!(std::fs::read(m.path("empty.txt")).unwrap(), b"");
    m.unmount();
}

/// Appends are refused with ENOTSUP and leave the object as it was.
#[test]
fn appends_are_refused_and_leave_the_object_untouched() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-append");
    fx.block_on(
        store
            .object_store()
            .put(&Key::from("a.txt"), "first\n".into()),
    )
    .unwrap();
    let mut m = Mount::background(&fx, "s3://mount-append", &["--allow-overwrite"]);
    let dir = m.dir.clone();
    let err = bash_fails(&dir, "echo more >> a.txt");
    assert!(err.contains("Operation not supported"), "{err}");
    let err = bash_fails(&dir, "echo more | tee -a a.txt");
    assert!(err.contains("Operation not supported"), "{err}");
    let err = bash_fails(&dir, "echo more >> new.txt");
    assert!(err.contains("Operation not supported"), "{err}");
    assert_eq!(object(&fx, &store, "a.txt").unwrap(), b"first\n");
    assert_eq!(std::fs::read(m.path("a.txt")).unwrap(), b"first\n");
    assert!(object(&fx, &store, "new.txt").is_none());
    assert!(!m.path("new.txt").exists());
    m.unmount();
}

/// Editors replace a file by writing another one and renaming it over the target (vim's
/// backup copy, `sed -i`'s temporary file).
#[test]
fn write_then_rename_editors_replace_the_file() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-editors");
    fx.block_on(store.object_store().put(&Key::from("f.txt"), "v0\n".into()))
        .unwrap();
    let mut m = Mount::background(
        &fx,
        "s3://mount-editors",
        &["--allow-overwrite", "--allow-delete"],
    );
    let dir = m.dir.clone();
    // vim with `backupcopy=no`: the new text goes to a temporary name, renamed over the file.
    bash_ok(&dir, "printf 'v1\\n' > .f.txt.swp && mv .f.txt.swp f.txt");
    assert_eq!(object(&fx, &store, "f.txt").unwrap(), b"v1\n");
    assert!(object(&fx, &store, ".f.txt.swp").is_none());
    // vim's `writebackup`: the old file becomes f.txt~, the new one is written, the backup goes.
    bash_ok(
        &dir,
        "mv f.txt f.txt~ && printf 'v2\\n' > f.txt && rm f.txt~",
    );
    assert_eq!(object(&fx, &store, "f.txt").unwrap(), b"v2\n");
    assert!(object(&fx, &store, "f.txt~").is_none());
    bash_ok(&dir, "sed -i 's/v2/v3/' f.txt");
    assert_eq!(object(&fx, &store, "f.txt").unwrap(), b"v3\n");
    assert_eq!(std::fs::read(m.path("f.txt")).unwrap(), b"v3\n");
    let listed: Vec<String> = fx.block_on(async {
        use futures::TryStreamExt;
        let all: Vec<_> = store.object_store().list(None).try_collect().await.unwrap();
        all.into_iter().map(|o| o.location.to_string()).collect()
    });
    assert_eq!(listed, ["f.txt"], "no temporary file left behind");
    m.unmount();
}

/// The store fails during `cp` onto an existing file and onto a new one: cp fails, the old
/// object is intact and shown again, the new name disappears, and both can be written again.
#[test]
fn a_store_failure_mid_cp_leaves_the_old_object_and_the_name_usable() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-fault");
    let old = pattern(3 << 20, 6);
    fx.block_on(
        store
            .object_store()
            .put(&Key::from("x.bin"), old.clone().into()),
    )
    .unwrap();
    let new = pattern(12 << 20, 7);
    let new_path = fx.work_path("new.bin");
    std::fs::write(&new_path, &new).unwrap();
    let new_path = new_path.to_str().unwrap();
    let mut m = Mount::background(
        &fx,
        "s3://mount-fault",
        // One part in flight (the memory limit holds two parts): a failed part is seen by the
        // next write, while cp is still writing.
        &[
            "--part-size",
            "5MiB",
            "--memory-limit",
            "10MiB",
            "--allow-overwrite",
            "--max-retries",
            "0",
        ],
    );
    let dir = m.dir.clone();
    let faults = fx.server().faults();
    use bucketload_server::FaultKind;

    faults.fail_next("UploadPart", 1, FaultKind::Status(500));
    let err = bash_fails(&dir, &format!("cp {new_path} x.bin"));
    assert!(err.contains("Input/output error"), "{err}");
    assert_eq!(
        object(&fx, &store, "x.bin").unwrap(),
        old,
        "old object intact"
    );
    assert_eq!(
        std::fs::metadata(m.path("x.bin")).unwrap().len(),
        old.len() as u64
    );
    assert_eq!(std::fs::read(m.path("x.bin")).unwrap(), old);
    let ls = sh("ls", &["-l", dir.to_str().unwrap()]);
    assert!(ls.contains(&old.len().to_string()), "{ls}");
    bash_ok(&dir, &format!("cp {new_path} x.bin"));
    assert_eq!(object(&fx, &store, "x.bin").unwrap(), new);

    faults.fail_next("UploadPart", 1, FaultKind::Status(500));
    let err = bash_fails(&dir, &format!("cp {new_path} fresh.bin"));
    assert!(err.contains("Input/output error"), "{err}");
    assert!(object(&fx, &store, "fresh.bin").is_none());
    assert!(!m.path("fresh.bin").exists(), "no phantom file");
    let ls = sh("ls", &[dir.to_str().unwrap()]);
    assert!(!ls.contains("fresh.bin"), "{ls}");
    bash_ok(&dir, &format!("cp {new_path} fresh.bin"));
    assert_eq!(object(&fx, &store, "fresh.bin").unwrap(), new);
    m.unmount();
}

/// A program killed while writing (the kernel closes its descriptors) does not replace the
/// object with what it had written so far.
#[test]
fn a_writer_killed_mid_write_leaves_the_old_object() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-killed");
    fx.block_on(
        store
            .object_store()
            .put(&Key::from("x.bin"), "old\n".into()),
    )
    .unwrap();
    let mut m = Mount::background(
        &fx,
        "s3://mount-killed",
        &["--part-size", "5MiB", "--allow-overwrite"],
    );
    // Threads too: every one of them is killed, whichever closes the file.
    let script = "import sys, threading, time\n\
                  for _ in range(4):\n    \
                      threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n\
                  f = open('x.bin', 'wb')\n\
                  f.write(b'partial' * 1000000)\n\
                  f.flush()\n\
                  print('written', flush=True)\n\
                  time.sleep(600)\n";
    let mut child = Command::new(venv_python())
        .args(["-c", script])
        .current_dir(&m.dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let stdout = child.stdout.as_mut().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
    }
    assert_eq!(line, "written\n");
    child.kill().unwrap(); // SIGKILL, by PID
    child.wait().unwrap();
    let got = object(&fx, &store, "x.bin").unwrap();
    assert!(got == b"old\n", "x.bin holds {} bytes", got.len());
    let path = m.path("x.bin");
    wait_until("the file is readable again", || {
        std::fs::read(&path).is_ok()
    });
    assert_eq!(std::fs::read(&path).unwrap(), b"old\n");
    bash_ok(&m.dir, "echo newer > x.bin");
    assert_eq!(object(&fx, &store, "x.bin").unwrap(), b"newer\n");
    m.unmount();
}

/// A multi-threaded program that exits normally with its output file open: the kernel closes
/// the file from whichever thread exits last, one the exit killed; the file is still complete.
#[test]
fn a_threaded_program_exiting_normally_completes_its_output() {
    let fx = Fixture::start();
    let store = fx.store("s3://mount-threads");
    let mut m = Mount::background(&fx, "s3://mount-threads", &[]);
    let script = "import sys, threading, time\n\
                  for _ in range(8):\n    \
                      threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n\
                  sys.stdout.write('x' * 100)\n";
    for i in 0..5 {
        let cmd = format!("{} -c \"$SCRIPT\" > out{i}.txt", venv_python().display());
        let out = Command::new("bash")
            .args(["-c", &cmd])
            .env("SCRIPT", script)
            .current_dir(&m.dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:#?}");
        let key = format!("out{i}.txt");
        let got = object(&fx, &store, &key);
        assert_eq!(got.as_deref(), Some(&[b'x'; 100][..]), "{key}");
    }
    m.unmount();
}

/// The case: the server is killed during `cp big x.bin` and comes back. The writer got
/// an error; the name then shows the old object again (size and bytes), and it can be read,
/// written and deleted at once — no phantom at the partial size, no EBUSY.
#[test]
fn a_server_killed_mid_cp_and_restarted_leaves_the_name_as_the_store_has_it() {
    let fx = Fixture::start();
    let root = fx.work_path("serve-root");
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut server = ServeProcess::start(&root, port, &["--latency", "20ms"]);
    let old = pattern(3 << 20, 8);
    let (old_path, big_path) = (fx.work_path("old.bin"), fx.work_path("big.bin"));
    std::fs::write(&old_path, &old).unwrap();
    std::fs::write(&big_path, pattern(60 << 20, 9)).unwrap();
    let cli = |args: &[&str]| {
        let out = fx
            .command()
            .args(args)
            .args(["--endpoint", &endpoint])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:#?}");
    };
    cli(&["cp", old_path.to_str().unwrap(), "s3://mount-restart/x.bin"]);
    let extra = [
        "--endpoint",
        &endpoint,
        "--part-size",
        "5MiB",
        "--allow-overwrite",
        "--allow-delete",
        "--max-retries",
        "1",
    ];
    let m = Mount::background(&fx, "s3://mount-restart", &extra);
    let mut cp = Command::new("cp")
        .arg(&big_path)
        .arg(m.path("x.bin"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("cp has written 15 MiB", || {
        std::fs::metadata(m.path("x.bin")).is_ok_and(|md| md.len() > 15 << 20)
    });
    server.kill();
    let status = cp.wait().unwrap();
    assert!(!status.success(), "cp succeeded although the server died");
    let _server = ServeProcess::start(&root, port, &["--latency", "20ms"]);

    assert_eq!(
        std::fs::metadata(m.path("x.bin")).unwrap().len(),
        old.len() as u64,
        "the name shows the old object's size"
    );
    assert_eq!(std::fs::read(m.path("x.bin")).unwrap(), old);
    let back = fx.work_path("back.bin");
    cli(&["cp", "s3://mount-restart/x.bin", back.to_str().unwrap()]);
    assert_eq!(
        std::fs::read(&back).unwrap(),
        old,
        "the old object is intact"
    );
    bash_ok(&m.dir, "echo again > x.bin");
    assert_eq!(std::fs::read(m.path("x.bin")).unwrap(), b"again\n");
    bash_ok(&m.dir, "rm x.bin");
    assert!(!m.path("x.bin").exists());
}
