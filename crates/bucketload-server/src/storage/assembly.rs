//! Parts written in place, so that completing an upload copies nothing.
//!
//! The first part of an upload that arrives with its length announced fixes the upload's slot
//! size S (the file `slot-size` in the upload's directory). Part n of at most S bytes is then
//! written straight into the upload's `assembly` file at offset (n − 1) × S, provided its slot
//! was never claimed before (`NNNNN.slot`, created exclusively). A part sent again, or twice at
//! once, goes to a file of its own, as every part did before: a slot is written once and never
//! overwritten, so the bytes a part record points at cannot change under it, and a request
//! that fails half-way spoils only a slot nobody will use. A part that turns out longer than
//! its slot moves, with the bytes it has written, to a file of its own.
//!
//! When a completion lists parts 1..=N, every one in a slot of the same S, every part but the
//! last S bytes long, and the assembly file holds nothing past them, that file is the object:
//! it is committed through a hard link, without copying a byte. Anything else is assembled by
//! copying, part by part.
//!
//! A request writing into the assembly file holds a shared `flock` on it; a completion takes
//! the file only when it gets the exclusive lock at once (otherwise it copies), and marks the
//! upload `sealed` while it holds it. A writer checks for the mark once it has its lock, so no
//! part is written into a file that became an object, also when several servers share the
//! root (`--shared-root`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek};
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use crate::lanes::BodyMd5;
use s3s::S3Error;

use super::multipart::PartInfo;
use super::{Storage, TempObject, internal};

/// The upload's file of slots.
pub(super) const ASSEMBLY: &str = "assembly";
/// The upload's slot size, in decimal.
const SLOT_SIZE: &str = "slot-size";
/// Present once a completion has taken the assembly file.
const SEALED: &str = "sealed";
/// No slot ends past this offset: part numbers reach 10,000, and a sparse file that large
/// would exceed what some file systems allow.
const MAX_ASSEMBLY: u64 = 1 << 40;

/// Where a part's bytes go while it is received.
#[derive(Debug)]
pub(crate) enum PartWriter {
    /// A temporary file of its own (renamed into the upload's directory when complete).
    Own(TempObject),
    /// The part's slot in the upload's assembly file.
    Slot(SlotWriter),
}

#[derive(Debug)]
pub(crate) struct SlotWriter {
    file: File,
    slot_size: u64,
    offset: u64,
    written: u64,
    md5: BodyMd5,
}

impl PartWriter {
    /// Appends `bytes`; a slot that would overflow moves to a file of its own first.
    pub(crate) fn write(&mut self, storage: &Storage, bytes: Bytes) -> Result<(), S3Error> {
        if let Self::Slot(slot) = self {
            if slot.written + bytes.len() as u64 <= slot.slot_size {
                slot.file
                    .write_all_at(&bytes, slot.offset + slot.written)
                    .map_err(internal)?;
                slot.written += bytes.len() as u64;
                slot.md5.update(bytes);
                return Ok(());
            }
            let own = slot.spill(storage)?;
            *self = Self::Own(own);
        }
        match self {
            Self::Own(temp) => temp.write_chunk(bytes),
            Self::Slot(_) => unreachable!("a slot that overflows becomes a file of its own"),
        }
    }

    /// MD5 of every byte written.
    pub(crate) fn md5(&self) -> [u8; 16] {
        match self {
            Self::Own(temp) => temp.md5(),
            Self::Slot(slot) => slot.md5.digest(),
        }
    }

    /// The temporary file of a whole object (a PUT never has a slot).
    pub(crate) fn into_object(self) -> Result<TempObject, S3Error> {
        match self {
            Self::Own(temp) => Ok(temp),
            Self::Slot(_) => Err(s3s::s3_error!(
                InternalError,
                "an object was written into a part's slot"
            )),
        }
    }
}

impl SlotWriter {
    /// The bytes written so far, copied into a temporary file of their own.
    fn spill(&mut self, storage: &Storage) -> Result<TempObject, S3Error> {
        let mut temp = storage.begin_write()?;
        copy_range(&self.file, self.offset, self.written, &mut temp.file).map_err(internal)?;
        temp.md5 = std::mem::replace(&mut self.md5, BodyMd5::alone());
        temp.size = self.written;
        Ok(temp)
    }

    /// The part's record, once every byte is in its slot (and on disk, when `fsync`).
    pub(super) fn finish(&self, number: i32, fsync: bool) -> io::Result<PartInfo> {
        if fsync {
            self.file.sync_data()?;
        }
        Ok(PartInfo {
            number,
            etag: hex::encode(self.md5.digest()),
            size: self.written,
            mtime_ns: super::multipart::now_ns(),
            checksum: None,
            slot: Some(self.slot_size),
        })
    }
}

/// Copies bytes `offset..offset + len` of `from` to the end of `to` (`copy_file_range` where
/// the kernel has it).
pub(super) fn copy_range(from: &File, offset: u64, len: u64, to: &mut File) -> io::Result<()> {
    let mut from = from.try_clone()?;
    from.seek(io::SeekFrom::Start(offset))?;
    let copied = io::copy(&mut io::Read::take(from, len), to)?;
    if copied != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("a part's slot holds {copied} of its {len} bytes"),
        ));
    }
    Ok(())
}

