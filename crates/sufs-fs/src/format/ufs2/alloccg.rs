//! FFS's allocator for one UFS2 cylinder group, in fragments: what FreeBSD's `ffs_alloccg`,
//! `ffs_alloccgblk`, `ffs_fragextend`, `ffs_mapsearch`, `ffs_blkfree_cg`, `ffs_clusteracct`,
//! `ffs_nodealloccg` and `ffs_freefile` (sys/ufs/ffs/ffs_alloc.c) do to a group's maps and
//! counts, with `ffs_fragacct`, `ffs_isblock`, `ffs_setblock` and `ffs_clrblock`
//! (sys/ufs/ffs/ffs_subr.c), over a decoded `Cg` and the superblock's totals (`fs_cstotal`).
//!
//! The invariant it keeps: the group's header says what its maps say. `cg_cs` (`nbfree`,
//! `nffree`, `nifree`), `cg_frsum` and `cg_clustersum` equal what `Cg::map_counts` recomputes
//! (fsck_ffs's pass 5), the cluster map has a bit set exactly for each wholly free block, the
//! group's metadata is never free, no inode is in use past `cg_initediblk`, and the rotors are
//! inside the group. `CgAlloc::new` checks it of the group it is given, and refuses a group that
//! breaks it (`CgAllocError::Inconsistent`), so that a later break is this module's bug: every
//! change checks it again in debug builds (`debug_assert!`). `fs_cstotal` moves by exactly what
//! `cg_cs` moves.
//!
//! Addresses are file-system fragment numbers (`fsb`), sizes are counts of fragments (a whole
//! block is `fs_frag` of them), inode numbers are FreeBSD's. What FreeBSD does around this and
//! the caller does here: choosing the group (`ffs_hashalloc`, `ffs_blkpref`), copying `cg_cs`
//! into the group's slot of the summary area (`fs_cs(fs, cg)` at `fs_csaddr`), stamping
//! `cg_time`, initializing the inode blocks `alloc_inode` reports before the group is written,
//! writing the group (`Cg::encode`, which reseals its check hash), and the soft-updates
//! dependencies on the group's buffer.

use std::ops::Range;

use thiserror::Error;

use super::*;

/// What the allocator refuses, as a value: a request it cannot meet or an address it will not
/// touch. None of these changes the group.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CgAllocError {
    /// Nothing of the kind is free in this group (the caller tries another group).
    #[error("cylinder group {cg}: no free {what}")]
    NoSpace { cg: u32, what: &'static str },
    /// A fragment run or size the group cannot hold: outside the group or the data space, in
    /// the summary area, crossing its block, or a size that is not 1 to `fs_frag` fragments.
    #[error("fragments {fsb} (+{frags}): {why}")]
    BadAddress { fsb: i64, frags: u32, why: &'static str },
    /// Freeing a fragment the map already shows free (`ffs_blkfree_cg`'s "freeing free frag").
    #[error("freeing fragment {fsb}, which is already free")]
    DoubleFree { fsb: i64 },
    /// Extending a run whose own fragments are not allocated.
    #[error("extending fragments at {fsb}: fragment {free} is free, not allocated")]
    NotAllocated { fsb: i64, free: i64 },
    /// An inode number the group cannot free: another group's, a reserved one, or a
    /// directory where the group counts none.
    #[error("inode {ino}: {why}")]
    BadInode { ino: u32, why: &'static str },
    /// Freeing an inode the map already shows free (`ffs_freefile`'s "freeing free inode").
    #[error("freeing inode {ino}, which is already free")]
    InodeDoubleFree { ino: u32 },
    /// A group whose header disagrees with its maps (or whose metadata is shown free): the
    /// allocator does not work on it; fsck repairs it.
    #[error("cylinder group {cg}: {what}")]
    Inconsistent { cg: u32, what: String },
}

/// An inode `alloc_inode` handed out, and the inodes whose blocks the caller must initialize
/// (zero, each dinode with a fresh `di_gen`, as `ffs_nodealloccg` does) and write before this
/// group's block reaches the disk: `cg_initediblk` has moved past them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeAlloc {
    pub ino: u32,
    /// Inode numbers, whole inode blocks (`INOPB`); empty when none.
    pub initialize: Range<u32>,
}

/// The counts of `struct csum`, in the group's header and in `fs_cstotal`.
#[derive(Debug, Clone, Copy)]
enum Count {
    Nbfree,
    Nffree,
    Nifree,
    Ndir,
}

/// Where `mapsearch` may start looking, kept for a group between its allocations (in memory
/// only): entry `k` is a block below which no block holds a run of exactly `k` free fragments.
/// A search for a new file's tail starts at the group's data (the inode's preferred block) and
/// otherwise crosses the group's full part for every file. Every change of a fragment's bit
/// lowers every entry to its block (`take_frag`, `give_frag`); a search that looked at every
/// block from the entry on raises it to where it found its run. A stale entry (a map changed
/// behind the allocator) can only hide runs: a search that finds nothing past the entries
/// looks again over the whole map (`mapsearch`), so the entries never change what is found
/// but where.
pub type SearchHints = [u32; MAXFRAG as usize + 1];

/// One cylinder group under allocation: the group, decoded, and the superblock whose totals
/// move with it. Made by `new`, which checks the invariant of the module doc.
pub struct CgAlloc<'a, B = Vec<u8>> {
    fs: &'a mut Fs,
    cg: &'a mut Cg<B>,
    cgx: u32,
    /// `fs_frag`.
    frag: u32,
    /// Fragments in this group (`cg_ndblk`; the last group may be short).
    ndblk: u32,
    /// Blocks the cluster map covers (`cg_nclusterblks`, whole blocks of the group; 0 without
    /// cluster maps).
    nclblk: u32,
    /// `fs_contigsumsize`.
    contig: u32,
    /// Group-relative start of the data zone (`cgdata`: after the inodes and `fs_metaspace`),
    /// where `cg_rotor` moves.
    data_start: u32,
    /// The group's search hints, when its owner keeps them (`with_hints`).
    hints: Option<&'a mut SearchHints>,
}

