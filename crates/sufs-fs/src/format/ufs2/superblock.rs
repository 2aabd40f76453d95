//! The UFS2 superblock, FreeBSD's `struct fs` (sys/ufs/ffs/fs.h): every field at its byte
//! offset, the validation FreeBSD's `validate_sblock` makes before trusting the geometry, the
//! geometry macros of fs.h as methods, the superblock check hash (`ffs_calc_sbhash`) and the
//! search of the standard locations (`SBLOCKSEARCH`, as `ffs_sbget` does).

use super::*;

le_struct! {
    /// FreeBSD 14's `struct fs`, the 1,376 bytes at the start of a superblock; the fields keep
    /// FreeBSD's names. `fs_old_*` fields are UFS1's and kept as they are; `fs_ocsp` and
    /// `fs_si` are in-core pointers, zero on disk.
    pub struct Fs (FS_STRUCT_SIZE) {
        fs_firstfield: i32 = 0,
        fs_unused_1: i32 = 4,
        /// Fragment offset of the superblock copy in each cylinder group.
        fs_sblkno: i32 = 8,
        /// Fragment offset of the cylinder group block.
        fs_cblkno: i32 = 12,
        /// Fragment offset of the inode blocks.
        fs_iblkno: i32 = 16,
        /// Fragment offset of the first data block after the inodes.
        fs_dblkno: i32 = 20,
        fs_old_cgoffset: i32 = 24,
        fs_old_cgmask: i32 = 28,
        fs_old_time: i32 = 32,
        fs_old_size: i32 = 36,
        fs_old_dsize: i32 = 40,
        /// Cylinder groups.
        fs_ncg: u32 = 44,
        fs_bsize: i32 = 48,
        fs_fsize: i32 = 52,
        /// Fragments to a block: 1, 2, 4 or 8.
        fs_frag: i32 = 56,
        fs_minfree: i32 = 60,
        fs_old_rotdelay: i32 = 64,
        fs_old_rps: i32 = 68,
        fs_bmask: i32 = 72,
        fs_fmask: i32 = 76,
        fs_bshift: i32 = 80,
        fs_fshift: i32 = 84,
        fs_maxcontig: i32 = 88,
        fs_maxbpg: i32 = 92,
        fs_fragshift: i32 = 96,
        fs_fsbtodb: i32 = 100,
        /// Bytes of the superblock on disk (covered by its check hash).
        fs_sbsize: i32 = 104,
        fs_spare1: [i32; 2] = 108,
        fs_nindir: i32 = 116,
        fs_inopb: u32 = 120,
        fs_old_nspf: i32 = 124,
        fs_optim: i32 = 128,
        fs_old_npsect: i32 = 132,
        fs_old_interleave: i32 = 136,
        fs_old_trackskew: i32 = 140,
        fs_id: [i32; 2] = 144,
        fs_old_csaddr: i32 = 152,
        /// Bytes of the cylinder group summary area (`struct csum` per group).
        fs_cssize: i32 = 156,
        /// Bytes of a cylinder group block (covered by its check hash).
        fs_cgsize: i32 = 160,
        fs_spare2: i32 = 164,
        fs_old_nsect: i32 = 168,
        fs_old_spc: i32 = 172,
        fs_old_ncyl: i32 = 176,
        fs_old_cpg: i32 = 180,
        /// Inodes per group.
        fs_ipg: u32 = 184,
        /// Fragments per group.
        fs_fpg: i32 = 188,
        fs_old_cstotal: Csum = 192,
        fs_fmod: i8 = 208,
        fs_clean: i8 = 209,
        fs_ronly: i8 = 210,
        fs_old_flags: i8 = 211,
        fs_fsmnt: [u8; MAXMNTLEN] = 212,
        fs_volname: [u8; MAXVOLLEN] = 680,
        fs_swuid: u64 = 712,
        fs_pad: i32 = 720,
        fs_cgrotor: i32 = 724,
        fs_ocsp: [u64; 15] = 728,
        fs_si: u64 = 848,
        fs_old_cpc: i32 = 856,
        fs_maxbsize: i32 = 860,
        fs_unrefs: i64 = 864,
        fs_providersize: i64 = 872,
        fs_metaspace: i64 = 880,
        fs_save_maxfilesize: u64 = 888,
        fs_sparecon64: [i64; 12] = 896,
        /// Byte offset this superblock was written at.
        fs_sblockactualloc: i64 = 992,
        /// Byte offset of the standard superblock: the search accepts a superblock only where
        /// this says it is.
        fs_sblockloc: i64 = 1000,
        fs_cstotal: CsumTotal = 1008,
        fs_time: i64 = 1072,
        /// Fragments in the file system.
        fs_size: i64 = 1080,
        fs_dsize: i64 = 1088,
        /// Fragment address of the cylinder group summary area.
        fs_csaddr: i64 = 1096,
        fs_pendingblocks: i64 = 1104,
        fs_pendinginodes: u32 = 1112,
        fs_snapinum: [u32; FSMAXSNAP] = 1116,
        fs_avgfilesize: u32 = 1196,
        fs_avgfpdir: u32 = 1200,
        fs_available_spare: i32 = 1204,
        fs_mtime: i64 = 1208,
        fs_sujfree: i32 = 1216,
        fs_sparecon32: [i32; 21] = 1220,
        /// The superblock's check hash, if `fs_metackhash` has `CK_SUPERBLOCK`.
        fs_ckhash: u32 = 1304,
        /// `CK_*`: which metadata carries check hashes.
        fs_metackhash: u32 = 1308,
        /// `FS_*` flags.
        fs_flags: i32 = 1312,
        /// Entries of a cylinder group's cluster summary (0: no cluster maps).
        fs_contigsumsize: i32 = 1316,
        /// Longest symbolic link kept in the dinode.
        fs_maxsymlinklen: i32 = 1320,
        fs_old_inodefmt: i32 = 1324,
        fs_maxfilesize: u64 = 1328,
        fs_qbmask: i64 = 1336,
        fs_qfmask: i64 = 1344,
        fs_state: i32 = 1352,
        fs_old_postblformat: i32 = 1356,
        fs_old_nrpos: i32 = 1360,
        fs_spare5: [i32; 2] = 1364,
        fs_magic: i32 = 1372,
    }
}

