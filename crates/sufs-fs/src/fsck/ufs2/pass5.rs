//! Pass 5, fsck_ffs's pass5.c: each group's maps rebuilt from pass 1 and compared with the
//! disk, a 64-bit word at a time (bits are looked at only where words differ). The inode map
//! from the inodes in use (0 and 1 reserved in group 0), the free-fragment map from the
//! fragments claimed and the metadata (superblock copy, group block, inodes; in
//! group 0 the boot area, and the summary area). A fragment or inode set used that nothing
//! holds is a leak (allowed); one held but free is a violation. Then each header against its
//! own maps, as the kernel keeps them in the same block write: `cg_cs` (`ndir` against the
//! directories in use), `cg_frsum` (free runs of each length in partly used blocks,
//! `ffs_fragacct`), the cluster map (a bit per wholly free block) and `cg_clustersum` when
//! `fs_contigsumsize > 0`, inodes in use below `cg_initediblk`, the rotors inside the group.
//! Last the summary area at `fs_csaddr` and `fs_cstotal` against the headers (stale after a
//! crash: allowed; `fs_cstotal` is not compared when the superblock is a group's copy, whose
//! counts are newfs's).

use super::*;

impl<D: ReadAt + ?Sized> Check<'_, D> {
    pub(super) fn pass5(&mut self) -> Result<Report, Ufs2Error> {
        let sb = self.sb.clone();
        let (ipg, frag, fpg) = (sb.fs_ipg, sb.fs_frag as i64, sb.fs_fpg as i64);
        let mut report = Report::default();
        let cs_area = self.read(sb.fs_csaddr, sb.fs_cssize as usize)?;
        let mut total = CsumTotal::default();
        let mut all_groups = true;
        for c in 0..sb.fs_ncg {
            let base = sb.cgbase(c);
            let ndblk = (sb.fs_size - base).min(fpg);
            let mut ndir = 0;
            // The inode map rebuilt: the inodes in use (pass 1 read every one that may be),
            // and 0 and 1, reserved.
            let mut used_ino = Bitmap::new(ipg as i64);
            for (i, t) in self.inodes.group(c).iter().enumerate() {
                if t.state != State::Free {
                    used_ino.set(i as i64);
                }
                if t.state == State::InUse {
                    if t.dtype == crate::format::DT_DIR {
                        ndir += 1;
                        report.dirs += 1;
                    } else {
                        report.files += 1;
                    }
                }
            }
            for i in 0..ipg.min(UFS_ROOTINO.saturating_sub(c * ipg)) {
                used_ino.set(i as i64);
            }
            let free = self.free_map(c, ndblk);
            let counts = fragacct(&free, howmany(ndblk, frag) as usize, frag as usize);
            report.nbfree += counts.nbfree as i64;
            report.nffree += counts.nffree as i64;
            let Some(g) = self.cgs[c as usize].clone() else {
                all_groups = false;
                continue;
            };
            let first_ino = (c * ipg) as i64;
            let disk_ino = Bitmap::from_bytes(g.inode_map(), ipg as usize);
            let disk_free = Bitmap::from_bytes(g.free_map(), ndblk as usize);
            // Only where the words differ are bits looked at one by one.
            let ino_runs = |bad: Bitmap| runs(bad.iter_ones().map(|i| (first_ino + i as i64, true)));
            let frag_runs = |bad: Bitmap| runs(bad.iter_ones().map(|f| (base + f as i64, true)));
            let found: Vec<Finding> = (ino_runs(used_ino.zip(&disk_ino, |want, disk| want & !disk)).into_iter())
                .map(|(first, last)| Finding::InodesMarkedFree { first: first as u32, last: last as u32 })
                .chain(
                    ino_runs(used_ino.zip(&disk_ino, |want, disk| disk & !want))
                        .into_iter()
                        .map(|(first, last)| Finding::InodesMarkedUsed { first: first as u32, last: last as u32 }),
                )
                .chain(
                    frag_runs(free.zip(&disk_free, |want, disk| disk & !want))
                        .into_iter()
                        .map(|(first, last)| Finding::FragsMarkedFree { first, last }),
                )
                .chain(
                    frag_runs(free.zip(&disk_free, |want, disk| want & !disk))
                        .into_iter()
                        .map(|(first, last)| Finding::FragsMarkedUsed { first, last }),
                )
                .collect();
            self.findings.extend(found);
            self.header_against_maps(c, &g, ndblk, ndir);
            let cs = g.hdr.cg_cs;
            let at = c as usize * Csum::SIZE;
            let words: Vec<i32> = (0..4).map(|k| i32::get(&cs_area, at + 4 * k)).collect();
            let fields = ["ndir", "nbfree", "nifree", "nffree"];
            let want = [cs.cs_ndir, cs.cs_nbfree, cs.cs_nifree, cs.cs_nffree];
            for k in 0..4 {
                if words[k] != want[k] {
                    let (stored, actual) = (words[k] as i64, want[k] as i64);
                    self.find(Finding::CsArea { cg: c, what: fields[k], stored, actual });
                }
            }
            total.cs_ndir += cs.cs_ndir as i64;
            total.cs_nbfree += cs.cs_nbfree as i64;
            total.cs_nifree += cs.cs_nifree as i64;
            total.cs_nffree += cs.cs_nffree as i64;
        }
        if all_groups && !self.alternate {
            let t = sb.fs_cstotal;
            for (what, stored, actual) in [
                ("ndir", t.cs_ndir, total.cs_ndir),
                ("nbfree", t.cs_nbfree, total.cs_nbfree),
                ("nifree", t.cs_nifree, total.cs_nifree),
                ("nffree", t.cs_nffree, total.cs_nffree),
            ] {
                if stored != actual {
                    self.find(Finding::CsTotal { what, stored, actual });
                }
            }
        }
        report.free_frags = report.nbfree * frag + report.nffree;
        report.used_frags = sb.fs_size - report.free_frags;
        Ok(report)
    }

    /// Group `c`'s free-fragment map (`ndblk` bits) rebuilt: free unless metadata (its
    /// superblock copy, group block and inodes; in group 0 everything below the data, the boot
    /// area included; the summary area) or claimed by an inode in pass 1.
    fn free_map(&self, c: u32, ndblk: i64) -> Bitmap {
        let sb = &self.sb;
        let base = sb.cgbase(c);
        let mut free = Bitmap::ones(ndblk as usize);
        let lo = if c == 0 { base } else { sb.cgsblock(c) };
        let cs_end = sb.fs_csaddr + howmany(sb.fs_cssize as i64, sb.fs_fsize as i64);
        for (lo, hi) in [(lo, sb.cgdmin(c)), (sb.fs_csaddr, cs_end)] {
            let (lo, hi) = (lo.clamp(base, base + ndblk), hi.clamp(base, base + ndblk));
            if lo < hi {
                free.clear_range((lo - base) as usize, (hi - base) as usize);
            }
        }
        for (k, w) in free.0.iter_mut().enumerate() {
            *w &= !self.claimed.word_at(base as usize + 64 * k);
        }
        free
    }

    /// A group's header against its own maps (and `ndir` against the directories in use).
    fn header_against_maps(&mut self, c: u32, g: &Cg, ndblk: i64, ndir: i64) {
        let sb = &self.sb;
        let (ipg, frag) = (sb.fs_ipg, sb.fs_frag as u32);
        // `Cg::map_counts`, a word at a time: every fragment of the group's blocks, to `fs_fpg`.
        let disk_ino = Bitmap::from_bytes(g.inode_map(), ipg as usize);
        let m = fragacct(
            &Bitmap::from_bytes(g.free_map(), sb.fs_fpg as usize),
            howmany(ndblk, frag as i64) as usize,
            frag as usize,
        );
        let nifree = ipg as i64 - disk_ino.count_ones() as i64;
        let cs = g.hdr.cg_cs;
        let mut found = Vec::new();
        for (what, stored, actual) in [
            ("ndir", cs.cs_ndir as i64, ndir),
            ("nbfree", cs.cs_nbfree as i64, m.nbfree as i64),
            ("nffree", cs.cs_nffree as i64, m.nffree as i64),
            ("nifree", cs.cs_nifree as i64, nifree),
        ] {
            if stored != actual {
                found.push(Finding::CgCount { cg: c, what, stored, actual });
            }
        }
        for (len, (&stored, &actual)) in g.hdr.cg_frsum.iter().zip(&m.frsum).enumerate() {
            if stored != actual {
                found.push(Finding::Frsum { cg: c, len, stored, actual });
            }
        }
        if let Some(map) = g.cluster_map().filter(|_| sb.fs_contigsumsize > 0) {
            let nclblk = (ndblk / frag as i64) as usize;
            let mut blocks = Bitmap::new(nclblk as i64);
            for b in m.free_blocks.iter_ones().take_while(|&b| b < nclblk) {
                blocks.set(b as i64);
            }
            let clusters = Bitmap::from_bytes(map, nclblk);
            for (first, last) in runs(clusters.zip(&blocks, |a, b| a ^ b).iter_ones().map(|b| (b as i64, true))) {
                found.push(Finding::ClusterMap { cg: c, first: first as u32, last: last as u32 });
            }
            let max = sb.fs_contigsumsize as usize;
            let mut sum = vec![0u32; max + 1];
            run_lengths(&blocks, nclblk, |run| sum[run.min(max)] += 1);
            for (len, (&stored, &actual)) in g.clustersum().iter().zip(&sum).enumerate().skip(1) {
                if stored != actual {
                    found.push(Finding::ClusterSum { cg: c, len, stored, actual });
                }
            }
        }
        let inited = g.hdr.cg_initediblk;
        if let Some(i) = disk_ino.iter_ones().find(|&i| i >= inited as usize) {
            found.push(Finding::PastInitedIblk { cg: c, ino: c * ipg + i as u32, initediblk: inited });
        }
        for (what, value, limit) in [
            ("cg_rotor", g.hdr.cg_rotor, ndblk as u32),
            ("cg_frotor", g.hdr.cg_frotor, ndblk as u32),
            ("cg_irotor", g.hdr.cg_irotor, ipg),
        ] {
            if value >= limit {
                found.push(Finding::Rotor { cg: c, what, value });
            }
        }
        self.findings.append(&mut found);
    }
}