/// Groups of at most this many fragments have their invariant checked after every change in
/// debug builds (`CgAlloc::settled`); larger ones every `FULL_CHECK_EVERY`th change.
const FULL_CHECK_FRAGS: u32 = 16384;
const FULL_CHECK_EVERY: u64 = 64;
/// Changes checked so far, for `FULL_CHECK_EVERY`.
static SETTLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl<'a, B: AsRef<[u8]> + AsMut<[u8]>> CgAlloc<'a, B> {
    /// The allocator over group `cg` (decoded with `fs`), refused if the group breaks the
    /// invariant of the module doc. Reads every map bit once.
    pub fn new(fs: &'a mut Fs, cg: &'a mut Cg<B>) -> Result<CgAlloc<'a, B>, CgAllocError> {
        let a = Self::frame(fs, cg);
        match a.inconsistency() {
            None => Ok(a),
            Some(what) => Err(CgAllocError::Inconsistent { cg: a.cgx, what }),
        }
    }

    /// The allocator over a group that `new` accepted before and that only an allocator has
    /// changed since (a mounted file system's group, checked once at mount): not read again
    /// whole, but in debug builds, where every change checks the invariant anyway.
    pub fn resume(fs: &'a mut Fs, cg: &'a mut Cg<B>) -> CgAlloc<'a, B> {
        let a = Self::frame(fs, cg);
        a.settled();
        a
    }

    /// The allocator, its searches guided by `hints` (the group's `SearchHints`, all 0 when
    /// nothing is known yet), which it keeps up to date.
    pub fn with_hints(mut self, hints: &'a mut SearchHints) -> CgAlloc<'a, B> {
        self.hints = Some(hints);
        self
    }

    /// The allocator's view of group `cg`, unchecked.
    fn frame(fs: &'a mut Fs, cg: &'a mut Cg<B>) -> CgAlloc<'a, B> {
        let cgx = cg.hdr.cg_cgx;
        let frag = fs.fs_frag as u32;
        let ndblk = cg.hdr.cg_ndblk;
        let contig = fs.fs_contigsumsize.max(0) as u32;
        let nclblk = if contig > 0 { ndblk / frag } else { 0 };
        let dmin = fs.fs_dblkno as i64;
        let data_start = (dmin + fs.fs_metaspace.clamp(0, fs.fs_fpg as i64)).min(ndblk as i64 - 1) as u32;
        CgAlloc { fs, cg, cgx, frag, ndblk, nclblk, contig, data_start, hints: None }
    }

    /// What breaks the module's invariant, if anything.
    pub fn inconsistency(&self) -> Option<String> {
        let (fs, g, h) = (&*self.fs, &*self.cg, &self.cg.hdr);
        let m = g.map_counts();
        let cs = h.cg_cs;
        for (what, stored, counted) in [
            ("nbfree", cs.cs_nbfree as i64, m.nbfree as i64),
            ("nffree", cs.cs_nffree as i64, m.nffree as i64),
            ("nifree", cs.cs_nifree as i64, m.nifree as i64),
        ] {
            if stored != counted {
                return Some(format!("cs_{what} {stored}, the map gives {counted}"));
            }
        }
        if cs.cs_ndir < 0 || cs.cs_ndir as i64 > fs.fs_ipg as i64 - cs.cs_nifree as i64 {
            return Some(format!(
                "cs_ndir {} with {} inodes in use",
                cs.cs_ndir,
                fs.fs_ipg as i64 - cs.cs_nifree as i64
            ));
        }
        if h.cg_frsum != m.frsum {
            return Some(format!("cg_frsum {:?}, the map gives {:?}", h.cg_frsum, m.frsum));
        }
        if self.contig > 0 {
            let stored = g.clustersum();
            if stored[1..] != m.clustersum[1..] {
                return Some(format!(
                    "cg_clustersum {:?}, the cluster map gives {:?}",
                    &stored[1..],
                    &m.clustersum[1..]
                ));
            }
            let nblk = self.ndblk.div_ceil(self.frag);
            if let Some(b) = (0..nblk).find(|&b| g.cluster_free(b) != Some(b < self.nclblk && g.block_free(b))) {
                return Some(format!("cluster map bit of block {b} is not whether the block is free"));
            }
        }
        let tail = self.ndblk..(self.ndblk.div_ceil(self.frag) * self.frag).min(fs.fs_fpg as u32);
        if let Some(f) = tail.into_iter().find(|&f| g.frag_free(f)) {
            return Some(format!("fragment {f}, past the group's end {}, is free", self.ndblk));
        }
        if let Some(f) = self.metadata().into_iter().flatten().find(|&f| g.frag_free(f)) {
            return Some(format!("metadata fragment {} is free", fs.cgbase(self.cgx) + f as i64));
        }
        if self.cgx == 0 && (0..UFS_ROOTINO.min(fs.fs_ipg)).any(|i| !g.inode_used(i)) {
            return Some("a reserved inode (0 or 1) is free".into());
        }
        let inited = h.cg_initediblk;
        if let Some(i) = (inited..fs.fs_ipg).find(|&i| g.inode_used(i)) {
            return Some(format!("inode {i} of the group is in use past cg_initediblk {inited}"));
        }
        for (what, value, limit) in [
            ("cg_rotor", h.cg_rotor, self.ndblk),
            ("cg_frotor", h.cg_frotor, self.ndblk),
            ("cg_irotor", h.cg_irotor, fs.fs_ipg),
        ] {
            if value >= limit {
                return Some(format!("{what} {value} is outside the group ({limit})"));
            }
        }
        None
    }

    /// The group's metadata, group-relative: the boot area (group 0) or the superblock copy
    /// through the inodes, and the summary area if it lies in this group.
    fn metadata(&self) -> [Range<u32>; 2] {
        let fs = &*self.fs;
        let lo = if self.cgx == 0 { 0 } else { fs.fs_sblkno as u32 };
        let head = lo..fs.fs_dblkno as u32;
        let base = fs.cgbase(self.cgx);
        let cs_frags = (fs.fs_cssize as u64).div_ceil(fs.fs_fsize as u64) as i64;
        let (cs_lo, cs_hi) = (fs.fs_csaddr - base, fs.fs_csaddr + cs_frags - base);
        let cs = if cs_hi > 0 && cs_lo < self.ndblk as i64 {
            cs_lo.max(0) as u32..cs_hi.min(self.ndblk as i64) as u32
        } else {
            0..0
        };
        [head, cs]
    }

    /// Checks the invariant after a change, in debug builds: every change of a small group (the
    /// crash tester's and the unit tests'), and every `FULL_CHECK_EVERY`th change of a larger one,
    /// whose recount of every map bit would otherwise make a debug build's allocations cost
    /// milliseconds each (a 32 KiB-block group holds some 190,000 fragments).
    fn settled(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let nth = SETTLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.ndblk <= FULL_CHECK_FRAGS || nth.is_multiple_of(FULL_CHECK_EVERY) {
            assert!(self.inconsistency().is_none(), "cg {}: {:?}", self.cgx, self.inconsistency());
        }
    }

    /// The group this allocator changes.
    pub fn cg(&self) -> &Cg<B> {
        self.cg
    }

    // Counts. Each moves the group's count and the superblock's total together.

    fn add(&mut self, count: Count, d: i32) {
        let (cs, total) = (&mut self.cg.hdr.cg_cs, &mut self.fs.fs_cstotal);
        let (c, t) = match count {
            Count::Nbfree => (&mut cs.cs_nbfree, &mut total.cs_nbfree),
            Count::Nffree => (&mut cs.cs_nffree, &mut total.cs_nffree),
            Count::Nifree => (&mut cs.cs_nifree, &mut total.cs_nifree),
            Count::Ndir => (&mut cs.cs_ndir, &mut total.cs_ndir),
        };
        assert!(*c + d >= 0, "cg {}: {count:?} {} {d:+}", self.cgx, *c);
        *c += d;
        *t += d as i64;
    }

    fn add_frsum(&mut self, len: u32, d: i32) {
        let c = &mut self.cg.hdr.cg_frsum[len as usize];
        assert!(*c as i64 + d as i64 >= 0, "cg {}: cg_frsum[{len}] {} {d:+}", self.cgx, *c);
        *c = (*c as i64 + d as i64) as u32;
    }

    // The free-fragment map. Group-relative fragment numbers.

    /// Marks fragment `f` used; it must be free.
    fn take_frag(&mut self, f: u32) {
        assert!(self.cg.frag_free(f), "cg {}: allocating fragment {f}, which is in use", self.cgx);
        self.cg.set_frag_free(f, false);
        self.block_changed(f / self.frag);
    }

    /// Marks fragment `f` free; it must be in use.
    fn give_frag(&mut self, f: u32) {
        assert!(!self.cg.frag_free(f), "cg {}: freeing fragment {f}, which is free", self.cgx);
        self.cg.set_frag_free(f, true);
        self.block_changed(f / self.frag);
    }

    /// Block `b`'s fragments changed: it may hold a run of any size now (`SearchHints`).
    fn block_changed(&mut self, b: u32) {
        if let Some(h) = self.hints.as_deref_mut() {
            for x in h.iter_mut() {
                *x = (*x).min(b);
            }
        }
    }

    /// `blkmap`: block `b`'s fragments as bits, bit `i` set when fragment `i` of the block is
    /// free (a fragment past the group's end counts as used).
    /// A block's fragments (`fs_frag`: 1, 2, 4 or 8) lie in one byte of `cg_blksfree`, read
    /// at once: `mapsearch` calls this for every block it passes, and a bit at a time it was a
    /// fifth of the time of copying a tree onto UFS2.
    fn blkmap(&self, b: u32) -> u32 {
        let f = b * self.frag;
        debug_assert!(8 % self.frag == 0);
        let m = (self.cg.free_map()[f as usize / 8] as u32 >> (f % 8)) & full(self.frag);
        // Fragments past the group's end count as used.
        let inside = self.ndblk.saturating_sub(f).min(self.frag);
        let m = m & full(inside);
        debug_assert_eq!(
            m,
            (0..self.frag).filter(|&i| f + i < self.ndblk && self.cg.frag_free(f + i)).fold(0, |m, i| m | 1 << i)
        );
        m
    }

    /// `ffs_fragacct`: adds `d` to `cg_frsum[n]` for each run of exactly `n` free fragments in
    /// the block map `map`; a wholly free block is counted in `cs_nbfree`, not here.
    fn fragacct(&mut self, map: u32, d: i32) {
        for (_, len) in runs(map, self.frag) {
            if len < self.frag {
                self.add_frsum(len, d);
            }
        }
    }

    /// `ffs_clusteracct`: block `b` becomes free (`d` = 1) or used (-1) in the cluster map,
    /// and the summary moves from the runs on either side to the joined run, or back. Runs are
    /// looked at up to `fs_contigsumsize` blocks each way: longer ones all count in the last
    /// entry.
    fn clusteracct(&mut self, b: u32, d: i32) {
        if self.contig == 0 || b >= self.nclblk {
            return;
        }
        let g = &mut *self.cg;
        assert_eq!(g.cluster_free(b), Some(d < 0), "cg {}: cluster bit of block {b} before {d:+}", self.cgx);
        g.set_cluster_free(b, d > 0);
        let max = self.contig;
        let forw =
            (b + 1..(b + 1 + max).min(self.nclblk)).take_while(|&x| g.cluster_free(x) == Some(true)).count() as u32;
        let back = (b.saturating_sub(max)..b).rev().take_while(|&x| g.cluster_free(x) == Some(true)).count() as u32;
        let mut sum = g.clustersum();
        let mut add = |len: u32, d: i32| {
            let e = &mut sum[len.min(max) as usize];
            assert!(*e as i64 + d as i64 >= 0, "cg {}: cg_clustersum[{len}] {} {d:+}", self.cgx, *e);
            *e = (*e as i64 + d as i64) as u32;
        };
        add(back + forw + 1, d);
        if back > 0 {
            add(back, -d);
        }
        if forw > 0 {
            add(forw, -d);
        }
        for (len, &v) in sum.iter().enumerate().skip(1) {
            g.set_clustersum(len, v);
        }
    }

    // Addresses.

    /// `fsb` as a fragment of this group, or `None`.
    fn rel(&self, fsb: i64) -> Option<u32> {
        (fsb >= 0 && fsb < self.fs.fs_size && self.fs.dtog(fsb) == self.cgx as i64).then(|| self.fs.dtogd(fsb) as u32)
    }

    /// Checks that `frags` fragments at `fsb` are a run this group may free or extend: in this
    /// group's data space, outside the summary area, inside one block.
    fn check_run(&self, fsb: i64, frags: u32) -> Result<u32, CgAllocError> {
        let bad = |why| Err(CgAllocError::BadAddress { fsb, frags, why });
        if frags == 0 || frags > self.frag {
            return bad("a size of 1 to fs_frag fragments");
        }
        let Some(f) = self.rel(fsb) else {
            return bad("not in this cylinder group");
        };
        if f % self.frag + frags > self.frag {
            return bad("crosses the end of its block");
        }
        if !self.fs.check_blkno(fsb, frags as u64 * self.fs.fs_fsize as u64) || f + frags > self.ndblk {
            return bad("not in the group's data space");
        }
        let cs = &self.metadata()[1];
        if f < cs.end && cs.start < f + frags {
            return bad("in the cylinder group summary area");
        }
        Ok(f)
    }

    /// Where a search starts, group-relative: at `pref` if it is in this group; for a `pref` in
    /// another group, at the same zone of this one (its metadata zone if `pref` is before its
    /// group's data zone, else the data zone: `ffs_alloccgblk`); without one, at `rotor`.
    fn start(&self, pref: Option<i64>, rotor: u32) -> u32 {
        let fs = &*self.fs;
        let start = match pref {
            Some(p) if self.rel(p).is_some() => self.fs.dtogd(p) as u32,
            Some(p) if p >= 0 && p < fs.fs_size => {
                let other_data = fs.fs_dblkno as i64 + fs.fs_metaspace.max(0);
                if fs.dtogd(p) < other_data {
                    fs.fs_dblkno as u32
                } else {
                    self.data_start
                }
            }
            _ => rotor,
        };
        if start < self.ndblk {
            start
        } else {
            0
        }
    }

    /// `ffs_mapsearch`: the first run of exactly `size` free fragments inside one block (a
    /// whole free block for `size == fs_frag`), looking from the block of `start` to the end of
    /// the group and then from its start. Sets `cg_frotor` to the block it is found in. The
    /// counts have said such a run exists: not finding one is an inconsistent group.
    fn mapsearch(&mut self, start: u32, size: u32) -> Result<u32, CgAllocError> {
        let nblk = self.ndblk.div_ceil(self.frag);
        let first = start / self.frag;
        let found = match self.hints.as_deref().map(|h| h[size as usize]) {
            // Blocks below the hint hold no such run: from the later of the start and the
            // hint to the end, then from the hint up to the start.
            Some(h) => self.hinted_search(first, nblk, h, size),
            None => None,
        };
        let found = found.or_else(|| {
            let f = self.scan(first, nblk, size).or_else(|| self.scan(0, first, size));
            if let (Some(at), Some(h)) = (f, self.hints.as_deref_mut()) {
                // Only a map changed behind the allocator gets here: know nothing from now on.
                log::debug!("cg {}: a run of {size} at {at} was below its search hint", self.cgx);
                *h = [0; MAXFRAG as usize + 1];
            }
            f
        });
        let Some(f) = found else {
            let what = format!("the counts promise a run of {size} free fragments the map does not have");
            return Err(CgAllocError::Inconsistent { cg: self.cgx, what });
        };
        self.cg.hdr.cg_frotor = f - f % self.frag;
        Ok(f)
    }

    /// `mapsearch` over the blocks from the hint `h` on (none below it holds a run of `size`):
    /// the run it finds, the hint raised to it when every block from the hint to it was looked
    /// at; None if there is none (or the hint is stale).
    fn hinted_search(&mut self, first: u32, nblk: u32, h: u32, size: u32) -> Option<u32> {
        let (found, from_hint) = match self.scan(first.max(h), nblk, size) {
            Some(f) => (f, first <= h),
            None => (self.scan(h.min(first), first, size)?, true),
        };
        if from_hint {
            let hints = self.hints.as_deref_mut().expect("a hinted search has hints");
            debug_assert!(found / self.frag >= hints[size as usize], "a hint raised, not lowered");
            hints[size as usize] = found / self.frag;
        }
        Some(found)
    }

    /// The first run of exactly `size` free fragments in blocks `lo..hi` (group-relative
    /// fragment), if any. FreeBSD's `scanc` over `fragtbl`: a table lookup per block passes
    /// the blocks without such a run at a byte's cost; and the map's 64-bit words with no free
    /// fragment at all (a group's full part, which a search from its start crosses for every
    /// new file's tail) are passed a word at a time. With 8 fragments to a block (UFS2's
    /// default) each whole block is a byte of the map, read as such (`scan_bytes`).
    fn scan(&self, lo: u32, hi: u32, size: u32) -> Option<u32> {
        if self.frag == 8 {
            let whole = (self.ndblk / 8).min(hi);
            if lo < whole {
                if let Some(f) = self.scan_bytes(lo, whole, size) {
                    return Some(f);
                }
            }
            return self.scan_blocks(lo.max(whole), hi, size);
        }
        self.scan_blocks(lo, hi, size)
    }

    /// `scan` over whole blocks `lo..hi` of a group of 8 fragments to a block: block `b`'s
    /// map is byte `b` of the free map.
    fn scan_bytes(&self, lo: u32, hi: u32, size: u32) -> Option<u32> {
        debug_assert!(self.frag == 8 && hi <= self.ndblk / 8, "whole blocks of 8 fragments");
        let map = &self.cg.free_map()[..hi as usize];
        let mut b = lo as usize;
        while b < map.len() {
            if b.is_multiple_of(8) {
                if let Some(w) = map.get(b..b + 8) {
                    if w == [0u8; 8] {
                        b += 8;
                        continue;
                    }
                }
            }
            let m = map[b];
            if RUN_LENGTHS[m as usize] & (1 << size) != 0 {
                let (at, _) = runs(m as u32, 8).find(|&(_, len)| len == size).expect("the table lists the run");
                debug_assert_eq!(m as u32, self.blkmap(b as u32));
                return Some(b as u32 * 8 + at);
            }
            b += 1;
        }
        None
    }

    /// `scan` a block at a time (`blkmap`), for any fragments to a block.
    fn scan_blocks(&self, lo: u32, hi: u32, size: u32) -> Option<u32> {
        let map = self.cg.free_map();
        let per_word = 64 / self.frag;
        let mut b = lo;
        while b < hi {
            let f = b * self.frag;
            if f.is_multiple_of(64) && b + per_word <= hi {
                let at = f as usize / 8;
                if map.get(at..at + 8).is_some_and(|w| w == [0u8; 8]) {
                    b += per_word;
                    continue;
                }
            }
            let m = self.blkmap(b);
            if RUN_LENGTHS[m as usize] & (1 << size) != 0 {
                if let Some((at, _)) = runs(m, self.frag).find(|&(_, len)| len == size) {
                    return Some(f + at);
                }
            }
            b += 1;
        }
        None
    }

    /// `ffs_alloccgblk`: takes a whole free block, the one at the start point if it is free,
    /// else the next one (moving `cg_rotor` when it is in the data zone); group-relative.
    fn take_block(&mut self, pref: Option<i64>) -> Result<u32, CgAllocError> {
        let rotor = self.cg.hdr.cg_rotor + self.frag;
        let start = self.start(pref, rotor);
        let b = start / self.frag;
        let f = if self.blkmap(b) == full(self.frag) {
            b * self.frag
        } else {
            let f = self.mapsearch(start, self.frag)?;
            if f >= self.data_start {
                self.cg.hdr.cg_rotor = f;
            }
            f
        };
        for i in f..f + self.frag {
            self.take_frag(i);
        }
        self.clusteracct(f / self.frag, -1);
        self.add(Count::Nbfree, -1);
        Ok(f)
    }

    /// Allocates a whole block (`fs_frag` fragments, block-aligned), at `pref` if that block is
    /// free, else the next free block after it (or after `cg_rotor`).
    pub fn alloc_block(&mut self, pref: Option<i64>) -> Result<i64, CgAllocError> {
        if self.cg.hdr.cg_cs.cs_nbfree == 0 {
            return Err(CgAllocError::NoSpace { cg: self.cgx, what: "block" });
        }
        let f = self.take_block(pref)?;
        self.settled();
        Ok(self.fs.cgbase(self.cgx) + f as i64)
    }

    /// `ffs_alloccg` for a fragment run: `n` (1 to `fs_frag - 1`) fragments in one block. From
    /// the smallest run of at least `n` free fragments in a partly used block that `cg_frsum`
    /// says exists, searched from `pref` (or `cg_frotor`); if there is none, a free block is
    /// split and the rest of it left free.
    pub fn alloc_frags(&mut self, n: u32, pref: Option<i64>) -> Result<i64, CgAllocError> {
        if n == 0 || n >= self.frag {
            return Err(CgAllocError::BadAddress {
                fsb: pref.unwrap_or(0),
                frags: n,
                why: "a fragment run is 1 to fs_frag - 1 fragments",
            });
        }
        let base = self.fs.cgbase(self.cgx);
        let fits = (n..self.frag).find(|&s| self.cg.hdr.cg_frsum[s as usize] > 0);
        let Some(size) = fits else {
            if self.cg.hdr.cg_cs.cs_nbfree == 0 {
                return Err(CgAllocError::NoSpace { cg: self.cgx, what: "fragments" });
            }
            let f = self.take_block(pref)?;
            for i in f + n..f + self.frag {
                self.give_frag(i);
            }
            let rest = self.frag - n;
            self.add(Count::Nffree, rest as i32);
            self.add_frsum(rest, 1);
            self.settled();
            return Ok(base + f as i64);
        };
        let start = self.start(pref, self.cg.hdr.cg_frotor);
        let f = self.mapsearch(start, size)?;
        for i in f..f + n {
            self.take_frag(i);
        }
        self.add(Count::Nffree, -(n as i32));
        self.add_frsum(size, -1);
        if size > n {
            self.add_frsum(size - n, 1);
        }
        self.settled();
        Ok(base + f as i64)
    }

    /// `ffs_fragextend`: grows the allocated run of `old` fragments at `fsb` to `new` in place,
    /// if the fragments after it are free and in the same block. `Ok(false)` (nothing changed)
    /// when they are not: the caller allocates a new run and moves the data.
    pub fn extend_frags(&mut self, fsb: i64, old: u32, new: u32) -> Result<bool, CgAllocError> {
        let f = self.check_run(fsb, old)?;
        if new <= old || new > self.frag {
            return Err(CgAllocError::BadAddress {
                fsb,
                frags: new,
                why: "an extension grows the run, to at most a block",
            });
        }
        if let Some(i) = (f..f + old).find(|&i| self.cg.frag_free(i)) {
            return Err(CgAllocError::NotAllocated { fsb, free: fsb + (i - f) as i64 });
        }
        if f % self.frag + new > self.frag || f + new > self.ndblk {
            return Ok(false);
        }
        if self.cg.hdr.cg_cs.cs_nffree < (new - old) as i32 || (f + old..f + new).any(|i| !self.cg.frag_free(i)) {
            return Ok(false);
        }
        // The free run after the old fragments ends at the first used fragment or the block's
        // end; the part past the new end stays a (shorter) free run.
        let block_end = (f / self.frag + 1) * self.frag;
        let end =
            (f + new..block_end.min(self.ndblk)).find(|&i| !self.cg.frag_free(i)).unwrap_or(block_end.min(self.ndblk));
        self.add_frsum(end - (f + old), -1);
        if end > f + new {
            self.add_frsum(end - (f + new), 1);
        }
        for i in f + old..f + new {
            self.take_frag(i);
        }
        self.add(Count::Nffree, -((new - old) as i32));
        self.settled();
        Ok(true)
    }

    /// `ffs_blkfree_cg`: frees `frags` fragments at `fsb` (a whole block, or a run inside one).
    /// Fragments that complete their block make it a free block again: their count moves
    /// from `cs_nffree` to `cs_nbfree` and the block joins the cluster map.
    pub fn free(&mut self, fsb: i64, frags: u32) -> Result<(), CgAllocError> {
        let f = self.check_run(fsb, frags)?;
        if let Some(i) = (f..f + frags).find(|&i| self.cg.frag_free(i)) {
            return Err(CgAllocError::DoubleFree { fsb: fsb + (i - f) as i64 });
        }
        let b = f / self.frag;
        if frags == self.frag {
            for i in f..f + frags {
                self.give_frag(i);
            }
            self.clusteracct(b, 1);
            self.add(Count::Nbfree, 1);
        } else {
            self.fragacct(self.blkmap(b), -1);
            for i in f..f + frags {
                self.give_frag(i);
            }
            self.add(Count::Nffree, frags as i32);
            let map = self.blkmap(b);
            self.fragacct(map, 1);
            if map == full(self.frag) {
                self.add(Count::Nffree, -(self.frag as i32));
                self.clusteracct(b, 1);
                self.add(Count::Nbfree, 1);
            }
        }
        self.settled();
        Ok(())
    }

    /// `ffs_nodealloccg`: allocates an inode, `pref` if it is free, else the first free one
    /// from `cg_irotor` on (wrapping), and moves `cg_irotor` to it. When the inode is within a
    /// block of `cg_initediblk`, `cg_initediblk` moves on a block of inodes at a time (never
    /// past `fs_ipg`) and the answer names the inodes the caller must initialize.
    pub fn alloc_inode(&mut self, pref: Option<u32>, dir: bool) -> Result<InodeAlloc, CgAllocError> {
        if self.cg.hdr.cg_cs.cs_nifree == 0 {
            return Err(CgAllocError::NoSpace { cg: self.cgx, what: "inode" });
        }
        let ipg = self.fs.fs_ipg;
        let g = &*self.cg;
        let rotor = g.hdr.cg_irotor;
        let pick = match pref.map(|p| p % ipg) {
            Some(i) if !g.inode_used(i) => Some(i),
            _ => (rotor..ipg).chain(0..rotor).find(|&i| !g.inode_used(i)),
        };
        let Some(i) = pick else {
            let what = format!("cs_nifree {} but every inode is in use", g.hdr.cg_cs.cs_nifree);
            return Err(CgAllocError::Inconsistent { cg: self.cgx, what });
        };
        let inopb = self.fs.fs_inopb;
        let first = self.cgx * ipg;
        let was = self.cg.hdr.cg_initediblk;
        let mut inited = was;
        while i + inopb > inited && inited < ipg {
            inited = (inited + inopb).min(ipg);
        }
        assert!(i < inited, "cg {}: inode {i} past cg_initediblk {inited}", self.cgx);
        self.cg.hdr.cg_initediblk = inited;
        self.cg.hdr.cg_irotor = i;
        assert!(!self.cg.inode_used(i), "cg {}: allocating inode {i}, which is in use", self.cgx);
        self.cg.set_inode_used(i, true);
        self.add(Count::Nifree, -1);
        if dir {
            self.add(Count::Ndir, 1);
        }
        self.settled();
        Ok(InodeAlloc { ino: first + i, initialize: first + was..first + inited })
    }

    /// `ffs_freefile`: frees inode `ino` of this group (a directory: `dir`, which lowers
    /// `cs_ndir`), moving `cg_irotor` back to it if it is before.
    pub fn free_inode(&mut self, ino: u32, dir: bool) -> Result<(), CgAllocError> {
        let bad = |why| Err(CgAllocError::BadInode { ino, why });
        if ino >= self.fs.maxino() || self.fs.ino_to_cg(ino) != self.cgx {
            return bad("not in this cylinder group");
        }
        if ino < UFS_ROOTINO {
            return bad("a reserved inode");
        }
        let i = ino % self.fs.fs_ipg;
        if !self.cg.inode_used(i) {
            return Err(CgAllocError::InodeDoubleFree { ino });
        }
        if dir && self.cg.hdr.cg_cs.cs_ndir == 0 {
            return bad("a directory freed where the group counts none");
        }
        self.cg.set_inode_used(i, false);
        if i < self.cg.hdr.cg_irotor {
            self.cg.hdr.cg_irotor = i;
        }
        self.add(Count::Nifree, 1);
        if dir {
            self.add(Count::Ndir, -1);
        }
        self.settled();
        Ok(())
    }
}

