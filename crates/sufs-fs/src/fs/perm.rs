//! Permission checks in sufs, for a mount without the kernel's `default_permissions`
//! (`-o permissions=sufs`): what Linux's `generic_permission` and the VFS around it check, for
//! the FUSE adapter to call per request.
//!
//! The algorithm (`permitted`): root (uid 0, taken to hold CAP_DAC_OVERRIDE) may read and write
//! anything and search any directory, and execute a file with at least one execute bit; anyone
//! else gets the owner's bits when the owner, else, where the file has an access ACL and its
//! mode has group bits (the mask), the ACL's answer (POSIX.1e: owner, named users, owning group
//! and named groups masked by the mask entry, other), else the group's bits when in the file's
//! group, else the others'. The caller's supplementary groups are asked for (`Cred::groups`)
//! only when an answer depends on them.
//!
//! What the kernel does not send for a FUSE server to check is listed in docs/performance.md
//! ("Permission checks in sufs"): a path walk through a cached name, and the opening of a
//! FIFO, socket or device. So these checks are not the mount's default.

use std::cell::OnceCell;

use super::acl::{parse_acl, AclEntry, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER};
use super::*;

/// The mode's set-user-ID, set-group-ID and sticky bits.
const S_ISUID: u16 = 0o4000;
const S_ISGID: u16 = 0o2000;
const S_ISVTX: u16 = 0o1000;

/// The attribute holding a file's access ACL.
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";

/// Read permission (Linux's MAY_READ).
pub const MAY_READ: u16 = 4;
/// Write permission (MAY_WRITE).
pub const MAY_WRITE: u16 = 2;
/// Execute, or search for a directory (MAY_EXEC).
pub const MAY_EXEC: u16 = 1;

/// Who asks: the request's user and group, and its supplementary groups, read only when needed.
pub struct Cred<'a> {
    /// The caller's file-system user id.
    pub uid: u32,
    /// The caller's file-system group id.
    pub gid: u32,
    /// Reads the supplementary groups (FUSE does not send them).
    load_groups: &'a dyn Fn() -> Vec<u32>,
    /// The supplementary groups, once read.
    groups: OnceCell<Vec<u32>>,
}

impl<'a> Cred<'a> {
    pub fn new(uid: u32, gid: u32, load_groups: &'a dyn Fn() -> Vec<u32>) -> Cred<'a> {
        Cred { uid, gid, load_groups, groups: OnceCell::new() }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the caller is in group `gid`: its own, or a supplementary one.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.get_or_init(|| (self.load_groups)()).contains(&gid)
    }
}

/// The part of an inode a permission check reads.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
}

impl From<&Dinode> for Owner {
    fn from(d: &Dinode) -> Owner {
        Owner { mode: d.mode, uid: d.uid, gid: d.gid }
    }
}

/// Whether `cred` may access a file `f` with access ACL `acl` for `want` (MAY_* bits).
pub fn permitted(cred: &Cred, f: Owner, acl: Option<&[AclEntry]>, want: u16) -> bool {
    debug_assert!(want & !7 == 0, "only read, write and execute are asked for");
    if cred.is_root() {
        let dir = f.mode & S_IFMT == S_IFDIR;
        return want & MAY_EXEC == 0 || dir || f.mode & 0o111 != 0;
    }
    if cred.uid == f.uid {
        return want & !(f.mode >> 6) & 7 == 0;
    }
    if let Some(acl) = acl.filter(|_| f.mode & 0o070 != 0) {
        return acl_permitted(cred, f.gid, acl, want);
    }
    // The group's bits only where they differ from the others' in what is asked for.
    let bits = if want & (f.mode ^ (f.mode >> 3)) & 7 != 0 && cred.in_group(f.gid) { f.mode >> 3 } else { f.mode };
    want & !bits & 7 == 0
}

