//! newfs for UFS2: a new file system laid out as FreeBSD's newfs(8) lays one out for the same
//! options (sbin/newfs/newfs.c's defaults, mkfs.c's `mkfs`, `initcg` and `fsinit`).
//!
//! `geometry` chooses the layout exactly as mkfs.c does: the fragments a group holds (`fs_fpg`)
//! grow until the group's map would no longer fit in one block or the file system would have
//! fewer than `MINCYLGRPS` groups, the inodes a group holds follow from the density (`-i`), and
//! the last group is shrunk into viability if it is too short for its metadata. `newfs` then
//! writes what newfs writes: every group's superblock copy, header with its maps and summaries,
//! and its first two blocks of inodes (`cg_initediblk`: the rest of the inode table is
//! initialized lazily, when the kernel first hands out an inode there, as FreeBSD does for
//! UFS2), the root directory with `.snap` in it, the summary area, the superblock and the
//! recovery record at the end of the boot area.
//!
//! The invariant kept: what is written is a clean file system. The counts of every group, of
//! the summary area and of `fs_cstotal` agree with the maps (asserted before the superblock is
//! written), and until that last write the superblock says `FS_BAD_MAGIC`, so a newfs cut short
//! is recognized as one.

use super::*;
use crate::format::{dirent_put, dirent_size, DIRBLKSIZ, DT_DIR};
use std::io;

/// newfs.h's defaults: fragment and block size, fragments of data per inode (`NFPI`).
pub const DFL_FRAGSIZE: i32 = 4096;
pub const DFL_BLKSIZE: i32 = 32768;
pub const NFPI: i32 = 2;
/// fs.h's `MINFREE`, `AVFILESIZ`, `AFPDIR`: minfree percent, expected file size and files per
/// directory.
pub const MINFREE: i32 = 8;
pub const AVFILESIZ: i32 = 16384;
pub const AFPDIR: i32 = 64;
/// `fs_optim`: `FS_OPTTIME`, `FS_OPTSPACE`.
pub const FS_OPTTIME: i32 = 0;
pub const FS_OPTSPACE: i32 = 1;
/// FreeBSD's `operator` group, which owns `.snap` (newfs looks it up; on FreeBSD it is 5).
pub const OPERATOR_GID: u32 = 5;
/// `MAXPHYS` of a 64-bit FreeBSD: the default `maxcontig` is `MAXPHYS / bsize` blocks.
const MAXPHYS: i32 = 1024 * 1024;
/// fs.h's `MINCYLGRPS`: newfs stops growing groups before there are fewer than this many.
const MINCYLGRPS: i64 = 4;
/// newfs.h's `MAXBLKSPERCG`: no limit on a group's fragments but its map's block.
const MAXBLKSPERCG: i64 = 0x7fff_ffff;
/// The sector newfs uses on an image file.
const SECTOR: i64 = DEV_BSIZE as i64;
/// `sizeof(struct cg)` as `CGSIZE` counts it: the 168 bytes of fields, `cg_space[1]`, and the
/// padding to the structure's 8-byte alignment.
const SIZEOF_CG: i64 = 176;
/// The recovery record newfs keeps in the last 20 bytes of the boot area (`struct fsrecovery`).
const FSRECOVERY_SIZE: usize = 20;

/// What `newfs` makes, as newfs(8)'s options say it: `None` takes newfs's default.
#[derive(Debug, Clone)]
pub struct NewfsOptions {
    /// `-b`: block size (default 32768, or 8 fragments if smaller).
    pub bsize: Option<i32>,
    /// `-f`: fragment size (default 4096).
    pub fsize: Option<i32>,
    /// `-i`: bytes of data space per inode (default `NFPI` fragments).
    pub density: Option<i32>,
    /// `-m`: percent of the space only root may allocate.
    pub minfree: i32,
    /// `-L`: the volume label (letters, digits, `_` and `-`; fewer than 32).
    pub label: Option<String>,
    /// `-U`: soft updates (`FS_DOSOFTDEP`), newfs's default for UFS2.
    pub softdep: bool,
    /// `-a`: most blocks allocated in one run (default `MAXPHYS / bsize`).
    pub maxcontig: Option<i32>,
    /// `-e`: most blocks of one file in a group (default an indirect block's worth).
    pub maxbpg: Option<i32>,
    /// `-g`, `-h`: the expected file size and files per directory.
    pub avgfilesize: i32,
    pub avgfpdir: i32,
    /// Make `/.snap` (newfs without `-n`).
    pub snap_dir: bool,
    /// Seconds since the epoch: every time newfs records.
    pub time: i64,
    /// `-R`: the file system's id and inode generations counted 1, 2, 3, ... instead of random.
    pub regression: bool,
}

impl Default for NewfsOptions {
    fn default() -> NewfsOptions {
        NewfsOptions {
            bsize: None,
            fsize: None,
            density: None,
            minfree: MINFREE,
            label: None,
            softdep: true,
            maxcontig: None,
            maxbpg: None,
            avgfilesize: AVFILESIZ,
            avgfpdir: AFPDIR,
            snap_dir: true,
            time: 0,
            regression: false,
        }
    }
}