/// The bit map of a wholly free block of `frag` fragments.
fn full(frag: u32) -> u32 {
    (1 << frag) - 1
}

/// For each block map of at most 8 fragments (bit `i` set: fragment `i` free), the lengths of
/// its runs of free fragments as bits (bit `n` set: a run of exactly `n`): FreeBSD's `fragtbl`,
/// which lets `mapsearch` pass a block without the run it looks for at a lookup's cost. Bits
/// past a block's `frag` are clear in its map, so one table serves every fragment count.
const RUN_LENGTHS: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut m = 0;
    while m < 256 {
        let (mut i, mut lengths) = (0, 0u16);
        while i < 8 {
            if m & (1 << i) == 0 {
                i += 1;
                continue;
            }
            let at = i;
            while i < 8 && m & (1 << i) != 0 {
                i += 1;
            }
            lengths |= 1 << (i - at);
        }
        t[m] = lengths;
        m += 1;
    }
    t
};

/// The runs of set bits in the low `frag` bits of `map`: (first bit, length), in order.
fn runs(map: u32, frag: u32) -> impl Iterator<Item = (u32, u32)> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < frag && map & (1 << i) == 0 {
            i += 1;
        }
        if i >= frag {
            return None;
        }
        let at = i;
        while i < frag && map & (1 << i) != 0 {
            i += 1;
        }
        Some((at, i - at))
    })
}