/// FreeBSD's `struct csum`: one cylinder group's counts, in its header (`cg_cs`) and in the
/// summary area at `fs_csaddr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Csum {
    pub cs_ndir: i32,
    pub cs_nbfree: i32,
    pub cs_nifree: i32,
    pub cs_nffree: i32,
}

impl LeField for Csum {
    const SIZE: usize = 16;
    fn get(b: &[u8], o: usize) -> Self {
        Csum {
            cs_ndir: i32::get(b, o),
            cs_nbfree: i32::get(b, o + 4),
            cs_nifree: i32::get(b, o + 8),
            cs_nffree: i32::get(b, o + 12),
        }
    }
    fn put(&self, b: &mut [u8], o: usize) {
        self.cs_ndir.put(b, o);
        self.cs_nbfree.put(b, o + 4);
        self.cs_nifree.put(b, o + 8);
        self.cs_nffree.put(b, o + 12);
    }
}

/// FreeBSD's `struct csum_total`: the file system's counts (`fs_cstotal`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CsumTotal {
    pub cs_ndir: i64,
    pub cs_nbfree: i64,
    pub cs_nifree: i64,
    pub cs_nffree: i64,
    pub cs_numclusters: i64,
    pub cs_spare: [i64; 3],
}

impl LeField for CsumTotal {
    const SIZE: usize = 64;
    fn get(b: &[u8], o: usize) -> Self {
        CsumTotal {
            cs_ndir: i64::get(b, o),
            cs_nbfree: i64::get(b, o + 8),
            cs_nifree: i64::get(b, o + 16),
            cs_nffree: i64::get(b, o + 24),
            cs_numclusters: i64::get(b, o + 32),
            cs_spare: <[i64; 3]>::get(b, o + 40),
        }
    }
    fn put(&self, b: &mut [u8], o: usize) {
        self.cs_ndir.put(b, o);
        self.cs_nbfree.put(b, o + 8);
        self.cs_nifree.put(b, o + 16);
        self.cs_nffree.put(b, o + 24);
        self.cs_numclusters.put(b, o + 32);
        self.cs_spare.put(b, o + 40);
    }
}

/// The offset of `fs_ckhash`, zero while the superblock hash is computed.
pub(super) const FS_CKHASH_OFF: usize = 1304;

/// A decoded UFS2 superblock: `struct fs` plus the bytes from the end of the structure to
/// `fs_sbsize`, kept as read. Its geometry has been validated (`Fs::validate`); `Deref` gives
/// the fields and the geometry methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub fs: Fs,
    /// Bytes `FS_STRUCT_SIZE..fs_sbsize` of the on-disk superblock (zero as newfs writes them).
    pub tail: Vec<u8>,
}

impl std::ops::Deref for Superblock {
    type Target = Fs;
    fn deref(&self) -> &Fs {
        &self.fs
    }
}

impl std::ops::DerefMut for Superblock {
    fn deref_mut(&mut self) -> &mut Fs {
        &mut self.fs
    }
}

fn bad(what: String) -> Ufs2Error {
    Ufs2Error::Geometry(what)
}

