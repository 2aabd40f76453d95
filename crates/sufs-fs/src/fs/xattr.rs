//! Extended attributes, as UFS2 keeps them (FreeBSD's ffs_extattr: `di_extsize` and
//! `di_extb[2]`, an area of records in blocks of its own; the records are `format::xattr`),
//! under Linux's names and errors (docs/xattr.md). The POSIX ACLs are FreeBSD's
//! records, turned into Linux's as the area is read and back as it is written (`fs::acl`).
//!
//! Every change writes the whole area again, copy-on-write, into new blocks: the new blocks'
//! contents reach the disk before the inode points at them, and the old blocks return to the
//! free map only once the disk no longer points at them. With soft updates that is an
//! `AllocDirect` per new block (`PtrSlot::Ext`) whose inode write rolls the whole area back to
//! the one on disk, and a delayed free (FreeBSD's softdep_setup_allocext); with `sync`, the
//! new blocks and then the inode are written before the old blocks are freed. So a crash
//! leaves the old attributes or the new ones, never a mixture.

use super::*;
use crate::format::ufs2::OLDACL_MAX_ENTRIES;

/// How a set treats an existing name (setxattr(2)'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    Any,
    /// `XATTR_CREATE`: EEXIST if the name exists.
    Create,
    /// `XATTR_REPLACE`: ENODATA if it does not.
    Replace,
}

impl XattrMode {
    /// From setxattr(2)'s flags (`XATTR_CREATE` 1, `XATTR_REPLACE` 2).
    pub fn from_flags(flags: i32) -> FsResult<XattrMode> {
        match flags & 3 {
            0 => Ok(XattrMode::Any),
            1 => Ok(XattrMode::Create),
            2 => Ok(XattrMode::Replace),
            _ => Err(FsError::Invalid("XATTR_CREATE and XATTR_REPLACE together")),
        }
    }
}

/// The POSIX ACLs' names (in the `system.` namespace).
pub const ACL_ACCESS: &[u8] = b"posix_acl_access";
pub const ACL_DEFAULT: &[u8] = b"posix_acl_default";

const PREFIXES: [(&[u8], u8); 4] = [
    (b"user.", EXT_NS_USER),
    (b"trusted.", EXT_NS_TRUSTED),
    (b"security.", EXT_NS_SECURITY),
    (b"system.", EXT_NS_SYSTEM),
];

/// A Linux attribute name as (namespace, name without its prefix). Names of no namespace
/// sufs keeps, and `system.` names other than the two ACLs, are EOPNOTSUPP.
pub fn split_name(full: &[u8]) -> FsResult<(u8, &[u8])> {
    if full.len() > XATTR_NAME_MAX {
        return Err(FsError::AttrRange);
    }
    for (prefix, ns) in PREFIXES {
        if let Some(name) = full.strip_prefix(prefix) {
            if name.is_empty() || name.contains(&0) {
                return Err(FsError::Invalid("an attribute name with nothing after its namespace"));
            }
            if ns == EXT_NS_SYSTEM && name != ACL_ACCESS && name != ACL_DEFAULT {
                return Err(FsError::NotSupported);
            }
            return Ok((ns, name));
        }
    }
    Err(FsError::NotSupported)
}

/// The Linux name of a stored attribute.
pub fn full_name(a: &ExtAttr) -> Vec<u8> {
    let prefix = PREFIXES.iter().find(|(_, ns)| *ns == a.namespace).map_or(&b""[..], |(p, _)| p);
    [prefix, &a.name[..]].concat()
}

impl Fs {
    /// The value of attribute `name` of `ino` (`uid` is the caller's: `trusted.` is root's).
    pub fn getxattr(&mut self, ino: u32, name: &[u8], uid: u32) -> FsResult<Vec<u8>> {
        let (ns, name) = split_name(name)?;
        if ns == EXT_NS_TRUSTED && uid != 0 {
            return Err(FsError::NoAttr);
        }
        let d = self.iget(ino)?;
        if ns == EXT_NS_SYSTEM {
            // An ACL: in FreeBSD's form, turned into Linux's as the area is read.
            let attrs = self.read_ext_area(ino, &d)?;
            return attrs
                .into_iter()
                .find(|a| a.namespace == ns && a.name == name)
                .map(|a| a.value)
                .ok_or(FsError::NoAttr);
        }
        let area = self.read_ext_bytes(ino, &d)?;
        // The record as the area holds it (in FreeBSD's namespaces).
        let (ns, name) = crate::format::ufs2::freebsd_key(ns, name);
        let found = match ext_records(&area) {
            Ok(refs) => refs.iter().find(|a| a.namespace == ns && a.name == name).map(|a| a.value.to_vec()),
            Err(e) => return Err(self.damaged(format!("inode {ino}: {e}"))),
        };
        found.ok_or(FsError::NoAttr)
    }

    /// The names of `ino`'s attributes, each followed by a NUL, as listxattr(2) returns them
    /// (`trusted.` names only to root).
    pub fn listxattr(&mut self, ino: u32, uid: u32) -> FsResult<Vec<u8>> {
        let d = self.iget(ino)?;
        let mut out = Vec::new();
        for a in self.read_ext_area(ino, &d)? {
            if a.namespace != EXT_NS_TRUSTED || uid == 0 {
                out.extend(full_name(&a));
                out.push(0);
            }
        }
        Ok(out)
    }