#[cfg(test)]
mod tests {
    use super::super::cg::tests::sample_cg;
    use super::super::superblock::tests::sample;
    use super::*;

    /// Group `cgx` of `sample()` (4 groups of 33 blocks of 8 fragments, 256 inodes, cluster
    /// summaries of 16) as newfs leaves it: everything free but the metadata (and in group 0
    /// the summary area, fragment 56, and inodes 0 and 1), the header counted from the maps,
    /// the first block of inodes initialized.
    fn fresh(sb: &Superblock, cgx: u32) -> Cg {
        let mut raw = sample_cg(sb, cgx);
        ((sb.fs_size - sb.cgbase(cgx)).min(sb.fs_fpg as i64) as u32).put(&mut raw, 20);
        let mut g = Cg::decode(&raw, sb, cgx, false).unwrap();
        let lo = if cgx == 0 { 0 } else { sb.fs_sblkno as u32 };
        for f in 0..g.hdr.cg_ndblk {
            let meta = (lo..sb.fs_dblkno as u32).contains(&f) || (cgx == 0 && f == 56);
            g.set_frag_free(f, !meta);
        }
        for b in 0..g.hdr.cg_ndblk / 8 {
            let free = g.block_free(b);
            g.set_cluster_free(b, free);
        }
        if cgx == 0 {
            g.set_inode_used(0, true);
            g.set_inode_used(1, true);
        }
        recount(&mut g);
        g.hdr.cg_initediblk = sb.fs_inopb;
        g
    }

