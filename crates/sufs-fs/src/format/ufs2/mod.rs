//! FreeBSD's UFS2, as FreeBSD 14 lays it out on disk: the superblock (`struct fs`,
//! sys/ufs/ffs/fs.h), the cylinder group (`struct cg` and its maps), the 256-byte dinode
//! (`struct ufs2_dinode`, sys/ufs/ufs/dinode.h), directory chunks (`struct direct`,
//! sys/ufs/ufs/dir.h) and extended-attribute records (`struct extattr`, sys/ufs/ufs/extattr.h),
//! with the geometry macros of fs.h as methods of the superblock and the CRC32C check hashes
//! FreeBSD keeps for the superblock, the cylinder groups and the inodes.
//!
//! Everything here is decoded from bytes a damaged or hostile disk may hold: a decoder checks
//! what it relies on and answers a `Ufs2Error`, never a panic. A decoded superblock has passed
//! `Fs::validate`, so its geometry methods compute with shifts and products that cannot
//! overflow for any block number inside the file system; block numbers read from inodes and
//! indirect blocks are checked (`Fs::check_blkno`) before they are used.
//!
//! Encoding is the exact inverse of decoding: every byte a decoder does not interpret (spare
//! fields, the tail of the superblock past `struct fs`, the bytes past a cylinder group's maps)
//! is kept and written back as it was.
//!
//! One file per structure: `superblock`, `cg`, `dinode`, `dir`, `extattr`, `acl` (the POSIX.1e
//! ACL an attribute's value holds), and `bmap` (reading a file's blocks through its block map)
//! and `alloccg` (allocating and freeing in one group, its maps and summaries kept exact). This file holds the constants they share, the error
//! type, the little-endian field codec and the check-hash function.

use thiserror::Error;

mod acl;
mod alloccg;
mod bmap;
mod cg;
mod dinode;
mod dir;
mod extattr;
pub mod growfs;
pub mod newfs;
mod superblock;

pub use acl::*;
pub use alloccg::*;
pub use bmap::*;
pub use cg::*;
pub use dinode::*;
pub use dir::*;
pub use extattr::*;
pub use superblock::*;

/// `FS_UFS2_MAGIC`: `fs_magic` of a UFS2 superblock.
pub const FS_UFS2_MAGIC: i32 = 0x1954_0119;
/// `FS_UFS1_MAGIC`: a UFS1 superblock (not read here).
pub const FS_UFS1_MAGIC: i32 = 0x0001_1954;
/// `FS_BAD_MAGIC`: a newfs that did not finish.
pub const FS_BAD_MAGIC: i32 = 0x1996_0408;
/// `CG_MAGIC`: `cg_magic` of a cylinder group.
pub const CG_MAGIC: i32 = 0x0009_0255;