/// Why newfs made nothing.
#[derive(Debug, Error)]
pub enum NewfsError {
    /// An option newfs refuses.
    #[error("{0}")]
    Option(String),
    #[error("file system size {size} < minimum size of {min} (fragments of {fsize} bytes)")]
    TooSmall { size: i64, min: i64, fsize: i32 },
    #[error("the first cylinder group has no whole free block for the root directory (file system too small)")]
    NoRoom,
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// A layout newfs chose: the superblock (as the groups' copies carry it, before the root
/// directory is allocated) and what newfs would print about the choices it changed.
#[derive(Debug, Clone)]
pub struct Newfs {
    pub sb: Superblock,
    pub notes: Vec<String>,
}

/// `howmany`, `roundup` of non-negative values.
pub(super) fn howmany(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}
fn roundup(a: i64, b: i64) -> i64 {
    howmany(a, b) * b
}

fn log2(v: i32) -> i32 {
    v.trailing_zeros() as i32
}

/// fs.h's `CGSIZE`: the bytes of a group block with its maps (UFS2: no rotational tables).
fn cgsize(fs: &Fs) -> i64 {
    let (ipg, fpg) = (fs.fs_ipg as i64, fs.fs_fpg as i64);
    let clusters = match fs.fs_contigsumsize {
        c if c <= 0 => 0,
        c => c as i64 * 4 + howmany(fpg >> fs.fs_fragshift, 8),
    };
    SIZEOF_CG + howmany(ipg, 8) + howmany(fpg, 8) + clusters
}

/// `newfs_random`: random numbers, or 1, 2, 3, ... with `-R`.
pub(super) struct Numbers {
    next: Option<u32>,
}

impl Numbers {
    pub(super) fn new(regression: bool) -> Numbers {
        Numbers { next: regression.then_some(1) }
    }
    pub(super) fn get(&mut self) -> u32 {
        match &mut self.next {
            Some(n) => {
                *n += 1;
                *n - 1
            }
            None => rand::random(),
        }
    }
}

/// mkfs.c's correction of a block or fragment size `v` to `to`, with its message.
fn adjust(notes: &mut Vec<String>, v: &mut i32, to: i32, what: &str, limit: &str) {
    let verb = if to > *v { "increasing" } else { "decreasing" };
    notes.push(format!("{verb} {what} size from {v} to {limit} ({to})"));
    *v = to;
}

/// The options newfs.c checks before mkfs runs.
fn check_options(o: &NewfsOptions) -> Result<(), NewfsError> {
    let bad = |m: String| Err(NewfsError::Option(m));
    if let Some(b) = o.bsize {
        if b < MINBSIZE {
            return bad(format!("{b}: block size too small, min is {MINBSIZE}"));
        }
        if b > MAXBSIZE {
            return bad(format!("{b}: block size too large, max is {MAXBSIZE}"));
        }
    }
    if o.fsize.is_some_and(|f| f <= 0) {
        return bad(format!("{}: bad fragment size", o.fsize.unwrap_or(0)));
    }
    if o.density.is_some_and(|d| d <= 0) {
        return bad(format!("{}: bad bytes per inode", o.density.unwrap_or(0)));
    }
    if !(0..=99).contains(&o.minfree) {
        return bad(format!("{}: bad free space %", o.minfree));
    }
    if o.maxcontig.is_some_and(|a| a <= 0) || o.maxbpg.is_some_and(|e| e <= 0) {
        return bad("bad maximum contiguous blocks or blocks per file in a group".into());
    }
    if o.avgfilesize <= 0 || o.avgfpdir <= 0 {
        return bad("bad average file size or files per directory".into());
    }
    if let Some(l) = &o.label {
        check_label(l).map_err(NewfsError::Option)?;
    }
    Ok(())
}

/// A volume label as newfs's and tunefs's `-L` take it: letters, digits, `_` and `-`, fewer
/// than `MAXVOLLEN` bytes (`fs_volname` keeps its NUL); empty clears the label.
pub fn check_label(l: &str) -> Result<(), String> {
    if !l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
        return Err("bad volume label. Valid characters are alphanumerics, dashes, and underscores.".into());
    }
    if l.len() >= MAXVOLLEN {
        return Err(format!("bad volume label. Length is longer than {}.", MAXVOLLEN - 1));
    }
    Ok(())
}