/// `howmany`: `a / b` rounded up, for the non-negative values of a validated superblock.
fn howmany(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// `log2(v)` if `v` is a positive power of two.
fn ilog2(v: i64) -> Option<i32> {
    (v > 0 && (v & (v - 1)) == 0).then(|| v.trailing_zeros() as i32)
}

impl Superblock {
    /// Decodes and validates the superblock in `buf` (at least `fs_sbsize` bytes, normally the
    /// `SBLOCKSIZE` read at its location), checking its check hash when the file system keeps
    /// one (`check_hash`; fsck reads a damaged one with `false`).
    pub fn decode(buf: &[u8], check_hash: bool) -> Result<Superblock, Ufs2Error> {
        if buf.len() < FS_STRUCT_SIZE {
            return Err(Ufs2Error::Short { what: "superblock", need: FS_STRUCT_SIZE, got: buf.len() });
        }
        let fs = Fs::read_fields(buf);
        match fs.fs_magic {
            FS_UFS2_MAGIC => {}
            FS_UFS1_MAGIC => return Err(Ufs2Error::Ufs1),
            FS_BAD_MAGIC => return Err(Ufs2Error::IncompleteNewfs),
            m => return Err(Ufs2Error::BadMagic(m)),
        }
        let sbsize = fs.fs_sbsize;
        if sbsize < FS_STRUCT_SIZE as i32 || sbsize > SBLOCKSIZE as i32 {
            return Err(bad(format!("fs_sbsize {sbsize} is not in {FS_STRUCT_SIZE}..={SBLOCKSIZE}")));
        }
        let sbsize = sbsize as usize;
        if buf.len() < sbsize {
            return Err(Ufs2Error::Short { what: "superblock", need: sbsize, got: buf.len() });
        }
        if check_hash {
            if let Some(computed) = fs.sb_ckhash_of(&buf[..sbsize]) {
                if computed != fs.fs_ckhash {
                    return Err(Ufs2Error::CheckHash { what: "superblock".into(), stored: fs.fs_ckhash, computed });
                }
            }
        }
        fs.validate()?;
        Ok(Superblock { fs, tail: buf[FS_STRUCT_SIZE..sbsize].to_vec() })
    }

    /// The `fs_sbsize` bytes of the superblock, its check hash updated when the file system
    /// keeps one (as `ffs_sbput` does).
    pub fn encode(&self) -> Vec<u8> {
        let sbsize = self.fs_sbsize as usize;
        assert_eq!(sbsize, FS_STRUCT_SIZE + self.tail.len(), "fs_sbsize disagrees with the kept tail");
        let mut b = vec![0u8; sbsize];
        self.fs.write_fields(&mut b);
        b[FS_STRUCT_SIZE..].copy_from_slice(&self.tail);
        if let Some(h) = self.fs.sb_ckhash_of(&b) {
            h.put(&mut b, FS_CKHASH_OFF);
        }
        b
    }

    /// Finds the superblock as FreeBSD's `ffs_sbget` does: the `SBLOCKSEARCH` locations in
    /// order, taking the first holding a UFS2 superblock that says it is the standard one
    /// (`fs_sblockloc` equal to where it was found; a backup copy elsewhere is not the
    /// superblock). A check-hash mismatch or a bad geometry there is an error, not a reason to
    /// look further. `read(offset, buf)` fills `buf` from the device; an offset past the end
    /// answers `UnexpectedEof`, which counts as "not here".
    pub fn search(mut read: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>) -> Result<(u64, Superblock), Ufs2Error> {
        let mut saw_ufs1 = false;
        let mut saw_other_endian = false;
        let mut buf = vec![0u8; SBLOCKSIZE];
        for loc in SBLOCKSEARCH {
            match read(loc, &mut buf) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => continue,
                Err(e) => return Err(e.into()),
            }
            let magic = i32::get(&buf, 1372);
            if magic == FS_UFS1_MAGIC {
                saw_ufs1 = true;
                continue;
            }
            if magic == FS_BAD_MAGIC {
                return Err(Ufs2Error::IncompleteNewfs);
            }
            if magic.swap_bytes() == FS_UFS2_MAGIC || magic.swap_bytes() == FS_UFS1_MAGIC {
                saw_other_endian = true;
                continue;
            }
            if magic != FS_UFS2_MAGIC || i64::get(&buf, 1000) != loc as i64 {
                continue;
            }
            return Ok((loc, Superblock::decode(&buf, true)?));
        }
        Err(if saw_ufs1 {
            Ufs2Error::Ufs1
        } else if saw_other_endian {
            Ufs2Error::OtherEndian
        } else {
            Ufs2Error::NoSuperblock
        })
    }
}

