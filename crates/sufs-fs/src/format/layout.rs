//! sufs's view of a FreeBSD UFS2 file system: the superblock, the dinodes and the group counts
//! of a UFS2 image mapped onto the types the file system works with (`Superblock`, `Dinode`),
//! so that the same code reads both formats.
//!
//! The unit of addresses. In UFS2 a block pointer, a group's size (`fs_fpg`) and the file
//! system's size (`fs_size`) count *fragments*; a block is `fs_frag` of them. sufs's block
//! numbers on a UFS2 image are fragment numbers too, and its "blocks" are `fs_bsize` bytes read
//! at a fragment address (`dev::FragDevice`). With one fragment a block (`fs_frag` 1) the two
//! units are the same. A file's last direct block may be a run of fewer fragments (its tail):
//! it is read whole, and the bytes past the file's size are never returned.
//!
//! What is not mapped yet: writing a UFS2 image. A UFS2 image mounts read-only
//! (`Superblock::writable`).

use super::ufs2;
use super::*;

/// UFS2's chflags(2) bits that sufs keeps as its own `DI_*` flags (sys/sys/stat.h).
const UF_NODUMP: u32 = 0x0000_0001;
const UF_IMMUTABLE: u32 = 0x0000_0002;
const UF_APPEND: u32 = 0x0000_0004;
const SF_IMMUTABLE: u32 = 0x0002_0000;
const SF_APPEND: u32 = 0x0004_0000;
const SF_SNAPSHOT: u32 = 0x0020_0000;

impl Superblock {
    /// The superblock of the UFS2 file system `u`, found at byte `loc`: its geometry in
    /// fragments (see the module's comment), its counts, flags, label and snapshot list.
    pub fn from_ufs2(u: ufs2::Superblock) -> Superblock {
        let frag = u.fs_frag as u64;
        let cs = u.fs_cstotal;
        let mut flags = 0;
        if u.fs_clean != 0 {
            flags |= SB_CLEAN;
        }
        if u.fs_flags & ufs2::FS_DOSOFTDEP != 0 {
            flags |= SB_SOFTDEP;
        }
        if u.fs_flags & ufs2::FS_NEEDSFSCK != 0 {
            flags |= SB_NEEDS_FSCK;
        }
        let mut snapshots = [0u32; MAX_SNAPSHOTS];
        snapshots.copy_from_slice(&u.fs_snapinum[..MAX_SNAPSHOTS]);
        let mut label: Vec<u8> = u.fs_volname.iter().take_while(|&&c| c != 0).copied().collect();
        label.truncate(MAX_LABEL);
        Superblock {
            version: VERSION,
            block_size: u.fs_bsize as u32,
            num_blocks: u.fs_size as u64,
            blocks_per_group: u.fs_fpg as u32,
            inodes_per_group: u.fs_ipg,
            ngroups: u.fs_ncg,
            free_blocks: cs.cs_nbfree.max(0) as u64 * frag + cs.cs_nffree.max(0) as u64,
            free_inodes: cs.cs_nifree.max(0) as u64,
            ndirs: cs.cs_ndir.max(0) as u64,
            flags,
            created: u.fs_time,
            mount_time: u.fs_mtime,
            write_time: u.fs_time,
            mount_count: 0,
            minfree: u8::try_from(u.fs_minfree).ok().filter(|&m| m <= MAX_MINFREE),
            default_ordering: ORDER_DEFAULT,
            label,
            snapshots,
            ufs2: Some(Box::new(u)),
        }
    }

    /// The UFS2 superblock of a UFS2 image.
    pub fn ufs2(&self) -> Option<&ufs2::Superblock> {
        self.ufs2.as_deref()
    }

    /// Fragments per block: 1 on a sufs image.
    pub fn frag(&self) -> u64 {
        self.ufs2().map_or(1, |u| u.fs_frag as u64)
    }

    /// Bytes of the unit block numbers count: a fragment on UFS2, a block on a sufs image.
    pub fn addr_unit(&self) -> u32 {
        self.ufs2().map_or(self.block_size, |u| u.fs_fsize as u32)
    }

    /// Whether sufs may mount the image read-write: not yet for UFS2.
    pub fn writable(&self) -> Result<(), String> {
        match self.ufs2() {
            None => Ok(()),
            Some(_) => Err("writing a UFS2 file system is not supported yet: mount it read-only (-o ro)".into()),
        }
    }

    /// Reads the superblock of the image `read_at` gives, a sufs one at byte 0 or a UFS2 one
    /// where FreeBSD looks for it (`ufs2::Superblock::search`). `read_at(offset, buf)` fills
    /// `buf` and answers `UnexpectedEof` past the end.
    pub fn probe(mut read_at: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>) -> Result<Superblock, FormatError> {
        let mut first = vec![0u8; SB_SIZE];
        read_at(0, &mut first).map_err(|e| FormatError::BadGeometry(format!("cannot read the superblock: {e}")))?;
        let sufs = Superblock::decode(&first);
        if sufs.is_ok() || get_u64(&first, 0) == MAGIC {
            return sufs;
        }
        match ufs2::Superblock::search(&mut read_at) {
            Ok((_, u)) => Ok(Superblock::from_ufs2(u)),
            Err(ufs2::Ufs2Error::NoSuperblock) => sufs,
            Err(e) => Err(FormatError::Ufs2(e.to_string())),
        }
    }