    /// The header's counts and cluster summary taken from the maps.
    fn recount(g: &mut Cg) {
        let m = g.map_counts();
        for (len, &n) in m.clustersum.iter().enumerate().skip(1) {
            g.set_clustersum(len, n);
        }
        g.hdr.cg_cs =
            Csum { cs_ndir: 0, cs_nbfree: m.nbfree as i32, cs_nifree: m.nifree as i32, cs_nffree: m.nffree as i32 };
        g.hdr.cg_frsum = m.frsum;
    }

    /// The group's bytes with the rotors and `cg_initediblk` taken out: what must come back
    /// after everything allocated is freed.
    fn maps_and_counts(sb: &Superblock, g: &Cg) -> Vec<u8> {
        let mut g = g.clone();
        (g.hdr.cg_rotor, g.hdr.cg_frotor, g.hdr.cg_irotor, g.hdr.cg_initediblk) = (0, 0, 0, 0);
        g.encode(sb)
    }

    #[test]
    fn fragments_come_from_the_smallest_run_that_fits_or_split_a_free_block() {
        let mut sb = sample();
        let mut g = fresh(&sb, 0);
        assert_eq!(g.hdr.cg_frsum, [0, 0, 0, 0, 0, 0, 0, 1], "57-63 free beside the summary area");
        let total = sb.fs_cstotal;
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        assert_eq!(a.alloc_frags(2, None), Ok(57));
        assert_eq!(a.cg().hdr.cg_frsum, [0, 0, 0, 0, 0, 1, 0, 0]);
        // Six fragments: no run of 6 or 7 is left, so a free block is split, its last two free.
        let six = a.alloc_frags(6, None).unwrap();
        assert_eq!(six % 8, 0);
        assert_eq!(a.cg().hdr.cg_frsum, [0, 0, 1, 0, 0, 1, 0, 0]);
        // One fragment comes from the run of 2, not the run of 5.
        assert_eq!(a.alloc_frags(1, None), Ok(six + 6));
        assert_eq!(a.cg().hdr.cg_frsum, [0, 1, 0, 0, 0, 1, 0, 0]);
        let cs = a.cg().hdr.cg_cs;
        assert_eq!((cs.cs_nbfree, cs.cs_nffree), (24, 6), "25 free blocks, 7 free fragments at the start");
        assert_eq!(
            (sb.fs_cstotal.cs_nbfree - total.cs_nbfree, sb.fs_cstotal.cs_nffree - total.cs_nffree),
            (-1, 6 - 7),
            "the totals moved with the group"
        );
        for bad in [0, 8] {
            let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
            assert!(matches!(a.alloc_frags(bad, None), Err(CgAllocError::BadAddress { .. })), "{bad} fragments");
        }
    }