impl Fs {
    /// The superblock check hash of `b` (the on-disk bytes, `fs_sbsize` long) if the file
    /// system keeps one: `CK_SUPERBLOCK` in `fs_metackhash`, with `FS_METACKHASH` set (a kernel
    /// without check hashes clears that flag, and the hashes are then stale and ignored).
    fn sb_ckhash_of(&self, b: &[u8]) -> Option<u32> {
        let on = self.fs_flags & FS_METACKHASH != 0 && self.fs_metackhash & CK_SUPERBLOCK != 0;
        on.then(|| ffs_ckhash(b, FS_CKHASH_OFF))
    }

    /// Whether the file system keeps check hashes of `ck` (`CK_CYLGRP`, `CK_INODE`).
    pub fn has_ckhash(&self, ck: u32) -> bool {
        self.fs_flags & FS_METACKHASH != 0 && self.fs_metackhash & ck != 0
    }

    /// Checks every field the geometry methods and the decoders rely on, as FreeBSD's
    /// `validate_sblock` does before it trusts a superblock: the sizes and the shifts and masks
    /// derived from them, the group layout, the summary area and the counts.
    pub fn validate(&self) -> Result<(), Ufs2Error> {
        macro_rules! need {
            ($cond:expr, $($fmt:tt)*) => {
                if !$cond {
                    return Err(bad(format!($($fmt)*)));
                }
            };
        }
        need!(self.fs_magic == FS_UFS2_MAGIC, "fs_magic {:#x}", self.fs_magic);
        let (bsize, fsize, frag) = (self.fs_bsize as i64, self.fs_fsize as i64, self.fs_frag as i64);
        let bshift = ilog2(bsize);
        need!(
            bshift.is_some() && (MINBSIZE as i64..=MAXBSIZE as i64).contains(&bsize),
            "fs_bsize {bsize} is not a power of two in {MINBSIZE}..={MAXBSIZE}"
        );
        need!(
            matches!(frag, 1 | 2 | 4 | 8) && fsize * frag == bsize,
            "fs_frag {frag} and fs_fsize {fsize} do not divide fs_bsize {bsize} in 1, 2, 4 or 8"
        );
        need!(fsize >= DEV_BSIZE as i64, "fs_fsize {fsize} is below {DEV_BSIZE}");
        let fshift = ilog2(fsize).unwrap_or(-1);
        need!(self.fs_bshift == bshift.unwrap_or(-1), "fs_bshift {} for fs_bsize {bsize}", self.fs_bshift);
        need!(self.fs_fshift == fshift, "fs_fshift {} for fs_fsize {fsize}", self.fs_fshift);
        need!(self.fs_fragshift == ilog2(frag).unwrap_or(-1), "fs_fragshift {}", self.fs_fragshift);
        need!(self.fs_bmask == !(bsize as i32 - 1), "fs_bmask {:#x}", self.fs_bmask);
        need!(self.fs_fmask == !(fsize as i32 - 1), "fs_fmask {:#x}", self.fs_fmask);
        need!(self.fs_qbmask == bsize - 1, "fs_qbmask {:#x}", self.fs_qbmask);
        need!(self.fs_qfmask == fsize - 1, "fs_qfmask {:#x}", self.fs_qfmask);
        need!(
            self.fs_fsbtodb == fshift - DEV_BSIZE.trailing_zeros() as i32,
            "fs_fsbtodb {} for fs_fsize {fsize}",
            self.fs_fsbtodb
        );
        need!(self.fs_nindir as i64 == bsize / 8, "fs_nindir {}", self.fs_nindir);
        need!(self.fs_inopb as i64 == bsize / UFS2_DINODE_SIZE as i64, "fs_inopb {}", self.fs_inopb);
        need!(
            (self.fs_sbsize as usize) >= FS_STRUCT_SIZE && self.fs_sbsize as usize <= SBLOCKSIZE,
            "fs_sbsize {}",
            self.fs_sbsize
        );
        need!(
            (0..=UFS2_MAXSYMLINKLEN).contains(&self.fs_maxsymlinklen),
            "fs_maxsymlinklen {} (at most {UFS2_MAXSYMLINKLEN})",
            self.fs_maxsymlinklen
        );
        need!(
            (0..=FS_MAXCONTIG).contains(&self.fs_contigsumsize),
            "fs_contigsumsize {} (at most {FS_MAXCONTIG})",
            self.fs_contigsumsize
        );

        // Groups: fs_fpg fragments and fs_ipg inodes each; the last may be short.
        let (ncg, ipg, fpg) = (self.fs_ncg as i64, self.fs_ipg as i64, self.fs_fpg as i64);
        need!(ncg >= 1, "fs_ncg is 0");
        need!(fpg > 0 && fpg % frag == 0, "fs_fpg {fpg} is not a positive multiple of fs_frag");
        need!(
            ipg > 0 && ipg % self.fs_inopb as i64 == 0,
            "fs_ipg {ipg} is not a positive multiple of fs_inopb {}",
            self.fs_inopb
        );
        need!(ncg * ipg <= u32::MAX as i64, "{ncg} groups of {ipg} inodes overflow an inode number");
        let size = self.fs_size;
        need!(
            size > (ncg - 1) * fpg && size <= ncg * fpg,
            "fs_size {size} does not end in group {} of {ncg} (fs_fpg {fpg})",
            ncg - 1
        );
        need!(size < (1i64 << 62) >> fshift.max(0), "fs_size {size} overflows a byte offset");
        need!((0..=size).contains(&self.fs_dsize), "fs_dsize {} (fs_size {size})", self.fs_dsize);

        // In a group: superblock copy, then the cylinder group block, the inodes, the data.
        let (sblkno, cblkno, iblkno, dblkno) =
            (self.fs_sblkno as i64, self.fs_cblkno as i64, self.fs_iblkno as i64, self.fs_dblkno as i64);
        need!(
            self.fs_cgsize as i64 >= CG_STRUCT_SIZE as i64 && self.fs_cgsize as i64 <= bsize,
            "fs_cgsize {} is not in {CG_STRUCT_SIZE}..={bsize}",
            self.fs_cgsize
        );
        let sb_frags = howmany(SBLOCKSIZE as i64, fsize);
        let cg_frags = howmany(self.fs_cgsize as i64, fsize);
        let ino_frags = ipg * UFS2_DINODE_SIZE as i64 / fsize;
        need!(
            sblkno >= 0 && sblkno + sb_frags <= cblkno && cblkno + cg_frags <= iblkno,
            "fs_sblkno {sblkno}, fs_cblkno {cblkno}, fs_iblkno {iblkno} overlap"
        );
        need!(iblkno + ino_frags <= dblkno, "fs_dblkno {dblkno} is inside the inodes (fs_iblkno {iblkno})");
        need!(dblkno <= fpg, "fs_dblkno {dblkno} past a group of {fpg} fragments");
        // The last group must at least hold its metadata.
        need!(size - (ncg - 1) * fpg >= dblkno, "the last group is shorter than its metadata");

        // The summary area: a struct csum per group, rounded up to a fragment.
        let cssize = self.fs_cssize as i64;
        need!(cssize == howmany(ncg * Csum::SIZE as i64, fsize) * fsize, "fs_cssize {cssize} for {ncg} groups");
        need!(
            self.fs_csaddr >= 0 && self.fs_csaddr <= size - cssize / fsize,
            "fs_csaddr {} past fs_size {size}",
            self.fs_csaddr
        );
        // Inside one group's data, as FreeBSD's `validate_sblock` requires (newfs puts it in
        // group 0's, growfs may move it to a new group's): never over a superblock, a group
        // block or inodes.
        let (csaddr, csfrags) = (self.fs_csaddr, howmany(cssize, fsize));
        let (csg, csoff) = (csaddr / fpg, csaddr % fpg);
        need!(
            csoff >= dblkno && csoff + csfrags <= fpg,
            "fs_csaddr {csaddr} is not inside group {csg}'s data (from fragment {dblkno} of {fpg})"
        );
        let c = &self.fs_cstotal;
        need!(
            c.cs_ndir >= 0 && c.cs_nbfree >= 0 && c.cs_nifree >= 0 && c.cs_nffree >= 0,
            "negative count in fs_cstotal"
        );
        Ok(())
    }

