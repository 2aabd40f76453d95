//! POSIX ACLs (POSIX.1e draft 17, as Linux keeps them): stored as the attributes
//! `system.posix_acl_access` and `system.posix_acl_default` in the kernel's xattr format
//! (a `u32` version 2, then 8-byte entries: `u16` tag, `u16` permissions, `u32` id).
//!
//! With FUSE_POSIX_ACL the kernel checks permissions against the ACLs itself, but leaves to
//! the file system what Linux's `posix_acl_create`, `posix_acl_update_mode` and
//! `posix_acl_chmod` do for a local one: a new file inherits its directory's default ACL (and
//! the umask is then not applied), setting an access ACL sets the mode it implies (and an ACL
//! the mode says entirely is kept as the mode alone), and a chmod changes the access ACL's
//! owner, mask (or group) and other entries. Those three live here.
//!
//! On UFS2 the ACLs are kept as FreeBSD's UFS keeps them (sys/ufs/ufs/ufs_acl.c): a `struct
//! oldacl` (`format::ufs2::acl`) in the system namespace under `posix1e.acl_access` and
//! `posix1e.acl_default`, so that FreeBSD enforces what setfacl set under sufs and sufs what
//! setfacl set on FreeBSD. The area's records are turned into Linux's names and format as they
//! are read (`acls_from_freebsd`) and back as they are written (`acls_to_freebsd`); everything
//! above that sees Linux's. As FreeBSD does, the access ACL's owner, other and mask (or owning
//! group) permissions are the mode's: FreeBSD's chmod leaves the record as it was.

use super::xattr::{ACL_ACCESS, ACL_DEFAULT};
use super::*;
use crate::format::ufs2::{
    decode_oldacl, encode_oldacl, OldAclEntry, ACL_UNDEFINED_ID, EXTATTR_NAMESPACE_SYSTEM, OLDACL_MAX_ENTRIES,
    POSIX1E_ACL_ACCESS_EXTATTR_NAME, POSIX1E_ACL_DEFAULT_EXTATTR_NAME,
};

const ACL_VERSION: u32 = 2;
pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;

/// One entry of an ACL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// An ACL from its xattr value; a value that is not one (wrong version or length, an unknown
/// tag or permission bits, no owner, group or other entry) is EINVAL.
pub fn parse_acl(v: &[u8]) -> FsResult<Vec<AclEntry>> {
    let bad = FsError::Invalid("not a POSIX ACL");
    if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) || u32::from_le_bytes([v[0], v[1], v[2], v[3]]) != ACL_VERSION {
        return Err(bad);
    }
    let acl: Vec<AclEntry> = v[4..]
        .chunks_exact(8)
        .map(|e| AclEntry {
            tag: u16::from_le_bytes([e[0], e[1]]),
            perm: u16::from_le_bytes([e[2], e[3]]),
            id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
        })
        .collect();
    let known = [ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER];
    let has = |t| acl.iter().any(|e| e.tag == t);
    if acl.iter().any(|e| !known.contains(&e.tag) || e.perm & !7 != 0)
        || !has(ACL_USER_OBJ)
        || !has(ACL_GROUP_OBJ)
        || !has(ACL_OTHER)
    {
        return Err(bad);
    }
    Ok(acl)
}

pub fn encode_acl(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = ACL_VERSION.to_le_bytes().to_vec();
    for e in acl {
        v.extend(e.tag.to_le_bytes());
        v.extend(e.perm.to_le_bytes());
        v.extend(e.id.to_le_bytes());
    }
    v
}

/// The permission bits an ACL implies (the owner, mask or group, and other entries), and
/// whether the ACL says more than they do (Linux's posix_acl_equiv_mode).
pub fn equiv_mode(acl: &[AclEntry], mode: u16) -> (u16, bool) {
    let mut bits = 0u16;
    let mut more = false;
    for e in acl {
        match e.tag {
            ACL_USER_OBJ => bits |= e.perm << 6,
            ACL_GROUP_OBJ => bits |= e.perm << 3,
            ACL_OTHER => bits |= e.perm,
            ACL_MASK => {
                bits = (bits & !0o070) | (e.perm << 3);
                more = true;
            }
            _ => more = true,
        }
    }
    ((mode & !0o777) | bits, more)
}

