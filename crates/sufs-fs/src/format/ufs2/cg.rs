//! The UFS2 cylinder group block, FreeBSD's `struct cg` (sys/ufs/ffs/fs.h) and the maps after
//! it: the used-inode map, the free-fragment map, the cluster summary and the free-cluster map.
//! Checked on decode as `ffs_getcg` and fsck_ffs's `check_cgmagic` check it, and with its
//! check hash (CRC32C over `fs_cgsize` bytes, `cg_ckhash` taken as zero).

use super::*;

le_struct! {
    /// FreeBSD's `struct cg`: the fixed 168 bytes of a cylinder group block. The `cg_*off`
    /// fields are byte offsets of the maps from the start of the block.
    pub struct CgHeader (CG_STRUCT_SIZE) {
        cg_firstfield: i32 = 0,
        cg_magic: i32 = 4,
        cg_old_time: i32 = 8,
        /// This group's index.
        cg_cgx: u32 = 12,
        cg_old_ncyl: i16 = 16,
        cg_old_niblk: i16 = 18,
        /// Fragments in this group (the last group may be short).
        cg_ndblk: u32 = 20,
        /// The group's counts.
        cg_cs: Csum = 24,
        cg_rotor: u32 = 40,
        cg_frotor: u32 = 44,
        cg_irotor: u32 = 48,
        /// `cg_frsum[n]`: runs of exactly `n` free fragments inside partly used blocks.
        cg_frsum: [u32; MAXFRAG as usize] = 52,
        cg_old_btotoff: i32 = 84,
        cg_old_boff: i32 = 88,
        /// Used-inode map: a bit per inode, set when in use.
        cg_iusedoff: u32 = 92,
        /// Free-fragment map: a bit per fragment, set when free.
        cg_freeoff: u32 = 96,
        cg_nextfreeoff: u32 = 100,
        /// Cluster summary: `fs_contigsumsize + 1` u32s, entry `n` counting free runs of `n`
        /// blocks (the last: of at least that many); entry 0 unused.
        cg_clustersumoff: u32 = 104,
        /// Free-cluster map: a bit per block, set when the whole block is free.
        cg_clusteroff: u32 = 108,
        cg_nclusterblks: u32 = 112,
        /// Inodes in this group (`fs_ipg`).
        cg_niblk: u32 = 116,
        /// Inodes whose blocks newfs or the kernel has initialized.
        cg_initediblk: u32 = 120,
        cg_unrefs: u32 = 124,
        cg_sparecon32: [i32; 1] = 128,
        /// The group's check hash, if `fs_metackhash` has `CK_CYLGRP`.
        cg_ckhash: u32 = 132,
        cg_time: i64 = 136,
        cg_sparecon64: [i64; 3] = 144,
    }
}

const CG_CKHASH_OFF: usize = 132;

/// A decoded cylinder group: the header and the whole `fs_cgsize`-byte block it came from, in
/// which the maps are read and changed in place. Bytes no map covers are kept as read. The bytes
/// are the group's own (`Vec<u8>`, from `decode`: fsck, growfs, newfs) or the cache's block
/// itself (`in_place` over `&mut [u8]`, `view` over `&[u8]`: the mount's allocator, which so
/// copies no group to change a bit of it); `hdr` goes back into them with `put_header`
/// (or `encode`).
#[derive(Clone)]
pub struct Cg<B = Vec<u8>> {
    pub hdr: CgHeader,
    buf: B,
    ipg: u32,
    fpg: u32,
    frag: u32,
    contigsumsize: u32,
}

impl<B: AsRef<[u8]>> std::fmt::Debug for Cg<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cg").field("hdr", &self.hdr).field("cgsize", &self.buf.as_ref().len()).finish_non_exhaustive()
    }
}

/// Counts recomputed from a group's maps, as fsck_ffs's pass 5 rebuilds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgMapCounts {
    /// Whole free blocks.
    pub nbfree: u32,
    /// Free fragments in blocks that are not wholly free.
    pub nffree: u32,
    /// Inodes whose bit is clear.
    pub nifree: u32,
    /// `cg_frsum` recomputed.
    pub frsum: [u32; MAXFRAG as usize],
    /// The cluster summary recomputed from the free-block runs (index 0 unused); empty
    /// without cluster maps.
    pub clustersum: Vec<u32>,
}

fn bit(map: &[u8], i: usize) -> bool {
    map[i / 8] & (1 << (i % 8)) != 0
}

fn set_bit(map: &mut [u8], i: usize, on: bool) {
    if on {
        map[i / 8] |= 1 << (i % 8);
    } else {
        map[i / 8] &= !(1 << (i % 8));
    }
}