    #[test]
    fn a_run_extends_in_place_only_into_free_fragments_of_its_block() {
        let mut sb = sample();
        let mut g = fresh(&sb, 1);
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        let r = a.alloc_frags(2, None).unwrap();
        assert_eq!(r % 8, 0, "a split block");
        assert_eq!(a.extend_frags(r, 2, 5), Ok(true));
        assert_eq!(a.cg().hdr.cg_frsum, [0, 0, 0, 1, 0, 0, 0, 0]);
        let next = a.alloc_frags(1, Some(r + 5)).unwrap();
        assert_eq!(next, r + 5, "the preferred run");
        assert_eq!(a.extend_frags(r, 5, 6), Ok(false), "fragment 5 is used");
        assert_eq!(a.extend_frags(next, 1, 3), Ok(true), "to the block's end");
        assert_eq!(a.cg().hdr.cg_frsum, [0; 8]);
        assert_eq!(a.extend_frags(next, 3, 4), Ok(false), "would cross into the next block");
        assert_eq!(a.cg().hdr.cg_cs.cs_nffree, 0);
        // What is not an allocated run is an error.
        assert_eq!(a.extend_frags(r + 8, 1, 2), Err(CgAllocError::NotAllocated { fsb: r + 8, free: r + 8 }));
        assert!(matches!(a.extend_frags(r, 5, 5), Err(CgAllocError::BadAddress { .. })));
        assert!(matches!(a.extend_frags(r, 5, 9), Err(CgAllocError::BadAddress { .. })));
    }

