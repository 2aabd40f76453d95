//! The files sufs makes for whoever runs it (images, exports, mount logs, `--stats` files,
//! benchmark results) and the private directory a device's log goes to. They are often made in a
//! directory other users may write to (/tmp, /var/tmp), by root, so none of them is ever made or
//! opened through a name another user chose:
//!
//! - a new file is made with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600 (an image holds every
//!   file's bytes; a log, the mount's messages): a symbolic link planted at its name is not
//!   followed and makes the call fail;
//! - an existing one is opened with `O_NOFOLLOW` and used only if it is a regular file owned by
//!   the caller with one link (a hard link to another file of the caller's would have the caller
//!   write into that file), or, for an image, a block device;
//! - a directory made for the caller is made 0700 and used only if it is the caller's and nobody
//!   else may write to it.
//!
//! The checks are made on the opened descriptor (`fstat`), not on the name, so that nothing can be
//! swapped in between.

use std::fs::{File, OpenOptions};
use std::io::{Error, ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The mode of every file sufs makes: the caller's only.
pub const PRIVATE_MODE: u32 = 0o600;

/// What to do with a file that already exists at the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse it: an export, which must not mix with what was there.
    Refuse,
    /// Write after its end: a log.
    Append,
    /// Empty it: a statistics or results file written whole.
    Truncate,
    /// Use it as it is, for reading and writing: an image (a regular file or a block device).
    Image,
}

/// The caller's effective user id.
fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// An error naming `path`, of `kind`.
fn refused(path: &Path, kind: ErrorKind, why: &str) -> Error {
    Error::new(kind, format!("{}: {why}", path.display()))
}

/// Opens `path` for writing (and reading), making it with mode 0600 if it does not exist; an
/// existing file is treated as `existing` says. Never follows a symbolic link at `path`, except,
/// for an image, one owned by root or the caller (`/dev/disk/by-id/...`): a link another user made
/// is refused.
pub fn open_private(path: &Path, existing: Existing) -> std::io::Result<File> {
    let mut new = OpenOptions::new();
    new.read(true).write(true).create_new(true).mode(PRIVATE_MODE).custom_flags(libc::O_NOFOLLOW);
    if existing == Existing::Append {
        new.append(true);
    }
    match new.open(path) {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(refused(path, e.kind(), &e.to_string())),
        Err(_) => {}
    }
    if existing == Existing::Refuse {
        return Err(refused(path, ErrorKind::AlreadyExists, "exists; not overwriting it"));
    }
    let io = |e: Error| refused(path, e.kind(), &e.to_string());
    let link = std::fs::symlink_metadata(path).map_err(io)?;
    let follow = existing == Existing::Image && link.file_type().is_symlink() && [0, euid()].contains(&link.uid());
    let mut old = OpenOptions::new();
    old.read(true).write(true).append(existing == Existing::Append);
    if !follow {
        old.custom_flags(libc::O_NOFOLLOW);
    }
    let f = old.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => refused(path, ErrorKind::PermissionDenied, "is a symbolic link; not following it"),
        _ => io(e),
    })?;
    let m = f.metadata().map_err(io)?;
    if existing == Existing::Image && m.file_type().is_block_device() {
        return Ok(f);
    }
    if !m.is_file() {
        return Err(refused(path, ErrorKind::InvalidInput, "is not a regular file"));
    }
    if m.uid() != euid() {
        let why = format!("is owned by uid {}, not by uid {}; not writing to it", m.uid(), euid());
        return Err(refused(path, ErrorKind::PermissionDenied, &why));
    }
    if m.nlink() != 1 {
        return Err(refused(path, ErrorKind::PermissionDenied, "has other hard links; not writing to it"));
    }
    if existing == Existing::Truncate {
        f.set_len(0).map_err(io)?;
    }
    Ok(f)
}

/// Writes `data` as the whole of the file `path` (made 0600, or an existing one of the caller's
/// emptied first).
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    open_private(path, Existing::Truncate)?.write_all(data)
}

/// A directory of the caller's only: made 0700 if missing; an existing one must be a directory
/// (not a link to one) owned by the caller that nobody else may write to.
pub fn private_dir(path: &Path) -> std::io::Result<PathBuf> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refused(path, e.kind(), &e.to_string())),
    }
    let m = std::fs::symlink_metadata(path).map_err(|e| refused(path, e.kind(), &e.to_string()))?;
    if !m.is_dir() {
        return Err(refused(path, ErrorKind::InvalidInput, "is not a directory"));
    }
    if m.uid() != euid() || m.mode() & 0o022 != 0 {
        let why = format!("is not private (owner uid {}, mode {:o}); not using it", m.uid(), m.mode() & 0o7777);
        return Err(refused(path, ErrorKind::PermissionDenied, &why));
    }
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn new_files_are_private_and_links_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("new");
        write_private(&p, b"one").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        // Written whole again: emptied first.
        write_private(&p, b"2").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"2");
        let mut log = open_private(&p, Existing::Append).unwrap();
        log.write_all(b"3").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"23");
        let e = open_private(&p, Existing::Refuse).unwrap_err();
        assert!(e.to_string().contains("not overwriting"), "{e}");

        // A dangling link: nothing is made at its target, whatever is asked.
        let target = d.path().join("target");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for how in [Existing::Refuse, Existing::Append, Existing::Truncate] {
            assert!(open_private(&link, how).is_err(), "{how:?}");
            assert!(!target.exists(), "{how:?}: made the link's target");
        }
        // A link to an existing file: not written through (the caller's own link to an image
        // is followed: the caller chose it).
        std::fs::write(&target, b"keep").unwrap();
        let e = open_private(&link, Existing::Append).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let mut s = String::new();
        File::open(&target).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "keep");
        assert!(open_private(&link, Existing::Image).is_ok());

        // A second hard link: refused.
        std::fs::hard_link(&target, d.path().join("hard")).unwrap();
        let e = open_private(&target, Existing::Truncate).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn private_dirs_are_made_0700_and_others_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = private_dir(&d.path().join("run")).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(private_dir(&p).is_ok(), "an existing private one is used");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_dir(&p).is_err(), "one others may write to is refused");
        let l = d.path().join("l");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(private_dir(&l).is_err(), "a link to a directory is refused");
    }
}