/// The layout newfs chooses for a device of `size` bytes: the superblock as mkfs.c fills it in
/// before the groups are written (counts without the root directory).
pub fn geometry(size: u64, o: &NewfsOptions) -> Result<Newfs, NewfsError> {
    check_options(o)?;
    let mut notes = Vec::new();
    let fssize = (size / SECTOR as u64) as i64;
    if fssize <= 0 {
        return Err(NewfsError::Option(format!("preposterous size {fssize}")));
    }
    // newfs.c: the defaults, and optimization for space below the standard minfree.
    let mut fsize = o.fsize.unwrap_or(DFL_FRAGSIZE.max(SECTOR as i32));
    let mut bsize = o.bsize.unwrap_or(DFL_BLKSIZE.min(8 * fsize));
    let mut optim = FS_OPTTIME;
    if o.minfree < MINFREE {
        notes.push(format!("Warning: changing optimization to space because minfree is less than {MINFREE}%"));
        optim = FS_OPTSPACE;
    }
    // mkfs's `maxcontig` and `density` are set once; a restart with larger blocks keeps them.
    let maxcontig = o.maxcontig.unwrap_or((MAXPHYS / bsize).max(1));
    let mut density = o.density.unwrap_or(0);

    let mut fs = Fs::zeroed();
    fs.fs_old_flags = FS_FLAGS_UPDATED as i8;
    fs.fs_flags = if o.softdep { FS_DOSOFTDEP } else { 0 };
    if let Some(l) = &o.label {
        fs.fs_volname[..l.len()].copy_from_slice(l.as_bytes());
    }
    fs.fs_avgfilesize = o.avgfilesize as u32;
    fs.fs_avgfpdir = o.avgfpdir as u32;

    // mkfs.c's `restart:` the sizes, the group's fixed layout, then the inodes and fragments a
    // group holds; a density the block size cannot address doubles the sizes and starts over.
    let fragsperinode = 'restart: loop {
        for (what, v) in [("block", bsize), ("fragment", fsize)] {
            if v <= 0 || v & (v - 1) != 0 {
                return Err(NewfsError::Option(format!("{what} size must be a power of 2, not {v}")));
            }
        }
        let (mut b, mut f) = (bsize, fsize);
        if f < SECTOR as i32 {
            adjust(&mut notes, &mut f, SECTOR as i32, "fragment", "sector size");
        }
        if b > MAXBSIZE {
            adjust(&mut notes, &mut b, MAXBSIZE, "block", "maximum");
        }
        if b < MINBSIZE {
            adjust(&mut notes, &mut b, MINBSIZE, "block", "minimum");
        }
        if f > MAXBSIZE {
            adjust(&mut notes, &mut f, MAXBSIZE, "fragment", "maximum");
        }
        if b < f {
            adjust(&mut notes, &mut b, f, "block", "fragment size");
        }
        if f * MAXFRAG < b {
            adjust(&mut notes, &mut f, b / MAXFRAG, "fragment", &format!("block size / {MAXFRAG}"));
        }
        fs.fs_bsize = b;
        fs.fs_fsize = f;
        fs.fs_maxbsize = b;
        fs.fs_maxcontig = maxcontig.max(fs.fs_maxbsize / b);
        fs.fs_contigsumsize = if fs.fs_maxcontig > 1 { fs.fs_maxcontig.min(FS_MAXCONTIG) } else { 0 };
        fs.fs_bmask = !(b - 1);
        fs.fs_fmask = !(f - 1);
        fs.fs_qbmask = (b - 1) as i64;
        fs.fs_qfmask = (f - 1) as i64;
        fs.fs_bshift = log2(b);
        fs.fs_fshift = log2(f);
        fs.fs_frag = b / f;
        fs.fs_fragshift = log2(fs.fs_frag);
        fs.fs_fsbtodb = log2(f / SECTOR as i32);
        fs.fs_size = fssize >> fs.fs_fsbtodb;
        fs.fs_providersize = fs.fs_size;
        fs.fs_magic = FS_UFS2_MAGIC;
        fs.fs_sblockloc = SBLOCK_UFS2 as i64;
        fs.fs_sblockactualloc = SBLOCK_UFS2 as i64;
        fs.fs_nindir = b / 8;
        fs.fs_inopb = (b / UFS2_DINODE_SIZE as i32) as u32;
        fs.fs_maxsymlinklen = UFS2_MAXSYMLINKLEN;
        let (frag, fl, inopb) = (fs.fs_frag as i64, f as i64, fs.fs_inopb as i64);
        fs.fs_sblkno = roundup(howmany(SBLOCK_UFS2 as i64 + SBLOCKSIZE as i64, fl), frag) as i32;
        fs.fs_cblkno = fs.fs_sblkno + roundup(howmany(SBLOCKSIZE as i64, fl), frag) as i32;
        fs.fs_iblkno = fs.fs_cblkno + fs.fs_frag;
        let mut sizepb = b as u64;
        fs.fs_maxfilesize = b as u64 * UFS_NDADDR as u64 - 1;
        for _ in 0..UFS_NIADDR {
            sizepb *= fs.fs_nindir as u64;
            fs.fs_maxfilesize += sizepb;
        }
        if fs.fs_maxfilesize < fs.fs_size as u64 {
            notes.push("WARNING: You will be unable to create snapshots on this file system.".into());
        }

        // The density: at least enough fragments per inode that inode numbers fit 32 bits.
        let maxinum = (1i64 << 32) - inopb;
        let minfragsperinode = 1 + fs.fs_size / maxinum;
        if density == 0 {
            density = (NFPI as i64).max(minfragsperinode) as i32 * fsize;
        } else if (density as i64) < minfragsperinode * fsize as i64 {
            let was = density;
            density = (minfragsperinode * fsize as i64) as i32;
            notes.push(format!("density increased from {was} to {density}"));
        }
        let origdensity = density;
        let inopf = inopb / frag;
        let fpi = loop {
            let fpi = ((density as i64) >> fs.fs_fshift).max(1);
            if fpi < minfragsperinode {
                bsize <<= 1;
                fsize <<= 1;
                notes.push(format!(
                    "Block size too small for a file system of this size. Increasing blocksize to {bsize}"
                ));
                continue 'restart;
            }
            let minfpg = (fpi * inopb).min(fs.fs_size);
            let (mut ipg, mut fpg) = (inopb, 0);
            for _ in 0..2 {
                fpg = roundup(fs.fs_iblkno as i64 + ipg / inopf, frag).max(minfpg);
                ipg = roundup(howmany(fpg, fpi), inopb);
            }
            (fs.fs_ipg, fs.fs_fpg) = (ipg as u32, fpg as i32);
            if cgsize(&fs) < b as i64 {
                break fpi;
            }
            density -= fs.fs_fsize;
        };
        if density != origdensity {
            notes.push(format!("density reduced from {origdensity} to {density}"));
        }
        break fpi;
    };
    let (frag, inopb) = (fs.fs_frag as i64, fs.fs_inopb as i64);
    let inopf = inopb / frag;
    let ipg_for = |fpg: i64| roundup(howmany(fpg, fragsperinode), inopb) as u32;

    // Pack fragments into a group until its map fills a block or there would be fewer than
    // MINCYLGRPS groups.
    let bsize_l = fs.fs_bsize as i64;
    while (fs.fs_fpg as i64) < MAXBLKSPERCG {
        fs.fs_ipg = ipg_for(fs.fs_fpg as i64);
        if fs.fs_size / fs.fs_fpg as i64 >= MINCYLGRPS {
            let c = cgsize(&fs);
            if c < bsize_l {
                fs.fs_fpg += fs.fs_frag;
                continue;
            }
            if c == bsize_l {
                break;
            }
            fs.fs_fpg -= fs.fs_frag;
            fs.fs_ipg = ipg_for(fs.fs_fpg as i64);
        }
        break;
    }

    // A last group too short for its metadata gives its fragments to smaller groups.
    let optimalfpg = fs.fs_fpg;
    loop {
        let fpg = fs.fs_fpg as i64;
        fs.fs_ncg = howmany(fs.fs_size, fpg) as u32;
        let lastminfpg = roundup(fs.fs_iblkno as i64 + fs.fs_ipg as i64 / inopf, frag);
        if fs.fs_size < lastminfpg || fpg <= lastminfpg && fs.fs_size % fpg != 0 {
            return Err(NewfsError::TooSmall { size: fs.fs_size, min: lastminfpg, fsize: fs.fs_fsize });
        }
        if fs.fs_size % fpg >= lastminfpg || fs.fs_size % fpg == 0 {
            break;
        }
        fs.fs_fpg -= fs.fs_frag;
        fs.fs_ipg = ipg_for(fs.fs_fpg as i64);
    }
    if optimalfpg != fs.fs_fpg {
        notes.push(format!(
            "Reduced frags per cylinder group from {optimalfpg} to {} to enlarge last cyl group",
            fs.fs_fpg
        ));
    }
    if fs.fs_ncg as u64 * fs.fs_ipg as u64 > u32::MAX as u64 {
        return Err(NewfsError::Option("too many inodes: raise the bytes per inode (-i)".into()));
    }
    let fl = fs.fs_fsize as i64;
    fs.fs_cgsize = roundup(cgsize(&fs), fl) as i32;
    fs.fs_dblkno = fs.fs_iblkno + (fs.fs_ipg as i64 / inopf) as i32;
    fs.fs_csaddr = fs.fs_dblkno as i64;
    fs.fs_cssize = roundup(fs.fs_ncg as i64 * Csum::SIZE as i64, fl) as i32;
    fs.fs_sbsize = (roundup(FS_STRUCT_SIZE as i64, fl).min(SBLOCKSIZE as i64)).max(SECTOR) as i32;
    fs.fs_minfree = o.minfree;
    // Half of minfree held for metadata (newfs's default metaspace).
    fs.fs_metaspace = (fs.fs_fpg as i64 * o.minfree as i64 / 200) & !(frag - 1);
    fs.fs_maxbpg = o.maxbpg.unwrap_or(fs.fs_bsize / 8);
    fs.fs_optim = optim;
    fs.fs_clean = 1;
    fs.fs_id[0] = o.time as i32;
    let csfrags = howmany(fs.fs_cssize as i64, fl);
    fs.fs_dsize = fs.fs_size - fs.fs_sblkno as i64 - fs.fs_ncg as i64 * (fs.fs_dblkno - fs.fs_sblkno) as i64;
    let fragnum = |v: i64| v & (frag - 1);
    fs.fs_cstotal = CsumTotal {
        cs_nbfree: (fs.fs_dsize >> fs.fs_fragshift) - howmany(csfrags, frag),
        cs_nffree: fragnum(fs.fs_size) + if fragnum(csfrags) > 0 { frag - fragnum(csfrags) } else { 0 },
        cs_nifree: fs.fs_ncg as i64 * fs.fs_ipg as i64 - UFS_ROOTINO as i64,
        ..CsumTotal::default()
    };
    fs.fs_dsize -= csfrags;
    fs.fs_time = o.time;
    fs.fs_flags |= FS_METACKHASH;
    fs.fs_metackhash = CK_CYLGRP | CK_SUPERBLOCK | CK_INODE;

    // Group 0 must hold the root directory and .snap, a whole block each (newfs's `alloc`).
    let ndblk0 = fs.fs_size.min(fs.fs_fpg as i64);
    let dupper0 = roundup(fs.fs_dblkno as i64 + csfrags, frag);
    let need = 1 + i64::from(o.snap_dir);
    if (ndblk0 - dupper0).max(0) / frag < need {
        return Err(NewfsError::NoRoom);
    }
    fs.validate().map_err(|e| NewfsError::Option(format!("newfs chose a layout it cannot use: {e}")))?;
    let tail = vec![0u8; fs.fs_sbsize as usize - FS_STRUCT_SIZE];
    Ok(Newfs { sb: Superblock { fs, tail }, notes })
}