/// POSIX.1e's access check on an ACL, for a caller other than the file's owner (Linux's
/// `posix_acl_permission`, the owner's entry being the mode's owner bits); `gid` is the file's
/// group, whom the owning group's entry stands for.
fn acl_permitted(cred: &Cred, gid: u32, acl: &[AclEntry], want: u16) -> bool {
    let entry = |tag| acl.iter().find(|e| e.tag == tag).map(|e| e.perm);
    let mask = entry(ACL_MASK).unwrap_or(7);
    let has = |perm: u16| want & !perm == 0;
    if let Some(e) = acl.iter().find(|e| e.tag == ACL_USER && e.id == cred.uid) {
        return has(e.perm & mask);
    }
    let mut found = false;
    for e in acl.iter().filter(|e| e.tag == ACL_GROUP_OBJ || e.tag == ACL_GROUP) {
        let member = cred.in_group(if e.tag == ACL_GROUP_OBJ { gid } else { e.id });
        if member {
            found = true;
            if has(e.perm) {
                return has(e.perm & mask);
            }
        }
    }
    !found && entry(ACL_OTHER).is_some_and(has)
}

impl Fs {
    /// The access ACL of `ino`; None without one, or where the mode's group bits are zero (the
    /// ACL is not consulted then).
    fn access_acl(&mut self, ino: u32, d: &Dinode) -> FsResult<Option<Vec<AclEntry>>> {
        if d.mode & 0o070 == 0 || (d.extsize == 0 && d.extb == [0; NXADDR]) {
            return Ok(None);
        }
        match self.getxattr(ino, ACL_ACCESS, 0) {
            Ok(v) => Ok(Some(parse_acl(&v)?)),
            Err(FsError::NoAttr) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// EACCES unless `cred` may access `ino` for `want`; its attributes otherwise.
    pub fn may(&mut self, ino: u32, cred: &Cred, want: u16) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        if want == 0 || (cred.is_root() && want & MAY_EXEC == 0) {
            return Ok(d);
        }
        let acl = if cred.uid == d.uid { None } else { self.access_acl(ino, &d)? };
        if permitted(cred, Owner::from(&d), acl.as_deref(), want) {
            Ok(d)
        } else {
            Err(FsError::Access)
        }
    }

    /// Removing (or renaming away) `name` from `dir`: write and search on the directory, and
    /// in a sticky directory only the file's owner, the directory's owner or root (EPERM).
    pub fn may_delete(&mut self, dir: u32, name: &[u8], cred: &Cred) -> FsResult<()> {
        let dd = self.may(dir, cred, MAY_WRITE | MAY_EXEC)?;
        if dd.mode & S_ISVTX == 0 || cred.is_root() || cred.uid == dd.uid {
            return Ok(());
        }
        let (_, victim) = self.lookup(dir, name)?;
        if victim.uid != cred.uid {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    /// A rename's checks (Linux's `may_delete`, `may_create` and `vfs_rename`): the source
    /// leaves `sdir`, the target (if any) leaves `tdir`, or a new name is made there; a
    /// directory moved to another parent needs write permission on itself (its ".."), and so
    /// does the target directory of an exchange (`exchange`), which moves the other way.
    pub fn may_rename(&mut self, from: (u32, &[u8]), to: (u32, &[u8]), exchange: bool, cred: &Cred) -> FsResult<()> {
        let ((sdir, sname), (tdir, tname)) = (from, to);
        self.may_delete(sdir, sname, cred)?;
        let target = self.lookup(tdir, tname).ok();
        if target.is_some() {
            self.may_delete(tdir, tname, cred)?;
        } else {
            self.may(tdir, cred, MAY_WRITE | MAY_EXEC)?;
        }
        if sdir == tdir {
            return Ok(());
        }
        let (src, sd) = self.lookup(sdir, sname)?;
        if sd.is_dir() {
            self.may(src, cred, MAY_WRITE)?;
        }
        if let Some((t, _)) = target.filter(|(_, td)| exchange && td.is_dir()) {
            self.may(t, cred, MAY_WRITE)?;
        }
        Ok(())
    }

    /// A hard link to `ino` in `dir`: a new name in `dir`, and Linux's `protected_hardlinks`
    /// (on by default): someone other than the owner or root may link only a regular file
    /// that is not set-user-ID or executable set-group-ID and that they may read and write.
    pub fn may_link(&mut self, ino: u32, dir: u32, cred: &Cred) -> FsResult<()> {
        self.may(dir, cred, MAY_WRITE | MAY_EXEC)?;
        let d = self.iget(ino)?;
        if cred.is_root() || cred.uid == d.uid {
            return Ok(());
        }
        let setid = d.mode & S_ISUID != 0 || d.mode & (S_ISGID | 0o010) == (S_ISGID | 0o010);
        if !d.is_reg() || setid || self.may(ino, cred, MAY_READ | MAY_WRITE).is_err() {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    /// A setattr's checks (Linux's `setattr_prepare`), before it is made; returns the mode to
    /// set, without set-group-ID where a chmod by someone other than root is not in the
    /// file's (new) group. `fh`: a truncation through an open file (checked at its open).
    pub fn may_setattr(&mut self, ino: u32, a: &SetAttr, fh: bool, cred: &Cred) -> FsResult<Option<u32>> {
        let d = self.iget(ino)?;
        let owner = cred.is_root() || cred.uid == d.uid;
        if a.size.is_some() && !fh {
            self.may(ino, cred, MAY_WRITE)?;
        }
        // The owner: only root gives a file away (the owner may name themselves).
        if a.uid.is_some_and(|u| !(cred.is_root() || (cred.uid == d.uid && u == d.uid))) {
            return Err(FsError::Perm);
        }
        // The group: root, or the owner to the file's group or one of their own.
        if a.gid.is_some_and(|g| !cred.is_root() && !(cred.uid == d.uid && (g == d.gid || cred.in_group(g)))) {
            return Err(FsError::Perm);
        }
        let times = a.atime.is_some() || a.mtime.is_some();
        if times && !owner {
            // To the current time: anyone who may write; other times: the owner or root.
            if !a.times_now {
                return Err(FsError::Perm);
            }
            self.may(ino, cred, MAY_WRITE)?;
        }
        let Some(mode) = a.mode else { return Ok(None) };
        if !owner {
            return Err(FsError::Perm);
        }
        let gid = a.gid.unwrap_or(d.gid);
        if mode & S_ISGID as u32 != 0 && !cred.is_root() && !cred.in_group(gid) {
            return Ok(Some(mode & !(S_ISGID as u32)));
        }
        Ok(Some(mode))
    }

    /// An extended attribute's checks beyond the namespace rules `fs::xattr` applies: `user.`
    /// needs read (get, list none) or write (set, remove) permission on the file; an ACL may
    /// be set or removed only by the owner or root (`system.`).
    pub fn may_xattr(&mut self, ino: u32, name: &[u8], write: bool, cred: &Cred) -> FsResult<()> {
        if name.starts_with(b"user.") {
            self.may(ino, cred, if write { MAY_WRITE } else { MAY_READ })?;
        } else if write && name.starts_with(b"system.posix_acl_") {
            let d = self.iget(ino)?;
            if !(cred.is_root() || cred.uid == d.uid) {
                return Err(FsError::Perm);
            }
        }
        Ok(())
    }
}

/// What an open with `flags` (open(2)'s, as FUSE's OPEN carries them) asks for. execve's open
/// carries the kernel's `__FMODE_EXEC` and asks for execute permission alone (Linux's
/// `do_open_execat`: a binary without read permission still runs).
pub fn open_wants(flags: i32) -> u16 {
    const FMODE_EXEC: i32 = 0x20;
    if flags & FMODE_EXEC != 0 {
        return MAY_EXEC;
    }
    let mut want = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    if flags & libc::O_TRUNC != 0 {
        want |= MAY_WRITE;
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::acl::ACL_USER_OBJ;

    fn file(mode: u16, uid: u32, gid: u32) -> Owner {
        Owner { mode: S_IFREG | mode, uid, gid }
    }

    fn check(uid: u32, gid: u32, groups: &[u32], f: Owner, acl: Option<&[AclEntry]>, want: u16) -> bool {
        let groups = groups.to_vec();
        let load = move || groups.clone();
        let cred = Cred::new(uid, gid, &load);
        permitted(&cred, f, acl, want)
    }

    fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    #[test]
    fn owner_group_other() {
        let f = file(0o640, 10, 20);
        assert!(check(10, 99, &[], f, None, MAY_READ | MAY_WRITE));
        assert!(!check(10, 99, &[], f, None, MAY_EXEC));
        assert!(check(11, 20, &[], f, None, MAY_READ));
        assert!(!check(11, 20, &[], f, None, MAY_WRITE));
        assert!(check(11, 5, &[20], f, None, MAY_READ), "a supplementary group counts");
        assert!(!check(11, 5, &[], f, None, MAY_READ));
        // The owner's bits alone count for the owner, even where the others' allow more.
        assert!(!check(10, 20, &[], file(0o077, 10, 20), None, MAY_READ));
        assert!(!check(11, 20, &[], file(0o707, 10, 20), None, MAY_READ), "the group's bits alone for the group");
    }

    #[test]
    fn supplementary_groups_are_read_only_when_they_matter() {
        let load = || panic!("groups read needlessly");
        let cred = Cred::new(11, 5, &load);
        assert!(permitted(&cred, file(0o644, 10, 20), None, MAY_READ), "group and other agree");
        assert!(!permitted(&cred, file(0o664, 10, 20), None, MAY_EXEC));
    }

    #[test]
    fn root_bypasses_but_needs_an_execute_bit() {
        assert!(check(0, 0, &[], file(0o000, 10, 20), None, MAY_READ | MAY_WRITE));
        assert!(!check(0, 0, &[], file(0o600, 10, 20), None, MAY_EXEC));
        assert!(check(0, 0, &[], file(0o001, 10, 20), None, MAY_EXEC));
        let dir = Owner { mode: S_IFDIR, uid: 10, gid: 20 };
        assert!(check(0, 0, &[], dir, None, MAY_EXEC | MAY_WRITE), "any directory is searched by root");
    }

    #[test]
    fn acl_named_users_groups_and_the_mask() {
        // user::rw- user:30:rwx group::r-- group:40:rw- mask::r-x other::---
        let acl = [
            e(ACL_USER_OBJ, 6, 0),
            e(ACL_USER, 7, 30),
            e(ACL_GROUP_OBJ, 4, 0),
            e(ACL_GROUP, 6, 40),
            e(ACL_MASK, 5, 0),
            e(ACL_OTHER, 0, 0),
        ];
        let f = file(0o650, 10, 20);
        assert!(check(30, 99, &[], f, Some(&acl), MAY_READ | MAY_EXEC));
        assert!(!check(30, 99, &[], f, Some(&acl), MAY_WRITE), "the mask takes write away");
        assert!(check(31, 20, &[], f, Some(&acl), MAY_READ));
        assert!(!check(31, 20, &[], f, Some(&acl), MAY_WRITE));
        assert!(check(31, 5, &[40], f, Some(&acl), MAY_READ));
        assert!(!check(31, 5, &[40], f, Some(&acl), MAY_WRITE), "named group masked");
        // A member of a group whose entries all deny gets no fall-back to other.
        let open_other = [e(ACL_USER_OBJ, 6, 0), e(ACL_GROUP_OBJ, 0, 0), e(ACL_MASK, 7, 0), e(ACL_OTHER, 7, 0)];
        assert!(!check(31, 20, &[], file(0o677, 10, 20), Some(&open_other), MAY_READ));
        assert!(check(31, 21, &[], file(0o677, 10, 20), Some(&open_other), MAY_READ));
        // The owner is judged by the mode's owner bits, never the ACL.
        assert!(check(10, 20, &[], f, Some(&acl), MAY_READ | MAY_WRITE));
        // With no group bits in the mode the ACL is not consulted: the others' bits decide.
        assert!(!check(30, 99, &[], file(0o604, 10, 20), Some(&acl), MAY_WRITE));
        assert!(check(30, 99, &[], file(0o604, 10, 20), Some(&acl), MAY_READ));
    }

    #[test]
    fn open_flags() {
        assert_eq!(open_wants(libc::O_RDONLY), MAY_READ);
        assert_eq!(open_wants(libc::O_WRONLY | libc::O_APPEND), MAY_WRITE);
        assert_eq!(open_wants(libc::O_RDWR), MAY_READ | MAY_WRITE);
        assert_eq!(open_wants(libc::O_RDONLY | libc::O_TRUNC), MAY_READ | MAY_WRITE);
        assert_eq!(open_wants(libc::O_RDONLY | 0x20), MAY_EXEC, "execve");
    }
}