/// Sets (`on`) or clears bits `first..first + n` of `map`, whole bytes at once.
fn set_bits(map: &mut [u8], first: usize, n: usize, on: bool) {
    let (mut i, end) = (first, first + n);
    while i < end && !i.is_multiple_of(8) {
        set_bit(map, i, on);
        i += 1;
    }
    let whole = (end - i) / 8;
    map[i / 8..i / 8 + whole].fill(if on { 0xff } else { 0 });
    i += whole * 8;
    while i < end {
        set_bit(map, i, on);
        i += 1;
    }
}

impl Cg {
    /// A new group block of `fs` (as newfs's `initcg` starts one): `hdr`, whose map offsets
    /// the caller has laid out, over maps all zero (every inode free, every fragment in use).
    /// The maps must lie inside the `fs_cgsize` bytes, in order, without overlap.
    pub fn new(fs: &Fs, hdr: CgHeader) -> Cg {
        let cgsize = fs.fs_cgsize as usize;
        let (ipg, fpg, frag, contigsumsize) =
            (fs.fs_ipg, fs.fs_fpg as u32, fs.fs_frag as u32, fs.fs_contigsumsize as u32);
        let mut end = hdr.cg_freeoff as usize + fpg.div_ceil(8) as usize;
        assert!(
            hdr.cg_iusedoff as usize >= CG_STRUCT_SIZE
                && hdr.cg_iusedoff as usize + ipg.div_ceil(8) as usize <= hdr.cg_freeoff as usize,
            "group {}: used-inode map at {} overlaps the header or the free map at {}",
            hdr.cg_cgx,
            hdr.cg_iusedoff,
            hdr.cg_freeoff
        );
        if contigsumsize > 0 {
            assert!(
                hdr.cg_clustersumoff as usize + 4 >= end
                    && hdr.cg_clustersumoff.is_multiple_of(4)
                    && hdr.cg_clusteroff as usize >= hdr.cg_clustersumoff as usize + 4 * (contigsumsize as usize + 1),
                "group {}: cluster summary at {} or map at {} misplaced",
                hdr.cg_cgx,
                hdr.cg_clustersumoff,
                hdr.cg_clusteroff
            );
            end = hdr.cg_clusteroff as usize + (fpg / frag).div_ceil(8) as usize;
        }
        assert!(end <= cgsize, "group {}: maps end at {end}, past fs_cgsize {cgsize}", hdr.cg_cgx);
        Cg { hdr, buf: vec![0; cgsize], ipg, fpg, frag, contigsumsize }
    }

    /// Decodes group `cgx`'s block (`buf`, at least `fs_cgsize` bytes), checking its magic,
    /// index, counts and map offsets against the superblock, and its check hash if the file
    /// system keeps them and `check_hash` is set.
    pub fn decode(buf: &[u8], fs: &Fs, cgx: u32, check_hash: bool) -> Result<Cg, Ufs2Error> {
        Ok(check(buf, fs, cgx, check_hash)?.over(buf[..fs.fs_cgsize as usize].to_vec()))
    }

    /// `cg_ndblk` as group block `buf` says it, before anything is checked (fsck's look at an
    /// interrupted growfs's header); `None` if `buf` is shorter than a header.
    pub fn peek_ndblk(buf: &[u8]) -> Option<u32> {
        (buf.len() >= CG_STRUCT_SIZE).then(|| CgHeader::read_fields(buf).cg_ndblk)
    }

    /// The `fs_cgsize` bytes of the group, header written and check hash updated if the file
    /// system keeps them.
    pub fn encode(&self, fs: &Fs) -> Vec<u8> {
        assert_eq!(self.buf.len(), fs.fs_cgsize as usize, "a group of another file system");
        let mut b = self.buf.clone();
        self.hdr.write_fields(&mut b);
        if fs.has_ckhash(CK_CYLGRP) {
            ffs_ckhash(&b, CG_CKHASH_OFF).put(&mut b, CG_CKHASH_OFF);
        }
        b
    }

    /// Encodes the group into `buf` (its block, at least `fs_cgsize` bytes) in place, without
    /// its check hash: for a block that the write path reseals on its way to the disk (`reseal`),
    /// as the allocator's group changes are; no copy of the group is made.
    pub fn encode_into(&self, buf: &mut [u8], fs: &Fs) {
        assert_eq!(self.buf.len(), fs.fs_cgsize as usize, "a group of another file system");
        let b = &mut buf[..self.buf.len()];
        b.copy_from_slice(&self.buf);
        self.hdr.write_fields(b);
    }