/// The bytes newfs writes for group `c`, from its superblock copy to the end of its first
/// inode blocks: the copy (`fs_sblockactualloc` saying where it is), the group block `g` (none
/// for group 0, whose block newfs writes last) and the `cg_initediblk` inodes initialized, each
/// with a fresh `di_gen`, the rest of the inode table left to be initialized lazily. The gaps
/// between them are zero. Written at `fsb_offset(cgsblock(c))`.
pub(super) fn group_span(sb: &Superblock, c: u32, g: Option<&Cg>, numbers: &mut Numbers) -> Vec<u8> {
    let (fsize, bsize) = (sb.fs_fsize as usize, sb.fs_bsize as usize);
    let inited = sb.fs_ipg.min(2 * sb.fs_inopb);
    let inode_blocks = (inited / sb.fs_inopb) as usize;
    let span = (sb.fs_iblkno - sb.fs_sblkno) as usize * fsize + inode_blocks * bsize;
    let at = |fsb: i64| (sb.fsb_offset(fsb) - sb.fsb_offset(sb.cgsblock(c))) as usize;
    let mut buf = vec![0u8; span];
    let mut copy = sb.clone();
    copy.fs_sblockactualloc = sb.fsb_offset(sb.cgsblock(c)) as i64;
    let enc = copy.encode();
    buf[..enc.len()].copy_from_slice(&enc);
    let ib = at(sb.cgimin(c));
    for i in 0..inited as usize {
        numbers.get().put(&mut buf, ib + i * UFS2_DINODE_SIZE + 80);
    }
    if let Some(g) = g {
        assert_eq!(g.hdr.cg_initediblk, inited, "group {c}: the inodes initialized are newfs's");
        let cb = at(sb.cgtod(c));
        buf[cb..cb + sb.fs_cgsize as usize].copy_from_slice(&g.encode(sb));
    }
    buf
}

