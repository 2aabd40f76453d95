//! Workloads of names: files created and removed in growing directories, trees removed children
//! first, directories made and removed, hard links made, removed, renamed and fsync'ed.

use rand::Rng;

use sufs_fs::fs::FsResult;

use super::super::promise::{join, under};
use super::super::work::Work;
use super::{pick, Workload};

/// Many files, of a few sizes, in two directories that grow past a block; some removed, among
/// them names made before the workload.
#[derive(Default)]
pub(super) struct CreateMany {
    pre: Vec<String>,
    files: Vec<String>,
    n: usize,
}

impl Workload for CreateMany {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/cm")?;
        w.mkdir("/cm/sub")?;
        for i in 0..8 {
            let p = format!("/cm/pre{i}");
            let len = w.rng.gen_range(0..6000);
            w.create(&p, len)?;
            self.pre.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let r = w.rng.gen_range(0..10);
        if r < 7 || self.files.is_empty() {
            self.n += 1;
            let dir = if w.rng.gen_bool(0.7) { "/cm" } else { "/cm/sub" };
            let name = w.name("f", self.n);
            let p = join(dir, &name);
            let len = [0, 100, 4096, 9000][w.rng.gen_range(0..4)];
            w.create(&p, len)?;
            self.files.push(p);
        } else {
            let list = if r < 9 || self.pre.is_empty() { &mut self.files } else { &mut self.pre };
            let p = list.swap_remove(w.rng.gen_range(0..list.len()));
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Trees made before the workload removed one entry at a time, children first.
pub(super) struct RemoveTree {
    pub(super) ops: usize,
    /// What is left to remove, last first (path, is a directory).
    pub(super) queue: Vec<(String, bool)>,
}

impl Workload for RemoveTree {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/rt")?;
        w.mkdir("/rt/keep")?;
        w.create("/rt/keep/file", 3000)?;
        let trees = (self.ops / 16).max(1);
        let per = (self.ops / trees).max(6);
        let mut order = Vec::new();
        for t in 0..trees {
            let root = format!("/rt/t{t}");
            let dirs = [root.clone(), format!("{root}/a"), format!("{root}/a/b"), format!("{root}/c")];
            for d in &dirs {
                w.mkdir(d)?;
            }
            // Files spread over the directories; the removal order is post-order.
            let mut files: Vec<Vec<String>> = vec![Vec::new(); dirs.len()];
            for i in 0..per.saturating_sub(dirs.len()) {
                let k = w.rng.gen_range(0..dirs.len());
                let name = w.name("f", i);
                let p = join(&dirs[k], &name);
                let len = [0, 700, 5000][w.rng.gen_range(0..3)];
                w.create(&p, len)?;
                files[k].push(p);
            }
            for k in [2, 1, 3, 0] {
                order.extend(files[k].drain(..).map(|p| (p, false)));
                order.push((dirs[k].clone(), true));
            }
        }
        order.reverse();
        self.queue = order;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let Some((p, is_dir)) = self.queue.pop() else {
            return Ok(false);
        };
        if is_dir {
            w.rmdir(&p)?;
        } else {
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Directories nested up to six deep, made and removed at random, a few files among them. As
/// through a mount, half the directories and files removed are still held by the kernel (a
/// lookup count, a process's working directory or open file) and forgotten some steps later (a tenth of the steps forget the oldest):
/// removed, they stay allocated without a name until then, a directory with its "..".
#[derive(Default)]
pub(super) struct MkdirRmdir {
    dirs: Vec<String>,
    files: Vec<String>,
    n: usize,
    /// Inodes removed while held, oldest first.
    held: Vec<u32>,
}

impl Workload for MkdirRmdir {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/mr", "/mr/p0", "/mr/p1", "/mr/p0/q"] {
            w.mkdir(d)?;
        }
        self.dirs = vec!["/mr/p0".into(), "/mr/p1".into(), "/mr/p0/q".into()];
        w.create("/mr/p0/file", 100)?;
        self.files.push("/mr/p0/file".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        if !self.held.is_empty() && w.rng.gen_range(0..10) == 0 {
            let ino = self.held.remove(0);
            w.forget(ino)?;
            return Ok(true);
        }
        let r = w.rng.gen_range(0..20);
        let hold = w.rng.gen_bool(0.5);
        let empty: Vec<String> = self
            .dirs
            .iter()
            .filter(|d| !self.dirs.iter().chain(&self.files).any(|x| x != *d && under(x, d)))
            .cloned()
            .collect();
        if r < 11 || empty.is_empty() {
            let mut parents: Vec<String> = self.dirs.iter().filter(|d| d.matches('/').count() < 7).cloned().collect();
            parents.push("/mr".into());
            let parent = pick(w.rng, &parents).unwrap_or_else(|| "/mr".into());
            let name = w.name("n", self.n);
            let p = join(&parent, &name);
            w.mkdir(&p)?;
            self.dirs.push(p);
        } else if r < 17 {
            let d = pick(w.rng, &empty).unwrap_or_default();
            if hold {
                self.held.push(w.hold(&d)?);
            }
            w.rmdir(&d)?;
            self.dirs.retain(|x| *x != d);
        } else if r < 19 || self.files.is_empty() {
            let parent = pick(w.rng, &self.dirs).unwrap_or_else(|| "/mr".into());
            let p = join(&parent, &format!("file{}", self.n));
            w.create(&p, 200)?;
            self.files.push(p);
        } else {
            let i = w.rng.gen_range(0..self.files.len());
            let p = self.files.swap_remove(i);
            if hold {
                self.held.push(w.hold(&p)?);
            }
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Hard links made, removed (the last one frees the file), renamed over each other, and files
/// written through any of their names.
#[derive(Default)]
pub(super) struct HardLinks {
    /// Every name and the file it names.
    names: Vec<(String, usize)>,
    files: usize,
    n: usize,
}

impl Workload for HardLinks {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/hl", "/hl/d1", "/hl/d2"] {
            w.mkdir(d)?;
        }
        for i in 0..5 {
            let p = format!("/hl/d1/f{i}");
            w.create(&p, 2000 + i * 1000)?;
            self.names.push((p, i));
        }
        self.files = 5;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let dirs = ["/hl", "/hl/d1", "/hl/d2"];
        let r = w.rng.gen_range(0..10);
        if self.names.is_empty() || r == 9 {
            let p = join(dirs[w.rng.gen_range(0..3)], &format!("new{}", self.n));
            w.create(&p, 1200)?;
            self.names.push((p, self.files));
            self.files += 1;
            return Ok(true);
        }
        let i = w.rng.gen_range(0..self.names.len());
        let (src, file) = self.names[i].clone();
        match r {
            0..=3 => {
                let p = join(dirs[w.rng.gen_range(0..3)], &w.name("l", self.n));
                w.link(&src, &p)?;
                self.names.push((p, file));
            }
            4..=6 => {
                w.unlink(&src)?;
                self.names.swap_remove(i);
            }
            7 => {
                let j = w.rng.gen_range(0..self.names.len());
                let (dst, _) = self.names[j].clone();
                w.rename(&src, &dst)?;
                if dst != src && self.names[j].1 != file {
                    self.names.retain(|n| n.0 != src);
                    if let Some(k) = self.names.iter().position(|n| n.0 == dst) {
                        self.names[k].1 = file;
                    }
                }
            }
            _ => {
                let off = w.rng.gen_range(0..20000);
                w.write(&src, off, 3000)?;
            }
        }
        Ok(true)
    }
}

/// Hard links made (into new directories too, whose own names are not on disk yet), then the
/// file fsync'ed by the new name; old names removed, files rewritten and fsync'ed by any name.
#[derive(Default)]
pub(super) struct LinkFsync {
    /// Every name and the file it names.
    names: Vec<(String, usize)>,
    dirs: Vec<String>,
    files: usize,
    n: usize,
}

impl Workload for LinkFsync {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/lk", "/lk/a", "/lk/b"] {
            w.mkdir(d)?;
            self.dirs.push(d.into());
        }
        for i in 0..4 {
            let p = format!("/lk/a/f{i}");
            w.create(&p, 1000 + i * 3000)?;
            self.names.push((p, i));
        }
        self.files = 4;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        if self.names.is_empty() {
            let p = format!("/lk/f{n}");
            w.create(&p, 2500)?;
            self.names.push((p, self.files));
            self.files += 1;
            return Ok(true);
        }
        let i = w.rng.gen_range(0..self.names.len());
        let (src, file) = self.names[i].clone();
        match w.rng.gen_range(0..10) {
            0..=5 => {
                let dir = if w.rng.gen_range(0..4) == 0 {
                    let parent = pick(w.rng, &self.dirs).unwrap_or_else(|| "/lk".into());
                    let d = join(&parent, &format!("d{n}"));
                    w.mkdir(&d)?;
                    self.dirs.push(d.clone());
                    d
                } else {
                    pick(w.rng, &self.dirs).unwrap_or_else(|| "/lk".into())
                };
                let p = join(&dir, &w.name("l", n));
                w.link(&src, &p)?;
                self.names.push((p.clone(), file));
                if w.rng.gen_bool(0.3) {
                    let len = w.rng.gen_range(1..5000);
                    w.write(&p, 0, len)?;
                }
                w.fsync(&p)?;
            }
            6..=7 => {
                w.unlink(&src)?;
                self.names.swap_remove(i);
            }
            _ => {
                let off = w.rng.gen_range(0..8000);
                w.write(&src, off, 2000)?;
                w.fsync(&src)?;
            }
        }
        Ok(true)
    }
}
