//! The workloads: a setup that is not recorded, then steps of one or a few operations, each a
//! deterministic function of the seed. One file per family: `names` (creates, removes, trees,
//! hard links), `renames`, `data` (growth into indirect blocks, truncation, fsync), `br` (Block
//! Register reservations), `snapshot`, `xattr` (extended attributes), `falloc` (fallocate and
//! inode flags), `inodes` (lazy inode initialization over several groups), `tmpfile` (files
//! made with no name, then linked), `tails` (files and small directories in fragments); `Mix`
//! interleaves the first eight.

use rand::rngs::SmallRng;
use rand::Rng;

use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Fs, FsResult};

use super::work::Work;
use super::WORKLOADS;

mod bigdir;
mod br;
mod data;
mod falloc;
mod full;
mod inodes;
mod names;
mod renames;
mod snapshot;
mod tails;
mod tmpfile;
mod xattr;

use bigdir::BigDir;
use br::BrWork;
use data::{FsyncWork, GrowIndirect, Truncate};
use falloc::FallocWork;
use full::FullDisk;
use inodes::LazyInodes;
use names::{CreateMany, HardLinks, LinkFsync, MkdirRmdir, RemoveTree};
use renames::{AncestorRename, GrowRenames, RenameBack, RenameOver, RenameStorm, RenameWhiteout, SwapFsync};
use snapshot::SnapWork;
use tails::Tails;
use tmpfile::TmpfileWork;
pub(super) use xattr::xattr_digest;
use xattr::XattrWork;

/// A workload: a setup that is not recorded, then steps, each one or a few operations.
pub(super) trait Workload {
    /// Blocks of the image the workload runs on, at least `default` (the option's).
    fn blocks(&self, default: u64) -> u64 {
        default
    }
    /// Makes the new image's device look used before (what was never written holds old data).
    fn age_device(&self, _dev: &sufs_fs::dev::MemDevice, _sb: &sufs_fs::format::Superblock) {}
    fn setup(&mut self, w: &mut Work) -> FsResult<()>;
    /// One step; false when there is nothing left to do.
    fn step(&mut self, w: &mut Work) -> FsResult<bool>;
}

pub(super) fn make_workload(name: &str, ops: usize) -> Option<Box<dyn Workload>> {
    Some(match name {
        "create-many" => Box::new(CreateMany::default()),
        "remove-tree" => Box::new(RemoveTree { ops, queue: Vec::new() }),
        "mkdir-rmdir" => Box::new(MkdirRmdir::default()),
        "rename-storm" => Box::new(RenameStorm::default()),
        "grow-indirect" => Box::new(GrowIndirect { ops, done: 0, pos: 0 }),
        "truncate" => Box::new(Truncate),
        "hard-links" => Box::new(HardLinks::default()),
        "fsync" => Box::new(FsyncWork::default()),
        "swap-fsync" => Box::new(SwapFsync::default()),
        "ancestor-rename" => Box::new(AncestorRename::default()),
        "rename-over" => Box::new(RenameOver::default()),
        "link-fsync" => Box::new(LinkFsync::default()),
        "rename-back" => Box::new(RenameBack::default()),
        "rename-whiteout" => Box::new(RenameWhiteout::default()),
        "br" => Box::new(BrWork::default()),
        "snapshot" => Box::new(SnapWork::default()),
        "xattr" => Box::new(XattrWork::default()),
        "falloc" => Box::new(FallocWork::default()),
        "lazy-inodes" => Box::new(LazyInodes::default()),
        "tmpfile" => Box::new(TmpfileWork::default()),
        "grow-renames" => Box::new(GrowRenames::default()),
        "full-disk" => Box::new(FullDisk::default()),
        "big-dir" => Box::new(BigDir::default()),
        "tails" => Box::new(Tails::default()),
        "mix" => {
            let each = (ops / 8).max(4);
            let subs = WORKLOADS[..8].iter().filter_map(|n| make_workload(n, each)).map(|w| (w, true)).collect();
            Box::new(Mix { subs })
        }
        _ => return None,
    })
}

pub(super) fn pick<T: Clone>(rng: &mut SmallRng, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())].clone())
}

/// A digest of a file tree (every name, type and file's bytes, but `/.snap`), in a fixed order.
pub(super) fn tree_digest(fs: &mut Fs) -> FsResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, path)) = stack.pop() {
        let mut entries = fs.readdir(dir, 0, usize::MAX)?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            if e.name == b"." || e.name == b".." || (dir == ROOT_INO && e.name == b".snap") {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let d = fs.iget(e.ino)?;
            out.extend_from_slice(p.as_bytes());
            out.push(0);
            if d.is_dir() {
                out.push(b'd');
                stack.push((e.ino, p));
            } else {
                let data = fs.read(e.ino, 0, d.size as usize)?;
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
                out.extend_from_slice(&crc32c::crc32c(&data).to_le_bytes());
            }
        }
    }
    Ok(out)
}

/// All of them, interleaved at random, each in its own directory.
struct Mix {
    subs: Vec<(Box<dyn Workload>, bool)>,
}

impl Workload for Mix {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for (s, _) in &mut self.subs {
            s.setup(w)?;
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let live: Vec<usize> = (0..self.subs.len()).filter(|&i| self.subs[i].1).collect();
        let Some(i) = pick(w.rng, &live) else {
            return Ok(false);
        };
        if !self.subs[i].0.step(w)? {
            self.subs[i].1 = false;
        }
        Ok(true)
    }
}