/// `initcg`: group `c` as newfs first writes it, every fragment outside its metadata free
/// (group 0's summary area too), inodes 0 and 1 taken in group 0.
pub(crate) fn initcg(fs: &Fs, c: u32, time: i64) -> Cg {
    let frag = fs.fs_frag as u32;
    let cbase = fs.cgbase(c);
    let dmax = (cbase + fs.fs_fpg as i64).min(fs.fs_size);
    let dlower = (fs.cgsblock(c) - cbase) as u32;
    let mut dupper = (fs.cgdmin(c) - cbase) as u32;
    if c == 0 {
        dupper += howmany(fs.fs_cssize as i64, fs.fs_fsize as i64) as u32;
    }
    let mut h = CgHeader::zeroed();
    h.cg_time = time;
    h.cg_magic = CG_MAGIC;
    h.cg_cgx = c;
    h.cg_niblk = fs.fs_ipg;
    h.cg_initediblk = fs.fs_ipg.min(2 * fs.fs_inopb);
    h.cg_ndblk = (dmax - cbase) as u32;
    if fs.fs_contigsumsize > 0 {
        h.cg_nclusterblks = h.cg_ndblk / frag;
    }
    h.cg_iusedoff = CG_STRUCT_SIZE as u32;
    h.cg_freeoff = h.cg_iusedoff + fs.fs_ipg.div_ceil(8);
    h.cg_nextfreeoff = h.cg_freeoff + (fs.fs_fpg as u32).div_ceil(8);
    if fs.fs_contigsumsize > 0 {
        h.cg_clustersumoff = h.cg_nextfreeoff.div_ceil(4) * 4 - 4;
        h.cg_clusteroff = h.cg_clustersumoff + (fs.fs_contigsumsize as u32 + 1) * 4;
        h.cg_nextfreeoff = h.cg_clusteroff + (fs.fs_fpg as u32 / frag).div_ceil(8);
    }
    h.cg_cs.cs_nifree = fs.fs_ipg as i32;
    let mut g = Cg::new(fs, h);
    let clusters = fs.fs_contigsumsize > 0;
    let free_blocks = |g: &mut Cg, from: u32, to: u32| {
        // Whole blocks `from..to` (fragment numbers, block-aligned).
        if to > from {
            g.set_frags_free(from, to - from, true);
            if clusters {
                g.set_clusters_free(from / frag, (to - from) / frag, true);
            }
            g.hdr.cg_cs.cs_nbfree += ((to - from) / frag) as i32;
        }
    };
    if c == 0 {
        for i in 0..UFS_ROOTINO {
            g.set_inode_used(i, true);
            g.hdr.cg_cs.cs_nifree -= 1;
        }
    } else {
        // Before the superblock copy: free (group 0 keeps it for the boot area).
        free_blocks(&mut g, 0, dlower);
    }
    let ndblk = g.hdr.cg_ndblk;
    if !dupper.is_multiple_of(frag) {
        let i = dupper % frag;
        g.hdr.cg_frsum[(frag - i) as usize] += 1;
        g.set_frags_free(dupper, frag - i, true);
        g.hdr.cg_cs.cs_nffree += (frag - i) as i32;
        dupper += frag - i;
    }
    let whole_end = dupper + (ndblk.saturating_sub(dupper)) / frag * frag;
    free_blocks(&mut g, dupper, whole_end);
    if whole_end < ndblk {
        g.hdr.cg_frsum[(ndblk - whole_end) as usize] += 1;
        g.set_frags_free(whole_end, ndblk - whole_end, true);
        g.hdr.cg_cs.cs_nffree += (ndblk - whole_end) as i32;
    }
    if clusters {
        g.set_clustersum_all(&cluster_summary(&g, fs));
    }
    g
}

