//! UFS2 extended attributes: the records of FreeBSD's `struct extattr` (sys/ufs/ufs/extattr.h)
//! in an inode's extended-attribute area (`di_extsize` bytes in the blocks `di_extb`).
//!
//! sufs keeps its own attributes in exactly this record layout (`format::xattr`: `ea_length`
//! u32, `ea_namespace` u8, `ea_contentpadlen` u8, `ea_namelength` u8, the name, padding to 8,
//! the content, padding to 8), so the records are decoded and encoded there; what is UFS2's
//! here is what a FreeBSD area may hold: only FreeBSD's two namespaces, at most `UFS_NXADDR`
//! blocks, and POSIX.1e ACLs in FreeBSD's `struct oldacl` (`acl`).

use super::*;
use crate::format::{decode_ext_area, encode_ext_area, ExtAttr, EXT_NS_SECURITY, EXT_NS_TRUSTED};

/// `EXTATTR_NAMESPACE_USER`, `EXTATTR_NAMESPACE_SYSTEM` (sys/extattr.h).
pub const EXTATTR_NAMESPACE_USER: u8 = 1;
pub const EXTATTR_NAMESPACE_SYSTEM: u8 = 2;

/// The attributes of a UFS2 extended-attribute area (`di_extsize` bytes).
pub fn decode_extattrs(area: &[u8], fs: &Fs) -> Result<Vec<ExtAttr>, Ufs2Error> {
    let max = UFS_NXADDR * fs.fs_bsize as usize;
    if area.len() > max {
        return Err(Ufs2Error::ExtAttr(format!("an area of {} bytes (at most {max})", area.len())));
    }
    let attrs = decode_ext_area(area).map_err(|e| Ufs2Error::ExtAttr(e.to_string()))?;
    if let Some(a) = attrs.iter().find(|a| !matches!(a.namespace, EXTATTR_NAMESPACE_USER | EXTATTR_NAMESPACE_SYSTEM)) {
        return Err(Ufs2Error::ExtAttr(format!("namespace {} is not FreeBSD's", a.namespace)));
    }
    // A POSIX.1e ACL's value is a `struct oldacl` FreeBSD can load.
    let acl_names = [POSIX1E_ACL_ACCESS_EXTATTR_NAME, POSIX1E_ACL_DEFAULT_EXTATTR_NAME];
    for a in attrs.iter().filter(|a| a.namespace == EXTATTR_NAMESPACE_SYSTEM && acl_names.contains(&&a.name[..])) {
        decode_oldacl(&a.value)?;
    }
    Ok(attrs)
}

/// The area holding `attrs` in order, as FreeBSD writes it.
pub fn encode_extattrs(attrs: &[ExtAttr], fs: &Fs) -> Result<Vec<u8>, Ufs2Error> {
    if let Some(a) = attrs.iter().find(|a| !matches!(a.namespace, EXTATTR_NAMESPACE_USER | EXTATTR_NAMESPACE_SYSTEM)) {
        return Err(Ufs2Error::ExtAttr(format!("namespace {} is not FreeBSD's", a.namespace)));
    }
    let area = encode_ext_area(attrs);
    let max = UFS_NXADDR * fs.fs_bsize as usize;
    if area.len() > max {
        return Err(Ufs2Error::ExtAttr(format!("{} bytes of attributes (at most {max})", area.len())));
    }
    Ok(area)
}

/// Linux's namespaces FreeBSD has no number for, kept in FreeBSD's system namespace (root's, as
/// they are) under their Linux prefix: `trusted.x` is `system` `trusted.x` on disk.
const LINUX_IN_SYSTEM: [(&[u8], u8); 2] = [(b"trusted.", EXT_NS_TRUSTED), (b"security.", EXT_NS_SECURITY)];

/// `attrs` (sufs's namespaces, `format::xattr`) as a UFS2 area holds them: only FreeBSD's two
/// namespaces (`LINUX_IN_SYSTEM`).
pub fn to_freebsd(attrs: &[ExtAttr]) -> Vec<ExtAttr> {
    attrs
        .iter()
        .map(|a| {
            let (namespace, name) = freebsd_key(a.namespace, &a.name);
            ExtAttr { namespace, name, value: a.value.clone() }
        })
        .collect()
}

