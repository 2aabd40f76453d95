//! Tails in fragments (the paper's fragment extension, §3's allocdirect with an old and a new
//! size, and `freefrag`): files grown a byte at a time and by odd lengths around the fragment
//! size through every fragment count of their last block, so that a tail is extended in place
//! or, where a neighbour's tail took the fragments after it, moved to a new run while the old
//! one is freed; tails cut back within their block and rewritten; small directories grown past
//! a fragment by long names and shrunk by removals; fsyncs of files and of new files in those
//! directories make promises throughout. On an image of one fragment a block every tail is a
//! whole block and the workload still checks growth, truncation and fsync.

use rand::Rng;

use sufs_fs::fs::FsResult;

use super::super::work::Work;
use super::super::BS;
use super::Workload;

/// Files whose tails grow and shrink; their first sizes in `setup`.
const FIRST_SIZES: [usize; 6] = [0, 1, 511, 513, 4095, 11 * BS + 1];
/// Small directories grown by long names.
const DIRS: usize = 2;
/// A file past this size is cut back to a tail within its first blocks, so that the workload
/// stays among fragments rather than whole blocks.
const MAX_SIZE: u64 = 14 * BS as u64;

#[derive(Default)]
pub(super) struct Tails {
    /// Steps so far (names of new entries).
    n: usize,
    /// The entries made in each small directory and not removed.
    entries: [Vec<String>; DIRS],
}

impl Tails {
    /// The fragment size of the image.
    fn fsize(w: &Work) -> u64 {
        BS as u64 / w.fs.sb.frag().max(1)
    }

    /// An odd length around the fragment size: one short of it, it, one past it, or anything up
    /// to two blocks.
    fn odd_len(w: &mut Work) -> usize {
        let f = Self::fsize(w) as usize;
        match w.rng.gen_range(0..5) {
            0 => f - 1,
            1 => f,
            2 => f + 1,
            3 => w.rng.gen_range(1..BS),
            _ => w.rng.gen_range(BS..2 * BS),
        }
    }

    /// A step on one of the files: appends, truncations, rewrites, fsyncs.
    fn file_step(&mut self, w: &mut Work) -> FsResult<()> {
        let path = format!("/ta/t{}", w.rng.gen_range(0..FIRST_SIZES.len()));
        let size = w.size(&path)?;
        if size > MAX_SIZE {
            let to = w.rng.gen_range(0..2 * BS as u64);
            return w.truncate(&path, to);
        }
        match w.rng.gen_range(0..9) {
            // A byte at a time, through every fragment count of the last block.
            0..=2 => w.write(&path, size, 1),
            3..=4 => {
                let len = Self::odd_len(w);
                w.write(&path, size, len)
            }
            5 => {
                // Cut back within the tail's block, or anywhere.
                let lo = if w.rng.gen_bool(0.7) { size.saturating_sub(BS as u64) } else { 0 };
                let to = w.rng.gen_range(lo..=size);
                w.truncate(&path, to)
            }
            6 => {
                let off = w.rng.gen_range(0..=size);
                let len = w.rng.gen_range(1..2 * Self::fsize(w) as usize);
                w.write(&path, off, len)
            }
            _ => w.fsync(&path),
        }
    }

    /// A step on a small directory: a long name added (its last fragment filled, then the run
    /// extended or moved), one removed, or a new file in it fsync'ed (its name promised).
    fn dir_step(&mut self, w: &mut Work) -> FsResult<()> {
        let d = w.rng.gen_range(0..DIRS);
        self.n += 1;
        match w.rng.gen_range(0..6) {
            0..=2 => {
                let pad = w.rng.gen_range(40..200);
                let path = format!("/ta/d{d}/e{}{}", self.n, "x".repeat(pad));
                w.create(&path, 0)?;
                self.entries[d].push(path);
            }
            3 => {
                if self.entries[d].is_empty() {
                    return Ok(());
                }
                let i = w.rng.gen_range(0..self.entries[d].len());
                let path = self.entries[d].swap_remove(i);
                w.unlink(&path)?;
            }
            _ => {
                let path = format!("/ta/d{d}/s{}", self.n);
                let len = Self::odd_len(w);
                w.create(&path, len)?;
                w.fsync(&path)?;
                self.entries[d].push(path);
            }
        }
        Ok(())
    }
}

impl Workload for Tails {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/ta")?;
        for (i, len) in FIRST_SIZES.iter().enumerate() {
            w.create(&format!("/ta/t{i}"), *len)?;
        }
        for d in 0..DIRS {
            w.mkdir(&format!("/ta/d{d}"))?;
        }
        Ok(())
    }

    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        if w.rng.gen_bool(0.7) {
            self.file_step(w)?;
        } else {
            self.dir_step(w)?;
        }
        Ok(true)
    }
}
