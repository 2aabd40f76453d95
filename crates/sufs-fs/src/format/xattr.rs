//! The extended-attribute area of an inode, as UFS2 lays it out (FreeBSD's `struct extattr`,
//! sys/ufs/ufs/extattr.h): `extsize` bytes in the blocks `extb[0]`, `extb[1]`, read as one run,
//! holding a sequence of records that ends exactly at `extsize`. A record:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | length: the whole record, a multiple of 8 |
//! | 4 | 1 | namespace (`EXT_NS_*`) |
//! | 5 | 1 | content padding: zero bytes after the value, 0-7 |
//! | 6 | 1 | name length, 1-255 |
//! | 7 | namelen | the name without its namespace prefix, no NUL |
//! | roundup8(7 + namelen) | | the value, then the padding up to `length` |
//!
//! Linux's namespaces are kept apart by the namespace byte: `user.` 1 and `system.` 2 as
//! FreeBSD numbers them, then `trusted.` 3 and `security.` 4.

use super::*;

pub const EXT_NS_USER: u8 = 1;
pub const EXT_NS_SYSTEM: u8 = 2;
pub const EXT_NS_TRUSTED: u8 = 3;
pub const EXT_NS_SECURITY: u8 = 4;

/// Longest attribute name (without its namespace prefix), as Linux's XATTR_NAME_MAX.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value, as Linux's XATTR_SIZE_MAX.
pub const XATTR_SIZE_MAX: usize = 65536;
/// Bytes of a record before its name.
const EA_HDR: usize = 7;

/// One extended attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtAttr {
    pub namespace: u8,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

fn roundup8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl ExtAttr {
    /// Bytes of its record.
    pub fn record_len(&self) -> usize {
        roundup8(EA_HDR + self.name.len()) + roundup8(self.value.len())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let len = self.record_len();
        let start = out.len();
        out.resize(start + len, 0);
        let b = &mut out[start..];
        put_u32(b, 0, len as u32);
        b[4] = self.namespace;
        b[5] = (roundup8(self.value.len()) - self.value.len()) as u8;
        b[6] = self.name.len() as u8;
        b[EA_HDR..EA_HDR + self.name.len()].copy_from_slice(&self.name);
        let voff = roundup8(EA_HDR + self.name.len());
        b[voff..voff + self.value.len()].copy_from_slice(&self.value);
    }
}

/// The area holding `attrs`, in order.
pub fn encode_ext_area(attrs: &[ExtAttr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(attrs.iter().map(ExtAttr::record_len).sum());
    for a in attrs {
        a.encode(&mut out);
    }
    out
}

fn bad(at: usize, what: &str) -> FormatError {
    FormatError::BadExtArea(format!("record at byte {at}: {what}"))
}

/// The attributes of an area of `area.len()` bytes; any record that breaks the layout above
/// (or a name found twice) is an error.
pub fn decode_ext_area(area: &[u8]) -> Result<Vec<ExtAttr>, FormatError> {
    let refs = ext_records(area)?;
    Ok(refs
        .into_iter()
        .map(|r| ExtAttr { namespace: r.namespace, name: r.name.to_vec(), value: r.value.to_vec() })
        .collect())
}

/// One attribute of an area, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtRef<'a> {
    pub namespace: u8,
    pub name: &'a [u8],
    pub value: &'a [u8],
}