    /// Reseals the check hash of the group block `buf` (at least `fs_cgsize` bytes) in place,
    /// if the file system keeps them: what goes to the disk after the block was changed.
    pub fn reseal(buf: &mut [u8], fs: &Fs) {
        if let Some(seal) = Cg::sealer(fs) {
            seal(buf);
        }
    }

    /// `reseal` as a function of the block alone, to run later (where the write is put
    /// together, outside the file system's lock); None when the file system keeps no check
    /// hash of its groups.
    pub fn sealer(fs: &Fs) -> Option<impl Fn(&mut [u8]) + Send + Sync + 'static> {
        let len = fs.fs_cgsize as usize;
        fs.has_ckhash(CK_CYLGRP).then_some(move |buf: &mut [u8]| {
            assert!(buf.len() >= len, "a group block of {} bytes, short of its {len}", buf.len());
            let b = &mut buf[..len];
            ffs_ckhash(b, CG_CKHASH_OFF).put(b, CG_CKHASH_OFF);
        })
    }

    /// Where the inode map lies in the group block whose header is `hdr` (its first
    /// `CG_STRUCT_SIZE` bytes, or more): the bytes `roll_back_inode_map` changes.
    pub fn inode_map_range(hdr: &[u8], fs: &Fs) -> std::ops::Range<usize> {
        let off = CgHeader::read_fields(hdr).cg_iusedoff as usize;
        assert!(off >= CG_STRUCT_SIZE, "an inode map at {off}, inside the group's header");
        off..off + fs.fs_ipg.div_ceil(8) as usize
    }

    /// The bytes of a group block that hold its header (`roll_back_inode_map`'s `hdr`).
    pub const HEADER: std::ops::Range<usize> = 0..CG_STRUCT_SIZE;

    /// Soft updates' roll-back of a group block's copy whose initialized inode blocks are not
    /// all on disk (`roll_back_inits`), in place on the block `buf` (at least `fs_cgsize` bytes)
    /// without decoding the group: `cg_initediblk` goes back to `from` and every inode from
    /// there to the group's end goes out free, in `cg_inosused` (a byte at a time where it is
    /// zero: a fsync-heavy load writes a group's block on every allocation) and in `cg_cs`
    /// (`is_dir` says which of them count in `cs_ndir`); an `cg_irotor` past `from` goes back
    /// to 0. The number of inodes freed. The check hash is left to the caller's reseal.
    pub fn roll_back_inodes(buf: &mut [u8], fs: &Fs, cgx: u32, from: u32, is_dir: impl Fn(u32) -> bool) -> u32 {
        let at = Cg::inode_map_range(buf, fs);
        let (hdr, rest) = buf.split_at_mut(CG_STRUCT_SIZE);
        let map = &mut rest[at.start - CG_STRUCT_SIZE..at.end - CG_STRUCT_SIZE];
        Cg::roll_back_inode_map(hdr, map, fs, cgx, from, is_dir)
    }

    /// `roll_back_inodes` over the two parts of the block it changes: the header's bytes `hdr`
    /// (`HEADER`) and the inode map's `map` (`inode_map_range`), so that a write may carry them
    /// as patches of the block rather than a copy of it.
    pub fn roll_back_inode_map(
        hdr_bytes: &mut [u8],
        map: &mut [u8],
        fs: &Fs,
        cgx: u32,
        from: u32,
        is_dir: impl Fn(u32) -> bool,
    ) -> u32 {
        let mut hdr = CgHeader::read_fields(hdr_bytes);
        assert!(hdr.cg_magic == CG_MAGIC && hdr.cg_cgx == cgx, "group {cgx}: its block's header is not its own");
        assert!(hdr.cg_initediblk > from, "group {cgx}: an initialized block pending past the count");
        let ipg = fs.fs_ipg;
        assert!(from <= ipg, "group {cgx}: inode {from} past a group of {ipg}");
        assert_eq!(map.len(), ipg.div_ceil(8) as usize, "group {cgx}: an inode map of another size");
        let (mut freed, mut dirs) = (0u32, 0i32);
        let mut i = from as usize;
        while i < ipg as usize {
            let at = i / 8;
            // The map past `from` is mostly clear: eight clear bytes are passed at once.
            if i.is_multiple_of(8) && map.get(at..at + 8).is_some_and(|w| w.iter().all(|&b| b == 0)) {
                i += 64;
                continue;
            }
            if map[at] == 0 {
                i = (at + 1) * 8;
                continue;
            }
            if bit(map, i) {
                set_bit(map, i, false);
                freed += 1;
                dirs += is_dir(i as u32) as i32;
            }
            i += 1;
        }
        hdr.cg_initediblk = from;
        hdr.cg_cs.cs_nifree += freed as i32;
        hdr.cg_cs.cs_ndir = (hdr.cg_cs.cs_ndir - dirs).max(0);
        if hdr.cg_irotor >= from {
            hdr.cg_irotor = 0;
        }
        hdr.write_fields(hdr_bytes);
        freed
    }
}

