//! The FUSE adapter: kernel requests (through [`fuser`]) translated to [`Fs`] calls.
//!
//! `fuser` reads requests on `--max-threads` threads (each with its own `/dev/fuse` descriptor);
//! each thread runs its request to completion on the Tokio runtime with `block_on`, so that many
//! requests are served at once and the store sees as many requests in flight. Nothing here
//! decides semantics: errors carry their errno from the core and are logged with their message
//! (which object, what to do), because the kernel only passes the errno on.

use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenAccMode, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
};
use tokio::runtime::Handle;

use crate::error::{Error, errno};
use crate::fs::{Fs, OpenMode};
use crate::tree::{Kind, Stat};

/// Largest write the kernel sends at once: 1 MiB instead of 128 KiB, fewer round trips.
const MAX_WRITE: u32 = 1 << 20;
/// Block size reported in `st_blksize`: programs buffer I/O in this unit.
const BLKSIZE: u32 = 1 << 20;
/// Linux `O_TRUNC` and `O_APPEND`.
const O_TRUNC: i32 = 0o1000;
const O_APPEND: i32 = 0o2000;

/// The [`fuser::Filesystem`] over an [`Fs`].
#[derive(Debug)]
pub struct BucketFs {
    fs: Fs,
    runtime: Handle,
    ttl: Duration,
    uid: u32,
    gid: u32,
}

impl BucketFs {
    /// The adapter of `fs`, whose requests run on `runtime`.
    pub fn new(fs: Fs, runtime: Handle) -> BucketFs {
        let ttl = fs.config().metadata_ttl();
        let (uid, gid) = (fs.config().uid, fs.config().gid);
        BucketFs {
            fs,
            runtime,
            ttl,
            uid,
            gid,
        }
    }

    fn attr(&self, s: &Stat) -> FileAttr {
        let read_only = self.fs.config().read_only();
        let (perm, nlink) = match (s.kind, read_only) {
            (Kind::Dir, false) => (0o755, 2),
            (Kind::Dir, true) => (0o555, 2),
            (Kind::File, false) => (0o644, 1),
            (Kind::File, true) => (0o444, 1),
        };
        let kind = file_type(s.kind);
        FileAttr {
            ino: INodeNo(s.ino),
            size: s.size,
            blocks: s.size.div_ceil(512),
            atime: s.mtime,
            mtime: s.mtime,
            ctime: s.mtime,
            crtime: s.mtime,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: BLKSIZE,
        }
    }

    /// Attributes of files being written change with every write: the kernel must not keep them.
    fn ttl_of(&self, s: &Stat) -> Duration {
        match s.writing {
            true => Duration::ZERO,
            false => self.ttl,
        }
    }

    fn run<T>(&self, f: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        self.runtime.block_on(f)
    }
}

fn fail(op: &str, e: &Error) -> Errno {
    let code = e.errno();
    match code {
        errno::ENOENT => tracing::debug!(op, error = %e, "mount"),
        _ => tracing::warn!(op, errno = code, error = %e, "mount: request failed"),
    }
    Errno::from_i32(code)
}

fn name_of(name: &OsStr) -> Result<&str, Errno> {
    name.to_str().ok_or_else(|| {
        tracing::warn!(?name, "mount: object keys are UTF-8; this name is not");
        Errno::EINVAL
    })
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}

fn mode_of(flags: i32) -> OpenMode {
    let acc = OpenFlags(flags).acc_mode();
    OpenMode {
        write: !matches!(acc, OpenAccMode::O_RDONLY),
        truncate: flags & O_TRUNC != 0,
        append: flags & O_APPEND != 0,
    }
}