/// The attributes of `area`, every record checked as `decode_ext_area` checks them, nothing
/// copied: a getxattr of one of 2,000 attributes copies one value.
pub fn ext_records(area: &[u8]) -> Result<Vec<ExtRef<'_>>, FormatError> {
    let mut attrs: Vec<ExtRef> = Vec::new();
    // Names seen, for the duplicate check: a set, not a scan of `attrs`, which made each read of
    // an area of 2,000 attributes cost millions of comparisons (and every getxattr reads it).
    let mut seen: std::collections::HashSet<(u8, &[u8])> = std::collections::HashSet::new();
    let mut at = 0;
    while at < area.len() {
        let rest = &area[at..];
        if rest.len() < 8 {
            return Err(bad(at, "shorter than a header"));
        }
        let len = get_u32(rest, 0) as usize;
        let (ns, pad, nlen) = (rest[4], rest[5] as usize, rest[6] as usize);
        if len < 8 || !len.is_multiple_of(8) || len > rest.len() {
            return Err(bad(at, &format!("length {len} (a multiple of 8, at most {})", rest.len())));
        }
        if !(EXT_NS_USER..=EXT_NS_SECURITY).contains(&ns) {
            return Err(bad(at, &format!("namespace {ns}")));
        }
        let voff = roundup8(EA_HDR + nlen);
        if nlen == 0 || pad >= 8 || voff + pad > len {
            return Err(bad(at, &format!("name length {nlen}, padding {pad} in a record of {len}")));
        }
        let name = &rest[EA_HDR..EA_HDR + nlen];
        let vlen = len - voff - pad;
        if name.contains(&0) || vlen > XATTR_SIZE_MAX {
            return Err(bad(at, "a NUL in the name or a value past 64 KiB"));
        }
        if !seen.insert((ns, name)) {
            return Err(bad(at, "a name found twice"));
        }
        attrs.push(ExtRef { namespace: ns, name, value: &rest[voff..voff + vlen] });
        at += len;
    }
    Ok(attrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ns: u8, name: &str, value: &[u8]) -> ExtAttr {
        ExtAttr { namespace: ns, name: name.as_bytes().to_vec(), value: value.to_vec() }
    }

    #[test]
    fn area_round_trip() {
        let attrs = vec![
            attr(EXT_NS_USER, "a", b""),
            attr(EXT_NS_SYSTEM, "posix_acl_access", &[2, 0, 0, 0, 1, 0, 6, 0]),
            attr(EXT_NS_SECURITY, &"n".repeat(255), &[7u8; 1000]),
            attr(EXT_NS_TRUSTED, "x", b"1234567"),
        ];
        let area = encode_ext_area(&attrs);
        assert_eq!(area.len(), attrs.iter().map(ExtAttr::record_len).sum::<usize>());
        assert_eq!(area.len() % 8, 0);
        assert_eq!(decode_ext_area(&area).unwrap(), attrs);
        // The first record, byte for byte: length 8, user, no padding, name "a", no value.
        assert_eq!(&area[..8], &[8, 0, 0, 0, 1, 0, 1, b'a']);
        // The last: length 16, trusted, padding 1, name "x", the value at 8.
        let last = &area[area.len() - 16..];
        assert_eq!(&last[..9], &[16, 0, 0, 0, 3, 1, 1, b'x', b'1']);
        assert_eq!(decode_ext_area(&[]).unwrap(), vec![]);
    }

    #[test]
    fn damaged_areas_are_refused() {
        let area = encode_ext_area(&[attr(EXT_NS_USER, "k", b"value")]);
        let mut cut = area.clone();
        cut.truncate(area.len() - 8);
        assert!(decode_ext_area(&cut).is_err(), "a record past the area's end");
        for (at, v) in [(0, 7u8), (0, 0), (4, 9), (4, 0), (5, 8), (6, 0), (7, 0)] {
            let mut a = area.clone();
            a[at] = v;
            assert!(decode_ext_area(&a).is_err(), "byte {at} = {v}");
        }
        let twice = encode_ext_area(&[attr(EXT_NS_USER, "k", b"1"), attr(EXT_NS_USER, "k", b"2")]);
        assert!(decode_ext_area(&twice).is_err(), "a name twice");
        let other_ns = encode_ext_area(&[attr(EXT_NS_USER, "k", b"1"), attr(EXT_NS_TRUSTED, "k", b"2")]);
        assert_eq!(decode_ext_area(&other_ns).unwrap().len(), 2);
    }
}
