//! Workloads of file data: a file grown into its indirect blocks, files truncated and extended,
//! files written and fsync'ed.

use rand::Rng;

use sufs_fs::fs::FsResult;

use sufs_fs::format::NDADDR;

use super::super::work::Work;
use super::super::BS;
use super::{pick, Workload};

/// A file grown through its direct blocks, then by strides through the single indirect block and
/// into the double indirect tree; a second file appended by small writes beside it.
pub(super) struct GrowIndirect {
    pub(super) ops: usize,
    pub(super) done: usize,
    /// Next logical block of the big file.
    pub(super) pos: u64,
}

impl Workload for GrowIndirect {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/gi")?;
        w.create("/gi/big", 0)?;
        w.create("/gi/small", 3000)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let p = w.fs.sb.ptrs_per_block();
        // Into the third single-indirect block under the double indirect one.
        let target = NDADDR as u64 + p + 2 * p + 8;
        self.done += 1;
        if w.rng.gen_range(0..10) < 3 {
            let size = w.size("/gi/small")?;
            let len = w.rng.gen_range(500..3000);
            w.write("/gi/small", size, len)?;
            return Ok(true);
        }
        let k = w.rng.gen_range(1..=3u64);
        let len = k as usize * BS - w.rng.gen_range(0..BS / 2);
        w.write("/gi/big", self.pos * BS as u64, len)?;
        self.pos += k;
        // Strides reach the double indirect tree by half-way; dense growth after that.
        let left = (self.ops / 2).saturating_sub(self.done).max(1) as u64;
        if self.done > 4 {
            self.pos += (target.saturating_sub(self.pos) / left).saturating_sub(k);
        }
        Ok(true)
    }
}

/// Files reaching into single and double indirect blocks, truncated partly and fully, extended
/// again by writes and by a larger size.
pub(super) struct Truncate;

const TRUNC_FILES: usize = 6;

impl Workload for Truncate {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/tr")?;
        let p = w.fs.sb.ptrs_per_block();
        let nd = NDADDR as u64;
        // (file, blocks written)
        let layouts: [Vec<u64>; TRUNC_FILES] = [
            vec![0],
            (0..40).collect(),
            vec![0, 5, nd + 3, nd + 200, nd + p + 2, nd + p + 600],
            (0..nd + 20).collect(),
            vec![nd + p + 3 * p + 1],
            vec![],
        ];
        for (i, blocks) in layouts.iter().enumerate() {
            let path = format!("/tr/t{i}");
            w.create(&path, 1000)?;
            for &b in blocks {
                w.write(&path, b * BS as u64, BS)?;
            }
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let path = format!("/tr/t{}", w.rng.gen_range(0..TRUNC_FILES));
        let size = w.size(&path)?;
        let p = w.fs.sb.ptrs_per_block();
        let nd = NDADDR as u64;
        let bs = BS as u64;
        match w.rng.gen_range(0..10) {
            0 => w.truncate(&path, 0)?,
            1..=3 => {
                let to = w.rng.gen_range(0..=size);
                w.truncate(&path, to)?
            }
            4 => w.truncate(&path, nd * bs - 100)?,
            5 => {
                let to = w.rng.gen_range(nd..nd + p) * bs + w.rng.gen_range(0..bs);
                w.truncate(&path, to.min(size))?
            }
            6 => {
                // Often within the last block: with fragments its run grows to the new end.
                let more =
                    if w.rng.gen_bool(0.5) { w.rng.gen_range(1..bs) } else { w.rng.gen_range(1..(nd + 2 * p) * bs) };
                w.truncate(&path, size + more)?
            }
            _ => {
                let b = w.rng.gen_range(0..nd + p + 2 * p);
                let len = w.rng.gen_range(1..2 * BS);
                w.write(&path, b * bs, len)?
            }
        }
        Ok(true)
    }
}

/// Files written and fsync'ed (new ones, some in new directories, and rewrites of fsync'ed ones),
/// with unsynced creates and removes around them.
#[derive(Default)]
pub(super) struct FsyncWork {
    synced: Vec<String>,
    others: Vec<String>,
    n: usize,
}

impl Workload for FsyncWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/fs")?;
        w.mkdir("/fs/d")?;
        w.create("/fs/old", 5000)?;
        self.synced.push("/fs/old".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        match w.rng.gen_range(0..10) {
            0..=3 => {
                let p = match w.rng.gen_range(0..3) {
                    0 => format!("/fs/f{n}"),
                    1 => format!("/fs/d/f{n}"),
                    _ => {
                        w.mkdir(&format!("/fs/s{n}"))?;
                        format!("/fs/s{n}/f")
                    }
                };
                let len = w.rng.gen_range(0..20000);
                w.create(&p, len)?;
                w.fsync(&p)?;
                self.synced.push(p);
            }
            4..=5 => {
                let p = pick(w.rng, &self.synced).unwrap_or_else(|| "/fs/old".into());
                let size = w.size(&p)?;
                if w.rng.gen_bool(0.3) {
                    let to = w.rng.gen_range(0..=size);
                    w.truncate(&p, to)?;
                } else {
                    let off = w.rng.gen_range(0..=size);
                    let len = w.rng.gen_range(1..9000);
                    w.write(&p, off, len)?;
                }
                w.fsync(&p)?;
            }
            6..=7 => {
                let p = format!("/fs/u{n}");
                w.create(&p, 3000)?;
                self.others.push(p);
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.others) {
                    w.unlink(&p)?;
                    self.others.retain(|x| *x != p);
                }
            }
        }
        Ok(true)
    }
}
