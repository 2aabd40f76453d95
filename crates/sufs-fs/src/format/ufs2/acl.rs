//! FreeBSD's on-disk POSIX.1e ACL (`struct oldacl`, sys/sys/acl.h), as UFS keeps it
//! (sys/ufs/ufs/ufs_acl.c): the value of the extended attribute `posix1e.acl_access` or
//! `posix1e.acl_default` in the system namespace, always `OLDACL_SIZE` bytes whatever the count:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | `acl_cnt`: entries in use, 0 to `OLDACL_MAX_ENTRIES` (32) |
//! | 4 + 12 * i | 4 | `ae_tag` of entry `i`: `ACL_USER_OBJ` 0x01, `ACL_USER` 0x02, `ACL_GROUP_OBJ` 0x04, `ACL_GROUP` 0x08, `ACL_MASK` 0x10, `ACL_OTHER` 0x20 |
//! | 8 + 12 * i | 4 | `ae_id`: the uid or gid of `ACL_USER` and `ACL_GROUP`, else `ACL_UNDEFINED_ID` |
//! | 12 + 12 * i | 2 | `ae_perm` (a FreeBSD `mode_t`): read 4, write 2, execute 1 |
//! | 14 + 12 * i | 2 | padding (the entry's alignment) |
//!
//! The entries past `acl_cnt` are zeros (`acl_copy_acl_into_oldacl` clears the structure first).
//! FreeBSD reads a value of any other length as a damaged ACL (`ufs_getacl_posix1e`: EPERM), and
//! one of more than 32 entries as invalid (`acl_copy_oldacl_into_acl`: EINVAL). The tags and
//! permission bits are Linux's numbers too.

use super::*;

/// `POSIX1E_ACL_ACCESS_EXTATTR_NAME`, `POSIX1E_ACL_DEFAULT_EXTATTR_NAME`: the records' names in
/// the system namespace (`POSIX1E_ACL_*_EXTATTR_NAMESPACE`, `EXTATTR_NAMESPACE_SYSTEM`).
pub const POSIX1E_ACL_ACCESS_EXTATTR_NAME: &[u8] = b"posix1e.acl_access";
pub const POSIX1E_ACL_DEFAULT_EXTATTR_NAME: &[u8] = b"posix1e.acl_default";
/// `OLDACL_MAX_ENTRIES`: the most entries the on-disk structure holds.
pub const OLDACL_MAX_ENTRIES: usize = 32;
/// Bytes of one `struct oldacl_entry` (`int`, `uid_t`, `mode_t` and 2 bytes of padding).
const OLDACL_ENTRY_SIZE: usize = 12;
/// `sizeof(struct oldacl)`: the length of every value.
pub const OLDACL_SIZE: usize = 4 + OLDACL_MAX_ENTRIES * OLDACL_ENTRY_SIZE;
/// `ACL_UNDEFINED_ID`: the id of the entries that name no user or group.
pub const ACL_UNDEFINED_ID: u32 = u32::MAX;
/// The tags FreeBSD's POSIX.1e ACLs use (`ACL_USER_OBJ` .. `ACL_OTHER`).
pub const OLDACL_TAGS: [u32; 6] = [ACL_USER_OBJ, 0x02, ACL_GROUP_OBJ, 0x08, 0x10, ACL_OTHER];
const ACL_USER_OBJ: u32 = 0x01;
const ACL_GROUP_OBJ: u32 = 0x04;
const ACL_OTHER: u32 = 0x20;
/// `ACL_POSIX1E_BITS`: read, write, execute.
pub const ACL_POSIX1E_BITS: u16 = 0o7;

/// One `struct oldacl_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldAclEntry {
    pub tag: u32,
    pub id: u32,
    pub perm: u16,
}

fn bad(what: String) -> Ufs2Error {
    Ufs2Error::ExtAttr(format!("a POSIX.1e ACL: {what}"))
}

