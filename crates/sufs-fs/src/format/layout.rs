//! sufs's view of a FreeBSD UFS2 file system: the superblock, the dinodes and the group counts
//! of a UFS2 image mapped onto the types the file system works with (`Superblock`, `Dinode`),
//! which the rest of the file system reads.
//!
//! The unit of addresses. In UFS2 a block pointer, a group's size (`fs_fpg`) and the file
//! system's size (`fs_size`) count *fragments*; a block is `fs_frag` of them. sufs's block
//! numbers on a UFS2 image are fragment numbers too, and its "blocks" are `fs_bsize` bytes read
//! at a fragment address (`dev::FragDevice`). With one fragment a block (`fs_frag` 1) the two
//! units are the same. A file's last direct block may be a run of fewer fragments (its tail):
//! the file system keeps it as a run of that many fragments (`fs::frags`).

use super::ufs2;
use super::*;

/// UFS2's chflags(2) bits that sufs keeps as its own `DI_*` flags (sys/sys/stat.h).
const UF_NODUMP: u32 = 0x0000_0001;
const UF_IMMUTABLE: u32 = 0x0000_0002;
const UF_APPEND: u32 = 0x0000_0004;
pub(crate) const SF_IMMUTABLE: u32 = 0x0002_0000;
const SF_APPEND: u32 = 0x0004_0000;
const SF_SNAPSHOT: u32 = 0x0020_0000;

/// sufs's flags and FreeBSD's bits for them: a sufs flag is set if either bit is.
const FLAG_MAP: &[(u32, u32)] = &[
    (DI_IMMUTABLE, SF_IMMUTABLE | UF_IMMUTABLE),
    (DI_APPEND, SF_APPEND | UF_APPEND),
    (DI_NODUMP, UF_NODUMP),
    (DI_SNAPSHOT, SF_SNAPSHOT),
];

/// sufs's flags FreeBSD has no bit for (no access time updates, synchronous updates, a Block Register
/// reservation's blocks that must not move): kept in `di_spare[0]`, which FreeBSD keeps as it
/// finds it and checks nowhere.
const SUFS_SPARE_FLAGS: u32 = DI_NOATIME | DI_UNMOVABLE | DI_SYNC;

/// sufs's flags of a dinode whose FreeBSD flags are `di_flags`: FreeBSD's bits mapped, and sufs's
/// own (`SUFS_SPARE_FLAGS`, which FreeBSD has no bit for) from `di_spare[0]`.
fn sufs_flags(di_flags: u32, spare: u32) -> u32 {
    let mapped = FLAG_MAP.iter().filter(|&&(_, theirs)| di_flags & theirs != 0).fold(0, |f, &(ours, _)| f | ours);
    mapped | (spare & SUFS_SPARE_FLAGS)
}