/// Where a superblock may be, in byte offsets (`SBLOCK_UFS2`, `SBLOCK_UFS1`, `SBLOCK_FLOPPY`,
/// `SBLOCK_PIGGY`), in the order FreeBSD searches them (`SBLOCKSEARCH`).
pub const SBLOCK_UFS2: u64 = 65536;
pub const SBLOCK_UFS1: u64 = 8192;
pub const SBLOCK_FLOPPY: u64 = 0;
pub const SBLOCK_PIGGY: u64 = 262_144;
pub const SBLOCKSEARCH: [u64; 4] = [SBLOCK_UFS2, SBLOCK_UFS1, SBLOCK_FLOPPY, SBLOCK_PIGGY];
/// `SBLOCKSIZE`: bytes read at a superblock location; `fs_sbsize` is at most this.
pub const SBLOCKSIZE: usize = 8192;
/// `sizeof(struct fs)`.
pub const FS_STRUCT_SIZE: usize = 1376;
/// `sizeof(struct cg)`: the fixed part, before the maps.
pub const CG_STRUCT_SIZE: usize = 168;
/// `sizeof(struct ufs2_dinode)`.
pub const UFS2_DINODE_SIZE: usize = 256;
/// `MINBSIZE`, `MAXBSIZE`: the block sizes FreeBSD mounts.
pub const MINBSIZE: i32 = 4096;
pub const MAXBSIZE: i32 = 65536;
/// `MAXFRAG`: at most 8 fragments to a block.
pub const MAXFRAG: i32 = 8;
/// `DEV_BSIZE`: the unit of `fsbtodb`.
pub const DEV_BSIZE: i32 = 512;
/// `FS_MAXCONTIG`: the most entries of a cluster summary.
pub const FS_MAXCONTIG: i32 = 16;
/// `FSMAXSNAP`: snapshot inode numbers in the superblock.
pub const FSMAXSNAP: usize = 20;
/// `SF_SNAPSHOT`: the inode is a snapshot (`di_flags`).
pub const SF_SNAPSHOT: u32 = 0x0020_0000;
/// In a snapshot's block map: the block was free when the snapshot was taken (`BLK_NOCOPY`), or
/// belongs to a snapshot (`BLK_SNAP`); markers, never addresses (ffs_snapshot.c).
pub const BLK_NOCOPY: i64 = 1;
pub const BLK_SNAP: i64 = 2;
/// `MAXMNTLEN`, `MAXVOLLEN`: bytes of `fs_fsmnt` and `fs_volname`.
pub const MAXMNTLEN: usize = 468;
pub const MAXVOLLEN: usize = 32;
/// `UFS_NDADDR`, `UFS_NIADDR`, `UFS_NXADDR`: direct, indirect and extended-attribute block
/// pointers of a dinode.
pub const UFS_NDADDR: usize = 12;
pub const UFS_NIADDR: usize = 3;
pub const UFS_NXADDR: usize = 2;
/// `UFS_ROOTINO`: the root directory's inode.
pub const UFS_ROOTINO: u32 = 2;
/// The longest symbolic link kept in the dinode itself (`di_db` and `di_ib`, 120 bytes): a
/// UFS2 `fs_maxsymlinklen`.
pub const UFS2_MAXSYMLINKLEN: i32 = ((UFS_NDADDR + UFS_NIADDR) * 8) as i32;

/// `fs_flags` bits (`FS_*` of fs.h).
pub const FS_UNCLEAN: i32 = 0x0001;
pub const FS_DOSOFTDEP: i32 = 0x0002;
pub const FS_NEEDSFSCK: i32 = 0x0004;
pub const FS_SUJ: i32 = 0x0008;
pub const FS_ACLS: i32 = 0x0010;
pub const FS_MULTILABEL: i32 = 0x0020;
pub const FS_GJOURNAL: i32 = 0x0040;
pub const FS_FLAGS_UPDATED: i32 = 0x0080;
pub const FS_NFS4ACLS: i32 = 0x0100;
pub const FS_METACKHASH: i32 = 0x0200;
pub const FS_TRIM: i32 = 0x0400;

/// `fs_metackhash` bits: which metadata carries a check hash.
pub const CK_SUPERBLOCK: u32 = 0x0001;
pub const CK_CYLGRP: u32 = 0x0002;
pub const CK_INODE: u32 = 0x0004;
pub const CK_INDIR: u32 = 0x0008;
pub const CK_DIR: u32 = 0x0010;

