//! A snapshot's first copies on a UFS2 image, as FreeBSD's `ffs_snapshot` makes them: the
//! groups (`cgaccount`: a block wholly free in its group's map is `BLK_NOCOPY`), with the
//! blocks of snapshots freed in the copies (`mapacct_ufs2`), the superblock with those counts and
//! no snapshot listed (`copy_fs`), and the summary area at `fs_csaddr` with each frozen group's
//! counts. The frozen file system then passes fsck as it stands. The groups are decoded and
//! changed through `Cg` and `CgAlloc` (crates/sufs-fs/src/format/ufs2/), never as raw bytes.

use std::collections::HashSet;

use super::snapshot::FrozenGroups;
use super::{Fs, FsError, FsResult};
use crate::format::ufs2::{Cg, CgAlloc, LeField};
use crate::format::*;

impl Fs {
    /// The UFS2 superblock as the allocator keeps it (its counts the groups' now).
    fn snap_ufs2_super(&self) -> crate::format::ufs2::Superblock {
        self.alloc.ufs2_super().clone()
    }

    /// Group `cg` decoded from the cache.
    fn snap_ufs2_cg(&mut self, u: &crate::format::ufs2::Superblock, cg: u32) -> FsResult<Cg> {
        let buf = self.cache.read(self.sb.cg_header_block(cg))?;
        Cg::decode(buf, u, cg, false).map_err(|e| FsError::Corrupt(format!("group {cg}: {e}")))
    }

    /// Whether every fragment of logical block `x` is free in its group's map (`ffs_isblock`).
    pub(super) fn snap_wholly_free(&mut self, x: u64) -> FsResult<bool> {
        let u = self.snap_ufs2_super();
        let b = x * self.sb.frag();
        let cg = self.sb.cg_of_block(b);
        let g = self.snap_ufs2_cg(&u, cg)?;
        Ok(g.block_free(((b - self.sb.cg_start(cg)) / self.sb.frag()) as u32))
    }

    /// The frozen groups: each group's map as it is now (its wholly free blocks recorded), the
    /// blocks of snapshots (`owned`, whole blocks) freed in a copy through the group's allocator,
    /// which keeps the counts, cluster maps and `fs_cstotal` right; the copy is encoded with its
    /// check hash.
    pub(super) fn snap_frozen_groups(&mut self, owned: &HashSet<u64>) -> FsResult<FrozenGroups> {
        let mut u = self.snap_ufs2_super();
        let frag = self.sb.frag();
        let mut f = FrozenGroups::new(self.snap_nblocks());
        let mut owned: Vec<u64> = owned.iter().copied().collect();
        owned.sort_unstable();
        for cg in 0..self.sb.ngroups {
            let mut g = self.snap_ufs2_cg(&u, cg)?;
            let (start, len) = (self.sb.cg_start(cg), self.sb.cg_blocks(cg) as u64);
            assert_eq!(start % frag, 0, "group {cg} starts inside a block");
            for b in 0..len / frag {
                if g.block_free(b as u32) {
                    f.set_free_then(start / frag + b);
                }
            }
            let lo = owned.partition_point(|&b| b < start);
            let hi = owned.partition_point(|&b| b < start + len);
            {
                let mut a = CgAlloc::resume(&mut u, &mut g);
                for &b in &owned[lo..hi] {
                    a.free(b as i64, frag as u32)
                        .map_err(|e| FsError::Corrupt(format!("snapshot block {b} in group {cg}: {e}")))?;
                }
            }
            let cs = g.hdr.cg_cs;
            f.csums.push(crate::format::ufs2::Csum {
                cs_ndir: cs.cs_ndir,
                cs_nbfree: cs.cs_nbfree,
                cs_nifree: cs.cs_nifree,
                cs_nffree: cs.cs_nffree,
            });
            f.cgs.push(g.encode(&u));
        }
        f.total = u.fs_cstotal;
        Ok(f)
    }