/// The entries of a `struct oldacl` value; one FreeBSD would not load (a length other than
/// `OLDACL_SIZE`, a count past 32, an unknown tag, permission bits other than rwx, not one
/// owner, owning group and other entry each) is an error. An empty ACL is no ACL.
pub fn decode_oldacl(v: &[u8]) -> Result<Vec<OldAclEntry>, Ufs2Error> {
    if v.len() != OLDACL_SIZE {
        return Err(bad(format!("{} bytes, not {OLDACL_SIZE}", v.len())));
    }
    let cnt = i32::get(v, 0);
    if !(0..=OLDACL_MAX_ENTRIES as i32).contains(&cnt) {
        return Err(bad(format!("{cnt} entries (0 to {OLDACL_MAX_ENTRIES})")));
    }
    let entries: Vec<OldAclEntry> = (0..cnt as usize)
        .map(|i| {
            let o = 4 + i * OLDACL_ENTRY_SIZE;
            OldAclEntry { tag: u32::get(v, o), id: u32::get(v, o + 4), perm: u16::get(v, o + 8) }
        })
        .collect();
    if let Some(e) = entries.iter().find(|e| !OLDACL_TAGS.contains(&e.tag) || e.perm & !ACL_POSIX1E_BITS != 0) {
        return Err(bad(format!("an entry of tag {:#x}, permissions {:#o}", e.tag, e.perm)));
    }
    // One owner, owning group and other entry each (FreeBSD's ufs_sync_acl_from_inode relies
    // on them), unless the ACL is empty.
    for tag in [ACL_USER_OBJ, ACL_GROUP_OBJ, ACL_OTHER] {
        let n = entries.iter().filter(|e| e.tag == tag).count();
        if !entries.is_empty() && n != 1 {
            return Err(bad(format!("{n} entries of tag {tag:#x}")));
        }
    }
    Ok(entries)
}

/// The `struct oldacl` value holding `entries` (more than `OLDACL_MAX_ENTRIES` is an error:
/// the caller refuses such an ACL before it gets here).
pub fn encode_oldacl(entries: &[OldAclEntry]) -> Result<Vec<u8>, Ufs2Error> {
    if entries.len() > OLDACL_MAX_ENTRIES {
        return Err(bad(format!("{} entries (at most {OLDACL_MAX_ENTRIES})", entries.len())));
    }
    let mut v = vec![0u8; OLDACL_SIZE];
    (entries.len() as i32).put(&mut v, 0);
    for (i, e) in entries.iter().enumerate() {
        assert!(OLDACL_TAGS.contains(&e.tag) && e.perm & !ACL_POSIX1E_BITS == 0, "an invalid ACL entry {e:?}");
        let o = 4 + i * OLDACL_ENTRY_SIZE;
        e.tag.put(&mut v, o);
        e.id.put(&mut v, o + 4);
        e.perm.put(&mut v, o + 8);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldacl_round_trips_in_freebsds_layout() {
        let entries = vec![
            OldAclEntry { tag: 0x01, id: ACL_UNDEFINED_ID, perm: 6 },
            OldAclEntry { tag: 0x02, id: 1001, perm: 5 },
            OldAclEntry { tag: 0x04, id: ACL_UNDEFINED_ID, perm: 4 },
            OldAclEntry { tag: 0x10, id: ACL_UNDEFINED_ID, perm: 7 },
            OldAclEntry { tag: 0x20, id: ACL_UNDEFINED_ID, perm: 0 },
        ];
        let v = encode_oldacl(&entries).unwrap();
        assert_eq!(v.len(), 388, "sizeof(struct oldacl) on FreeBSD");
        assert_eq!(&v[..4], &[5, 0, 0, 0], "acl_cnt");
        // Entry 1: tag 2, id 1001, perm 5, two bytes of padding.
        assert_eq!(&v[16..28], &[2, 0, 0, 0, 0xe9, 0x03, 0, 0, 5, 0, 0, 0]);
        assert!(v[4 + 5 * 12..].iter().all(|&b| b == 0), "unused entries are zeros");
        assert_eq!(decode_oldacl(&v).unwrap(), entries);

        assert!(decode_oldacl(&v[..387]).is_err(), "a short value");
        let mut many = v.clone();
        many[0] = 33;
        assert!(decode_oldacl(&many).is_err(), "33 entries");
        let mut tag = v.clone();
        tag[16] = 0x40;
        assert!(decode_oldacl(&tag).is_err(), "an NFSv4 or unknown tag");
        let mut perm = v.clone();
        perm[24] = 0o10;
        assert!(decode_oldacl(&perm).is_err(), "permission bits past rwx");
        let mut no_owner = v.clone();
        no_owner[4] = 0x02;
        assert!(decode_oldacl(&no_owner).is_err(), "no owner entry, two named users");
        assert_eq!(decode_oldacl(&encode_oldacl(&[]).unwrap()).unwrap(), vec![], "an empty ACL");
        let mut full = vec![OldAclEntry { tag: 0x02, id: 7, perm: 1 }; 32];
        full[0].tag = ACL_USER_OBJ;
        full[1].tag = ACL_GROUP_OBJ;
        full[31].tag = ACL_OTHER;
        assert_eq!(decode_oldacl(&encode_oldacl(&full).unwrap()).unwrap(), full);
        assert!(encode_oldacl(&vec![full[1]; 33]).is_err());
    }
}