/// Sectors of `DEV_BSIZE` bytes in a fragment: the unit of `di_blocks` over sufs's.
fn sectors_per_frag(u: &ufs2::Superblock) -> u64 {
    (u.fs_fsize as u64 / ufs2::DEV_BSIZE as u64).max(1)
}

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
            block_size: u.fs_bsize as u32,
            num_blocks: u.fs_size as u64,
            blocks_per_group: u.fs_fpg as u32,
            inodes_per_group: u.fs_ipg,
            ngroups: u.fs_ncg,
            free_blocks: cs.cs_nbfree.max(0) as u64 * frag + cs.cs_nffree.max(0) as u64,
            free_inodes: cs.cs_nifree.max(0) as u64,
            ndirs: cs.cs_ndir.max(0) as u64,
            flags,
            mount_time: u.fs_mtime,
            write_time: u.fs_time,
            minfree: u8::try_from(u.fs_minfree).ok().filter(|&m| m <= MAX_MINFREE),
            // FreeBSD's setting: soft updates when `FS_DOSOFTDEP` is set (tunefs -n), else the
            // traditional synchronous metadata writes (see `to_ufs2`).
            default_ordering: if u.fs_flags & ufs2::FS_DOSOFTDEP != 0 { ORDER_SOFTDEP } else { ORDER_SYNC },
            label,
            snapshots,
            ufs2: Box::new(u),
        }
    }

    /// The UFS2 superblock this one stands for, at its location (`fs_sblockloc`), with what
    /// sufs keeps in its own fields written over FreeBSD's: the clean flag (`fs_clean`), soft
    /// updates and "needs fsck" (`fs_flags`), the times, the label, minfree and the snapshot
    /// list. The counts (`fs_cstotal`) are the UFS2 superblock's own, kept by the allocator.
    ///
    /// `FS_DOSOFTDEP` is two things here, as in FreeBSD: on a clean image the setting (the
    /// ordering a mount uses when given none: `default_ordering`, which `sufs tunefs
    /// --ordering` changes); while mounted (not clean) the ordering that mount runs
    /// (`SB_SOFTDEP`), so that after a crash the image says what fsck must repair: a sync or
    /// async mount clears it for as long as it runs.
    ///
    /// An image marked for fsck is never written clean: FreeBSD's ffs_unmount writes `fs_clean`
    /// 0 while `FS_NEEDSFSCK` (or `FS_UNCLEAN`) is set, and fsck_ffs -p skips an image whose
    /// `fs_clean` is set without looking at the flags. `FS_DOSOFTDEP` is then the setting, as
    /// on a clean image.
    pub fn to_ufs2(&self) -> ufs2::Superblock {
        let mut u = self.ufs2().clone();
        let clean = self.flags & SB_CLEAN != 0;
        u.fs_clean = (clean && self.flags & SB_NEEDS_FSCK == 0) as i8;
        let mut fl = u.fs_flags & !(ufs2::FS_DOSOFTDEP | ufs2::FS_NEEDSFSCK | ufs2::FS_UNCLEAN);
        let softdep = if clean { self.default_ordering == ORDER_SOFTDEP } else { self.flags & SB_SOFTDEP != 0 };
        if softdep {
            fl |= ufs2::FS_DOSOFTDEP;
        }
        if self.flags & SB_NEEDS_FSCK != 0 {
            fl |= ufs2::FS_NEEDSFSCK;
        }
        if self.flags & SB_CLEAN == 0 {
            fl |= u.fs_flags & ufs2::FS_UNCLEAN;
        }
        u.fs_flags = fl;
        u.fs_time = self.write_time;
        u.fs_mtime = self.mount_time;
        let mut name = [0u8; ufs2::MAXVOLLEN];
        name[..self.label.len()].copy_from_slice(&self.label);
        u.fs_volname = name;
        u.fs_snapinum[..MAX_SNAPSHOTS].copy_from_slice(&self.snapshots);
        if let Some(m) = self.minfree {
            u.fs_minfree = m as i32;
        }
        u
    }

    /// The image's UFS2 superblock.
    pub fn ufs2(&self) -> &ufs2::Superblock {
        &self.ufs2
    }

    /// Fragments per block (`fs_frag`).
    pub fn frag(&self) -> u64 {
        self.ufs2.fs_frag as u64
    }

    /// Bytes of the unit block numbers count: a fragment (`fs_fsize`).
    pub fn addr_unit(&self) -> u32 {
        self.ufs2.fs_fsize as u32
    }

    /// Whether sufs may mount the image read-write. Not a UFS2 image that FreeBSD's gjournal
    /// keeps, nor one with journaled soft updates (SU+J) that was not unmounted cleanly (its
    /// journal is not replayed: fsck first). Files' tails are written in fragments
    /// (`fs::frags`).
    pub fn writable(&self) -> Result<(), String> {
        let u = self.ufs2();
        let ro = "mount it read-only (-o ro)";
        if u.fs_flags & ufs2::FS_GJOURNAL != 0 {
            return Err(format!(
                "this UFS2 file system is kept by FreeBSD's gjournal, which sufs does not write: {ro}"
            ));
        }
        if u.fs_flags & ufs2::FS_SUJ != 0 && u.fs_clean == 0 {
            return Err(format!(
                "this UFS2 file system has journaled soft updates (SU+J) and was not unmounted cleanly; sufs does not replay the journal: run sufs fsck first, or {ro}"
            ));
        }
        Ok(())
    }

    /// Turns journaled soft updates off, as `tunefs -j disable` does (`FS_SUJ` and
    /// `fs_sujfree` cleared; the journal file stays): sufs writes soft updates without the
    /// journal, so after a crash FreeBSD runs a full check. Returns whether it was on.
    pub fn disable_suj(&mut self) -> bool {
        let u = &mut *self.ufs2;
        if u.fs_flags & ufs2::FS_SUJ == 0 {
            return false;
        }
        u.fs_flags &= !ufs2::FS_SUJ;
        u.fs_sujfree = 0;
        true
    }

    /// Reads the superblock of the UFS2 image `read_at` gives, where FreeBSD looks for it
    /// (`ufs2::Superblock::search`), refusing an image of sufs's retired format (its magic
    /// `RETIRED_MAGIC` at byte 0). `read_at(offset, buf)` fills `buf` and answers
    /// `UnexpectedEof` past the end.
    pub fn probe(mut read_at: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>) -> Result<Superblock, FormatError> {
        // The retired format's superblock was its first 256 bytes.
        let mut first = [0u8; 256];
        read_at(0, &mut first).map_err(|e| FormatError::BadGeometry(format!("cannot read the superblock: {e}")))?;
        if get_u64(&first, 0) == RETIRED_MAGIC {
            return Err(FormatError::Retired);
        }
        match ufs2::Superblock::search(&mut read_at) {
            Ok((_, u)) => Ok(Superblock::from_ufs2(u)),
            Err(e) => Err(FormatError::Ufs2(e.to_string())),
        }
    }
}