    /// The frames of group `cg` in block numbers, for UFS2: (start, header, inode table, data).
    pub(super) fn ufs2_cg(&self, u: &ufs2::Superblock, cg: u32) -> (u64, u64, u64, u64) {
        (u.cgbase(cg) as u64, u.cgtod(cg) as u64, u.cgimin(cg) as u64, u.cgdmin(cg) as u64)
    }

    /// Whether block number `bno` of a UFS2 image may be a file's: inside the file system, not
    /// a group's superblock copy, header or inode table, not group 0's boot area nor the
    /// summary area.
    pub(super) fn ufs2_is_data(&self, u: &ufs2::Superblock, bno: u64) -> bool {
        if bno >= u.fs_size as u64 {
            return false;
        }
        let cg = u.dtog(bno as i64) as u32;
        let (start, _, _, data) = self.ufs2_cg(u, cg);
        let meta = if cg == 0 { start..data } else { u.cgsblock(cg) as u64..data };
        let cs_frags = (u.fs_cssize as u64).div_ceil(u.fs_fsize as u64);
        let cs = u.fs_csaddr as u64..u.fs_csaddr as u64 + cs_frags;
        !meta.contains(&bno) && !cs.contains(&bno)
    }
}

impl Superblock {
    /// The inode in the 256 bytes `raw` of an inode table, in this image's format.
    pub fn decode_dinode(&self, raw: &[u8]) -> Dinode {
        match self.ufs2() {
            Some(u) => Dinode::decode_ufs2(raw, u),
            None => Dinode::decode(raw),
        }
    }
}

impl Dinode {
    /// The inode in UFS2's 256 bytes `raw`, on the file system `u`: `blocks` in fragments, the
    /// device number kept in `di_db[0]`, FreeBSD's flags as sufs's. A short symbolic link keeps
    /// its target in the block pointers, as on disk (`Dinode::short_symlink`).
    pub fn decode_ufs2(raw: &[u8], u: &ufs2::Superblock) -> Dinode {
        let d = ufs2::Dinode::decode(raw).expect("a dinode buffer of 256 bytes");
        let sectors_per_frag = (u.fs_fsize as u64 / ufs2::DEV_BSIZE as u64).max(1);
        let f = d.di_flags;
        let mut flags = 0;
        if f & (SF_IMMUTABLE | UF_IMMUTABLE) != 0 {
            flags |= DI_IMMUTABLE;
        }
        if f & (SF_APPEND | UF_APPEND) != 0 {
            flags |= DI_APPEND;
        }
        if f & UF_NODUMP != 0 {
            flags |= DI_NODUMP;
        }
        if f & SF_SNAPSHOT != 0 {
            flags |= DI_SNAPSHOT;
        }
        let device = matches!(d.di_mode & S_IFMT, S_IFCHR | S_IFBLK);
        let mut out = Dinode {
            mode: d.di_mode,
            nlink: d.di_nlink.max(0) as u32,
            uid: d.di_uid,
            gid: d.di_gid,
            size: d.di_size,
            blocks: d.di_blocks / sectors_per_frag,
            atime: d.di_atime,
            mtime: d.di_mtime,
            ctime: d.di_ctime,
            btime: d.di_birthtime,
            atime_ns: d.di_atimensec as u32,
            mtime_ns: d.di_mtimensec as u32,
            ctime_ns: d.di_ctimensec as u32,
            btime_ns: d.di_birthnsec as u32,
            generation: d.di_gen,
            flags,
            rdev: if device { d.di_db[0] as u32 } else { 0 },
            extsize: d.di_extsize,
            ..Default::default()
        };
        for i in 0..NDADDR {
            out.db[i] = if device { 0 } else { d.di_db[i] as u64 };
        }
        for i in 0..NIADDR {
            out.ib[i] = d.di_ib[i] as u64;
        }
        for i in 0..NXADDR {
            out.extb[i] = d.di_extb[i] as u64;
        }
        out
    }

    /// Whether this is a symbolic link whose target is kept in the inode's block pointers
    /// (UFS2's short links: no blocks held). Its pointers are not block numbers.
    pub fn short_symlink(&self) -> bool {
        self.is_symlink() && self.blocks == 0 && self.size > 0
    }

    /// The target of a short symbolic link: `size` bytes of its block pointers.
    pub fn short_target(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(8 * (NDADDR + NIADDR));
        for p in self.db.iter().chain(self.ib.iter()) {
            raw.extend_from_slice(&p.to_le_bytes());
        }
        raw.truncate(self.size.min(raw.len() as u64) as usize);
        raw
    }
}