    // The geometry macros of fs.h. Arguments are fragment numbers (`fsb`), logical block
    // numbers (`lbn`) or byte offsets; all stay far from overflow for any value inside the
    // validated file system.

    /// `cgbase`: first fragment of group `c`.
    pub fn cgbase(&self, c: u32) -> i64 {
        self.fs_fpg as i64 * c as i64
    }
    /// `cgstart`: for UFS2, `cgbase`.
    pub fn cgstart(&self, c: u32) -> i64 {
        self.cgbase(c)
    }
    /// `cgsblock`: the group's superblock copy.
    pub fn cgsblock(&self, c: u32) -> i64 {
        self.cgstart(c) + self.fs_sblkno as i64
    }
    /// `cgtod`: the cylinder group block.
    pub fn cgtod(&self, c: u32) -> i64 {
        self.cgstart(c) + self.fs_cblkno as i64
    }
    /// `cgimin`: the first inode block.
    pub fn cgimin(&self, c: u32) -> i64 {
        self.cgstart(c) + self.fs_iblkno as i64
    }
    /// `cgdmin`: the first data fragment after the inodes.
    pub fn cgdmin(&self, c: u32) -> i64 {
        self.cgstart(c) + self.fs_dblkno as i64
    }
    /// `dtog`: the group of fragment `d`.
    pub fn dtog(&self, d: i64) -> i64 {
        d / self.fs_fpg as i64
    }
    /// `dtogd`: fragment `d`'s index within its group.
    pub fn dtogd(&self, d: i64) -> i64 {
        d % self.fs_fpg as i64
    }
    /// `fragstoblks`.
    pub fn fragstoblks(&self, frags: i64) -> i64 {
        frags >> self.fs_fragshift
    }
    /// `blkstofrags`.
    pub fn blkstofrags(&self, blks: i64) -> i64 {
        blks << self.fs_fragshift
    }
    /// `fragnum`: `fsb`'s fragment within its block.
    pub fn fragnum(&self, fsb: i64) -> i64 {
        fsb & (self.fs_frag as i64 - 1)
    }
    /// `blknum`: the first fragment of `fsb`'s block.
    pub fn blknum(&self, fsb: i64) -> i64 {
        fsb & !(self.fs_frag as i64 - 1)
    }
    /// `fsbtodb`: fragment number to `DEV_BSIZE` sector.
    pub fn fsbtodb(&self, fsb: i64) -> i64 {
        fsb << self.fs_fsbtodb
    }
    /// `dbtofsb`.
    pub fn dbtofsb(&self, db: i64) -> i64 {
        db >> self.fs_fsbtodb
    }
    /// The byte offset of fragment `fsb` on the device (`dbtob(fsbtodb(fsb))`).
    pub fn fsb_offset(&self, fsb: i64) -> u64 {
        (fsb as u64) << self.fs_fshift
    }
    /// `ino_to_cg`.
    pub fn ino_to_cg(&self, ino: u32) -> u32 {
        ino / self.fs_ipg
    }
    /// `ino_to_fsba`: the fragment of the inode block holding `ino`.
    pub fn ino_to_fsba(&self, ino: u32) -> i64 {
        let cg = self.ino_to_cg(ino);
        self.cgimin(cg) + self.blkstofrags(((ino % self.fs_ipg) / self.fs_inopb) as i64)
    }
    /// `ino_to_fsbo`: `ino`'s index in that block.
    pub fn ino_to_fsbo(&self, ino: u32) -> usize {
        (ino % self.fs_inopb) as usize
    }
    /// The byte offset of inode `ino`'s dinode on the device.
    pub fn ino_offset(&self, ino: u32) -> u64 {
        self.fsb_offset(self.ino_to_fsba(ino)) + (self.ino_to_fsbo(ino) * UFS2_DINODE_SIZE) as u64
    }
    /// Inodes in the file system (`fs_ncg * fs_ipg`): inode numbers are below this.
    pub fn maxino(&self) -> u32 {
        self.fs_ncg * self.fs_ipg
    }
    /// `lblkno`: the logical block of byte `loc`.
    pub fn lblkno(&self, loc: u64) -> i64 {
        (loc >> self.fs_bshift) as i64
    }
    /// `lblktosize`: the byte offset of logical block `lbn`.
    pub fn lblktosize(&self, lbn: i64) -> u64 {
        (lbn as u64) << self.fs_bshift
    }
    /// `blkoff`: byte `loc`'s offset in its block.
    pub fn blkoff(&self, loc: u64) -> u64 {
        loc & self.fs_qbmask as u64
    }
    /// `fragoff`: byte `loc`'s offset in its fragment.
    pub fn fragoff(&self, loc: u64) -> u64 {
        loc & self.fs_qfmask as u64
    }
    /// `numfrags`: whole fragments in `loc` bytes.
    pub fn numfrags(&self, loc: u64) -> i64 {
        (loc >> self.fs_fshift) as i64
    }
    /// `fragroundup`.
    pub fn fragroundup(&self, size: u64) -> u64 {
        size.div_ceil(self.fs_fsize as u64) * self.fs_fsize as u64
    }
    /// `blkroundup`.
    pub fn blkroundup(&self, size: u64) -> u64 {
        size.div_ceil(self.fs_bsize as u64) * self.fs_bsize as u64
    }
    /// `NINDIR`: block pointers in an indirect block.
    pub fn nindir(&self) -> i64 {
        self.fs_nindir as i64
    }
    /// `INOPB`: inodes in a block.
    pub fn inopb(&self) -> u32 {
        self.fs_inopb
    }
    /// `sblksize`: bytes of logical block `lbn` of a file of `size` bytes: a whole block, or
    /// for the last of the direct blocks, only the fragments the size reaches.
    pub fn sblksize(&self, size: u64, lbn: i64) -> u64 {
        if lbn >= UFS_NDADDR as i64 || size >= self.lblktosize(lbn + 1) {
            self.fs_bsize as u64
        } else {
            self.fragroundup(self.blkoff(size))
        }
    }
    /// `dblksize`: `sblksize` with the dinode's size.
    pub fn dblksize(&self, dip: &Dinode, lbn: i64) -> u64 {
        self.sblksize(dip.di_size, lbn)
    }
    /// `blksize`: the same for an in-core inode; here, an inode is its dinode.
    pub fn blksize(&self, dip: &Dinode, lbn: i64) -> u64 {
        self.dblksize(dip, lbn)
    }