impl Superblock {
    /// The inode in the 256 bytes `raw` of an inode table.
    pub fn decode_dinode(&self, raw: &[u8]) -> Dinode {
        Dinode::decode(raw, self.ufs2())
    }

    /// Writes the inode `d` into the 256 bytes `raw` of an inode table, with its check hash
    /// when the file system keeps them.
    pub fn encode_dinode(&self, d: &Dinode, raw: &mut [u8]) {
        raw[..ufs2::UFS2_DINODE_SIZE].copy_from_slice(&d.encode(self.ufs2()));
    }
}

impl Dinode {
    /// The mode and link count of the inode in UFS2's 256 bytes `raw`, as `decode` gives them
    /// (a negative count as 0), without decoding the rest.
    pub fn mode_and_nlink(raw: &[u8]) -> (u16, u32) {
        let (mode, nlink) = ufs2::Dinode::mode_and_nlink(raw);
        (mode, nlink.max(0) as u32)
    }

    /// The mode and sufs's flags of the inode in UFS2's 256 bytes `raw`, as `decode` gives them,
    /// without decoding the rest.
    pub fn mode_and_flags(raw: &[u8]) -> (u16, u32) {
        let (mode, _) = ufs2::Dinode::mode_and_nlink(raw);
        let (flags, spare) = ufs2::Dinode::flags_and_spare(raw);
        (mode, sufs_flags(flags, spare))
    }

    /// The inode in UFS2's 256 bytes `raw`, on the file system `u`: `blocks` in fragments, the
    /// device number kept in `di_db[0]`, FreeBSD's flags as sufs's. A short symbolic link keeps
    /// its target in the block pointers, as on disk (`Dinode::short_symlink`).
    pub fn decode(raw: &[u8], u: &ufs2::Superblock) -> Dinode {
        let d = ufs2::Dinode::decode(raw).expect("a dinode buffer of 256 bytes");
        let flags = sufs_flags(d.di_flags, d.di_spare[0]);
        let device = matches!(d.di_mode & S_IFMT, S_IFCHR | S_IFBLK);
        let mut out = Dinode {
            mode: d.di_mode,
            nlink: d.di_nlink.max(0) as u32,
            uid: d.di_uid,
            gid: d.di_gid,
            size: d.di_size,
            blocks: d.di_blocks / sectors_per_frag(u),
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
            ufs2: Ufs2Extra {
                flags: d.di_flags,
                kernflags: d.di_kernflags,
                blksize: d.di_blksize,
                modrev: d.di_modrev,
                freelink: d.di_freelink,
                rdev: if device { d.di_db[0] as u64 } else { 0 },
                spare: d.di_spare,
                shortlink: d.shortlink(u).is_some(),
            },
            ..Default::default()
        };
        for i in 0..NDADDR {
            out.db[i] = if device && i == 0 { 0 } else { d.di_db[i] as u64 };
        }
        for i in 0..NIADDR {
            out.ib[i] = d.di_ib[i] as u64;
        }
        for i in 0..NXADDR {
            out.extb[i] = d.di_extb[i] as u64;
        }
        out
    }

    /// The UFS2 dinode of this inode on the file system `u`, its check hash set when `u`
    /// keeps them: the inverse of `decode` (what sufs does not use comes back from
    /// `ufs2`; sufs's flags are written over FreeBSD's bits for them).
    pub fn encode(&self, u: &ufs2::Superblock) -> [u8; ufs2::UFS2_DINODE_SIZE] {
        assert!(self.nlink <= i16::MAX as u32, "link count {} past UFS2's", self.nlink);
        let x = &self.ufs2;
        let mut flags = x.flags;
        for &(ours, theirs) in FLAG_MAP {
            if self.flags & ours == 0 {
                flags &= !theirs;
            } else if flags & theirs == 0 {
                // Set by sufs: the system flag (only root changes sufs's flags).
                flags |= theirs & !(UF_IMMUTABLE | UF_APPEND);
            }
        }
        let mut spare = x.spare;
        spare[0] = (spare[0] & !SUFS_SPARE_FLAGS) | (self.flags & SUFS_SPARE_FLAGS);
        let device = matches!(self.mode & S_IFMT, S_IFCHR | S_IFBLK);
        let mut db = self.db.map(|b| b as i64);
        if device {
            db[0] = if x.rdev as u32 == self.rdev { x.rdev as i64 } else { self.rdev as i64 };
        }
        let d = ufs2::Dinode {
            di_mode: self.mode,
            di_nlink: self.nlink as i16,
            di_uid: self.uid,
            di_gid: self.gid,
            di_blksize: x.blksize,
            di_size: self.size,
            di_blocks: self.blocks * sectors_per_frag(u),
            di_atime: self.atime,
            di_mtime: self.mtime,
            di_ctime: self.ctime,
            di_birthtime: self.btime,
            di_mtimensec: self.mtime_ns as i32,
            di_atimensec: self.atime_ns as i32,
            di_ctimensec: self.ctime_ns as i32,
            di_birthnsec: self.btime_ns as i32,
            di_gen: self.generation,
            di_kernflags: x.kernflags,
            di_flags: flags,
            di_extsize: self.extsize,
            di_extb: self.extb.map(|b| b as i64),
            di_db: db,
            di_ib: self.ib.map(|b| b as i64),
            di_modrev: x.modrev,
            di_freelink: x.freelink,
            di_ckhash: 0,
            di_spare: spare,
        };
        d.encode_for(u)
    }

