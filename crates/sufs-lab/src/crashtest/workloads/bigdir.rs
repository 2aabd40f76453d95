//! A directory grown past its direct blocks: names long enough that a dozen blocks fill in the
//! setup, then creates (and a few removals and fsyncs) that give it blocks under its indirect
//! block while the crash states are recorded. A new block's pointer in the indirect block must be
//! on disk before the directory's size covers it: a size past a missing block is a hole in the
//! directory, which no ordering may leave (fstests' generic/705 found one under `sync`).

use rand::Rng;

use sufs_fs::format::NDADDR;
use sufs_fs::fs::FsResult;

use super::super::work::Work;
use super::super::BS;
use super::Workload;

/// Bytes of each name: about 19 entries a 4 KiB block.
const NAME: usize = 200;

#[derive(Default)]
pub(super) struct BigDir {
    names: Vec<String>,
    n: usize,
}

impl BigDir {
    fn next_name(&mut self) -> String {
        self.n += 1;
        let tag = format!("{}-", self.n);
        format!("/bd/{tag}{}", "n".repeat(NAME - tag.len()))
    }
}

impl Workload for BigDir {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/bd")?;
        // Just short of the direct blocks' end, so that the recorded creates cross it.
        while w.size("/bd")? < (NDADDR as u64 - 1) * BS as u64 {
            let p = self.next_name();
            w.create(&p, 0)?;
            self.names.push(p);
        }
        Ok(())
    }

    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        match w.rng.gen_range(0..10) {
            0 if !self.names.is_empty() => {
                let p = self.names.swap_remove(w.rng.gen_range(0..self.names.len()));
                w.unlink(&p)?;
            }
            1 => {
                let dir = w.resolve("/bd")?;
                w.fsync_ino(dir)?
            }
            _ => {
                let p = self.next_name();
                let len = [0, 100, 5000][w.rng.gen_range(0..3)];
                w.create(&p, len)?;
                if w.rng.gen_bool(0.1) {
                    w.fsync(&p)?;
                }
                self.names.push(p);
            }
        }
        Ok(true)
    }
}