impl Filesystem for BucketFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // O_TRUNC arrives with open instead of as a separate setattr(size = 0).
        if config
            .add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC)
            .is_err()
        {
            tracing::debug!("mount: the kernel does not pass O_TRUNC with open");
        }
        // Listings carry the attributes of their entries: `ls -l` and `os.walk` + `stat` need no
        // lookup per entry.
        let plus = InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO;
        if config.add_capabilities(plus).is_err() {
            tracing::debug!("mount: the kernel does not take attributes with listings");
        }
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.run(self.fs.lookup(parent.0, name)) {
            Ok(s) => reply.entry(&self.ttl_of(&s), &self.attr(&s), Generation(0)),
            Err(e) => reply.error(fail("lookup", &e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.run(self.fs.getattr(ino.0)) {
            Ok(s) => reply.attr(&self.ttl_of(&s), &self.attr(&s)),
            Err(e) => reply.error(fail("getattr", &e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Modes, owners and times are fixed by the mount and changes to them are ignored
        // (docs/SEMANTICS.md); a size change is only accepted when it changes nothing.
        let result = match size {
            Some(size) => self.run(self.fs.truncate(ino.0, size, fh.map(|f| f.0))),
            None => self.run(self.fs.getattr(ino.0)),
        };
        match result {
            Ok(s) => reply.attr(&self.ttl_of(&s), &self.attr(&s)),
            Err(e) => reply.error(fail("setattr", &e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.run(self.fs.mkdir(parent.0, name)) {
            Ok(s) => reply.entry(&self.ttl_of(&s), &self.attr(&s), Generation(0)),
            Err(e) => reply.error(fail("mkdir", &e)),
        }
    }

    /// Special files (FIFOs, sockets, devices) cannot be objects: `EPERM`, as for links. The
    /// kernel makes regular files with `create`, never here.
    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        tracing::warn!(
            parent = parent.0,
            ?name,
            mode = format_args!("{mode:o}"),
            "mount: special files (mkfifo, mknod) cannot be stored as objects"
        );
        reply.error(Errno::EPERM);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.run(self.fs.unlink(parent.0, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("unlink", &e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.run(self.fs.rmdir(parent.0, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("rmdir", &e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = match (name_of(name), name_of(newname)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            tracing::warn!(
                name,
                newname,
                "mount: RENAME_EXCHANGE and RENAME_WHITEOUT are not supported"
            );
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.run(
            self.fs
                .rename(parent.0, name, newparent.0, newname, no_replace),
        ) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("rename", &e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.run(self.fs.open(ino.0, mode_of(flags.0), req.pid())) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(fail("open", &e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.run(self.fs.read(fh.0, offset, size)) {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(fail("read", &e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = Bytes::copy_from_slice(data);
        match self.run(self.fs.write(fh.0, offset, data)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fail("write", &e)),
        }
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        match self.run(self.fs.flush(fh.0, req.pid())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("close", &e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.run(self.fs.fsync(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("fsync", &e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match self.run(self.fs.release(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("release", &e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.run(self.fs.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(fail("opendir", &e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.fs.readdir(fh.0) {
            Ok(e) => e,
            Err(e) => return reply.error(fail("readdir", &e)),
        };
        // Offsets 0 and 1 are `.` and `..`; entry i is at offset i + 2. Each call starts at
        // its offset directly: a 100,000-entry directory takes thousands of calls.
        let mut at = usize::try_from(offset).unwrap_or(usize::MAX);
        loop {
            let (child, kind, name) = match at {
                0 => (ino, FileType::Directory, "."),
                1 => (ino, FileType::Directory, ".."),
                _ => match entries.get(at - 2) {
                    Some(e) => (INodeNo(e.ino), file_type(e.kind), e.name.as_str()),
                    None => break,
                },
            };
            if reply.add(child, at as u64 + 1, kind, name) {
                break;
            }
            at += 1;
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let entries = match self.fs.readdir(fh.0) {
            Ok(e) => e,
            Err(e) => return reply.error(fail("readdirplus", &e)),
        };
        let dir = Stat {
            ino: ino.0,
            kind: Kind::Dir,
            size: 0,
            mtime: SystemTime::now(),
            writing: false,
        };
        let mut at = usize::try_from(offset).unwrap_or(usize::MAX);
        loop {
            let (name, stat) = match at {
                0 => (".", &dir),
                1 => ("..", &dir),
                _ => match entries.get(at - 2) {
                    Some(e) => (e.name.as_str(), &e.stat),
                    None => break,
                },
            };
            let (ttl, attr) = (self.ttl_of(stat), self.attr(stat));
            if reply.add(
                INodeNo(stat.ino),
                at as u64 + 1,
                name,
                &ttl,
                &attr,
                Generation(0),
            ) {
                break;
            }
            at += 1;
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        // Objects carry no extended attributes (the kernel asks for security.capability on
        // every write).
        reply.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        match size {
            0 => reply.size(0),
            _ => reply.data(&[]),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // An object store has no capacity to report: a large, constant free space keeps `df`
        // and programs that check for room (pip, torch's checkpoint writers) going.
        const BLOCKS: u64 = 1 << 40;
        reply.statfs(BLOCKS, BLOCKS, BLOCKS, 1 << 32, 1 << 32, 4096, 255, 4096);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let mode = OpenMode {
            write: true,
            ..mode_of(flags)
        };
        match self.run(self.fs.create(parent.0, name, mode, req.pid())) {
            Ok((s, fh)) => reply.created(
                &Duration::ZERO,
                &self.attr(&s),
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(fail("create", &e)),
        }
    }
}

/// A mounted file system, not yet serving requests.
#[derive(Debug)]
pub struct Mounted {
    session: fuser::Session<BucketFs>,
}

/// Unmounts a [`Mounted`] file system from another thread (a signal handler's task).
#[derive(Debug)]
pub struct Unmounter(fuser::SessionUnmounter);

impl Unmounter {
    /// Unmounts; the session's [`Mounted::run`] then returns.
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

/// The effective user and group of this process (the owner of `/proc/self`).
pub fn current_owner() -> (u32, u32) {
    std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0))
}

/// Mounts `fs` on `mountpoint`; requests run on `runtime` once [`Mounted::run`] is called.
///
/// Run as root, the mount is `allow_other` and `auto_unmount`: `fusermount3` unmounts it even
/// if this process is killed, so no stale mount is left behind (the CLI adds a watchdog for
/// the case `fusermount3` misses).
pub fn mount(fs: Fs, mountpoint: &Path, runtime: Handle) -> io::Result<Mounted> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(fs.store().uri().to_string()),
        MountOption::Subtype("bucketload".to_owned()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
    ];
    if fs.config().read_only() {
        config.mount_options.push(MountOption::RO);
    }
    if current_owner().0 == 0 {
        config.mount_options.push(MountOption::AutoUnmount);
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(fs.config().max_threads());
    config.clone_fd = true;
    let session = fuser::Session::new(BucketFs::new(fs, runtime), mountpoint, &config)?;
    Ok(Mounted { session })
}

impl Mounted {
    /// A handle that unmounts from elsewhere.
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until the file system is unmounted (by [`Unmounter`], `umount` or
    /// `fusermount3 -u`).
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }

    /// Serves requests on background threads; dropping the returned session unmounts.
    pub fn spawn(self) -> io::Result<fuser::BackgroundSession> {
        self.session.spawn()
    }
}
