//! Lazy inode initialization (UFS2's `cg_initediblk`): files made round-robin in directories
//! spread over several groups, so that each group's allocator initializes inode blocks as it
//! goes, with some files removed and their inodes reused. The image is big enough for four
//! groups, and the inode blocks mkfs left uninitialized hold stale dinodes, as a reused device
//! would: a group header that reaches the disk counting an inode block before the block's zeros
//! do shows those stale inodes as live, which fsck reports (an inode in use but free in the map).

use rand::Rng;

use sufs_fs::dev::{BlockDevice, MemDevice, WriteKind, WriteReq};
use sufs_fs::format::*;
use sufs_fs::fs::FsResult;

use super::super::promise::join;
use super::super::work::Work;
use super::Workload;

/// Directories the files go in: the first in group 0, the others spread by the allocator.
const DIRS: usize = 4;
/// Files made in each directory before the workload (not recorded).
const PRE: usize = 10;
/// Inode blocks past each group's initialized ones filled with stale dinodes.
const STALE_BLOCKS: u32 = 12;

#[derive(Default)]
pub(super) struct LazyInodes {
    dirs: Vec<String>,
    files: Vec<String>,
    n: usize,
}

impl Workload for LazyInodes {
    fn blocks(&self, default: u64) -> u64 {
        default.max(90_000)
    }
    fn age_device(&self, dev: &MemDevice, sb: &Superblock) {
        stale_inode_blocks(dev, sb);
    }
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/li")?;
        self.dirs.push("/li".into());
        for d in 1..DIRS {
            let p = format!("/li/d{d}");
            w.mkdir(&p)?;
            self.dirs.push(p);
        }
        for i in 0..PRE * DIRS {
            let p = join(&self.dirs[i % DIRS], &format!("pre{i}"));
            w.create(&p, [0, 300][i % 2])?;
            self.files.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        if w.rng.gen_range(0..8) == 0 && !self.files.is_empty() {
            let p = self.files.swap_remove(w.rng.gen_range(0..self.files.len()));
            w.unlink(&p)?;
            return Ok(true);
        }
        self.n += 1;
        let name = w.name("f", self.n);
        let p = join(&self.dirs[self.n % DIRS], &name);
        let len = [0, 100, 5000][w.rng.gen_range(0..3)];
        w.create(&p, len)?;
        self.files.push(p);
        Ok(true)
    }
}

/// Fills the first `STALE_BLOCKS` uninitialized inode blocks of every group with live-looking
/// regular files (mode, one link, no blocks), as a device used before would hold.
fn stale_inode_blocks(dev: &MemDevice, sb: &Superblock) {
    let bs = sb.block_size as usize;
    let mut block = vec![0u8; bs];
    for (k, raw) in block.chunks_exact_mut(DINODE_SIZE).enumerate() {
        sb.encode_dinode(&Dinode::new(S_IFREG | 0o644, 1, 0, 0, (946_684_800, 0), 7 + k as u32), raw);
    }
    let mut header = vec![0u8; bs];
    for cg in 0..sb.ngroups {
        dev.read_block(sb.cg_header_block(cg), &mut header).expect("a header of the new image");
        let initialized =
            ufs2::Cg::decode(&header, sb.ufs2(), cg, false).expect("a group of the new image").hdr.cg_initediblk;
        let first = initialized / sb.inodes_per_block();
        let last = (first + STALE_BLOCKS).min(sb.inode_table_blocks());
        let reqs: Vec<WriteReq> =
            (first..last).map(|b| WriteReq { bno: sb.cg_itable_nth(cg, b as u64), data: &block }).collect();
        dev.write_batch(&reqs, WriteKind::Async).expect("the image's own blocks");
    }
}
