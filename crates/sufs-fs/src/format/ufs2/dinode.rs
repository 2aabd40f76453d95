//! The UFS2 dinode, FreeBSD's `struct ufs2_dinode` (sys/ufs/ufs/dinode.h): 256 bytes, every
//! field at its offset, with its check hash (`ffs_update_dinode_ckhash`,
//! `ffs_verify_dinode_ckhash`: CRC32C over the 256 bytes with `di_ckhash` taken as zero, kept
//! only for allocated inodes) and the short symbolic link kept in `di_db`/`di_ib`.

use super::*;

le_struct! {
    /// FreeBSD's `struct ufs2_dinode`. `di_db`/`di_ib` hold fragment numbers (0: a hole), or
    /// for a short symbolic link its target; `di_freelink` shares its place with FreeBSD 14's
    /// `di_dirdepth` (directories).
    pub struct Dinode (UFS2_DINODE_SIZE) {
        /// File type (`IFMT`) and permissions.
        di_mode: u16 = 0,
        di_nlink: i16 = 2,
        di_uid: u32 = 4,
        di_gid: u32 = 8,
        di_blksize: u32 = 12,
        di_size: u64 = 16,
        /// `DEV_BSIZE` sectors held, data, indirect and extended-attribute blocks.
        di_blocks: u64 = 24,
        di_atime: i64 = 32,
        di_mtime: i64 = 40,
        di_ctime: i64 = 48,
        di_birthtime: i64 = 56,
        di_mtimensec: i32 = 64,
        di_atimensec: i32 = 68,
        di_ctimensec: i32 = 72,
        di_birthnsec: i32 = 76,
        di_gen: u32 = 80,
        di_kernflags: u32 = 84,
        /// chflags(2) flags.
        di_flags: u32 = 88,
        /// Bytes of the extended-attribute area.
        di_extsize: u32 = 92,
        di_extb: [i64; UFS_NXADDR] = 96,
        di_db: [i64; UFS_NDADDR] = 112,
        di_ib: [i64; UFS_NIADDR] = 208,
        di_modrev: u64 = 232,
        di_freelink: u32 = 240,
        /// The inode's check hash, if `fs_metackhash` has `CK_INODE`.
        di_ckhash: u32 = 244,
        di_spare: [u32; 2] = 248,
    }
}

const DI_CKHASH_OFF: usize = 244;
/// Where `di_db` starts: a short symbolic link's target.
const DI_SHORTLINK_OFF: usize = 112;

/// `IFMT` and the file types of `di_mode`: the same values as sufs's own modes.
pub use crate::format::{
    S_IFBLK as IFBLK, S_IFCHR as IFCHR, S_IFDIR as IFDIR, S_IFIFO as IFIFO, S_IFLNK as IFLNK, S_IFMT as IFMT,
    S_IFREG as IFREG, S_IFSOCK as IFSOCK,
};
/// `IFWHT`: a whiteout (never an inode's type on disk).
pub const IFWHT: u16 = 0o160000;

