//! UFS2 extended attributes: the records of FreeBSD's `struct extattr` (sys/ufs/ufs/extattr.h)
//! in an inode's extended-attribute area (`di_extsize` bytes in the blocks `di_extb`).
//!
//! sufs keeps its own attributes in exactly this record layout (`format::xattr`: `ea_length`
//! u32, `ea_namespace` u8, `ea_contentpadlen` u8, `ea_namelength` u8, the name, padding to 8,
//! the content, padding to 8), so the records are decoded and encoded there; what is UFS2's
//! here is what a FreeBSD area may hold: only FreeBSD's two namespaces, and at most
//! `UFS_NXADDR` blocks.

use super::*;
use crate::format::{decode_ext_area, encode_ext_area, ExtAttr};

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

#[cfg(test)]
mod tests {
    use super::super::superblock::tests::sample;
    use super::*;

    #[test]
    fn extattr_records_round_trip_in_freebsds_layout() {
        let sb = sample();
        let attrs = vec![
            ExtAttr { namespace: EXTATTR_NAMESPACE_USER, name: b"test".to_vec(), value: b"testvalue".to_vec() },
            ExtAttr { namespace: EXTATTR_NAMESPACE_SYSTEM, name: b"posix1e.acl_access".to_vec(), value: vec![1; 28] },
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
        let big = ExtAttr { namespace: 1, name: b"big".to_vec(), value: vec![0; 65530] };
        assert!(encode_extattrs(&[big], &sb).is_err(), "past two 32 KiB blocks");
    }
}