/// The cluster summary of a group's free-cluster map: runs of free blocks counted by length,
/// the longest as `fs_contigsumsize`.
fn cluster_summary(g: &Cg, fs: &Fs) -> Vec<u32> {
    let max = fs.fs_contigsumsize as usize;
    let mut sum = vec![0u32; max + 1];
    let mut run = 0;
    for b in 0..=g.hdr.cg_nclusterblks {
        if b < g.hdr.cg_nclusterblks && g.cluster_free(b) == Some(true) {
            run += 1;
        } else if run > 0 {
            sum[run.min(max)] += 1;
            run = 0;
        }
    }
    sum
}

/// Where newfs's counts live: group 0's header, its entry in the summary area and the
/// superblock's total, changed together by `alloc` and `iput`.
struct Counts<'a> {
    fs: &'a mut Fs,
    cg0: &'a mut Cg,
    cs0: &'a mut Csum,
}

impl Counts<'_> {
    /// newfs's `alloc(fsize, mode)`: the first wholly free block of group 0, of which the
    /// first fragment is taken and the rest left free; a directory is counted.
    fn alloc_frag(&mut self, dir: bool) -> i64 {
        let frag = self.fs.fs_frag as u32;
        let nblk = self.cg0.hdr.cg_ndblk / frag;
        let blk = (0..nblk).find(|&b| self.cg0.block_free(b));
        // `geometry` checked there is room.
        let blk = blk.expect("group 0 has a whole free block for the root directory");
        let d = blk * frag;
        self.cg0.set_frags_free(d, frag, false);
        if self.fs.fs_contigsumsize > 0 {
            self.cg0.set_clusters_free(blk, 1, false);
        }
        self.cg0.hdr.cg_cs.cs_nbfree -= 1;
        self.cs0.cs_nbfree -= 1;
        self.fs.fs_cstotal.cs_nbfree -= 1;
        if dir {
            self.cg0.hdr.cg_cs.cs_ndir += 1;
            self.cs0.cs_ndir += 1;
            self.fs.fs_cstotal.cs_ndir += 1;
        }
        if frag > 1 {
            let rest = frag - 1;
            self.cg0.set_frags_free(d + 1, rest, true);
            self.cg0.hdr.cg_cs.cs_nffree += rest as i32;
            self.cs0.cs_nffree += rest as i32;
            self.fs.fs_cstotal.cs_nffree += rest as i64;
            self.cg0.hdr.cg_frsum[rest as usize] += 1;
        }
        d as i64
    }

    /// newfs's `iput`: inode `ino` of group 0 taken.
    fn take_inode(&mut self, ino: u32) {
        assert!(!self.cg0.inode_used(ino), "inode {ino} taken twice");
        self.cg0.set_inode_used(ino, true);
        self.cg0.hdr.cg_cs.cs_nifree -= 1;
        self.cs0.cs_nifree -= 1;
        self.fs.fs_cstotal.cs_nifree -= 1;
    }
}

/// newfs's `makedir`: one directory chunk holding `entries`, the last taking the chunk's rest.
fn makedir(entries: &[(u32, &[u8])], fsize: usize) -> Vec<u8> {
    let mut b = vec![0u8; fsize];
    let mut at = 0;
    for (i, (ino, name)) in entries.iter().enumerate() {
        let reclen = if i + 1 == entries.len() { DIRBLKSIZ - at } else { dirent_size(name.len()) };
        dirent_put(&mut b, at, *ino, reclen, DT_DIR, name);
        at += reclen;
    }
    b
}

