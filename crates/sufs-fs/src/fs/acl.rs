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

use super::xattr::{ACL_ACCESS, ACL_DEFAULT};
use super::*;

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
