//! fallocate and inode flags: files preallocated (growing and past their size), holes punched
//! and ranges zeroed across the direct and indirect blocks, flags set and cleared, each often
//! followed by an fsync whose promise (the file's contents, its flags) must then hold in every
//! crash state.

use rand::Rng;

use sufs_fs::format::NDADDR;
use sufs_fs::fs::falloc::{FallocMode, FallocOp};
use sufs_fs::fs::flags::{FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL};
use sufs_fs::fs::FsResult;

use super::super::work::Work;
use super::super::BS;
use super::Workload;

const FILES: usize = 4;

#[derive(Default)]
pub(super) struct FallocWork {
    /// A file whose immutable or append-only flag the next step clears.
    frozen: Option<String>,
}

impl Workload for FallocWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/fa")?;
        for i in 0..FILES {
            w.create(&format!("/fa/f{i}"), 3 * BS + 100 * i)?;
        }
        Ok(())
    }

    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        if let Some(p) = self.frozen.take() {
            let keep = if w.rng.gen_bool(0.5) { FS_NODUMP_FL } else { 0 };
            w.set_flags(&p, keep)?;
            w.fsync_flags(&p)?;
            return Ok(true);
        }
        let path = format!("/fa/f{}", w.rng.gen_range(0..FILES));
        let size = w.size(&path)?;
        let bs = BS as u64;
        let p = w.fs.sb.ptrs_per_block();
        // Anywhere in the direct blocks, the single indirect block and the start of the double.
        let reach = (NDADDR as u64 + p + 8) * bs;
        let off = if w.rng.gen_bool(0.5) { w.rng.gen_range(0..=size) } else { w.rng.gen_range(0..reach) };
        let len = w.rng.gen_range(1..24 * bs);
        let (op, keep_size) = match w.rng.gen_range(0..10) {
            0..=2 => (FallocOp::Allocate, false),
            3..=4 => (FallocOp::Allocate, true),
            5..=6 => (FallocOp::PunchHole, true),
            7 => (FallocOp::ZeroRange, w.rng.gen_bool(0.5)),
            8 => {
                let mut f = [FS_NODUMP_FL, FS_NOATIME_FL][w.rng.gen_range(0..2)];
                if w.rng.gen_bool(0.4) {
                    f |= [FS_IMMUTABLE_FL, FS_APPEND_FL][w.rng.gen_range(0..2)];
                    self.frozen = Some(path.clone());
                }
                w.set_flags(&path, f)?;
                w.fsync_flags(&path)?;
                return Ok(true);
            }
            _ => {
                let n = w.rng.gen_range(1..3 * BS);
                w.write(&path, off.min(size), n)?;
                return Ok(true);
            }
        };
        // UFS2 holds no block past a file's size: there, the file grows (posix_fallocate).
        let keep_size = keep_size && (op == FallocOp::PunchHole || off + len <= size);
        w.fallocate(&path, off, len, FallocMode { op, keep_size })?;
        if w.rng.gen_bool(0.6) {
            w.fsync(&path)?;
        }
        Ok(true)
    }
}