/// Makes a UFS2 file system on a device of `size` bytes written through `write(offset,
/// bytes)`, as newfs(8) would with options `o`, and answers the layout with the superblock as
/// written.
pub fn newfs(
    size: u64,
    o: &NewfsOptions,
    mut write: impl FnMut(u64, &[u8]) -> io::Result<()>,
) -> Result<Newfs, NewfsError> {
    let mut made = geometry(size, o)?;
    let mut numbers = Numbers::new(o.regression);
    let sb = &mut made.sb;
    sb.fs_id[1] = numbers.get() as i32;
    let fsize = sb.fs_fsize as usize;

    // The last sector must be writable; the boot area and the rest of group 0 before its
    // superblock copy are cleared (an older file system's superblock there must not be found).
    let last = (size / SECTOR as u64 - 1) * SECTOR as u64;
    write(last, &[0u8; SECTOR as usize])?;
    write(0, &vec![0u8; sb.fsb_offset(sb.fs_sblkno as i64) as usize])?;
    let mut unfinished = sb.clone();
    unfinished.fs_magic = FS_BAD_MAGIC;
    write(SBLOCK_UFS2, &unfinished.encode())?;

    // Every group: its superblock copy, header and first inode blocks in one write, from the
    // copy to the end of those inode blocks (the gaps between them zero).
    let ncg = sb.fs_ncg;
    let mut fscs = vec![Csum::default(); ncg as usize];
    let mut group0 = None;
    for c in 0..ncg {
        let g = initcg(sb, c, o.time);
        fscs[c as usize] = g.hdr.cg_cs;
        if c == 0 {
            let buf = group_span(sb, 0, None, &mut numbers);
            group0 = Some((g, buf));
            continue;
        }
        write(sb.fsb_offset(sb.cgsblock(c)), &group_span(sb, c, Some(&g), &mut numbers))?;
    }
    let Some((mut cg0, mut buf0)) = group0 else { unreachable!("a file system has a group 0") };
    let at = |fsb: i64, c: u32, sb: &Fs| (sb.fsb_offset(fsb) - sb.fsb_offset(sb.cgsblock(c))) as usize;

    // fsinit: the root directory and .snap, a fragment each, their inodes in group 0's first
    // inode block.
    let (root_block, snap_block) = {
        let mut counts = Counts { fs: &mut sb.fs, cg0: &mut cg0, cs0: &mut fscs[0] };
        let root = counts.alloc_frag(true);
        counts.take_inode(UFS_ROOTINO);
        let snap = o.snap_dir.then(|| {
            let s = counts.alloc_frag(true);
            counts.take_inode(UFS_ROOTINO + 1);
            s
        });
        (root, snap)
    };
    if sb.fs_contigsumsize > 0 {
        // Recounted from the map: newfs's `alloc` leaves the summary as `initcg` made it,
        // which is stale when group 0's free run was shorter than fs_contigsumsize + 2.
        let sum = cluster_summary(&cg0, sb);
        cg0.set_clustersum_all(&sum);
    }
    let mut node = Dinode::zeroed();
    (node.di_atime, node.di_mtime, node.di_ctime, node.di_birthtime) = (o.time, o.time, o.time, o.time);
    node.di_mode = IFDIR | 0o755;
    node.di_nlink = 2 + i16::from(o.snap_dir);
    node.di_size = DIRBLKSIZ as u64;
    node.di_blocks = sb.fragroundup(DIRBLKSIZ as u64) / DEV_BSIZE as u64;
    node.di_db[0] = root_block;
    let mut inodes = vec![(UFS_ROOTINO, node.clone())];
    let mut root_entries: Vec<(u32, &[u8])> = vec![(UFS_ROOTINO, b"."), (UFS_ROOTINO, b"..")];
    let mut dirs = vec![(root_block, Vec::new())];
    if let Some(snap) = snap_block {
        root_entries.push((UFS_ROOTINO + 1, b".snap"));
        node.di_mode |= 0o020;
        node.di_gid = OPERATOR_GID;
        node.di_nlink = 2;
        node.di_db[0] = snap;
        // di_dirdepth (sharing its place with di_freelink): .snap is one below the root.
        node.di_freelink = 1;
        inodes.push((UFS_ROOTINO + 1, node));
        dirs.push((snap, makedir(&[(UFS_ROOTINO + 1, b"."), (UFS_ROOTINO, b"..")], fsize)));
    }
    dirs[0].1 = makedir(&root_entries, fsize);
    for (ino, d) in &inodes {
        let off = at(sb.ino_to_fsba(*ino), 0, sb) + sb.ino_to_fsbo(*ino) * UFS2_DINODE_SIZE;
        buf0[off..off + UFS2_DINODE_SIZE].copy_from_slice(&d.encode_for(sb));
    }
    for (fsb, data) in &dirs {
        write(sb.fsb_offset(*fsb), data)?;
    }
    let cb = at(sb.cgtod(0), 0, sb);
    buf0[cb..cb + sb.fs_cgsize as usize].copy_from_slice(&cg0.encode(sb));
    write(sb.fsb_offset(sb.cgsblock(0)), &buf0)?;

    // Every count agrees before the superblock says the file system is whole.
    let total = fscs.iter().fold(CsumTotal::default(), |mut t, c| {
        t.cs_ndir += c.cs_ndir as i64;
        t.cs_nbfree += c.cs_nbfree as i64;
        t.cs_nifree += c.cs_nifree as i64;
        t.cs_nffree += c.cs_nffree as i64;
        t
    });
    assert_eq!(total, sb.fs_cstotal, "the groups' counts disagree with fs_cstotal");
    assert_eq!(fscs[0], cg0.hdr.cg_cs, "group 0's counts disagree with its summary entry");

    let mut cs = vec![0u8; sb.fs_cssize as usize];
    for (i, c) in fscs.iter().enumerate() {
        c.put(&mut cs, i * Csum::SIZE);
    }
    write(sb.fsb_offset(sb.fs_csaddr), &cs)?;
    let enc = sb.encode();
    write(SBLOCK_UFS2, &enc)?;
    sb.fs_ckhash = u32::get(&enc, FS_CKHASH_OFF);

    // The recovery record in the boot area's last sector (`struct fsrecovery`).
    let mut rec = vec![0u8; SECTOR as usize];
    let r = rec.len() - FSRECOVERY_SIZE;
    for (i, v) in [sb.fs_magic, sb.fs_fsbtodb, sb.fs_sblkno, sb.fs_fpg, sb.fs_ncg as i32].iter().enumerate() {
        v.put(&mut rec, r + 4 * i);
    }
    write(SBLOCK_UFS2 - SECTOR as u64, &rec)?;
    Ok(made)
}

/// A UFS2 image of `size` bytes in memory, as newfs makes it with 4 KiB blocks of `fsize`-byte
/// fragments (the library's tests of UFS2).
#[cfg(test)]
pub(crate) fn mem_image(size: u64, fsize: usize) -> std::sync::Arc<crate::dev::MemDevice> {
    mem_image_of(size, 4096, fsize)
}

/// `mem_image` with blocks of `bsize` bytes.
#[cfg(test)]
pub(crate) fn mem_image_of(size: u64, bsize: usize, fsize: usize) -> std::sync::Arc<crate::dev::MemDevice> {
    mem_volume(size, size, bsize, fsize)
}