impl<'b> Cg<&'b mut [u8]> {
    /// Group `cgx` over its block `buf` itself (at least `fs_cgsize` bytes), checked as
    /// `decode` checks it (not its check hash, which the cache's block, changed since it was
    /// read, need not match): its maps change in `buf`, its header when `put_header` writes it.
    pub fn in_place(buf: &'b mut [u8], fs: &Fs, cgx: u32) -> Result<Self, Ufs2Error> {
        let shape = check(buf, fs, cgx, false)?;
        Ok(shape.over(&mut buf[..fs.fs_cgsize as usize]))
    }

    /// The block's bytes as they are now (a debug check that a refusal changed none).
    pub fn clone_bytes(&self) -> Vec<u8> {
        self.buf.to_vec()
    }

    /// Writes `hdr` into the block (its check hash left to the write path's `reseal`).
    pub fn put_header(&mut self) {
        self.hdr.write_fields(self.buf);
    }
}

impl<'b> Cg<&'b [u8]> {
    /// Group `cgx` over its block `buf` itself, read only, checked as `in_place`.
    pub fn view(buf: &'b [u8], fs: &Fs, cgx: u32) -> Result<Self, Ufs2Error> {
        Ok(check(buf, fs, cgx, false)?.over(&buf[..fs.fs_cgsize as usize]))
    }
}

impl Cg<()> {
    /// This shape over the bytes `buf`.
    fn over<B>(self, buf: B) -> Cg<B> {
        let Cg { hdr, buf: (), ipg, fpg, frag, contigsumsize } = self;
        Cg { hdr, buf, ipg, fpg, frag, contigsumsize }
    }
}

/// `Cg::decode`'s checks of group `cgx`'s block `buf`: its header, and the group's shape
/// (over no bytes yet) for the caller to put them in.
fn check(buf: &[u8], fs: &Fs, cgx: u32, check_hash: bool) -> Result<Cg<()>, Ufs2Error> {
    let cgsize = fs.fs_cgsize as usize;
    let bad = |what: String| Err(Ufs2Error::Cg { cg: cgx, what });
    if buf.len() < cgsize {
        return Err(Ufs2Error::Short { what: "cylinder group", need: cgsize, got: buf.len() });
    }
    let buf = &buf[..cgsize];
    let hdr = CgHeader::read_fields(buf);
    if hdr.cg_magic != CG_MAGIC {
        return bad(format!("bad magic {:#x}", hdr.cg_magic));
    }
    if hdr.cg_cgx != cgx {
        return bad(format!("says it is group {}", hdr.cg_cgx));
    }
    if check_hash && fs.has_ckhash(CK_CYLGRP) {
        let computed = ffs_ckhash(buf, CG_CKHASH_OFF);
        if computed != hdr.cg_ckhash {
            return Err(Ufs2Error::CheckHash {
                what: format!("cylinder group {cgx}"),
                stored: hdr.cg_ckhash,
                computed,
            });
        }
    }
    let (ipg, fpg, frag) = (fs.fs_ipg, fs.fs_fpg as u32, fs.fs_frag as u32);
    let ndblk = (fs.fs_size - fs.cgbase(cgx)).min(fpg as i64);
    if hdr.cg_ndblk as i64 != ndblk {
        return bad(format!("cg_ndblk {} (expected {ndblk})", hdr.cg_ndblk));
    }
    if hdr.cg_niblk != ipg || hdr.cg_initediblk > ipg {
        return bad(format!("cg_niblk {}, cg_initediblk {} (fs_ipg {ipg})", hdr.cg_niblk, hdr.cg_initediblk));
    }
    let cs = hdr.cg_cs;
    if cs.cs_ndir < 0
        || cs.cs_nifree < 0
        || cs.cs_nbfree < 0
        || cs.cs_nffree < 0
        || cs.cs_ndir as u32 > ipg
        || cs.cs_nifree as u32 > ipg
        || cs.cs_nbfree as u32 > fpg / frag
        || cs.cs_nffree as u32 > fpg
    {
        return bad(format!("counts out of range: {cs:?}"));
    }
    let fits = |off: u32, len: u32| off as usize >= CG_STRUCT_SIZE && off as usize + len as usize <= cgsize;
    if !fits(hdr.cg_iusedoff, ipg.div_ceil(8)) {
        return bad(format!("used-inode map at {} does not fit", hdr.cg_iusedoff));
    }
    if !fits(hdr.cg_freeoff, fpg.div_ceil(8)) {
        return bad(format!("free-fragment map at {} does not fit", hdr.cg_freeoff));
    }
    let contigsumsize = fs.fs_contigsumsize as u32;
    if contigsumsize > 0 {
        if !hdr.cg_clustersumoff.is_multiple_of(4) || !fits(hdr.cg_clustersumoff, (contigsumsize + 1) * 4) {
            return bad(format!("cluster summary at {} does not fit", hdr.cg_clustersumoff));
        }
        if !fits(hdr.cg_clusteroff, (fpg / frag).div_ceil(8)) {
            return bad(format!("cluster map at {} does not fit", hdr.cg_clusteroff));
        }
    }
    Ok(Cg { hdr, buf: (), ipg, fpg, frag, contigsumsize })
}