impl Dinode {
    /// Decodes the dinode in the first 256 bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<Dinode, Ufs2Error> {
        if b.len() < UFS2_DINODE_SIZE {
            return Err(Ufs2Error::Short { what: "dinode", need: UFS2_DINODE_SIZE, got: b.len() });
        }
        Ok(Dinode::read_fields(b))
    }

    /// Decodes inode `ino` and verifies its check hash if the file system keeps them (an
    /// unallocated inode, mode 0, has none).
    pub fn decode_checked(b: &[u8], fs: &Fs, ino: u32) -> Result<Dinode, Ufs2Error> {
        let d = Dinode::decode(b)?;
        if let Some(computed) = d.ckhash_due(fs) {
            if computed != d.di_ckhash {
                return Err(Ufs2Error::CheckHash { what: format!("inode {ino}"), stored: d.di_ckhash, computed });
            }
        }
        Ok(d)
    }

    /// `di_mode` and `di_nlink` of the 256 bytes `raw`, without decoding the rest (a write's
    /// check of the link count it would replace).
    pub fn mode_and_nlink(raw: &[u8]) -> (u16, i16) {
        assert!(raw.len() >= UFS2_DINODE_SIZE, "a dinode is {UFS2_DINODE_SIZE} bytes, not {}", raw.len());
        (u16::from_le_bytes([raw[0], raw[1]]), i16::from_le_bytes([raw[2], raw[3]]))
    }

    /// `di_flags` and `di_spare[0]` of the 256 bytes `raw`, without decoding the rest (the
    /// checks of an inode's flags on every create and write).
    pub fn flags_and_spare(raw: &[u8]) -> (u32, u32) {
        assert!(raw.len() >= UFS2_DINODE_SIZE, "a dinode is {UFS2_DINODE_SIZE} bytes, not {}", raw.len());
        let word = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().expect("four bytes"));
        (word(88), word(248))
    }

    /// The 256 bytes, as they are (no check hash computed: see `encode_for`).
    pub fn encode(&self) -> [u8; UFS2_DINODE_SIZE] {
        let mut b = [0u8; UFS2_DINODE_SIZE];
        self.write_fields(&mut b);
        b
    }

    /// The 256 bytes with `di_ckhash` updated as `ffs_update_dinode_ckhash` does.
    /// Encoded once: the hash skips its own field, which is then written in place.
    pub fn encode_for(&self, fs: &Fs) -> [u8; UFS2_DINODE_SIZE] {
        let mut b = self.encode();
        if self.di_mode != 0 && fs.has_ckhash(CK_INODE) {
            let h = ffs_ckhash(&b, DI_CKHASH_OFF);
            h.put(&mut b, DI_CKHASH_OFF);
        }
        b
    }

    /// The check hash this inode should carry, if it carries one.
    fn ckhash_due(&self, fs: &Fs) -> Option<u32> {
        (self.di_mode != 0 && fs.has_ckhash(CK_INODE)).then(|| ffs_ckhash(&self.encode(), DI_CKHASH_OFF))
    }

    /// The check hash over these 256 bytes, `di_ckhash` as zero.
    pub fn compute_ckhash(&self) -> u32 {
        ffs_ckhash(&self.encode(), DI_CKHASH_OFF)
    }

    pub fn file_type(&self) -> u16 {
        self.di_mode & IFMT
    }

    /// The target of a short symbolic link, kept in `di_db`/`di_ib` (as `ufs_readlink` decides:
    /// a link shorter than `fs_maxsymlinklen`), or `None` for a link kept in a block or for
    /// another type.
    pub fn shortlink(&self, fs: &Fs) -> Option<Vec<u8>> {
        if self.file_type() != IFLNK || self.di_size >= fs.fs_maxsymlinklen as u64 {
            return None;
        }
        let b = self.encode();
        Some(b[DI_SHORTLINK_OFF..DI_SHORTLINK_OFF + self.di_size as usize].to_vec())
    }

    /// Stores `target` as a short symbolic link: in `di_db`/`di_ib`, zero-padded, size set.
    pub fn set_shortlink(&mut self, target: &[u8]) {
        assert!(target.len() < UFS2_MAXSYMLINKLEN as usize, "a short link of {} bytes", target.len());
        let mut b = self.encode();
        b[DI_SHORTLINK_OFF..DI_SHORTLINK_OFF + UFS2_MAXSYMLINKLEN as usize].fill(0);
        b[DI_SHORTLINK_OFF..DI_SHORTLINK_OFF + target.len()].copy_from_slice(target);
        let mut d = Dinode::read_fields(&b);
        d.di_size = target.len() as u64;
        *self = d;
    }
}

#[cfg(test)]
mod tests {
    use super::super::superblock::tests::sample;
    use super::*;

    #[test]
    fn dinode_fields_tile_struct_ufs2_dinode() {
        crate::format::ufs2::assert_tiles("struct ufs2_dinode", Dinode::FIELDS, UFS2_DINODE_SIZE);
    }

    #[test]
    fn dinode_round_trips_with_its_check_hash() {
        let sb = sample();
        let mut raw = [0u8; UFS2_DINODE_SIZE];
        for (i, v) in raw.iter_mut().enumerate() {
            *v = (i * 7 + 3) as u8;
        }
        let d = Dinode::decode(&raw).unwrap();
        assert_eq!(d.encode(), raw);
        assert_eq!(d.di_mode, u16::from_le_bytes([raw[0], raw[1]]));
        assert_eq!(Dinode::mode_and_nlink(&raw), (d.di_mode, d.di_nlink));
        assert_eq!(Dinode::flags_and_spare(&raw), (d.di_flags, d.di_spare[0]));
        assert_eq!(d.di_ib[2], i64::from_le_bytes(raw[224..232].try_into().unwrap()));
        let sealed = d.encode_for(&sb);
        assert_ne!(sealed[244..248], raw[244..248]);
        let back = Dinode::decode_checked(&sealed, &sb, 5).unwrap();
        assert_eq!(back.di_ckhash, back.compute_ckhash());
        let mut torn = sealed;
        torn[17] ^= 0x40;
        assert!(matches!(Dinode::decode_checked(&torn, &sb, 5), Err(Ufs2Error::CheckHash { .. })));
        // A free inode (mode 0) carries no hash.
        let mut free = Dinode::decode(&[0u8; 256]).unwrap();
        free.di_size = 9;
        assert_eq!(free.encode_for(&sb)[244..248], [0; 4]);
        assert!(Dinode::decode_checked(&free.encode(), &sb, 6).is_ok());
        assert!(Dinode::decode(&[0u8; 255]).is_err());
    }

    #[test]
    fn short_symlink_lives_in_the_block_pointers() {
        let sb = sample();
        let mut d = Dinode::decode(&[0u8; 256]).unwrap();
        d.di_mode = IFLNK | 0o755;
        d.set_shortlink(b"dir1/dir2/dir3/file2");
        assert_eq!(d.di_size, 20);
        assert_eq!(&d.encode()[112..132], b"dir1/dir2/dir3/file2");
        assert_eq!(d.shortlink(&sb).as_deref(), Some(&b"dir1/dir2/dir3/file2"[..]));
        d.di_size = 120;
        assert_eq!(d.shortlink(&sb), None, "a link of fs_maxsymlinklen bytes is kept in a block");
    }
}