/// A new file's access ACL from its directory's default ACL, and the mode both allow
/// (Linux's posix_acl_create_masq); true if the ACL says more than the mode.
pub fn create_masq(acl: &mut [AclEntry], mode: u16) -> (u16, bool) {
    let mut m = mode & 0o777;
    let mut more = false;
    for e in acl.iter_mut() {
        match e.tag {
            ACL_USER_OBJ => {
                e.perm &= m >> 6;
                m &= (e.perm << 6) | !0o700;
            }
            ACL_OTHER => {
                e.perm &= m & 7;
                m &= e.perm | !0o007;
            }
            ACL_USER | ACL_GROUP | ACL_MASK => more = true,
            _ => {}
        }
    }
    let group = acl.iter().position(|e| e.tag == ACL_MASK).or_else(|| acl.iter().position(|e| e.tag == ACL_GROUP_OBJ));
    if let Some(g) = group {
        acl[g].perm &= (m >> 3) & 7;
        m &= (acl[g].perm << 3) | !0o070;
    }
    ((mode & !0o777) | m, more)
}

/// The access ACL after a chmod to `mode` (Linux's posix_acl_chmod).
pub fn chmod_acl(acl: &mut [AclEntry], mode: u16) {
    let has_mask = acl.iter().any(|e| e.tag == ACL_MASK);
    for e in acl.iter_mut() {
        match e.tag {
            ACL_USER_OBJ => e.perm = (mode >> 6) & 7,
            ACL_OTHER => e.perm = mode & 7,
            ACL_MASK => e.perm = (mode >> 3) & 7,
            ACL_GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
            _ => {}
        }
    }
}

/// Whether an entry of `tag` names a user or group by its id (the others' id is undefined).
fn named(tag: u16) -> bool {
    tag == ACL_USER || tag == ACL_GROUP
}

/// An ACL in Linux's xattr format as FreeBSD's `struct oldacl`. One past FreeBSD's 32 entries is
/// `AclTooLong`; ids go across as numbers.
pub fn acl_to_freebsd(value: &[u8]) -> FsResult<Vec<u8>> {
    let acl = parse_acl(value)?;
    if acl.len() > OLDACL_MAX_ENTRIES {
        return Err(FsError::AclTooLong(acl.len()));
    }
    let entries: Vec<OldAclEntry> = acl
        .iter()
        .map(|e| OldAclEntry {
            tag: u32::from(e.tag),
            id: if named(e.tag) { e.id } else { ACL_UNDEFINED_ID },
            perm: e.perm,
        })
        .collect();
    Ok(encode_oldacl(&entries).expect("at most OLDACL_MAX_ENTRIES valid entries"))
}

/// A FreeBSD `struct oldacl` as an ACL in Linux's xattr format, its entries in Linux's order.
/// For an access ACL `mode` is the file's: its owner, other and mask (or, without a mask,
/// owning group) bits replace those entries' permissions, as FreeBSD's ufs_sync_acl_from_inode
/// does on every read. None for an empty ACL (no ACL); a value FreeBSD would not load is an
/// error (the area is damaged).
pub fn acl_from_freebsd(value: &[u8], mode: Option<u16>) -> Result<Option<Vec<u8>>, String> {
    let entries = decode_oldacl(value).map_err(|e| e.to_string())?;
    if entries.is_empty() {
        return Ok(None);
    }
    let mut acl: Vec<AclEntry> = entries
        .iter()
        .map(|e| AclEntry {
            tag: e.tag as u16,
            perm: e.perm,
            id: if named(e.tag as u16) { e.id } else { ACL_UNDEFINED_ID },
        })
        .collect();
    // FreeBSD's setfacl sorts as Linux wants them (acl_sort): by tag, then by id.
    acl.sort_by_key(|e| (e.tag, e.id));
    if let Some(mode) = mode {
        chmod_acl(&mut acl, mode);
    }
    let v = encode_acl(&acl);
    debug_assert!(parse_acl(&v).is_ok(), "decode_oldacl checked the owner, group and other entries");
    Ok(Some(v))
}

