//! Pass 5, fsck_ffs's pass5.c: each group's maps rebuilt from pass 1 and compared with the
//! disk. The inode map from the inodes in use (0 and 1 reserved in group 0), the free-fragment
//! map from the fragments claimed and the metadata (superblock copy, group block, inodes; in
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
            let used_ino = |i: u32| {
                let ino = c * ipg + i;
                ino < UFS_ROOTINO || self.inodes[ino as usize].state != State::Free
            };
            let free = |f: i64| !self.is_meta(base + f) && !self.claimed.get(base + f);
            let mut ndir = 0;
            for i in 0..ipg {
                let ino = (c * ipg + i) as usize;
                if self.is_dir(ino as u32) {
                    ndir += 1;
                }
                if self.inodes[ino].state == State::InUse {
                    if self.inodes[ino].dtype == crate::format::DT_DIR {
                        report.dirs += 1;
                    } else {
                        report.files += 1;
                    }
                }
            }
            for b in 0..howmany(ndblk, frag) {
                let frags = (b * frag..(b + 1) * frag).filter(|&f| f < ndblk && free(f)).count() as i64;
                if frags == frag {
                    report.nbfree += 1;
                } else {
                    report.nffree += frags;
                }
            }
            let Some(g) = self.cgs[c as usize].clone() else {
                all_groups = false;
                continue;
            };
            let first_ino = (c * ipg) as i64;
            let ino_runs = |bad: &dyn Fn(u32) -> bool| runs((0..ipg).map(|i| (first_ino + i as i64, bad(i))));
            let frag_runs = |bad: &dyn Fn(i64) -> bool| runs((0..ndblk).map(|f| (base + f, bad(f))));
            let found: Vec<Finding> = (ino_runs(&|i| !g.inode_used(i) && used_ino(i)).into_iter())
                .map(|(first, last)| Finding::InodesMarkedFree { first: first as u32, last: last as u32 })
                .chain(
                    ino_runs(&|i| g.inode_used(i) && !used_ino(i))
                        .into_iter()
                        .map(|(first, last)| Finding::InodesMarkedUsed { first: first as u32, last: last as u32 }),
                )
                .chain(
                    frag_runs(&|f| g.frag_free(f as u32) && !free(f))
                        .into_iter()
                        .map(|(first, last)| Finding::FragsMarkedFree { first, last }),
                )
                .chain(
                    frag_runs(&|f| !g.frag_free(f as u32) && free(f))
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

    /// A group's header against its own maps (and `ndir` against the directories in use).
    fn header_against_maps(&mut self, c: u32, g: &Cg, ndblk: i64, ndir: i64) {
        let sb = &self.sb;
        let (ipg, frag) = (sb.fs_ipg, sb.fs_frag as u32);
        let m = g.map_counts();
        let cs = g.hdr.cg_cs;
        let mut found = Vec::new();
        for (what, stored, actual) in [
            ("ndir", cs.cs_ndir as i64, ndir),
            ("nbfree", cs.cs_nbfree as i64, m.nbfree as i64),
            ("nffree", cs.cs_nffree as i64, m.nffree as i64),
            ("nifree", cs.cs_nifree as i64, m.nifree as i64),
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
        if sb.fs_contigsumsize > 0 {
            let nclblk = (ndblk / frag as i64) as u32;
            for (first, last) in runs((0..nclblk).map(|b| (b as i64, g.cluster_free(b) != Some(g.block_free(b))))) {
                found.push(Finding::ClusterMap { cg: c, first: first as u32, last: last as u32 });
            }
            let max = sb.fs_contigsumsize as usize;
            let mut sum = vec![0u32; max + 1];
            let mut run = 0;
            for b in 0..=nclblk {
                if b < nclblk && g.block_free(b) {
                    run += 1;
                } else if run > 0 {
                    sum[run.min(max)] += 1;
                    run = 0;
                }
            }
            for (len, (&stored, &actual)) in g.clustersum().iter().zip(&sum).enumerate().skip(1) {
                if stored != actual {
                    found.push(Finding::ClusterSum { cg: c, len, stored, actual });
                }
            }
        }
        let inited = g.hdr.cg_initediblk;
        if let Some(i) = (inited..ipg).find(|&i| g.inode_used(i)) {
            found.push(Finding::PastInitedIblk { cg: c, ino: c * ipg + i, initediblk: inited });
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