/// What `fragacct` counts in a map of free fragments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BlockCounts {
    /// Wholly free blocks, and a bit for each.
    nbfree: u32,
    free_blocks: Bitmap,
    /// Free fragments in the other blocks, and their runs by length (`cg_frsum`).
    nffree: u32,
    frsum: [u32; MAXFRAG as usize],
}

/// fsck_ffs's block accounting over a map of free fragments (`ffs_isblock` and
/// `ffs_fragacct` for each of `nblk` blocks of `frag` fragments), a word at a time where a word
/// is all free or all used. `frag` is 1, 2, 4 or 8, so a block never crosses a word.
fn fragacct(map: &Bitmap, nblk: usize, frag: usize) -> BlockCounts {
    assert!(matches!(frag, 1 | 2 | 4 | 8), "fs_frag {frag}");
    let mut c = BlockCounts { nbfree: 0, free_blocks: Bitmap::new(nblk as i64), nffree: 0, frsum: Default::default() };
    let (per_word, full) = (64 / frag, (1u64 << frag) - 1);
    let mut b = 0;
    while b < nblk {
        let f = b * frag;
        let w = map.0.get(f / 64).copied().unwrap_or(0);
        if f.is_multiple_of(64) && b + per_word <= nblk && (w == 0 || w == !0) {
            if w == !0 {
                c.nbfree += per_word as u32;
                c.free_blocks.set_range(b, b + per_word);
            }
            b += per_word;
            continue;
        }
        let bits = (w >> (f % 64)) & full;
        if bits == full {
            c.nbfree += 1;
            c.free_blocks.set(b as i64);
        } else if bits != 0 {
            c.nffree += bits.count_ones();
            run_lengths(&Bitmap(vec![bits]), frag, |run| c.frsum[run] += 1);
        }
        b += 1;
    }
    c
}