/// The two ACLs' names: sufs's (Linux's without `system.`) and FreeBSD's, and whether the
/// ACL is the access one.
const ACL_NAMES: [(&[u8], &[u8], bool); 2] =
    [(ACL_ACCESS, POSIX1E_ACL_ACCESS_EXTATTR_NAME, true), (ACL_DEFAULT, POSIX1E_ACL_DEFAULT_EXTATTR_NAME, false)];

/// A UFS2 inode's attributes (already in sufs's namespaces, `ufs2::from_freebsd`) with its
/// FreeBSD ACLs under Linux's names and in Linux's format; `mode` is the inode's. An ACL an
/// earlier sufs kept under Linux's name in Linux's format is read as it is, unless a FreeBSD
/// one is there too, which wins (the next write keeps only that one).
pub fn acls_from_freebsd(attrs: Vec<ExtAttr>, mode: u16) -> Result<Vec<ExtAttr>, String> {
    let freebsd = |a: &ExtAttr, name: &[u8]| a.namespace == EXTATTR_NAMESPACE_SYSTEM && a.name == name;
    let mut out = Vec::with_capacity(attrs.len());
    for a in &attrs {
        if let Some(&(linux, _, _)) = ACL_NAMES.iter().find(|(linux, _, _)| freebsd(a, linux)) {
            let shadowed = ACL_NAMES.iter().any(|&(l, f, _)| l == linux && attrs.iter().any(|b| freebsd(b, f)));
            if !shadowed {
                out.push(a.clone());
            }
        } else if let Some(&(linux, _, access)) = ACL_NAMES.iter().find(|(_, f, _)| freebsd(a, f)) {
            // An empty one (FreeBSD stores none, but may be handed one) is no ACL.
            if let Some(value) = acl_from_freebsd(&a.value, access.then_some(mode))? {
                out.push(system_attr(linux, value));
            }
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// sufs's attributes of a UFS2 inode with its ACLs in FreeBSD's form, for the disk: the inverse
/// of `acls_from_freebsd`. An ACL past FreeBSD's 32 entries can only be an earlier sufs's
/// (setxattr refuses one, and one inherited comes from a default ACL that is one): it stays in
/// the form that sufs wrote, so that it does not block every other change to the file's
/// attributes (or a chmod).
pub fn acls_to_freebsd(attrs: &[ExtAttr]) -> FsResult<Vec<ExtAttr>> {
    attrs
        .iter()
        .map(|a| match ACL_NAMES.iter().find(|(l, _, _)| a.namespace == EXT_NS_SYSTEM && a.name == *l) {
            Some(&(_, freebsd, _)) => match acl_to_freebsd(&a.value) {
                Ok(value) => Ok(system_attr(freebsd, value)),
                Err(FsError::AclTooLong(_)) => Ok(a.clone()),
                Err(e) => Err(e),
            },
            None => Ok(a.clone()),
        })
        .collect()
}

/// What a new file takes from its directory: its mode, and the ACLs to set on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inherited {
    pub mode: u32,
    acls: Vec<ExtAttr>,
}

fn system_attr(name: &[u8], value: Vec<u8>) -> ExtAttr {
    ExtAttr { namespace: EXT_NS_SYSTEM, name: name.to_vec(), value }
}

impl Fs {
    /// The mode and ACLs of a new file of mode `mode` in `dir`: with a default ACL there, the
    /// file's access ACL comes from it (and a directory keeps it as its own default), and the
    /// umask is not applied; without one, the mode less the umask.
    pub fn acl_inherit(&mut self, dir: u32, mode: u32, umask: u32, is_dir: bool) -> FsResult<Inherited> {
        let d = self.iget(dir)?;
        let default =
            self.read_ext_area(dir, &d)?.into_iter().find(|a| a.namespace == EXT_NS_SYSTEM && a.name == ACL_DEFAULT);
        let Some(default) = default else {
            return Ok(Inherited { mode: mode & !umask, acls: Vec::new() });
        };
        let mut acl = parse_acl(&default.value)?;
        let (m, more) = create_masq(&mut acl, mode as u16);
        let mut acls = Vec::new();
        if more {
            acls.push(system_attr(ACL_ACCESS, encode_acl(&acl)));
        }
        if is_dir {
            acls.push(default);
        }
        Ok(Inherited { mode: (mode & !0o7777) | (m as u32 & 0o7777), acls })
    }

    /// Gives the new file `ino` the ACLs it inherited; its attributes after, if any were set.
    pub fn acl_apply(&mut self, ino: u32, inh: &Inherited) -> FsResult<Option<Dinode>> {
        if inh.acls.is_empty() {
            return Ok(None);
        }
        let acls = inh.acls.clone();
        self.retry_nospace(|fs| {
            let mut d = fs.iget(ino)?;
            fs.write_ext_area(ino, &mut d, &acls)
        })?;
        self.balance()?;
        Ok(Some(self.getattr(ino)?))
    }

    /// A chmod of `ino` changes its access ACL's entries to match (if it has one).
    pub fn acl_chmod(&mut self, ino: u32) -> FsResult<()> {
        let mut d = self.iget(ino)?;
        let mut attrs = self.read_ext_area(ino, &d)?;
        let Some(a) = attrs.iter_mut().find(|a| a.namespace == EXT_NS_SYSTEM && a.name == ACL_ACCESS) else {
            return Ok(());
        };
        let mut acl = parse_acl(&a.value)?;
        chmod_acl(&mut acl, d.mode);
        a.value = encode_acl(&acl);
        // The same size as before: it fits where the old one did.
        self.write_ext_area(ino, &mut d, &attrs)?;
        self.balance()
    }

    /// Clears the set-group-ID bit of `ino` (an ACL set by someone outside its group).
    pub fn clear_sgid(&mut self, ino: u32) -> FsResult<()> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        if d.mode & 0o2000 != 0 {
            d.mode &= !0o2000;
            self.iput(ino, &d)?;
        }
        Ok(())
    }

    /// Setting an access ACL sets the mode it implies; an ACL the mode says entirely is not
    /// kept (Linux's posix_acl_update_mode). Returns the value to store, if any.
    pub(super) fn acl_update_mode(d: &mut Dinode, value: &[u8]) -> FsResult<Option<Vec<u8>>> {
        let acl = parse_acl(value)?;
        let (mode, more) = equiv_mode(&acl, d.mode);
        d.mode = mode;
        Ok(more.then(|| value.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    #[test]
    fn acl_round_trip_and_validation() {
        let acl = vec![
            e(ACL_USER_OBJ, 6, 0),
            e(ACL_USER, 4, 65534),
            e(ACL_GROUP_OBJ, 4, 0),
            e(ACL_MASK, 4, 0),
            e(ACL_OTHER, 0, 0),
        ];
        let v = encode_acl(&acl);
        assert_eq!(v.len(), 4 + 8 * 5);
        assert_eq!(parse_acl(&v).unwrap(), acl);
        assert!(parse_acl(&v[..v.len() - 1]).is_err());
        assert!(parse_acl(&encode_acl(&acl[..2])).is_err(), "no group or other entry");
        let mut bad = v.clone();
        bad[0] = 1;
        assert!(parse_acl(&bad).is_err(), "version 1");
    }

    const U: u32 = ACL_UNDEFINED_ID;

    /// FreeBSD's `struct oldacl` holding (tag, id, perm) entries (`format::ufs2::acl`, whose
    /// test checks the bytes against FreeBSD's layout).
    fn oldacl(entries: &[(u32, u32, u16)]) -> Vec<u8> {
        let entries: Vec<OldAclEntry> = entries.iter().map(|&(tag, id, perm)| OldAclEntry { tag, id, perm }).collect();
        encode_oldacl(&entries).unwrap()
    }

    #[test]
    fn acls_convert_between_linux_and_freebsd() {
        // Every tag, as setfacl sends them: named ids as numbers, the others undefined.
        let linux = vec![
            e(ACL_USER_OBJ, 7, U),
            e(ACL_USER, 6, 1001),
            e(ACL_USER, 4, 70000),
            e(ACL_GROUP_OBJ, 5, U),
            e(ACL_GROUP, 3, 2002),
            e(ACL_MASK, 7, U),
            e(ACL_OTHER, 1, U),
        ];
        let freebsd = oldacl(&[
            (0x01, U, 7),
            (0x02, 1001, 6),
            (0x02, 70000, 4),
            (0x04, U, 5),
            (0x08, 2002, 3),
            (0x10, U, 7),
            (0x20, U, 1),
        ]);
        assert_eq!(acl_to_freebsd(&encode_acl(&linux)).unwrap(), freebsd);
        // A default ACL reads back as it was; an access ACL takes the mode's owner, mask and
        // other bits (FreeBSD's chmod leaves the record alone).
        assert_eq!(acl_from_freebsd(&freebsd, None).unwrap(), Some(encode_acl(&linux)));
        let synced = acl_from_freebsd(&freebsd, Some(S_IFREG | 0o640)).unwrap().unwrap();
        assert_eq!(parse_acl(&synced).unwrap().iter().map(|x| x.perm).collect::<Vec<_>>(), [6, 6, 4, 5, 3, 4, 0]);
        // Without a mask the mode's group bits are the owning group's.
        let plain = oldacl(&[(0x01, U, 7), (0x04, U, 7), (0x20, U, 7)]);
        let synced = acl_from_freebsd(&plain, Some(S_IFDIR | 0o751)).unwrap().unwrap();
        assert_eq!(synced, encode_acl(&[e(ACL_USER_OBJ, 7, U), e(ACL_GROUP_OBJ, 5, U), e(ACL_OTHER, 1, U)]));
        // FreeBSD's ids of unnamed entries need not be -1, nor its entries sorted.
        let loose = oldacl(&[(0x20, 0, 4), (0x08, 9, 2), (0x04, 0, 4), (0x01, 0, 6), (0x10, 0, 6)]);
        let want =
            [e(ACL_USER_OBJ, 6, U), e(ACL_GROUP_OBJ, 4, U), e(ACL_GROUP, 2, 9), e(ACL_MASK, 6, U), e(ACL_OTHER, 4, U)];
        assert_eq!(acl_from_freebsd(&loose, None).unwrap(), Some(encode_acl(&want)));
        assert_eq!(acl_from_freebsd(&oldacl(&[]), None).unwrap(), None, "an empty ACL is none");
        // Damage: no owner entry, a short value, an unknown tag.
        assert!(acl_from_freebsd(&oldacl(&[(0x04, U, 7), (0x20, U, 7)]), None).is_err());
        assert!(acl_from_freebsd(&freebsd[..300], None).is_err());
        let mut unknown = oldacl(&[(0x01, U, 7), (0x04, U, 7), (0x20, U, 7), (0x02, 1, 1)]);
        unknown[4 + 3 * 12] = 0x40;
        assert!(acl_from_freebsd(&unknown, None).is_err());
    }

    #[test]
    fn acls_past_freebsds_32_entries_are_refused() {
        let with_users = |n: u32| {
            let mut acl = vec![e(ACL_USER_OBJ, 7, U)];
            acl.extend((0..n).map(|i| e(ACL_USER, 4, 1000 + i)));
            acl.extend([e(ACL_GROUP_OBJ, 5, U), e(ACL_MASK, 7, U), e(ACL_OTHER, 0, U)]);
            encode_acl(&acl)
        };
        // 4 + 28 = 32 entries fit, and come back.
        let fits = acl_to_freebsd(&with_users(28)).unwrap();
        assert_eq!(acl_from_freebsd(&fits, None).unwrap(), Some(with_users(28)));
        assert!(matches!(acl_to_freebsd(&with_users(29)), Err(FsError::AclTooLong(33))));
        assert_eq!(FsError::AclTooLong(33).errno(), libc::E2BIG);
        // One an earlier sufs wrote stays as it was written, and reads back the same.
        let attrs = vec![system_attr(ACL_DEFAULT, with_users(29)), system_attr(ACL_ACCESS, with_users(28))];
        let disk = acls_to_freebsd(&attrs).unwrap();
        assert_eq!(disk[0], attrs[0]);
        assert_eq!(disk[1].name, POSIX1E_ACL_ACCESS_EXTATTR_NAME);
        assert_eq!(acls_from_freebsd(disk, S_IFDIR | 0o770).unwrap(), attrs);
    }

    #[test]
    fn area_records_turn_into_linux_names_and_back() {
        let access = encode_acl(&[
            e(ACL_USER_OBJ, 6, U),
            e(ACL_USER, 4, 5),
            e(ACL_GROUP_OBJ, 4, U),
            e(ACL_MASK, 4, U),
            e(ACL_OTHER, 0, U),
        ]);
        let default = encode_acl(&[e(ACL_USER_OBJ, 7, U), e(ACL_GROUP_OBJ, 5, U), e(ACL_OTHER, 5, U)]);
        let user = ExtAttr { namespace: EXT_NS_USER, name: b"u".to_vec(), value: b"1".to_vec() };
        let linux =
            vec![user.clone(), system_attr(ACL_ACCESS, access.clone()), system_attr(ACL_DEFAULT, default.clone())];
        let disk = acls_to_freebsd(&linux).unwrap();
        assert_eq!(disk[0], user);
        assert_eq!((disk[1].namespace, &disk[1].name[..]), (2, &b"posix1e.acl_access"[..]));
        assert_eq!((disk[2].namespace, &disk[2].name[..]), (2, &b"posix1e.acl_default"[..]));
        assert_eq!(disk[1].value.len(), 388);
        assert_eq!(acls_from_freebsd(disk.clone(), S_IFDIR | 0o640).unwrap(), linux);
        // An earlier sufs's ACL under Linux's name is read as it is; next to a FreeBSD one, the
        // FreeBSD one wins.
        let legacy = system_attr(ACL_ACCESS, default.clone());
        assert_eq!(acls_from_freebsd(vec![legacy.clone()], S_IFREG | 0o600).unwrap(), vec![legacy.clone()]);
        let both = vec![legacy, disk[1].clone()];
        assert_eq!(acls_from_freebsd(both, S_IFREG | 0o640).unwrap(), vec![system_attr(ACL_ACCESS, access)]);
    }

    #[test]
    fn mode_and_acl_agree_as_linux_has_them() {
        let base = [e(ACL_USER_OBJ, 7, 0), e(ACL_GROUP_OBJ, 5, 0), e(ACL_OTHER, 1, 0)];
        assert_eq!(equiv_mode(&base, S_IFREG | 0o4000), (S_IFREG | 0o4751, false));
        let full =
            [e(ACL_USER_OBJ, 6, 0), e(ACL_USER, 7, 9), e(ACL_GROUP_OBJ, 4, 0), e(ACL_MASK, 6, 0), e(ACL_OTHER, 4, 0)];
        assert_eq!(equiv_mode(&full, S_IFREG), (S_IFREG | 0o664, true));
        // A default ACL rwx for all, a file made with 0644: the ACL is cut to the mode.
        let mut d =
            [e(ACL_USER_OBJ, 7, 0), e(ACL_USER, 7, 9), e(ACL_GROUP_OBJ, 7, 0), e(ACL_MASK, 7, 0), e(ACL_OTHER, 7, 0)];
        assert_eq!(create_masq(&mut d, S_IFREG | 0o644), (S_IFREG | 0o644, true));
        assert_eq!(d.map(|x| x.perm), [6, 7, 7, 4, 4]);
        let mut plain = [e(ACL_USER_OBJ, 7, 0), e(ACL_GROUP_OBJ, 5, 0), e(ACL_OTHER, 0, 0)];
        assert_eq!(create_masq(&mut plain, S_IFDIR | 0o777), (S_IFDIR | 0o750, false));
        let mut c = full;
        chmod_acl(&mut c, 0o751);
        assert_eq!(c.map(|x| x.perm), [7, 7, 4, 5, 1]);
    }
}