    /// Fills the first copies (logical block, copy) on UFS2: each block as the disk holds it
    /// (everything was written first; an inode block from the cache), the frozen group, the
    /// frozen superblock and summary area patched in where they lie, the snapshots' inodes
    /// expunged (`snap_inos`).
    pub(super) fn snap_fill_copies(
        &mut self,
        copies: &[(u64, u64)],
        frozen: &FrozenGroups,
        snap_inos: &[u32],
    ) -> FsResult<()> {
        let (bs, frag) = (self.sb.block_size as u64, self.sb.frag());
        // The frozen superblock: the frozen counts, clean, no snapshot listed.
        let mut fsb = self.sb.clone();
        fsb.flags = (fsb.flags & SB_SOFTDEP) | SB_CLEAN;
        fsb.snapshots = [0; MAX_SNAPSHOTS];
        fsb.write_time = self.clock.wall().0;
        let mut u = fsb.to_ufs2();
        u.fs_cstotal = frozen.total;
        u.fs_fmod = 0;
        let sblock = u.encode();
        let mut cs = vec![0u8; u.fragroundup(u.fs_cssize as u64) as usize];
        for (i, c) in frozen.csums.iter().enumerate() {
            LeField::put(c, &mut cs, i * 16);
        }
        let areas: [(u64, &[u8]); 2] = [(u.fs_sblockloc as u64, &sblock), (u.fsb_offset(u.fs_csaddr), &cs)];
        for &(x, c) in copies {
            let at = x * frag;
            let mut data = vec![0u8; bs as usize];
            if self.sb.is_cg_header(at) {
                self.cache.device().read_block(at, &mut data)?;
                let g = &frozen.cgs[self.sb.cg_of_block(at) as usize];
                data[..g.len()].copy_from_slice(g);
            } else if snap_inos.iter().any(|&i| self.sb.inode_location(i).0 == at) {
                data.copy_from_slice(self.cache.read(at)?);
                self.snap_expunge_inodes(at, &mut data, snap_inos);
            } else {
                self.cache.device().read_block(at, &mut data)?;
            }
            let (lo, hi) = (x * bs, (x + 1) * bs);
            for &(off, bytes) in &areas {
                let (s, e) = (off.max(lo), (off + bytes.len() as u64).min(hi));
                if s < e {
                    data[(s - lo) as usize..(e - lo) as usize]
                        .copy_from_slice(&bytes[(s - off) as usize..(e - off) as usize]);
                }
            }
            self.cache.create(c).copy_from_slice(&data);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::super::snapshot::{shared, tests::tree, FrozenDevice};
    use crate::clock::SimClock;
    use crate::dev::{read_bytes, BlockDevice, MemDevice};
    use crate::format::*;
    use crate::fs::{Fs, MountOptions, Ordering, SetAttr};

    /// A 32 MiB UFS2 image as newfs makes it, 4 KiB blocks of `fsize` fragments.
    pub(in crate::fs) fn image(fsize: usize) -> Arc<MemDevice> {
        crate::format::ufs2::newfs::mem_image(32 << 20, fsize)
    }

    fn mount(dev: &Arc<MemDevice>) -> Fs {
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap()
    }

    /// The UFS2 checker's findings on `dev`.
    fn findings(dev: &(dyn BlockDevice + 'static)) -> Vec<String> {
        let len = dev.num_blocks() * dev.addr_unit() as u64;
        let r = crate::fsck::ufs2::check(dev, len, &Default::default()).unwrap();
        r.findings.iter().map(|f| f.to_string()).collect()
    }

    /// Snapshot `name` of `fs`: the tree it shows, and the UFS2 checker's findings on it.
    fn frozen(fs: Fs, name: &[u8]) -> (Fs, BTreeMap<String, Option<Vec<u8>>>, Vec<String>) {
        let shared_fs = shared(fs);
        let frozen = FrozenDevice::new(shared_fs.clone(), name).unwrap();
        let found = findings(&frozen);
        let frozen: Arc<dyn BlockDevice> = Arc::new(frozen);
        let ro = MountOptions { readonly: true, ..Default::default() };
        let mut ffs = Fs::mount(frozen.clone(), ro, Arc::new(SimClock::new())).unwrap();
        let t = tree(&mut ffs);
        drop((ffs, frozen));
        (Arc::try_unwrap(shared_fs).ok().unwrap().into_inner().unwrap(), t, found)
    }

    /// Tails in fragments shrunk (fragments freed from blocks a snapshot shares, then handed out
    /// again to small files) and grown, a big file overwritten then removed (claimed by the
    /// oldest snapshot), the oldest deleted (its claims handed to the next): each snapshot keeps
    /// its moment, every image and frozen file system is clean for the UFS2 checker, and all
    /// space comes back.
    #[test]
    fn ufs2_snapshots_copy_shared_fragments_claim_and_hand_over() {
        for fsize in [4096, 1024, 512] {
            let dev = image(fsize);
            let mut fs = mount(&dev);
            let free0 = fs.statfs().bfree;
            let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
            let mut files = Vec::new();
            for i in 0..12u8 {
                let (f, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
                fs.write(f, 0, &vec![i + 1; 700 + i as usize * 1900]).unwrap();
                files.push(f);
            }
            let (big, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
            fs.write(big, 0, &vec![9u8; 300 * 4096 + 1000]).unwrap();
            fs.sync_all().unwrap();
            let before = tree(&mut fs);
            fs.snapshot_create(b"a").unwrap();
            for (i, &f) in files.iter().enumerate() {
                let size = fs.iget(f).unwrap().size;
                if i % 2 == 0 {
                    fs.setattr(f, &SetAttr { size: Some(size / 3), ..Default::default() }).unwrap();
                } else {
                    fs.write(f, size, &vec![0x55; 1500]).unwrap();
                }
            }
            fs.write(big, 4096 * 7, &vec![1u8; 4096 * 20]).unwrap();
            fs.sync_all().unwrap();
            for i in 0..40u8 {
                let (f, _) = fs.create(d, format!("s{i}").as_bytes(), 0o644, 0, 0).unwrap();
                fs.write(f, 0, &vec![0xa0 | (i & 15); 200 + (i as usize % 7) * 500]).unwrap();
            }
            fs.sync_all().unwrap();
            let mid = tree(&mut fs);
            let (back, t, found) = frozen(fs, b"a");
            fs = back;
            assert_eq!(found, Vec::<String>::new(), "{fsize}: frozen a");
            assert_eq!(t, before, "{fsize}: a shows its moment");
            fs.snapshot_create(b"b").unwrap();
            fs.unlink(ROOT_INO, b"big").unwrap();
            fs.sync_all().unwrap();
            let (cow, claimed) = fs.snapshot_counters();
            assert!(cow > 0 && claimed > 0, "{fsize}: cow {cow} claimed {claimed}");
            fs.snapshot_delete(b"a").unwrap();
            fs.sync_all().unwrap();
            let (mut fs, t, found) = frozen(fs, b"b");
            assert_eq!(found, Vec::<String>::new(), "{fsize}: frozen b");
            assert_eq!(t, mid, "{fsize}: b shows its moment after a went");
            fs.snapshot_delete(b"b").unwrap();
            for i in 0..12 {
                fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
            }
            for i in 0..40 {
                fs.unlink(d, format!("s{i}").as_bytes()).unwrap();
            }
            fs.rmdir(ROOT_INO, b"d").unwrap();
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, free0, "{fsize}: every fragment back");
            fs.unmount().unwrap();
            assert_eq!(findings(dev.as_ref()), Vec::<String>::new(), "{fsize}");
            let sb = Superblock::probe(|off, buf| read_bytes(dev.as_ref(), off, buf)).unwrap();
            assert_eq!(sb.snapshots, [0; MAX_SNAPSHOTS]);
        }
    }
}