    #[test]
    fn freeing_every_allocation_gives_back_the_same_maps_and_summaries() {
        let mut sb = sample();
        let mut g = fresh(&sb, 0);
        let before = maps_and_counts(&sb, &g);
        let total = sb.fs_cstotal;
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        let blocks: Vec<i64> = (0..5).map(|_| a.alloc_block(None).unwrap()).collect();
        let frags: Vec<(i64, u32)> = (1..8).map(|n| (a.alloc_frags(n, None).unwrap(), n)).collect();
        let ext = a.alloc_frags(3, None).unwrap();
        let grown = if a.extend_frags(ext, 3, 7).unwrap() { 7 } else { 3 };
        let ino = a.alloc_inode(None, true).unwrap().ino;
        assert_ne!(maps_and_counts(&sb, &g), before);
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        // Freed out of order, a block's fragments one at a time: each block re-forms.
        for &(f, n) in frags.iter().rev() {
            for i in 0..n {
                a.free(f + i as i64, 1).unwrap();
            }
        }
        a.free(ext, grown).unwrap();
        for &b in &blocks {
            a.free(b, 8).unwrap();
        }
        a.free_inode(ino, true).unwrap();
        assert_eq!(maps_and_counts(&sb, &g), before);
        assert_eq!(sb.fs_cstotal, total);
    }

    #[test]
    fn double_frees_and_bad_addresses_are_refused_and_change_nothing() {
        let mut sb = sample();
        let mut g = fresh(&sb, 0);
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        let r = a.alloc_frags(3, None).unwrap();
        let before = g.encode(&sb);
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        assert_eq!(a.free(r + 2, 2), Err(CgAllocError::DoubleFree { fsb: r + 3 }), "one of the two is free");
        assert_eq!(a.free(104, 8), Err(CgAllocError::DoubleFree { fsb: 104 }));
        let bad = |e: Result<(), CgAllocError>| matches!(e, Err(CgAllocError::BadAddress { .. }));
        assert!(bad(a.free(40, 1)), "an inode block");
        assert!(bad(a.free(56, 1)), "the summary area");
        assert!(bad(a.free(8, 8)), "the boot area of group 0");
        assert!(bad(a.free(300, 1)), "group 1's");
        assert!(bad(a.free(r + 6, 2)), "crossing its block");
        assert!(bad(a.free(r, 0)) && bad(a.free(r, 9)));
        assert!(bad(a.free(-1, 1)) && bad(a.free(1 << 40, 1)));
        assert_eq!(a.free_inode(1, false), Err(CgAllocError::BadInode { ino: 1, why: "a reserved inode" }));
        assert_eq!(a.free_inode(9, false), Err(CgAllocError::InodeDoubleFree { ino: 9 }));
        assert!(matches!(a.free_inode(256, false), Err(CgAllocError::BadInode { .. })), "group 1's");
        assert_eq!(g.encode(&sb), before);
    }

    #[test]
    fn blocks_go_to_the_preferred_block_else_after_it_and_the_rotor_follows() {
        let mut sb = sample();
        let mut g = fresh(&sb, 1);
        let base = sb.cgbase(1);
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        assert_eq!(a.alloc_block(Some(base + 100)), Ok(base + 96), "the preferred block, aligned");
        assert_eq!(a.alloc_block(Some(base + 100)), Ok(base + 104), "the next free one");
        assert_eq!(a.cg().hdr.cg_rotor, 104);
        // Without a preference: the block after the rotor.
        assert_eq!(a.alloc_block(None), Ok(base + 112));
        // A preference in another group's data zone: this group's data zone.
        assert_eq!(a.alloc_block(Some(sb_cgbase(3) + 200)), Ok(base + 56));
        // Before the superblock copy: group 1's data starts at its first fragment.
        assert_eq!(a.alloc_block(Some(base)), Ok(base));
        // Every block taken: no space, and a fragment run has nowhere to come from either.
        while a.alloc_block(None).is_ok() {}
        assert_eq!(a.alloc_block(None), Err(CgAllocError::NoSpace { cg: 1, what: "block" }));
        assert_eq!(a.alloc_frags(1, None), Err(CgAllocError::NoSpace { cg: 1, what: "fragments" }));
        assert_eq!(a.cg().map_counts().clustersum.iter().sum::<u32>(), 0);
    }

    fn sb_cgbase(c: u32) -> i64 {
        sample().cgbase(c)
    }

    #[test]
    fn inodes_follow_the_rotor_count_directories_and_initialize_ahead() {
        let mut sb = sample();
        let mut g = fresh(&sb, 1);
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        let first = a.alloc_inode(None, false).unwrap();
        assert_eq!(first.ino, 256);
        assert!(first.initialize.is_empty(), "inside the 128 initialized inodes");
        // Inode 127 of the group is within a block of the initialized 128: the next block of
        // 128 is initialized (inodes 384-511 of the file system).
        let near = a.alloc_inode(Some(127), true).unwrap();
        assert_eq!(near, InodeAlloc { ino: 256 + 127, initialize: 384..512 });
        assert_eq!((a.cg().hdr.cg_initediblk, a.cg().hdr.cg_irotor, a.cg().hdr.cg_cs.cs_ndir), (256, 127, 1));
        assert_eq!(a.alloc_inode(Some(127), false).unwrap().ino, 256 + 128, "taken: the next after the rotor");
        a.free_inode(256, false).unwrap();
        assert_eq!(a.cg().hdr.cg_irotor, 0, "the rotor moves back to a freed inode");
        assert_eq!(a.free_inode(257, false), Err(CgAllocError::InodeDoubleFree { ino: 257 }));
        assert_eq!(a.free_inode(256 + 127, true), Ok(()));
        assert_eq!(a.cg().hdr.cg_cs.cs_ndir, 0);
        let no_dir = a.free_inode(256 + 128, true);
        assert!(matches!(no_dir, Err(CgAllocError::BadInode { .. })), "the group counts no directory");
        assert_eq!(sb.fs_cstotal.cs_ndir, 0);
        // Group 0 never hands out inodes 0 and 1.
        let mut g0 = fresh(&sb, 0);
        let mut a = CgAlloc::new(&mut sb, &mut g0).unwrap();
        assert_eq!(a.alloc_inode(Some(1), false).unwrap().ino, 2);
    }

    #[test]
    fn a_group_whose_header_disagrees_with_its_maps_is_refused() {
        let mut sb = sample();
        type Damage = fn(&mut Cg);
        let cases: [(&str, Damage); 8] = [
            ("nbfree", |g| g.hdr.cg_cs.cs_nbfree += 1),
            ("frsum", |g| g.hdr.cg_frsum[3] += 1),
            ("clustersum", |g| g.set_clustersum(16, 0)),
            ("cluster bit", |g| g.set_cluster_free(20, false)),
            ("metadata free", |g| g.set_frag_free(45, true)),
            ("past initediblk", |g| {
                g.set_inode_used(200, true);
                g.hdr.cg_cs.cs_nifree -= 1;
            }),
            ("rotor", |g| g.hdr.cg_frotor = 264),
            ("ndir", |g| g.hdr.cg_cs.cs_ndir = 300),
        ];
        for (what, damage) in cases {
            let mut g = fresh(&sb, 0);
            damage(&mut g);
            assert!(matches!(CgAlloc::new(&mut sb, &mut g), Err(CgAllocError::Inconsistent { cg: 0, .. })), "{what}");
        }
    }

