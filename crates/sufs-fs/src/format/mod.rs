//! The on-disk format: FreeBSD's UFS2 (`ufs2`: the superblock, the cylinder groups, the dinode,
//! encoded as FreeBSD lays them out) and the types the file system works with over it:
//! `Superblock` and `Dinode` (sufs's view of UFS2's, mapped by `layout`), the directory chunk
//! (`dir`), the extended-attribute area (`xattr`), and the Block Register volume layer's own
//! header (`volume`). `bits` is bit access over a map. This file holds the constants they share,
//! the error type and the little-endian field access.

use thiserror::Error;

mod bits;
mod dir;
mod inode;
pub(crate) mod layout;
mod superblock;
pub mod ufs2;
mod volume;
mod xattr;

pub use bits::*;
pub use dir::*;
pub use inode::*;
pub use superblock::*;
pub use volume::*;
pub use xattr::*;

/// The magic number at byte 0 of an image of sufs's retired format ("SUFSFFS1"), which
/// `Superblock::probe` refuses with `FormatError::Retired`.
pub const RETIRED_MAGIC: u64 = 0x5355_4653_4646_5331;
pub const DINODE_SIZE: usize = 256;
pub const NDADDR: usize = 12;
pub const NIADDR: usize = 3;
/// Block pointers of the extended-attribute area (UFS2's `UFS_NXADDR`).
pub const NXADDR: usize = 2;
pub const MAX_SNAPSHOTS: usize = 20;
pub const DIRBLKSIZ: usize = 512;
pub const MAXNAMLEN: usize = 255;
pub const ROOT_INO: u32 = 2;
pub const LOST_FOUND_INO: u32 = 3;
/// First inode number handed out to users; 0 and 1 are never used, as in FFS.
pub const FIRST_INO: u32 = 2;
pub const MIN_BLOCK_SIZE: u32 = 4096;
/// The longest symbolic link target sufs makes: the kernel's PATH_MAX (4096) less its NUL.
pub const MAX_SYMLINK: usize = 4095;
/// A time's nanoseconds field is below this.
pub const NSEC_PER_SEC: u32 = 1_000_000_000;
/// Largest link count; a link past it is EMLINK.
pub const LINK_MAX: u32 = 32000;

/// Superblock flags. `SB_CLEAN`: unmounted cleanly, the summary counts are exact.
pub const SB_CLEAN: u32 = 1;
/// The last read-write mount ran soft updates: an unclean image holds only what soft updates
/// may leave after a crash (leaks and link counts too high), so it may be mounted at once.
pub const SB_SOFTDEP: u32 = 2;
/// Something was found damaged while mounted (a value read from disk out of range, a bitmap
/// that disagreed with the inodes): only a full `fsck -y` clears it.
pub const SB_NEEDS_FSCK: u32 = 8;

/// Dinode flags (chflags-like); the Block Register and snapshots rely on them.
/// `DI_IMMUTABLE` (UFS's `SF_IMMUTABLE`): no change to the inode, its data or its names (a
/// directory: no entry added or removed).
pub const DI_IMMUTABLE: u32 = 1;
pub const DI_SNAPSHOT: u32 = 2;
pub const DI_UNMOVABLE: u32 = 4;
/// UFS's `SF_APPEND`: data may only be appended; no name removed, renamed or added (a
/// directory: entries may be added, none removed).
pub const DI_APPEND: u32 = 8;
/// UFS's `UF_NODUMP`: dump(8) skips the file. sufs only keeps it.
pub const DI_NODUMP: u32 = 16;
/// `UF_NOATIME` style: reads do not change the access time.
pub const DI_NOATIME: u32 = 32;
/// Linux's `FS_SYNC_FL` (`chattr +S`; UFS has none): every change of the file, or of a
/// directory's entries, is durable before the call returns, as on a `sync` mount.
pub const DI_SYNC: u32 = 64;
/// The flags that keep an inode's names as they are: no unlink, rename or link.
pub const DI_KEEP_NAMES: u32 = DI_IMMUTABLE | DI_SNAPSHOT | DI_APPEND;

/// In a snapshot file's block map (logical block = physical block of the file system): the block
/// was not in use when the snapshot was taken, or belongs to a snapshot, and is never copied
/// (FreeBSD's BLK_NOCOPY). 0 means not copied yet: the snapshot reads the block in place.
pub const BLK_NOCOPY: u64 = 1;
/// In a snapshot's block map: the block belongs to a snapshot (FreeBSD's BLK_SNAP), never
/// copied.
pub const BLK_SNAP: u64 = 2;

pub const S_IFMT: u16 = 0o170000;
pub const S_IFREG: u16 = 0o100000;
pub const S_IFDIR: u16 = 0o040000;
pub const S_IFLNK: u16 = 0o120000;
pub const S_IFIFO: u16 = 0o010000;
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFBLK: u16 = 0o060000;
pub const S_IFSOCK: u16 = 0o140000;

pub const DT_UNKNOWN: u8 = 0;
pub const DT_FIFO: u8 = 1;
pub const DT_CHR: u8 = 2;
pub const DT_DIR: u8 = 4;
pub const DT_BLK: u8 = 6;
pub const DT_REG: u8 = 8;
pub const DT_LNK: u8 = 10;
pub const DT_SOCK: u8 = 12;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("inconsistent geometry: {0}")]
    BadGeometry(String),
    #[error("cylinder group {cg}: {what}")]
    BadCg { cg: u32, what: String },
    /// An image of sufs's own earlier format (its superblock's magic at byte 0), which sufs no
    /// longer reads or writes.
    #[error(
        "an image of sufs's earlier format (\"SUFSFFS1\"), which this sufs no longer reads: copy its \
         files out with the sufs that made it (a release before UFS2 became sufs's format) onto an \
         image `sufs mkfs` makes"
    )]
    Retired,
    /// A UFS superblock found but not read (UFS1, the other byte order, a bad check hash...).
    #[error("{0}")]
    Ufs2(String),
    #[error("extended-attribute area: {0}")]
    BadExtArea(String),
}

fn get_u16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn get_u32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn get_u64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
fn get_i64(b: &[u8], o: usize) -> i64 {
    get_u64(b, o) as i64
}
fn put_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes())
}
fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes())
}
fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes())
}
fn put_i64(b: &mut [u8], o: usize, v: i64) {
    put_u64(b, o, v as u64)
}