    /// Whether this is a symbolic link whose target is kept in the inode's block pointers
    /// (UFS2's short links: no blocks held). Its pointers are not block numbers.
    pub fn short_symlink(&self) -> bool {
        self.is_symlink() && self.size > 0 && (self.blocks == 0 || self.ufs2.shortlink)
    }

    /// Makes this inode a short symbolic link to `target` (UFS2: a target shorter than
    /// `fs_maxsymlinklen` lives in the block pointers and holds no block).
    pub fn set_short_target(&mut self, target: &[u8]) {
        assert!(!target.is_empty() && target.len() < 8 * (NDADDR + NIADDR), "a short target of {} bytes", target.len());
        assert!(self.blocks == 0, "a short symbolic link holds no block");
        let mut raw = [0u8; 8 * (NDADDR + NIADDR)];
        raw[..target.len()].copy_from_slice(target);
        let mut words = raw.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
        for p in self.db.iter_mut().chain(self.ib.iter_mut()) {
            *p = words.next().expect("a word per pointer");
        }
        self.size = target.len() as u64;
        self.ufs2.shortlink = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The clean flag and the marks written to a UFS2 superblock, as FreeBSD's ffs_unmount
    /// writes them: an image marked for fsck is not clean (fsck_ffs -p would skip it), and keeps
    /// its soft-updates setting.
    /// The mode and flags read alone are what a whole decode gives, for every flag FreeBSD or
    /// sufs keeps and bytes around them of any value.
    #[test]
    fn mode_and_flags_agree_with_the_decode() {
        let u = ufs2::newfs::geometry(64 << 20, &Default::default()).unwrap().sb;
        for seed in 0..64u32 {
            let mut raw = [0u8; ufs2::UFS2_DINODE_SIZE];
            for (i, v) in raw.iter_mut().enumerate() {
                *v = (i as u32 * 31 + seed * 17) as u8;
            }
            let bits = |k: u32| 1u32 << ((seed + k) % 32);
            raw[88..92].copy_from_slice(&(bits(0) | bits(5) | (SF_IMMUTABLE * (seed & 1))).to_le_bytes());
            raw[248..252].copy_from_slice(&(bits(3) | (DI_SYNC * ((seed >> 1) & 1))).to_le_bytes());
            let d = Dinode::decode(&raw, &u);
            assert_eq!(Dinode::mode_and_flags(&raw), (d.mode, d.flags), "seed {seed}");
        }
    }

    #[test]
    fn an_image_marked_for_fsck_is_written_unclean() {
        let mut u = ufs2::newfs::geometry(64 << 20, &Default::default()).unwrap().sb;
        u.fs_clean = 1;
        u.fs_flags |= ufs2::FS_DOSOFTDEP;
        let mut sb = Superblock::from_ufs2(u);
        let w = sb.to_ufs2();
        assert_eq!((w.fs_clean, w.fs_flags & (ufs2::FS_NEEDSFSCK | ufs2::FS_DOSOFTDEP)), (1, ufs2::FS_DOSOFTDEP));
        sb.flags |= SB_NEEDS_FSCK;
        let w = sb.to_ufs2();
        assert_eq!(w.fs_clean, 0, "marked for fsck: written unclean");
        assert_eq!(w.fs_flags & (ufs2::FS_NEEDSFSCK | ufs2::FS_DOSOFTDEP), ufs2::FS_NEEDSFSCK | ufs2::FS_DOSOFTDEP);
        let back = Superblock::from_ufs2(w);
        assert_eq!(back.flags & (SB_CLEAN | SB_NEEDS_FSCK | SB_SOFTDEP), SB_NEEDS_FSCK | SB_SOFTDEP);
        assert_eq!(back.default_ordering, ORDER_SOFTDEP);
    }
}