/// What a UFS2 image may hold that these decoders refuse.
#[derive(Debug, Error)]
pub enum Ufs2Error {
    #[error("no UFS2 superblock at any of the standard locations")]
    NoSuperblock,
    #[error("a UFS1 file system (only UFS2 is read)")]
    Ufs1,
    /// A UFS superblock in the other byte order: a file system from a big-endian machine.
    #[error("a big-endian UFS file system (from a big-endian machine): only little-endian UFS2 is read")]
    OtherEndian,
    #[error("the superblock says newfs did not finish (FS_BAD_MAGIC)")]
    IncompleteNewfs,
    #[error("bad magic number {0:#x}: not a UFS2 superblock")]
    BadMagic(i32),
    #[error("superblock: {0}")]
    Geometry(String),
    #[error("{what}: check-hash mismatch (recorded {stored:#x}, computed {computed:#x})")]
    CheckHash { what: String, stored: u32, computed: u32 },
    #[error("cylinder group {cg}: {what}")]
    Cg { cg: u32, what: String },
    #[error("inode {ino}: {what}")]
    Inode { ino: u32, what: String },
    #[error("directory entry at byte {offset}: {what}")]
    Dir { offset: u64, what: &'static str },
    #[error("extended attributes: {0}")]
    ExtAttr(String),
    #[error("{what}: {need} bytes needed, {got} given")]
    Short { what: &'static str, need: usize, got: usize },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// FreeBSD's check hash: `calculate_crc32c(~0, buf, len)`, the CRC32C register without the
/// final inversion (the standard CRC32C of the bytes, inverted), computed over `buf` with the
/// four bytes at `hole` (the hash field itself) taken as zero.
pub fn ffs_ckhash(buf: &[u8], hole: usize) -> u32 {
    assert!(hole + 4 <= buf.len(), "check-hash field at {hole} is outside {} bytes", buf.len());
    let c = crc32c::crc32c(&buf[..hole]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    !crc32c::crc32c_append(c, &buf[hole + 4..])
}

/// A fixed-size little-endian field of an on-disk structure.
pub trait LeField: Sized {
    const SIZE: usize;
    /// Reads the field at `o`; the caller has checked `o + SIZE <= b.len()`.
    fn get(b: &[u8], o: usize) -> Self;
    fn put(&self, b: &mut [u8], o: usize);
}

macro_rules! le_int {
    ($($t:ty),*) => {$(
        impl LeField for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn get(b: &[u8], o: usize) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[o..o + Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
            fn put(&self, b: &mut [u8], o: usize) {
                b[o..o + Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
le_int!(i8, u8, i16, u16, i32, u32, i64, u64);

impl<T: LeField + Copy + Default, const N: usize> LeField for [T; N] {
    const SIZE: usize = T::SIZE * N;
    fn get(b: &[u8], o: usize) -> Self {
        let mut a = [T::default(); N];
        for (i, v) in a.iter_mut().enumerate() {
            *v = T::get(b, o + i * T::SIZE);
        }
        a
    }
    fn put(&self, b: &mut [u8], o: usize) {
        for (i, v) in self.iter().enumerate() {
            v.put(b, o + i * T::SIZE);
        }
    }
}

/// Declares an on-disk structure as named fields at explicit byte offsets, with `read_fields`
/// and `write_fields` over a buffer at least `$size` bytes long and `FIELDS` (name, offset,
/// size) for the layout test.
macro_rules! le_struct {
    ($(#[$m:meta])* pub struct $name:ident ($size:expr) {
        $($(#[$fm:meta])* $field:ident : $ty:ty = $off:expr),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name { $($(#[$fm])* pub $field: $ty),* }
        impl $name {
            /// Bytes the fields cover.
            pub const SIZE: usize = $size;
            /// Every field: name, byte offset, size.
            pub const FIELDS: &'static [(&'static str, usize, usize)] =
                &[$((stringify!($field), $off, <$ty as LeField>::SIZE)),*];
            /// Every field zero: a structure being built (as newfs builds its superblock and
            /// groups in zeroed memory).
            pub fn zeroed() -> Self {
                Self::read_fields(&[0u8; $size])
            }
            fn read_fields(b: &[u8]) -> Self {
                assert!(b.len() >= Self::SIZE, "{} needs {} bytes", stringify!($name), Self::SIZE);
                Self { $($field: <$ty as LeField>::get(b, $off)),* }
            }
            fn write_fields(&self, b: &mut [u8]) {
                assert!(b.len() >= Self::SIZE, "{} needs {} bytes", stringify!($name), Self::SIZE);
                $(LeField::put(&self.$field, b, $off);)*
            }
        }
    };
}
use le_struct;

/// Checks that `FIELDS` tile `0..SIZE` without gap or overlap, in order.
#[cfg(test)]
fn assert_tiles(name: &str, fields: &[(&str, usize, usize)], size: usize) {
    let mut at = 0;
    for &(f, off, len) in fields {
        assert_eq!(off, at, "{name}.{f} at {off}, expected {at}");
        at += len;
    }
    assert_eq!(at, size, "{name} fields end at {at}, not {size}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ckhash_zeroes_its_own_field_and_skips_the_final_inversion() {
        let mut b = b"123456789\xaa\xbb\xcc\xdd".to_vec();
        let h = ffs_ckhash(&b, 9);
        b[9..].copy_from_slice(&[0; 4]);
        assert_eq!(h, !crc32c::crc32c(&b), "the field counts as zero");
        assert_eq!(ffs_ckhash(&b, 9), h);
        // The crate's CRC32C is the standard one (its check value), which FreeBSD's inverts.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }
}