    /// Sets attribute `name` of `ino` to `value`. The area holds at most two blocks of records:
    /// a set that would not fit is ENOSPC (as FreeBSD's ffs_setextattr); a value past 64 KiB is
    /// E2BIG before that.
    pub fn setxattr(&mut self, ino: u32, name: &[u8], value: &[u8], mode: XattrMode, uid: u32) -> FsResult<()> {
        let (ns, name) = split_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(FsError::AttrTooBig);
        }
        self.check_attr_change(ino, ns, uid)?;
        if ns == EXT_NS_SYSTEM {
            let acl = acl::parse_acl(value)?;
            // FreeBSD's record holds at most 32 entries.
            if acl.len() > OLDACL_MAX_ENTRIES {
                return Err(FsError::AclTooLong(acl.len()));
            }
        }
        self.retry_nospace(|fs| {
            let mut d = fs.iget(ino)?;
            let mut attrs = fs.read_ext_area(ino, &d)?;
            let at = attrs.iter().position(|a| a.namespace == ns && a.name == name);
            match (at, mode) {
                (Some(_), XattrMode::Create) => return Err(FsError::Exists),
                (None, XattrMode::Replace) => return Err(FsError::NoAttr),
                _ => {}
            }
            // An access ACL sets the mode; one the mode says entirely is kept as the mode.
            let keep = if ns == EXT_NS_SYSTEM && name == ACL_ACCESS {
                Fs::acl_update_mode(&mut d, value)?
            } else {
                Some(value.to_vec())
            };
            let new = keep.map(|value| ExtAttr { namespace: ns, name: name.to_vec(), value });
            match (at, new) {
                (Some(i), Some(new)) => attrs[i] = new,
                (Some(i), None) => drop(attrs.remove(i)),
                (None, Some(new)) => attrs.push(new),
                (None, None) => {}
            }
            fs.touch_c(&mut d);
            fs.write_ext_area(ino, &mut d, &attrs)
        })?;
        self.balance()
    }

    /// Removes attribute `name` of `ino` (ENODATA if it has none).
    pub fn removexattr(&mut self, ino: u32, name: &[u8], uid: u32) -> FsResult<()> {
        let (ns, name) = split_name(name)?;
        self.check_attr_change(ino, ns, uid)?;
        let mut d = self.iget(ino)?;
        let mut attrs = self.read_ext_area(ino, &d)?;
        let i = attrs.iter().position(|a| a.namespace == ns && a.name == name).ok_or(FsError::NoAttr)?;
        attrs.remove(i);
        self.touch_c(&mut d);
        // A smaller area needs no more blocks than the one it replaces, so no ENOSPC retry.
        self.write_ext_area(ino, &mut d, &attrs)?;
        self.balance()
    }

    /// What Linux refuses before a file system sees a change: `trusted.` by anyone but root,
    /// `user.` on anything but regular files and directories; and what sufs refuses of
    /// immutable and append-only files (chattr's, reservations, snapshots) and read-only mounts.
    fn check_attr_change(&mut self, ino: u32, ns: u8, uid: u32) -> FsResult<()> {
        self.check_writable()?;
        let d = self.iget(ino)?;
        let user_ok = d.is_reg() || d.is_dir();
        if (ns == EXT_NS_TRUSTED && uid != 0) || (ns == EXT_NS_USER && !user_ok) {
            return Err(FsError::Perm);
        }
        if d.flags & (DI_IMMUTABLE | DI_APPEND | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    /// The attributes of `ino` (its dinode `d`): every value from disk is checked, and a
    /// damaged area fails the request with EIO and asks for fsck.
    pub(super) fn read_ext_area(&mut self, ino: u32, d: &Dinode) -> FsResult<Vec<ExtAttr>> {
        if d.extsize == 0 && d.extb == [0; NXADDR] {
            // No area (most files): nothing to decode (every create asks its directory).
            return Ok(Vec::new());
        }
        let area = self.read_ext_bytes(ino, d)?;
        match decode_ext_area(&area) {
            Ok(attrs) => match acl::acls_from_freebsd(crate::format::ufs2::from_freebsd(attrs), d.mode) {
                Ok(attrs) => Ok(attrs),
                Err(e) => Err(self.damaged(format!("inode {ino}: {e}"))),
            },
            Err(e) => Err(self.damaged(format!("inode {ino}: {e}"))),
        }
    }

    /// The bytes of `ino`'s attribute area, its size and pointers checked.
    fn read_ext_bytes(&mut self, ino: u32, d: &Dinode) -> FsResult<Vec<u8>> {
        if d.extsize == 0 && d.extb == [0; NXADDR] {
            return Ok(Vec::new());
        }
        let bs = self.sb.block_size as usize;
        let size = d.extsize as usize;
        let n = size.div_ceil(bs);
        if size > NXADDR * bs || (0..NXADDR).any(|i| (i < n) != (d.extb[i] != 0)) {
            return Err(self.damaged(format!("inode {ino}: attribute area of {size} bytes in blocks {:?}", d.extb)));
        }
        let mut area = Vec::with_capacity(size);
        for (i, &b) in d.extb[..n].iter().enumerate() {
            self.checked_ptr(b)?;
            let len = bs.min(size - i * bs);
            let run = self.ext_run_len(len);
            area.extend_from_slice(&self.cache.read_frags(b, run)?[..len]);
        }
        Ok(area)
    }

    /// Writes `attrs` as `ino`'s new attribute area (copy-on-write, see the module's comment)
    /// and the dinode `d` with it.
    pub(super) fn write_ext_area(&mut self, ino: u32, d: &mut Dinode, attrs: &[ExtAttr]) -> FsResult<()> {
        // Only FreeBSD's namespaces (`ufs2::to_freebsd`) and FreeBSD's ACLs
        // (`acl::acls_to_freebsd`) reach the disk.
        let area = encode_ext_area(&crate::format::ufs2::to_freebsd(&acl::acls_to_freebsd(attrs)?));
        let bs = self.sb.block_size as usize;
        if area.len() > NXADDR * bs {
            // ENOSPC as the disk's, but not worth a wait for soft updates' frees.
            return Err(FsError::AttrAreaFull);
        }
        let mut old: Vec<u64> = d.ext_blocks().collect();
        for &b in &old {
            self.checked_ptr(b)?;
        }
        // The old area's last run, when in fragments, is freed as such.
        let old_tail = match old.last() {
            Some(&b) => {
                let run = self.ext_run_len(d.extsize as usize - (old.len() - 1) * bs);
                (run < bs).then(|| (b, self.frags_in(run)))
            }
            None => None,
        };
        let old_held =
            (old.len() as u64 - old_tail.is_some() as u64) * self.sb.frag() + old_tail.map_or(0, |t| t.1 as u64);
        if !old.is_empty() {
            // Whether the old area is on disk decides when its blocks may go.
            self.land_flight()?;
        }
        let on_disk = self.hooks.softdep.as_ref().and_then(|sd| sd.ext_on_disk(ino)).unwrap_or((d.extsize, d.extb));
        let new = self.alloc_ext_blocks(ino, &area)?;
        self.order_write(&new)?;
        d.extsize = area.len() as u32;
        d.extb = [0; NXADDR];
        d.extb[..new.len()].copy_from_slice(&new);
        let new_held: u64 = area.chunks(bs).map(|c| self.frags_in(self.ext_run_len(c.len())) as u64).sum();
        d.blocks = d.blocks.saturating_sub(old_held) + new_held;
        if let Some(sd) = self.hooks.softdep.as_mut() {
            let orphans = sd.cancel_blocks(ino, &old);
            debug_assert!(orphans.is_empty(), "attribute blocks hold no directory entries");
            sd.alloc_ext(ino, &new, on_disk);
            for &b in &old {
                self.cache.forget(b);
            }
            if old_tail.is_some() {
                old.pop();
            }
            if !old.is_empty() || old_tail.is_some() {
                let then =
                    old_tail.map(|(bno, frags)| Task::FreeFrag(FreeFrag { ino, bno, frags })).into_iter().collect();
                sd.free_ext_blocks(ino, old, then);
            }
            self.iput(ino, d)?;
            return Ok(());
        }
        let ib = self.iput(ino, d)?;
        self.order_write(&[ib])?;
        for b in &old {
            self.forget_block(*b)?;
        }
        if old_tail.is_some() {
            old.pop();
        }
        for b in old {
            self.free_block(b)?;
        }
        if let Some((b, frags)) = old_tail {
            self.free_frags(b, frags)?;
        }
        Ok(())
    }

    /// New blocks holding `area`, in the inode's group (none for an empty area).
    fn alloc_ext_blocks(&mut self, ino: u32, area: &[u8]) -> FsResult<Vec<u64>> {
        let bs = self.sb.block_size as usize;
        let mut new = Vec::new();
        for chunk in area.chunks(bs) {
            let pref = new.last().map_or_else(|| self.ino_pref(ino), |&b| b + self.sb.frag());
            let run = self.ext_run_len(chunk.len());
            let b = match self.alloc_run(self.frags_in(run), pref) {
                Ok(b) => b,
                Err(e) => {
                    // Nothing points at the blocks taken so far (all whole): they go back at once.
                    for b in new {
                        self.free_block(b)?;
                    }
                    return Err(e);
                }
            };
            self.cache.create_frags(b, run)[..chunk.len()].copy_from_slice(chunk);
            new.push(b);
        }
        Ok(new)
    }

    /// A file being freed loses its attribute area with it (before its data blocks, with the
    /// same ordering: the blocks go once the cleared pointers are on disk).
    pub(super) fn release_ext(&mut self, ino: u32, d: &mut Dinode) -> FsResult<()> {
        if d.extsize == 0 && d.extb == [0; NXADDR] {
            return Ok(());
        }
        self.write_ext_area(ino, d, &[])
    }
}