/// The (namespace, name) under which a UFS2 area holds sufs's attribute `name` of `ns`.
pub fn freebsd_key(ns: u8, name: &[u8]) -> (u8, Vec<u8>) {
    match LINUX_IN_SYSTEM.iter().find(|(_, n)| *n == ns) {
        Some((prefix, _)) => (EXTATTR_NAMESPACE_SYSTEM, [prefix, name].concat()),
        None => (ns, name.to_vec()),
    }
}

/// A UFS2 area's attributes in sufs's namespaces: the inverse of `to_freebsd`.
pub fn from_freebsd(attrs: Vec<ExtAttr>) -> Vec<ExtAttr> {
    attrs
        .into_iter()
        .map(|a| {
            if a.namespace != EXTATTR_NAMESPACE_SYSTEM {
                return a;
            }
            for (prefix, ns) in LINUX_IN_SYSTEM {
                if let Some(name) = a.name.strip_prefix(prefix).filter(|n| !n.is_empty()) {
                    return ExtAttr { namespace: ns, name: name.to_vec(), value: a.value };
                }
            }
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::superblock::tests::sample;
    use super::*;

    #[test]
    fn extattr_records_round_trip_in_freebsds_layout() {
        let sb = sample();
        let trivial =
            [(0x01, 6), (0x04, 4), (0x20, 4)].map(|(tag, perm)| OldAclEntry { tag, id: ACL_UNDEFINED_ID, perm });
        let acl = encode_oldacl(&trivial).unwrap();
        let attrs = vec![
            ExtAttr { namespace: EXTATTR_NAMESPACE_USER, name: b"test".to_vec(), value: b"testvalue".to_vec() },
            ExtAttr { namespace: EXTATTR_NAMESPACE_SYSTEM, name: b"posix1e.acl_access".to_vec(), value: acl.clone() },
        ];
        let area = encode_extattrs(&attrs, &sb).unwrap();
        // user.test = testvalue: length 32, namespace 1, 7 bytes of padding after the 9-byte
        // value, name length 4; the value at roundup8(7 + 4) = 16.
        assert_eq!(&area[..11], &[32, 0, 0, 0, 1, 7, 4, b't', b'e', b's', b't']);
        assert_eq!(&area[16..25], b"testvalue");
        assert_eq!(decode_extattrs(&area, &sb).unwrap(), attrs);
        let mut linux = area.clone();
        linux[4] = 3;
        assert!(decode_extattrs(&linux, &sb).is_err(), "namespace 3 is sufs's, not FreeBSD's");
        // Linux's trusted. and security. go into the system namespace under their prefix.
        let linux = vec![
            ExtAttr { namespace: EXT_NS_TRUSTED, name: b"x".to_vec(), value: b"1".to_vec() },
            ExtAttr { namespace: EXT_NS_SECURITY, name: b"selinux".to_vec(), value: b"2".to_vec() },
            attrs[0].clone(),
            attrs[1].clone(),
        ];
        let stored = to_freebsd(&linux);
        assert_eq!((stored[0].namespace, &stored[0].name[..]), (EXTATTR_NAMESPACE_SYSTEM, &b"trusted.x"[..]));
        assert_eq!((stored[1].namespace, &stored[1].name[..]), (EXTATTR_NAMESPACE_SYSTEM, &b"security.selinux"[..]));
        let area = encode_extattrs(&stored, &sb).unwrap();
        assert_eq!(from_freebsd(decode_extattrs(&area, &sb).unwrap()), linux);
        // An ACL record FreeBSD would not load is damage.
        let mut short = attrs.clone();
        short[1].value.truncate(28);
        assert!(decode_extattrs(&encode_ext_area(&short), &sb).is_err(), "an ACL of 28 bytes");
        let big = ExtAttr { namespace: 1, name: b"big".to_vec(), value: vec![0; 65530] };
        assert!(encode_extattrs(&[big], &sb).is_err(), "past two 32 KiB blocks");
    }
}