impl Storage {
    /// Where part `part` of the upload in `dir`, announced as `size` bytes, is written: its
    /// slot in the assembly file when it can have one, else a temporary file of its own.
    /// Only a part of at least `min_part_size` bytes, the least every part but the last
    /// holds, fixes the slot size: a last part that arrives first does not.
    pub(crate) fn begin_part(
        &self,
        dir: &Path,
        part: i32,
        (size, min_part_size): (Option<u64>, u64),
    ) -> Result<PartWriter, S3Error> {
        let slot = size
            .filter(|&s| s > 0)
            .map(|size| self.claim_slot(dir, part, (size, min_part_size)));
        match slot {
            Some(Ok(Some(slot))) => Ok(PartWriter::Slot(slot)),
            Some(Err(e)) => {
                tracing::debug!(dir = %dir.display(), part, error = %e, "part written to a file of its own");
                self.begin_write().map(PartWriter::Own)
            }
            _ => self.begin_write().map(PartWriter::Own),
        }
    }

    fn claim_slot(
        &self,
        dir: &Path,
        part: i32,
        (size, min_part_size): (u64, u64),
    ) -> io::Result<Option<SlotWriter>> {
        let fixed = match size >= min_part_size {
            true => slot_size(dir, size, &self.temp_path())?,
            false => match fs::read_to_string(dir.join(SLOT_SIZE)) {
                Ok(text) => parse_size(&text)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            },
        };
        let slot_size = fixed;
        let offset = u64::try_from(part - 1).unwrap_or(u64::MAX) * slot_size;
        if size > slot_size || offset.saturating_add(slot_size) > MAX_ASSEMBLY {
            return Ok(None);
        }
        let claim = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(format!("{part:05}.slot")));
        match claim {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(e),
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(ASSEMBLY))?;
        // Held while the part is written (until the file is dropped).
        file.lock_shared()?;
        if dir.join(SEALED).exists() || !dir.join("upload.json").exists() {
            return Ok(None);
        }
        Ok(Some(SlotWriter {
            file,
            slot_size,
            offset,
            written: 0,
            md5: BodyMd5::Lanes(self.lanes.stream()),
        }))
    }

    /// The object made of `parts` (numbered from 1) without copying them, when that can be:
    /// a single part in a file of its own is that file; otherwise every part but the last
    /// must fill its slot, and the assembly file hold nothing past them and no request be
    /// writing into it. A last part in a file of its own is then copied onto the end (the
    /// only bytes copied), and the assembly file is the object. The upload is sealed until
    /// [`Storage::unseal`]. The returned temporary file is a hard link.
    pub(super) fn assembled_in_place(
        &self,
        dir: &Path,
        parts: &[&PartInfo],
    ) -> Result<Option<TempObject>, S3Error> {
        let numbered = parts
            .iter()
            .enumerate()
            .all(|(i, p)| usize::try_from(p.number).is_ok_and(|n| n == i + 1));
        let Some((tail, body)) = parts.split_last().filter(|_| numbered) else {
            return Ok(None);
        };
        if body.is_empty() && tail.slot.is_none() {
            let file = dir.join(format!("{:05}", tail.number));
            return self.linked(&file, tail.size).map_err(internal);
        }
        let Some(slot_size) = parts[0].slot else {
            return Ok(None);
        };
        if !body
            .iter()
            .all(|p| p.slot == Some(slot_size) && p.size == slot_size)
            || tail.slot.is_some_and(|s| s != slot_size)
        {
            return Ok(None);
        }
        let filled = slot_size * body.len() as u64;
        let assembly = dir.join(ASSEMBLY);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&assembly)
            .map_err(internal)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => return Err(internal(e)),
        }
        File::create(dir.join(SEALED)).map_err(internal)?;
        let taken = (|| {
            let len = file.metadata()?.len();
            if tail.slot.is_some() {
                if len != filled + tail.size {
                    return Ok(None);
                }
            } else {
                if len != filled {
                    return Ok(None);
                }
                let mut own = File::open(dir.join(format!("{:05}", tail.number)))?;
                file.seek(io::SeekFrom::Start(filled))?;
                let copied = io::copy(&mut own, &mut file);
                if !copied.is_ok_and(|n| n == tail.size) {
                    let _ = file.set_len(filled);
                    return Ok(None);
                }
            }
            self.linked(&assembly, filled + tail.size)
        })();
        match taken {
            Ok(Some(temp)) => Ok(Some(temp)),
            Ok(None) => {
                self.unseal(dir);
                Ok(None)
            }
            Err(e) => {
                self.unseal(dir);
                Err(internal(e))
            }
        }
    }

    /// A temporary name for the file at `path`, which must hold `size` bytes.
    fn linked(&self, path: &Path, size: u64) -> io::Result<Option<TempObject>> {
        let file = File::open(path)?;
        if file.metadata()?.len() != size {
            return Ok(None);
        }
        let temp = self.temp_path();
        fs::hard_link(path, &temp)?;
        Ok(Some(TempObject {
            path: Some(temp),
            file,
            md5: BodyMd5::alone(),
            size,
        }))
    }

    /// Lets parts be written in place again after a completion that did not happen.
    pub(super) fn unseal(&self, dir: &Path) {
        let _ = fs::remove_file(dir.join(SEALED));
    }
}

/// The upload's slot size: `proposed` when this is the first part to say, else the one fixed
/// before. Written at `private` and linked into place, so nobody reads it half-written.
fn slot_size(dir: &Path, proposed: u64, private: &Path) -> io::Result<u64> {
    let path = dir.join(SLOT_SIZE);
    match fs::read_to_string(&path) {
        Ok(text) => return parse_size(&text),
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    fs::write(private, proposed.to_string())?;
    let linked = fs::hard_link(private, &path);
    let _ = fs::remove_file(private);
    match linked {
        Ok(()) => Ok(proposed),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            parse_size(&fs::read_to_string(&path)?)
        }
        Err(e) => Err(e),
    }
}

fn parse_size(text: &str) -> io::Result<u64> {
    text.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "unreadable slot size"))
}