    /// Whether `size` bytes at fragment `fsb` lie in data space, as FreeBSD's `ffs_check_blkno`
    /// asks of a block number read from an untrusted disk: inside the file system and, in
    /// its group, either before the superblock copy (not in group 0) or after the inodes.
    pub fn check_blkno(&self, fsb: i64, size: u64) -> bool {
        if fsb < 0 || fsb >= self.fs_size || size > MAXBSIZE as u64 {
            return false;
        }
        let end = fsb + self.numfrags(self.fragroundup(size));
        let cg = self.dtog(fsb) as u32;
        end <= self.fs_size
            && ((cg > 0 && end <= self.cgsblock(cg))
                || (fsb >= self.cgdmin(cg) && end <= self.cgbase(cg) + self.fs_fpg as i64))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A superblock as newfs would make for a small file system: 32 KiB blocks, 4 KiB
    /// fragments, 4 groups of 264 fragments and 256 inodes (the FreeBSD test image's geometry).
    pub(crate) fn sample() -> Superblock {
        let mut b = vec![0u8; 4096];
        let put = |b: &mut [u8], o: usize, v: i64, w: usize| b[o..o + w].copy_from_slice(&v.to_le_bytes()[..w]);
        for (o, v) in [
            (8, 24),
            (12, 32),
            (16, 40),
            (20, 56),
            (44, 4),
            (48, 32768),
            (52, 4096),
            (56, 8),
            (72, !32767),
            (76, !4095),
            (80, 15),
            (84, 12),
            (96, 3),
            (100, 3),
            (104, 4096),
            (116, 4096),
            (120, 128),
            (156, 4096),
            (160, 4096),
            (184, 256),
            (188, 264),
            (1308, 7),
            (1312, FS_METACKHASH as i64 | FS_DOSOFTDEP as i64),
            (1316, 16),
            (1320, 120),
            (1372, FS_UFS2_MAGIC as i64),
        ] {
            put(&mut b, o, v, 4);
        }
        for (o, v) in [(1000, 65536), (1080, 1024), (1088, 871), (1096, 56), (1336, 32767), (1344, 4095)] {
            put(&mut b, o, v, 8);
        }
        b[212..216].copy_from_slice(b"/mnt");
        b[3000] = 0x5a; // a byte past struct fs, kept on re-encode
        let h = ffs_ckhash(&b, FS_CKHASH_OFF);
        h.put(&mut b, FS_CKHASH_OFF);
        Superblock::decode(&b, true).expect("the sample superblock is valid")
    }

    #[test]
    fn fs_fields_tile_struct_fs() {
        crate::format::ufs2::assert_tiles("struct fs", Fs::FIELDS, FS_STRUCT_SIZE);
    }

    #[test]
    fn superblock_round_trips_byte_for_byte() {
        let sb = sample();
        let b = sb.encode();
        assert_eq!(b.len(), 4096);
        assert_eq!(b[3000], 0x5a);
        let again = Superblock::decode(&b, true).unwrap();
        assert_eq!(again, sb);
        assert_eq!(again.encode(), b);
        // A changed field is written at its offset and resealed.
        let mut sb2 = sb.clone();
        sb2.fs_cstotal.cs_nbfree = 49;
        sb2.fs_volname[..4].copy_from_slice(b"test");
        let b2 = sb2.encode();
        assert_eq!(i64::from_le_bytes(b2[1016..1024].try_into().unwrap()), 49);
        assert_eq!(&b2[680..684], b"test");
        let back = Superblock::decode(&b2, true).unwrap();
        assert_ne!(back.fs_ckhash, sb.fs_ckhash, "resealed");
        sb2.fs_ckhash = back.fs_ckhash;
        assert_eq!(back, sb2);
    }

    #[test]
    fn superblock_check_hash_is_verified() {
        let mut b = sample().encode();
        b[3001] ^= 1;
        assert!(matches!(Superblock::decode(&b, true), Err(Ufs2Error::CheckHash { .. })));
        assert!(Superblock::decode(&b, false).is_ok(), "fsck may read it without the hash");
        // Without FS_METACKHASH the recorded hash is stale and not checked.
        let mut sb = sample();
        sb.fs_flags &= !FS_METACKHASH;
        let mut b = sb.encode();
        b[3001] ^= 1;
        assert!(Superblock::decode(&b, true).is_ok());
    }

    #[test]
    fn bad_geometry_is_refused() {
        type Change = fn(&mut Fs);
        let cases: Vec<(&str, Change)> = vec![
            ("bsize", |f| f.fs_bsize = 3000),
            ("bsize too big", |f| f.fs_bsize = 131072),
            ("frag", |f| f.fs_frag = 16),
            ("fsize", |f| f.fs_fsize = 8192),
            ("bshift", |f| f.fs_bshift = 14),
            ("ncg", |f| f.fs_ncg = 0),
            ("ipg", |f| f.fs_ipg = 100),
            ("fpg", |f| f.fs_fpg = 0),
            ("size", |f| f.fs_size = 4000),
            ("dblkno", |f| f.fs_dblkno = 41),
            ("cgsize", |f| f.fs_cgsize = 65536),
            ("cssize", |f| f.fs_cssize = 8192),
            ("csaddr", |f| f.fs_csaddr = 1024),
            ("symlink", |f| f.fs_maxsymlinklen = 121),
            ("contig", |f| f.fs_contigsumsize = 17),
            ("nindir", |f| f.fs_nindir = 1024),
            ("inopb", |f| f.fs_inopb = 64),
        ];
        for (what, change) in cases {
            let mut sb = sample();
            change(&mut sb.fs);
            assert!(matches!(sb.fs.validate(), Err(Ufs2Error::Geometry(_))), "{what}");
        }
    }

    #[test]
    fn geometry_methods_follow_fs_h() {
        let sb = sample();
        assert_eq!(sb.cgbase(2), 528);
        assert_eq!((sb.cgsblock(1), sb.cgtod(1), sb.cgimin(1), sb.cgdmin(1)), (288, 296, 304, 320));
        assert_eq!((sb.fragstoblks(17), sb.blkstofrags(3), sb.fragnum(19), sb.blknum(19)), (2, 24, 3, 16));
        assert_eq!(sb.fsbtodb(5), 40);
        // Inode 300: group 1, index 44 in it, block 0 of its inodes, slot 300 % 128 = 44.
        assert_eq!((sb.ino_to_cg(300), sb.ino_to_fsba(300), sb.ino_to_fsbo(300)), (1, 304, 44));
        assert_eq!(sb.ino_to_fsba(2 + 128), 40 + 8);
        assert_eq!((sb.lblkno(65537), sb.blkoff(65537), sb.numfrags(8191)), (2, 1, 1));
        assert_eq!(sb.sblksize(23, 0), 4096, "a 23-byte file's only block is one fragment");
        assert_eq!(sb.sblksize(40000, 1), 8192, "its second block, two fragments");
        assert_eq!(sb.sblksize(40000, 0), 32768);
        assert_eq!(sb.sblksize(1 << 20, 12), 32768, "indirect-mapped blocks are whole");
        assert!(sb.check_blkno(56, 32768) && sb.check_blkno(264, 4096));
        assert!(!sb.check_blkno(40, 4096), "inode block");
        assert!(!sb.check_blkno(288, 4096), "group 1's superblock copy");
        assert!(!sb.check_blkno(1020, 32768), "past the end");
        assert!(!sb.check_blkno(-1, 4096));
    }

    #[test]
    fn search_takes_the_standard_location_only() {
        let sb = sample();
        // The superblock at 8192 as makefs may place it, and a copy at 65536 saying it is a
        // backup of that one (fs_sblockloc 8192): the search passes the copy.
        let mut at8k = sb.clone();
        at8k.fs_sblockloc = 8192;
        let img_len = 300_000;
        let mut img = vec![0u8; img_len];
        let b = at8k.encode();
        img[8192..8192 + b.len()].copy_from_slice(&b);
        img[65536..65536 + b.len()].copy_from_slice(&b);
        let read = |img: &[u8], off: u64, buf: &mut [u8]| {
            let off = off as usize;
            if off + buf.len() > img.len() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.copy_from_slice(&img[off..off + buf.len()]);
            Ok(())
        };
        let (loc, found) = Superblock::search(|o, b| read(&img, o, b)).unwrap();
        assert_eq!((loc, found.fs_sblockloc), (8192, 8192));
        let empty = vec![0u8; img_len];
        assert!(matches!(Superblock::search(|o, b| read(&empty, o, b)), Err(Ufs2Error::NoSuperblock)));
        // A bad hash at the standard location stops the search.
        img[8192 + 3001] ^= 1;
        assert!(matches!(Superblock::search(|o, b| read(&img, o, b)), Err(Ufs2Error::CheckHash { .. })));
        // A UFS2 or UFS1 superblock in the other byte order is named as such.
        for magic in [FS_UFS2_MAGIC, FS_UFS1_MAGIC] {
            let mut be = vec![0u8; img_len];
            be[65536 + 1372..65536 + 1376].copy_from_slice(&magic.to_be_bytes());
            assert!(matches!(Superblock::search(|o, b| read(&be, o, b)), Err(Ufs2Error::OtherEndian)), "{magic:#x}");
        }
    }
}
