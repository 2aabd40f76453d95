//! A full disk: files whose tails are in fragments grown, truncated up past their direct blocks,
//! preallocated and appended to on a disk with a few blocks free, so that operations fail with
//! ENOSPC part-way (a tail moved to a whole block, then no block for the next one), while
//! truncations, punched holes and removals give space back and fsyncs make promises. A failed
//! operation must leave nothing waiting that no write completes, and every crash state must
//! still be one fsck's oracle accepts.

use rand::Rng;

use sufs_fs::format::NDADDR;
use sufs_fs::fs::falloc::{FallocMode, FallocOp};
use sufs_fs::fs::{FsError, FsResult};

use super::super::work::Work;
use super::super::BS;
use super::Workload;

const FILES: usize = 4;

/// Blocks left free after the setup fills the disk.
const LEFT_FREE: u64 = 6;

#[derive(Default)]
pub(super) struct FullDisk {
    /// Blocks of the filler punched out so far (its logical blocks, from the start).
    punched: u64,
}

/// An operation's ENOSPC is an expected outcome on a full disk; any other error is not.
fn tolerate(r: FsResult<()>) -> FsResult<()> {
    match r {
        Err(FsError::NoSpace) => Ok(()),
        r => r,
    }
}

impl FullDisk {
    /// Gives `n` blocks of the filler back (a hole punched at its start).
    fn give_back(&mut self, w: &mut Work, n: u64) -> FsResult<()> {
        if n == 0 {
            // (A punch of no bytes is EINVAL.)
            return Ok(());
        }
        let bs = BS as u64;
        let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
        w.fallocate("/fu/filler", self.punched * bs, n * bs, punch)?;
        self.punched += n;
        Ok(())
    }
}

impl Workload for FullDisk {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/fu")?;
        let bs = BS as u64;
        for i in 0..FILES {
            // Tails of one to a few fragments, two of them in the last direct block.
            let len = [11 * BS + 1500, 5000, 300, 11 * BS + 3000][i];
            w.create(&format!("/fu/f{i}"), len)?;
        }
        let filler = w.create("/fu/filler", 0)?;
        let chunk = vec![0x5au8; 16 * BS];
        let mut off = 0;
        while let Ok(n) = w.fs.write(filler, off, &chunk) {
            off += n as u64;
        }
        // Loose fragments are taken too, so that tails move rather than grow in place.
        let dir = w.resolve("/fu")?;
        for i in 0.. {
            let Ok((g, _)) = w.fs.create(dir, format!("s{i}").as_bytes(), 0o644, 0, 0) else { break };
            if w.fs.write(g, 0, b"s").is_err() {
                break;
            }
        }
        w.fs.sync_all()?;
        let free = w.fs.statfs().bfree / w.fs.sb.frag();
        let n = LEFT_FREE.saturating_sub(free).min(off / bs);
        self.give_back(w, n)?;
        w.fs.sync_all()
    }

    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let path = format!("/fu/f{}", w.rng.gen_range(0..FILES));
        let size = w.size(&path)?;
        let bs = BS as u64;
        let nd = NDADDR as u64;
        match w.rng.gen_range(0..12) {
            0..=2 => {
                let len = w.rng.gen_range(1..3 * BS);
                tolerate(w.write(&path, size, len))?
            }
            3..=4 => {
                // Past the direct blocks: the tail becomes whole, then the new end needs an
                // indirect block and a block of its own.
                let to = w.rng.gen_range(nd * bs + 1..(nd + 40) * bs).max(size + 1);
                tolerate(w.truncate(&path, to))?
            }
            5 => {
                let len = w.rng.gen_range(1..20 * bs);
                let grow = FallocMode { op: FallocOp::Allocate, keep_size: false };
                tolerate(w.fallocate(&path, size.saturating_sub(100), len, grow))?
            }
            6 => {
                let zero = FallocMode { op: FallocOp::ZeroRange, keep_size: false };
                let len = w.rng.gen_range(1..4 * bs);
                tolerate(w.fallocate(&path, size, len, zero))?
            }
            7 => {
                // Back to a tail in fragments. A new end in a hole needs its block first (UFS2
                // has no file ending in a hole: FFS's ffs_truncate allocates it before it cuts),
                // which a full disk may refuse.
                let to = if w.rng.gen_bool(0.5) { w.rng.gen_range(0..bs) } else { (nd - 1) * bs + 700 };
                tolerate(w.truncate(&path, to.min(size)))?
            }
            8 => tolerate(w.fsync(&path))?,
            9 => {
                if w.rng.gen_bool(0.3) {
                    self.give_back(w, 1)?;
                }
                let (off, len) = (w.rng.gen_range(0..=size), w.rng.gen_range(1..BS));
                tolerate(w.write(&path, off, len))?
            }
            _ => {
                w.unlink(&path)?;
                let len = w.rng.gen_range(1..2 * BS);
                tolerate(w.create(&path, len).map(|_| ()))?;
                if w.resolve(&path).is_err() {
                    w.create(&path, 0)?;
                }
            }
        }
        Ok(true)
    }
}