/// Calls `f` with the length of each run of set bits among the first `n` of `map`, in order,
/// whole words at a time where a word is all set or all clear.
fn run_lengths(map: &Bitmap, n: usize, mut f: impl FnMut(usize)) {
    let mut run = 0;
    let mut i = 0;
    while i < n {
        if i.is_multiple_of(64) && i + 64 <= n {
            match map.0[i / 64] {
                0 => {
                    if run > 0 {
                        f(run);
                    }
                    run = 0;
                    i += 64;
                    continue;
                }
                u64::MAX => {
                    run += 64;
                    i += 64;
                    continue;
                }
                _ => {}
            }
        }
        if map.get(i as i64) {
            run += 1;
        } else if run > 0 {
            f(run);
            run = 0;
        }
        i += 1;
    }
    if run > 0 {
        f(run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    /// `n` random bits: all clear, all set, sparse, dense, or in long runs, so that whole
    /// words of each kind and words with edges inside both occur.
    fn random_bits(rng: &mut SmallRng, n: usize) -> Vec<bool> {
        match rng.gen_range(0..5) {
            0 => vec![false; n],
            1 => vec![true; n],
            2 => (0..n).map(|_| rng.gen_bool(0.05)).collect(),
            3 => (0..n).map(|_| rng.gen_bool(0.95)).collect(),
            _ => {
                let mut v = Vec::with_capacity(n);
                while v.len() < n {
                    let (on, len) = (rng.gen_bool(0.5), rng.gen_range(1..200));
                    v.extend(std::iter::repeat_n(on, len.min(n - v.len())));
                }
                v
            }
        }
    }

    /// The bits as a cylinder group map's bytes.
    fn bytes_of(bits: &[bool]) -> Vec<u8> {
        let mut b = vec![0u8; bits.len().div_ceil(8)];
        for (i, _) in bits.iter().enumerate().filter(|(_, &on)| on) {
            b[i / 8] |= 1 << (i % 8);
        }
        b
    }

    #[test]
    fn fragacct_agrees_with_counting_fragment_by_fragment() {
        let mut rng = SmallRng::seed_from_u64(5);
        for round in 0..2000 {
            let frag = [1usize, 2, 4, 8][round % 4];
            let nblk = rng.gen_range(1..400);
            let bits = random_bits(&mut rng, nblk * frag);
            let got = fragacct(&Bitmap::from_bytes(&bytes_of(&bits), bits.len()), nblk, frag);
            // `ffs_isblock` and `ffs_fragacct`, a fragment at a time.
            let mut want =
                BlockCounts { nbfree: 0, free_blocks: Bitmap::new(nblk as i64), nffree: 0, frsum: Default::default() };
            for (b, blk) in bits.chunks(frag).enumerate() {
                if blk.iter().all(|&f| f) {
                    want.nbfree += 1;
                    want.free_blocks.set(b as i64);
                    continue;
                }
                want.nffree += blk.iter().filter(|&&f| f).count() as u32;
                for run in blk.split(|&f| !f).map(|r| r.len()).filter(|&l| l > 0) {
                    want.frsum[run] += 1;
                }
            }
            assert_eq!(got, want, "round {round}: frag {frag}, {nblk} blocks");
        }
    }

    #[test]
    fn word_maps_agree_with_their_bits() {
        let mut rng = SmallRng::seed_from_u64(7);
        for round in 0..2000 {
            let n = rng.gen_range(1..700);
            let mut bits = random_bits(&mut rng, n);
            // A map's bytes may run past the bits that count: those bits are dropped.
            let mut bytes = bytes_of(&bits);
            bytes.push(0xff);
            let mut m = Bitmap::from_bytes(&bytes, n);
            let (lo, hi) = (rng.gen_range(0..n), rng.gen_range(0..=n));
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            let on = rng.gen_bool(0.5);
            m.fill(lo, hi, on);
            bits[lo..hi].fill(on);
            let ones: Vec<usize> = (0..n).filter(|&i| bits[i]).collect();
            assert_eq!(m.iter_ones().collect::<Vec<_>>(), ones, "round {round}: {n} bits, {lo}..{hi} = {on}");
            assert_eq!(m.count_ones(), ones.len() as u64);
            let at = rng.gen_range(0..n + 64);
            let word = (0..64).filter(|k| bits.get(at + k) == Some(&true)).fold(0u64, |w, k| w | 1 << k);
            assert_eq!(m.word_at(at), word, "round {round}: the word at {at}");
            let mut got = Vec::new();
            run_lengths(&m, n, |r| got.push(r));
            let want: Vec<usize> = bits.split(|&b| !b).map(|r| r.len()).filter(|&l| l > 0).collect();
            assert_eq!(got, want, "round {round}: runs");
        }
    }
}