impl<B: AsRef<[u8]>> Cg<B> {
    fn map(&self, off: u32, bits: u32) -> &[u8] {
        &self.buf.as_ref()[off as usize..off as usize + bits.div_ceil(8) as usize]
    }

    /// The used-inode map's bytes (`cg_inosused`, `fs_ipg` bits, inode `i` at bit `i % 8` of
    /// byte `i / 8`), for a reader that compares it a word at a time.
    pub fn inode_map(&self) -> &[u8] {
        self.map(self.hdr.cg_iusedoff, self.ipg)
    }

    /// The free-fragment map's bytes (`cg_blksfree`, `fs_fpg` bits), as `inode_map`.
    pub fn free_map(&self) -> &[u8] {
        self.map(self.hdr.cg_freeoff, self.fpg)
    }

    /// The free-cluster map's bytes (`cg_clustersfree`, a bit per block), as `inode_map`;
    /// `None` without cluster maps.
    pub fn cluster_map(&self) -> Option<&[u8]> {
        (self.contigsumsize > 0).then(|| self.map(self.hdr.cg_clusteroff, self.fpg / self.frag))
    }

    /// `cg_inosused`: whether inode `i` of the group (0-based in the group) is in use.
    pub fn inode_used(&self, i: u32) -> bool {
        assert!(i < self.ipg, "inode {i} of a group of {}", self.ipg);
        bit(self.map(self.hdr.cg_iusedoff, self.ipg), i as usize)
    }

    /// `cg_blksfree`: whether fragment `f` of the group is free.
    pub fn frag_free(&self, f: u32) -> bool {
        assert!(f < self.fpg, "fragment {f} of a group of {}", self.fpg);
        bit(self.map(self.hdr.cg_freeoff, self.fpg), f as usize)
    }

    /// `ffs_isblock`: whether every fragment of block `b` of the group is free.
    pub fn block_free(&self, b: u32) -> bool {
        (b * self.frag..(b + 1) * self.frag).all(|f| f < self.fpg && self.frag_free(f))
    }

    /// `cg_clustersfree`: the free-cluster map's bit for block `b` (`None` without cluster
    /// maps).
    pub fn cluster_free(&self, b: u32) -> Option<bool> {
        let nblk = self.fpg / self.frag;
        assert!(b < nblk, "block {b} of a group of {nblk}");
        (self.contigsumsize > 0).then(|| bit(self.map(self.hdr.cg_clusteroff, nblk), b as usize))
    }

    /// `cg_clustersum`: entries `0..=fs_contigsumsize` (empty without cluster maps).
    pub fn clustersum(&self) -> Vec<u32> {
        let off = self.hdr.cg_clustersumoff as usize;
        (0..self.contigsumsize as usize + usize::from(self.contigsumsize > 0))
            .map(|i| u32::get(self.buf.as_ref(), off + 4 * i))
            .collect()
    }