    #[test]
    fn the_last_groups_partial_block_gives_fragments_never_a_block() {
        let mut sb = sample();
        // The last group: 229 fragments, 28 blocks and 5 fragments of a 29th.
        sb.fs_size = 1021;
        let mut g = fresh(&sb, 3);
        let base = sb.cgbase(3);
        assert_eq!((g.hdr.cg_ndblk, g.hdr.cg_frsum[5], g.hdr.cg_cs.cs_nffree), (229, 1, 5));
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        assert_eq!(a.alloc_frags(4, None), Ok(base + 224), "the only run of 5");
        assert_eq!(a.extend_frags(base + 224, 4, 6), Ok(false), "past the group's end");
        assert_eq!(a.extend_frags(base + 224, 4, 5), Ok(true));
        assert!(matches!(a.free(base + 228, 2), Err(CgAllocError::BadAddress { .. })));
        a.free(base + 224, 5).unwrap();
        assert_eq!((a.cg().hdr.cg_cs.cs_nffree, a.cg().hdr.cg_frsum[5]), (5, 1), "no block re-forms");
        let mut blocks = 0;
        while let Ok(b) = a.alloc_block(None) {
            assert!(b < base + 224);
            blocks += 1;
        }
        assert_eq!(blocks, 28 - 4, "the whole blocks but the 4 of the superblock copy to the inodes");
    }

    /// The search passes the map's words without a free fragment whole: on maps nearly full
    /// (a free fragment in 0-2% of the data area), from several starts, it finds for every
    /// size the same first run as a look at each block in turn, reading blocks as bytes of the
    /// map (8 fragments to a block) or not.
    #[test]
    fn a_search_that_passes_full_words_finds_the_first_run_of_each_size() {
        let mut sb = sample();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..300u64 {
            // (the last group too, which may end inside a block)
            let mut g = fresh(&sb, if round % 2 == 0 { 1 } else { sb.fs_ncg - 1 });
            for f in sb.fs_dblkno as u32..g.hdr.cg_ndblk {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                g.set_frag_free(f, x % 100 < round % 3);
            }
            for b in 0..g.hdr.cg_ndblk / 8 {
                let free = g.block_free(b);
                g.set_cluster_free(b, free);
            }
            recount(&mut g);
            let a = CgAlloc::new(&mut sb, &mut g).unwrap();
            let nblk = a.ndblk.div_ceil(a.frag);
            for size in 1..=a.frag {
                for lo in [0, 3, 8, 9, 16] {
                    let one_by_one = (lo..nblk).find_map(|b| {
                        runs(a.blkmap(b), a.frag).find(|&(_, len)| len == size).map(|(at, _)| b * a.frag + at)
                    });
                    assert_eq!(a.scan(lo, nblk, size), one_by_one, "round {round}, size {size}, from block {lo}");
                    assert_eq!(
                        a.scan_blocks(lo, nblk, size),
                        one_by_one,
                        "round {round}, size {size}, from block {lo}"
                    );
                }
            }
        }
    }

    /// An allocator that keeps its group's search hints across its changes finds each run
    /// where one without them does (the first from its start): 3,000 allocations of fragments
    /// and blocks from random preferences and frees of what they got, on two copies of a group,
    /// give the same answers and the same maps. A run freed behind the hinted one (without its
    /// hints) is still found and the group stays consistent.
    #[test]
    fn search_hints_change_how_far_a_search_looks_but_not_what_it_finds() {
        let (mut sa, mut sb) = (sample(), sample());
        let mut plain = fresh(&sa, 1);
        let mut hinted = plain.clone();
        let mut hints = SearchHints::default();
        let mut held: Vec<(i64, u32)> = Vec::new();
        let (base, ndblk) = (sa.cgbase(1), plain.hdr.cg_ndblk as i64);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut raised = 0;
        for step in 0..3000 {
            if next(10) < 6 || held.is_empty() {
                let n = 1 + next(8) as u32;
                let pref = (next(4) > 0).then(|| base + next(ndblk as u64) as i64);
                let alloc = |a: &mut CgAlloc| if n == 8 { a.alloc_block(pref) } else { a.alloc_frags(n, pref) };
                let want = alloc(&mut CgAlloc::resume(&mut sa, &mut plain));
                let got = alloc(&mut CgAlloc::resume(&mut sb, &mut hinted).with_hints(&mut hints));
                assert_eq!(got, want, "step {step}: {n} fragments from {pref:?}");
                held.extend(got.ok().map(|f| (f, n)));
                raised += hints.iter().filter(|&&h| h > 0).count();
            } else {
                let (f, n) = held.swap_remove(next(held.len() as u64) as usize);
                CgAlloc::resume(&mut sa, &mut plain).free(f, n).unwrap();
                CgAlloc::resume(&mut sb, &mut hinted).with_hints(&mut hints).free(f, n).unwrap();
            }
            assert_eq!(hinted.free_map(), plain.free_map(), "step {step}");
        }
        assert!(raised > 0, "the hints were used");
        // Behind the hints: the lowest run held goes back without them; each size is still found.
        held.sort_unstable();
        for &(f, n) in &held {
            CgAlloc::resume(&mut sb, &mut hinted).free(f, n).unwrap();
        }
        hints = [hinted.hdr.cg_ndblk; MAXFRAG as usize + 1];
        let mut a = CgAlloc::resume(&mut sb, &mut hinted).with_hints(&mut hints);
        for n in 1..8 {
            a.alloc_frags(n, None).unwrap();
        }
        assert_eq!(a.inconsistency(), None);
    }

    #[test]
    fn the_run_length_table_agrees_with_the_runs() {
        for m in 0..256u32 {
            for frag in [1, 2, 4, 8] {
                let map = m & full(frag);
                let want = runs(map, frag).fold(0u16, |t, (_, len)| t | 1 << len);
                assert_eq!(RUN_LENGTHS[map as usize], want, "map {map:#b}, {frag} fragments");
            }
        }
    }

    #[test]
    fn runs_and_fragacct_count_exact_runs_inside_a_block() {
        assert_eq!(runs(0b1011_0110, 8).collect::<Vec<_>>(), [(1, 2), (4, 2), (7, 1)]);
        assert_eq!(runs(0xff, 8).collect::<Vec<_>>(), [(0, 8)]);
        assert_eq!(runs(0b11, 2).collect::<Vec<_>>(), [(0, 2)]);
        assert_eq!(runs(0, 4).count(), 0);
    }
}