/// A device of `dev_size` bytes in memory (addressed in `fsize`-byte fragments) whose first
/// `size` bytes newfs makes a UFS2 file system of `bsize`-byte blocks; the rest is left alone
/// (the volume snapshot's tests keep their reserved area there).
#[cfg(test)]
pub(crate) fn mem_volume(
    dev_size: u64,
    size: u64,
    bsize: usize,
    fsize: usize,
) -> std::sync::Arc<crate::dev::MemDevice> {
    use crate::dev::{write_bytes, MemDevice, WriteKind};
    let dev = std::sync::Arc::new(MemDevice::new_frags(bsize, fsize, dev_size / fsize as u64));
    let o = NewfsOptions {
        bsize: Some(bsize as i32),
        fsize: Some(fsize as i32),
        time: 1,
        regression: true,
        ..Default::default()
    };
    newfs(size, &o, |off, data| write_bytes(&*dev, off, data, WriteKind::Sync).map_err(io::Error::other))
        .expect("newfs of a test image");
    dev
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(size: u64, o: &NewfsOptions) -> (Vec<u8>, Newfs) {
        let mut img = vec![0u8; size as usize];
        let made = newfs(size, o, |off, b| {
            img[off as usize..off as usize + b.len()].copy_from_slice(b);
            Ok(())
        })
        .expect("newfs");
        (img, made)
    }

    #[test]
    fn defaults_follow_newfs_for_a_4_mib_disk() {
        // The FreeBSD fixture's geometry (4 MiB, newfs's defaults).
        let n = geometry(4 << 20, &NewfsOptions::default()).unwrap();
        let f = &n.sb.fs;
        assert_eq!((f.fs_sblkno, f.fs_cblkno, f.fs_iblkno, f.fs_dblkno), (24, 32, 40, 56));
        assert_eq!((f.fs_ncg, f.fs_fpg, f.fs_ipg, f.fs_cgsize, f.fs_cssize), (4, 264, 256, 4096, 4096));
        assert_eq!((f.fs_maxcontig, f.fs_contigsumsize, f.fs_maxbpg, f.fs_metaspace), (32, 16, 4096, 8));
        assert_eq!((f.fs_dsize, f.fs_maxfilesize), (871, 2_252_349_704_110_079));
        assert_eq!(f.fs_flags, FS_DOSOFTDEP | FS_METACKHASH);
    }

    #[test]
    fn the_image_decodes_with_its_counts() {
        let o = NewfsOptions { regression: true, time: 1_000_000_000, ..NewfsOptions::default() };
        let (img, made) = image(4 << 20, &o);
        let (loc, sb) = Superblock::search(|off, b| {
            b.copy_from_slice(&img[off as usize..off as usize + b.len()]);
            Ok(())
        })
        .unwrap();
        assert_eq!(loc, SBLOCK_UFS2);
        assert_eq!(sb, made.sb);
        assert_eq!((sb.fs_cstotal.cs_ndir, sb.fs_cstotal.cs_nifree), (2, 4 * 256 - 4));
        assert_eq!(sb.fs_id[1], 1, "-R counts from 1");
        for c in 0..sb.fs_ncg {
            let off = sb.fsb_offset(sb.cgtod(c)) as usize;
            let g = Cg::decode(&img[off..], &sb, c, true).unwrap();
            let m = g.map_counts();
            let cs = g.hdr.cg_cs;
            assert_eq!((m.nbfree, m.nffree, m.nifree), (cs.cs_nbfree as u32, cs.cs_nffree as u32, cs.cs_nifree as u32));
            assert_eq!(m.frsum, g.hdr.cg_frsum);
            assert_eq!(m.clustersum[1..], g.clustersum()[1..], "group {c}'s cluster summary");
        }
        let root = Dinode::decode_checked(&img[sb.ino_offset(2) as usize..], &sb, 2).unwrap();
        assert_eq!(
            (root.di_mode, root.di_nlink, root.di_size, root.di_birthtime),
            (IFDIR | 0o755, 3, 512, 1_000_000_000)
        );
        let snap = Dinode::decode_checked(&img[sb.ino_offset(3) as usize..], &sb, 3).unwrap();
        assert_eq!((snap.di_mode, snap.di_gid, snap.di_freelink), (IFDIR | 0o775, OPERATOR_GID, 1));
        let data = &img[sb.fsb_offset(root.di_db[0]) as usize..][..512];
        let names: Vec<_> = DirIter::new(data, 0, 512, sb.maxino()).map(|e| e.unwrap().name.to_vec()).collect();
        assert_eq!(names, [&b"."[..], b"..", b".snap"]);
        // The recovery record before the superblock.
        assert_eq!(i32::get(&img, 65536 - 20), FS_UFS2_MAGIC);
        assert_eq!(i32::get(&img, 65536 - 8), 264);
    }

    #[test]
    fn too_small_is_refused_not_made() {
        assert!(matches!(geometry(100_000, &NewfsOptions::default()), Err(NewfsError::TooSmall { .. })));
        assert!(matches!(geometry(0, &NewfsOptions::default()), Err(NewfsError::Option(_))));
        let bad_label = NewfsOptions { label: Some("a b".into()), ..NewfsOptions::default() };
        assert!(matches!(geometry(1 << 30, &bad_label), Err(NewfsError::Option(_))));
    }
}
