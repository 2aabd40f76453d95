//! O_TMPFILE (`Fs::tmpfile`): files made with no name and written, some fsync'ed while
//! nameless, then given a name by `link` (linkat of /proc/self/fd/N) and most fsync'ed by it,
//! or closed without one (freed at the close); several stay open across steps, so nameless
//! inodes are allocated while other files come and go. A crash may leave a nameless file
//! allocated (a leak fsck reclaims, never a name to it); a name reaches the disk only after the
//! inode it names, with its link count raised, and an fsync by the name promises the data.

use rand::Rng;

use sufs_fs::fs::FsResult;

use super::super::promise::join;
use super::super::work::Work;
use super::{pick, Workload};

/// The directories the files are made in and named in.
const DIRS: [&str; 2] = ["/tf", "/tf/a"];

#[derive(Default)]
pub(super) struct TmpfileWork {
    /// Files open with no name yet.
    open: Vec<u32>,
    /// Names given to them.
    names: Vec<String>,
    n: usize,
}

impl Workload for TmpfileWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in DIRS {
            w.mkdir(d)?;
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let dir = DIRS[w.rng.gen_range(0..DIRS.len())];
        match w.rng.gen_range(0..10) {
            0..=3 => {
                let len = [0, 700, 6000, 60_000][w.rng.gen_range(0..4)];
                let ino = w.tmpfile(dir, len)?;
                if w.rng.gen_bool(0.3) {
                    w.fsync_ino(ino)?;
                }
                self.open.push(ino);
            }
            4..=6 if !self.open.is_empty() => {
                let ino = self.open.swap_remove(w.rng.gen_range(0..self.open.len()));
                let p = join(dir, &w.name("t", n));
                w.link_ino(ino, &p)?;
                if w.rng.gen_bool(0.7) {
                    w.fsync(&p)?;
                }
                w.forget(ino)?;
                self.names.push(p);
            }
            7 if !self.open.is_empty() => {
                let ino = self.open.swap_remove(w.rng.gen_range(0..self.open.len()));
                w.forget(ino)?;
            }
            8 if !self.names.is_empty() => {
                let p = self.names.swap_remove(w.rng.gen_range(0..self.names.len()));
                w.unlink(&p)?;
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.names) {
                    let off = w.rng.gen_range(0..20_000);
                    w.write(&p, off, 3000)?;
                }
            }
        }
        Ok(true)
    }
}