    /// The counts, fragment summary and cluster summary recomputed from the maps, as fsck_ffs
    /// pass 5 rebuilds them (`ffs_fragacct` for the fragment runs).
    pub fn map_counts(&self) -> CgMapCounts {
        let mut c = CgMapCounts {
            nifree: (0..self.ipg).filter(|&i| !self.inode_used(i)).count() as u32,
            ..CgMapCounts::default()
        };
        let nblk = self.hdr.cg_ndblk.div_ceil(self.frag);
        for b in 0..nblk {
            if self.block_free(b) {
                c.nbfree += 1;
                continue;
            }
            let mut run = 0;
            for f in b * self.frag..(b + 1) * self.frag {
                if f < self.fpg && self.frag_free(f) {
                    c.nffree += 1;
                    run += 1;
                } else if run > 0 {
                    c.frsum[run] += 1;
                    run = 0;
                }
            }
            if run > 0 {
                c.frsum[run] += 1;
            }
        }
        if self.contigsumsize > 0 {
            let max = self.contigsumsize as usize;
            c.clustersum = vec![0; max + 1];
            let mut run = 0;
            for b in 0..=nblk {
                if b < nblk && self.cluster_free(b) == Some(true) {
                    run += 1;
                } else if run > 0 {
                    c.clustersum[run.min(max)] += 1;
                    run = 0;
                }
            }
        }
        c
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Cg<B> {
    fn map_mut(&mut self, off: u32, bits: u32) -> &mut [u8] {
        &mut self.buf.as_mut()[off as usize..off as usize + bits.div_ceil(8) as usize]
    }

    pub fn set_inode_used(&mut self, i: u32, used: bool) {
        assert!(i < self.ipg, "inode {i} of a group of {}", self.ipg);
        let (off, n) = (self.hdr.cg_iusedoff, self.ipg);
        set_bit(self.map_mut(off, n), i as usize, used);
    }

    pub fn set_frag_free(&mut self, f: u32, free: bool) {
        assert!(f < self.fpg, "fragment {f} of a group of {}", self.fpg);
        let (off, n) = (self.hdr.cg_freeoff, self.fpg);
        set_bit(self.map_mut(off, n), f as usize, free);
    }

    /// Marks fragments `first..first + n` of the group free (or in use), as `ffs_setblock` and
    /// newfs's loops do a run at a time.
    pub fn set_frags_free(&mut self, first: u32, n: u32, free: bool) {
        assert!(first + n <= self.fpg, "fragments {first}+{n} of a group of {}", self.fpg);
        let (off, bits) = (self.hdr.cg_freeoff, self.fpg);
        set_bits(self.map_mut(off, bits), first as usize, n as usize, free);
    }

    /// Sets the free-cluster map's bits of blocks `first..first + n` (`setbit(cg_clustersfree)`);
    /// the group must keep cluster maps.
    pub fn set_clusters_free(&mut self, first: u32, n: u32, free: bool) {
        let nblk = self.fpg / self.frag;
        assert!(self.contigsumsize > 0, "a group without cluster maps");
        assert!(first + n <= nblk, "blocks {first}+{n} of a group of {nblk}");
        let off = self.hdr.cg_clusteroff;
        set_bits(self.map_mut(off, nblk), first as usize, n as usize, free);
    }

    /// Writes the cluster summary's entries `1..=fs_contigsumsize` from `sum` (indexed as the
    /// summary, `sum[0]` ignored). Entry 0 is never written: newfs places the summary at the
    /// last whole word of the free map (`roundup(cg_nextfreeoff, 4) - 4`), so that entry shares
    /// its bytes with the map.
    pub fn set_clustersum_all(&mut self, sum: &[u32]) {
        assert_eq!(sum.len(), self.contigsumsize as usize + 1, "a cluster summary of {} entries", sum.len());
        for (len, &v) in sum.iter().enumerate().skip(1) {
            self.set_clustersum(len, v);
        }
    }

    /// Sets block `b`'s free-cluster bit (`ffs_clusteracct`'s `setbit`/`clrbit`). The group
    /// must have cluster maps (`fs_contigsumsize > 0`).
    pub fn set_cluster_free(&mut self, b: u32, free: bool) {
        let nblk = self.fpg / self.frag;
        assert!(b < nblk, "block {b} of a group of {nblk}");
        assert!(self.contigsumsize > 0, "a group without cluster maps");
        let off = self.hdr.cg_clusteroff;
        set_bit(self.map_mut(off, nblk), b as usize, free);
    }

    /// Sets `cg_clustersum[len]`, `len` in `1..=fs_contigsumsize` (with cluster maps only).
    /// Entry 0 is never written: newfs places the summary 4 bytes before the end of the map
    /// before it (`cg_clustersumoff` rounded up, less 4), so entry 0 is that map's last bytes.
    /// The other counts of the header (`cg_cs`, `cg_frsum`, the rotors, `cg_initediblk`) are
    /// fields of `hdr`, set there.
    pub fn set_clustersum(&mut self, len: usize, count: u32) {
        assert!(
            self.contigsumsize > 0 && (1..=self.contigsumsize as usize).contains(&len),
            "cluster summary entry {len} of {}",
            self.contigsumsize
        );
        count.put(self.buf.as_mut(), self.hdr.cg_clustersumoff as usize + 4 * len);
    }

    /// Resizes the group to `ndblk` fragments (growfs extends the old last group; fsck cuts an
    /// interrupted growfs's back): growing frees the fragments from the old end to the new one,
    /// shrinking clears every bit past the new end (bits past a group's end are zero), and the
    /// cluster map and counts are then recomputed from the free map (`recount`).
    pub fn resize(&mut self, ndblk: u32) {
        assert!(ndblk > 0 && ndblk <= self.fpg, "group {}: {ndblk} fragments of at most {}", self.hdr.cg_cgx, self.fpg);
        let old = self.hdr.cg_ndblk;
        if ndblk > old {
            self.set_frags_free(old, ndblk - old, true);
        } else {
            self.set_frags_free(ndblk, self.fpg - ndblk, false);
        }
        self.hdr.cg_ndblk = ndblk;
        if self.contigsumsize > 0 {
            self.hdr.cg_nclusterblks = ndblk / self.frag;
        }
        self.recount();
    }

    /// Makes the cluster map (a bit per wholly free block inside the group), the free counts
    /// of `cg_cs`, `cg_frsum` and the cluster summary agree with the free-fragment map, as
    /// growfs leaves a group whose map it changed. `cs_ndir` and `cs_nifree` are not touched.
    pub fn recount(&mut self) {
        if self.contigsumsize > 0 {
            let whole = self.hdr.cg_ndblk / self.frag;
            for b in 0..self.fpg / self.frag {
                let free = b < whole && self.block_free(b);
                self.set_cluster_free(b, free);
            }
        }
        let m = self.map_counts();
        self.hdr.cg_cs.cs_nbfree = m.nbfree as i32;
        self.hdr.cg_cs.cs_nffree = m.nffree as i32;
        self.hdr.cg_frsum = m.frsum;
        if self.contigsumsize > 0 {
            self.set_clustersum_all(&m.clustersum);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::superblock::tests::sample;
    use super::*;

    /// A group block laid out as newfs lays it out for `sample()`: maps after the header,
    /// every map clear (the caller frees what it wants free).
    pub(crate) fn sample_cg(fs: &Fs, cgx: u32) -> Vec<u8> {
        let mut b = vec![0u8; fs.fs_cgsize as usize];
        let iusedoff = CG_STRUCT_SIZE as u32;
        let freeoff = iusedoff + fs.fs_ipg / 8;
        let clustersumoff = (freeoff + (fs.fs_fpg as u32).div_ceil(8)).div_ceil(4) * 4 - 4;
        let clusteroff = clustersumoff + 4 * (fs.fs_contigsumsize as u32 + 1);
        for (o, v) in [
            (4, CG_MAGIC as u32),
            (12, cgx),
            (20, fs.fs_fpg as u32),
            (92, iusedoff),
            (96, freeoff),
            (104, clustersumoff),
            (108, clusteroff),
            (116, fs.fs_ipg),
        ] {
            v.put(&mut b, o);
        }
        b
    }

    #[test]
    fn cg_fields_tile_struct_cg() {
        crate::format::ufs2::assert_tiles("struct cg", CgHeader::FIELDS, CG_STRUCT_SIZE);
    }

    #[test]
    fn cg_round_trips_and_recounts_its_maps() {
        let sb = sample();
        let raw = sample_cg(&sb, 1);
        let mut cg = Cg::decode(&raw, &sb, 1, false).unwrap();
        // Free fragments 56..264 (26 blocks) but fragment 58; inodes 0..10 used.
        for f in 56..264 {
            cg.set_frag_free(f, f != 58);
        }
        for b in 7..33 {
            // The cluster map mirrors the whole free blocks.
            cg.set_cluster_free(b, b != 7);
        }
        for i in 0..10 {
            cg.set_inode_used(i, true);
        }
        let c = cg.map_counts();
        assert_eq!((c.nbfree, c.nffree, c.nifree), (25, 7, 246));
        assert_eq!(c.frsum, [0, 0, 1, 0, 0, 1, 0, 0], "runs of 2 (56-57) and 5 (59-63)");
        assert_eq!(c.clustersum[16], 1, "one run of 25 free blocks, counted as 16 or more");
        cg.hdr.cg_cs = Csum { cs_ndir: 1, cs_nbfree: 25, cs_nifree: 246, cs_nffree: 7 };
        cg.hdr.cg_frsum = c.frsum;
        cg.set_clustersum(16, 1);
        assert!(cg.frag_free(263), "entry 0 of the summary, the free map's last bytes, is not written");
        let b = cg.encode(&sb);
        let again = Cg::decode(&b, &sb, 1, true).unwrap();
        assert_eq!(again.hdr.cg_ckhash, ffs_ckhash(&b, CG_CKHASH_OFF));
        cg.hdr.cg_ckhash = again.hdr.cg_ckhash;
        assert_eq!(again.hdr, cg.hdr);
        assert_eq!(again.map_counts(), c);
        assert_eq!(again.encode(&sb), b);
        // In place, unsealed, then resealed as the write path does: the same bytes.
        let mut in_place = vec![0xa5; b.len() + 7];
        cg.encode_into(&mut in_place, &sb);
        assert_eq!(in_place[b.len()..], [0xa5; 7], "bytes past fs_cgsize written");
        Cg::reseal(&mut in_place, &sb);
        assert_eq!(in_place[..b.len()], b[..]);
        assert!(again.inode_used(9) && !again.inode_used(10));
        assert!(again.block_free(8) && !again.block_free(7));
        assert_eq!(again.cluster_free(8), Some(true));
        assert_eq!((again.cluster_free(7), again.clustersum()[16]), (Some(false), 1));
    }

    /// The in-place roll-back of initialized inodes frees exactly the used inodes from its
    /// start on (zero bytes and runs of eight skipped, the edges of a byte kept), in the map and the
    /// counts, and leaves everything before them and the other maps as they were.
    #[test]
    fn inode_roll_back_in_place_frees_the_used_inodes_past_its_start() {
        let sb = sample();
        let mut cg = Cg::decode(&sample_cg(&sb, 1), &sb, 1, false).unwrap();
        let used = [0, 3, 9, 10, 11, 17, 40, 41, 63, 64, 135, 200, sb.fs_ipg - 1];
        for &i in &used {
            cg.set_inode_used(i, true);
        }
        for f in 56..100 {
            cg.set_frag_free(f, true);
        }
        cg.hdr.cg_cs =
            Csum { cs_ndir: 3, cs_nbfree: 5, cs_nifree: (sb.fs_ipg - used.len() as u32) as i32, cs_nffree: 4 };
        (cg.hdr.cg_initediblk, cg.hdr.cg_irotor) = (sb.fs_ipg, 41);
        for from in [0, 10, 11, 12, 40, 64, 65, 201, sb.fs_ipg - 1] {
            let mut b = cg.encode(&sb);
            let dirs = [10, 64];
            let freed = Cg::roll_back_inodes(&mut b, &sb, 1, from, |i| dirs.contains(&i));
            let gone: Vec<u32> = used.iter().copied().filter(|&i| i >= from).collect();
            assert_eq!(freed, gone.len() as u32, "from {from}");
            let again = Cg::decode(&b, &sb, 1, false).unwrap();
            for i in 0..sb.fs_ipg {
                assert_eq!(again.inode_used(i), used.contains(&i) && i < from, "from {from}: inode {i}");
            }
            let ndir = 3 - gone.iter().filter(|i| dirs.contains(i)).count() as i32;
            let nifree = cg.hdr.cg_cs.cs_nifree + gone.len() as i32;
            assert_eq!((again.hdr.cg_cs.cs_ndir, again.hdr.cg_cs.cs_nifree), (ndir, nifree), "from {from}");
            assert_eq!(again.hdr.cg_initediblk, from);
            assert_eq!(again.hdr.cg_irotor, if from <= 41 { 0 } else { 41 });
            assert_eq!(again.free_map(), cg.free_map(), "from {from}: the free map changed");
        }
    }

    #[test]
    fn runs_of_bits_set_whole_bytes_and_their_edges() {
        for (first, n) in [(0, 0), (3, 2), (5, 11), (8, 16), (1, 30), (0, 40)] {
            let mut m = vec![0u8; 5];
            set_bits(&mut m, first, n, true);
            for i in 0..40 {
                assert_eq!(bit(&m, i), (first..first + n).contains(&i), "{first}+{n}: bit {i}");
            }
            set_bits(&mut m, first, n, false);
            assert_eq!(m, [0; 5]);
        }
    }

    #[test]
    fn damaged_groups_are_refused() {
        let sb = sample();
        let good = Cg::decode(&sample_cg(&sb, 2), &sb, 2, false).unwrap().encode(&sb);
        assert!(Cg::decode(&good, &sb, 2, true).is_ok());
        assert!(matches!(Cg::decode(&good, &sb, 1, true), Err(Ufs2Error::Cg { .. })), "wrong index");
        let mut flipped = good.clone();
        flipped[4000] ^= 1;
        assert!(matches!(Cg::decode(&flipped, &sb, 2, true), Err(Ufs2Error::CheckHash { .. })));
        for (off, v) in [(4u32, 0u32), (92, 4090), (96, 4095), (104, 4094), (108, 4093), (116, 7), (20, 999), (32, 300)]
        {
            let mut b = good.clone();
            v.put(&mut b, off as usize);
            assert!(Cg::decode(&b, &sb, 2, false).is_err(), "field at {off} = {v}");
        }
    }
}
