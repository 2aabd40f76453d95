//! Workloads of renames: a storm of renames within and across directories, names swapped
//! through temporary names, ancestors moved, renames over files, renames undone, and renames
//! that leave whiteouts; most fsync the names they end with.

use rand::Rng;

use sufs_fs::fs::FsResult;

use super::super::promise::{join, split, under};
use super::super::work::Work;
use super::{pick, Workload};

/// Renames of files and directories, within and across directories, to new names and over
/// existing ones (a file over a file, a directory over an empty directory).
#[derive(Default)]
pub(super) struct RenameStorm {
    n: usize,
}

impl Workload for RenameStorm {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/rs", "/rs/a", "/rs/b", "/rs/c", "/rs/a/x", "/rs/b/y", "/rs/c/e0", "/rs/c/e1"] {
            w.mkdir(d)?;
        }
        for (dir, k) in [("/rs/a", 4), ("/rs/b", 4), ("/rs/c", 3), ("/rs/b/y", 2), ("/rs/a/x", 1)] {
            for i in 0..k {
                let len = w.rng.gen_range(0..5000);
                w.create(&format!("{dir}/f{i}"), len)?;
            }
        }
        // A directory whose first block is full (63 entries of 64 bytes after "." and ".."), so
        // that a rename into it grows it by a block.
        w.mkdir("/rs/full")?;
        for i in 0..63 {
            w.create(&format!("/rs/full/{i:02}{}", "-".repeat(53)), 0)?;
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let all = w.walk("/rs")?;
        let mut dirs: Vec<String> = all.iter().filter(|e| e.1).map(|e| e.0.clone()).collect();
        dirs.push("/rs".into());
        let r = w.rng.gen_range(0..20);
        if r == 2 && self.empty_by_renames(w, &all, &dirs)? {
            return Ok(true);
        }
        if r == 3 && self.reuse_name(w, &all)? {
            return Ok(true);
        }
        if r < 2 || all.len() < 4 {
            self.new_entry(w, &all, &dirs, r == 0)?;
            return Ok(true);
        }
        self.rename_one(w, &all, &dirs)?;
        Ok(true)
    }
}

/// `Work::walk`'s entries: path, is a directory, inode.
type Entries = [(String, bool, u32)];

impl RenameStorm {
    /// A leaf directory emptied and removed; false if there is none.
    fn empty_by_renames(&mut self, w: &mut Work, all: &Entries, dirs: &[String]) -> FsResult<bool> {
        // A directory emptied by renaming its files out, then removed at once: its name must
        // stay on disk until the files' new names are reachable.
        let leaves: Vec<&String> = dirs
            .iter()
            .filter(|d| d.as_str() != "/rs" && d.as_str() != "/rs/full")
            .filter(|d| !all.iter().any(|e| e.1 && split(&e.0).0 == d.as_str()))
            .collect();
        if let Some(d) = pick(w.rng, &leaves).cloned() {
            let files: Vec<String> = all.iter().filter(|e| split(&e.0).0 == d).map(|e| e.0.clone()).collect();
            // Out to /rs, or into a directory made now (not reachable on disk yet).
            let to_dir = if w.rng.gen_bool(0.5) {
                let p = format!("/rs/new{}", self.n);
                w.mkdir(&p)?;
                p
            } else {
                "/rs".to_string()
            };
            for (i, f) in files.iter().enumerate() {
                let to = join(&to_dir, &w.name(&format!("out{i}-"), self.n));
                w.rename(f, &to)?;
            }
            w.rmdir(&d)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// A name moved away and taken again; false if nothing can move.
    fn reuse_name(&mut self, w: &mut Work, all: &Entries) -> FsResult<bool> {
        // A name reused at once: its entry moves into a new directory (so its old name stays
        // on disk, hidden), and a new file takes the name and is fsync'ed. The new entry
        // must not land behind the hidden one, where a lookup after a crash finds the old.
        // The name is taken by a new file, fsync'ed; or by another file renamed there; or by
        // a new directory, a file then moved into it.
        let movable: Vec<String> = all.iter().filter(|e| split(&e.0).0 != "/rs/full").map(|e| e.0.clone()).collect();
        if let Some(src) = pick(w.rng, &movable) {
            let (parent, _) = split(&src);
            let p = join(parent, &format!("new{}", self.n));
            w.mkdir(&p)?;
            let to = join(&p, &w.name("m", self.n));
            w.rename(&src, &to)?;
            let files: Vec<String> = all.iter().filter(|e| !e.1 && !under(&e.0, &src)).map(|e| e.0.clone()).collect();
            match w.rng.gen_range(0..3) {
                0 => {
                    w.create(&src, 700)?;
                    w.fsync(&src)?;
                }
                1 if !files.is_empty() => {
                    let f = pick(w.rng, &files).expect("not empty");
                    w.rename(&f, &src)?;
                }
                _ => {
                    w.mkdir(&src)?;
                    if let Some(f) = pick(w.rng, &files) {
                        let to = join(&src, &w.name("m", self.n));
                        w.rename(&f, &to)?;
                    }
                }
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// A new file, or (`with_rename`) a new directory with a file renamed into it at once.
    fn new_entry(&mut self, w: &mut Work, all: &Entries, dirs: &[String], with_rename: bool) -> FsResult<()> {
        let parent = pick(w.rng, dirs).unwrap_or_else(|| "/rs".into());
        let p = join(&parent, &format!("new{}", self.n));
        if with_rename {
            // A new directory, and at once a file renamed into it: the new name is on disk
            // before the directory is reachable, so the old name must stay until it is.
            w.mkdir(&p)?;
            let files: Vec<&(String, bool, u32)> = all.iter().filter(|e| !e.1).collect();
            if let Some((f, _, _)) = pick(w.rng, &files) {
                let to = join(&p, &w.name("m", self.n));
                w.rename(f, &to)?;
            }
        } else {
            w.create(&p, 1500)?;
        }
        Ok(())
    }

    /// A file or directory renamed within or across directories, to a new name or over one of
    /// its kind; a directory sometimes moved again at once.
    fn rename_one(&mut self, w: &mut Work, all: &Entries, dirs: &[String]) -> FsResult<()> {
        // Mostly not the many names of /rs/full.
        let movable: Vec<&(String, bool, u32)> =
            all.iter().filter(|e| split(&e.0).0 != "/rs/full" || w.rng.gen_bool(0.1)).collect();
        let (src, src_dir, _) = match pick(w.rng, &movable) {
            Some(e) => e.clone(),
            None => return Ok(()),
        };
        let (src_parent, _) = split(&src);
        let targets: Vec<String> = dirs.iter().filter(|d| !src_dir || !under(d, &src)).cloned().collect();
        let dst_dir = if w.rng.gen_bool(0.3) {
            src_parent.to_string()
        } else {
            pick(w.rng, &targets).unwrap_or_else(|| "/rs".into())
        };
        // Over an existing name of the same kind, or to a new name.
        let over: Vec<String> = all
            .iter()
            .filter(|e| split(&e.0).0 == dst_dir && e.1 == src_dir && e.0 != src)
            .filter(|e| !e.1 || !all.iter().any(|x| x.0 != e.0 && under(&x.0, &e.0)))
            .filter(|e| !under(&e.0, &src) && !under(&src, &e.0))
            .map(|e| e.0.clone())
            .collect();
        let dst = match pick(w.rng, &over) {
            Some(o) if w.rng.gen_bool(0.5) => o,
            _ => join(&dst_dir, &w.name("r", self.n)),
        };
        w.rename(&src, &dst)?;
        if src_dir && w.rng.gen_bool(0.3) {
            // The same directory moved again at once, while its first rename is in flight.
            let again: Vec<&String> = dirs.iter().filter(|d| !under(d, &src) && !under(d, &dst)).collect();
            if let Some(to_dir) = pick(w.rng, &again).cloned() {
                let to = join(&to_dir, &w.name("again", self.n));
                w.rename(&dst, &to)?;
            }
        }
        Ok(())
    }
}

/// Names swapped through a temporary name (`mv x t; mv y x; mv t y`), then one or both
/// fsync'ed, some after a write: each new name waits on disk for its hidden namesake, the old
/// name of the other file. Files in two directories, so some swaps cross directories.
#[derive(Default)]
pub(super) struct SwapFsync {
    names: Vec<String>,
    n: usize,
}

impl Workload for SwapFsync {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/sw")?;
        w.mkdir("/sw/d")?;
        for i in 0..6 {
            let p = if i % 3 == 2 { format!("/sw/d/x{i}") } else { format!("/sw/x{i}") };
            w.create(&p, 1000 + i * 1500)?;
            self.names.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        if w.rng.gen_range(0..8) == 0 {
            // A new file, made durable, joins the swaps (its name fresh on disk).
            let p = if w.rng.gen_bool(0.5) { format!("/sw/n{n}") } else { format!("/sw/d/n{n}") };
            let len = w.rng.gen_range(0..9000);
            w.create(&p, len)?;
            w.fsync(&p)?;
            self.names.push(p);
            return Ok(true);
        }
        let i = w.rng.gen_range(0..self.names.len());
        let j = (i + w.rng.gen_range(1..self.names.len())) % self.names.len();
        let (x, y) = (self.names[i].clone(), self.names[j].clone());
        let t = if w.rng.gen_bool(0.5) { format!("/sw/t{n}") } else { format!("/sw/d/t{n}") };
        w.rename(&x, &t)?;
        w.rename(&y, &x)?;
        w.rename(&t, &y)?;
        if w.rng.gen_bool(0.3) {
            let len = w.rng.gen_range(1..6000);
            w.write(&x, 0, len)?;
        }
        match w.rng.gen_range(0..3) {
            0 => w.fsync(&x)?,
            1 => w.fsync(&y)?,
            _ => {
                w.fsync(&x)?;
                w.fsync(&y)?;
            }
        }
        Ok(true)
    }
}

/// Directories holding files moved to other parents (into each other too, so that a file's
/// grandparent is renamed as well), then a file below written and fsync'ed under its new path:
/// fsync makes every name up to the root durable, the moved ancestors' new names too.
#[derive(Default)]
pub(super) struct AncestorRename {
    /// The movable directories' paths; each holds a file `f`.
    dirs: Vec<String>,
    n: usize,
}

impl Workload for AncestorRename {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/ar")?;
        w.mkdir("/ar/p")?;
        for i in 0..4 {
            let d = format!("/ar/m{i}");
            w.mkdir(&d)?;
            w.create(&format!("{d}/f"), 2000 + i * 2500)?;
            self.dirs.push(d);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let k = w.rng.gen_range(0..self.dirs.len());
        let d = self.dirs[k].clone();
        if w.rng.gen_range(0..4) == 0 {
            // Only the file changes, fsync'ed where it is.
            let f = format!("{d}/f");
            let len = w.rng.gen_range(1..8000);
            w.write(&f, 0, len)?;
            w.fsync(&f)?;
            return Ok(true);
        }
        // A new parent: /ar, /ar/p or another movable directory not under this one.
        let mut parents = vec!["/ar".to_string(), "/ar/p".to_string()];
        parents.extend(self.dirs.iter().filter(|p| !under(p, &d)).cloned());
        let parent = pick(w.rng, &parents).unwrap_or_else(|| "/ar".into());
        let to = join(&parent, &w.name("m", n));
        w.rename(&d, &to)?;
        for p in &mut self.dirs {
            if under(p, &d) {
                *p = format!("{to}{}", &p[d.len()..]);
            }
        }
        // A file at or below the moved directory, written (sometimes) and fsync'ed.
        let below: Vec<String> = self.dirs.iter().filter(|p| under(p, &to)).cloned().collect();
        let target = pick(w.rng, &below).unwrap_or(to);
        let f = format!("{target}/f");
        if w.rng.gen_bool(0.5) {
            let off = w.rng.gen_range(0..4000);
            let len = w.rng.gen_range(1..6000);
            w.write(&f, off, len)?;
        }
        w.fsync(&f)?;
        Ok(true)
    }
}

/// Renames over existing files (a new file, fsync'ed first or not, or another old one), then
/// the survivor fsync'ed under the name it took; some in a second directory.
#[derive(Default)]
pub(super) struct RenameOver {
    names: Vec<String>,
    n: usize,
}

impl Workload for RenameOver {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/ro")?;
        w.mkdir("/ro/d")?;
        for i in 0..6 {
            let p = if i % 2 == 1 { format!("/ro/d/v{i}") } else { format!("/ro/v{i}") };
            w.create(&p, 1500 + i * 2000)?;
            self.names.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let j = w.rng.gen_range(0..self.names.len());
        let dst = self.names[j].clone();
        if self.names.len() < 3 || w.rng.gen_bool(0.6) {
            let src = if w.rng.gen_bool(0.5) { format!("/ro/s{n}") } else { format!("/ro/d/s{n}") };
            let len = w.rng.gen_range(0..9000);
            w.create(&src, len)?;
            if w.rng.gen_bool(0.4) {
                w.fsync(&src)?;
            }
            w.rename(&src, &dst)?;
        } else {
            let i = (j + w.rng.gen_range(1..self.names.len())) % self.names.len();
            let src = self.names.swap_remove(i);
            w.rename(&src, &dst)?;
            // A name freed: a new file takes its place later.
            if w.rng.gen_bool(0.5) {
                w.create(&src, 700)?;
                self.names.push(src);
            }
        }
        w.fsync(&dst)?;
        Ok(true)
    }
}

/// fstests' readdir-while-renames, crashed: each file of a directory is renamed to a temporary
/// name (in its directory or another) and back, some after a write of the file or an fsync
/// between, some fsync'ed by the name they end with; files are made and removed on the way, so
/// that renames are undone both before and after their names reach the disk.
#[derive(Default)]
pub(super) struct RenameBack {
    names: Vec<String>,
    n: usize,
}

impl Workload for RenameBack {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/rb")?;
        w.mkdir("/rb/o")?;
        self.names = w.create_files("/rb/", 12, |i| 300 + i * 700)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let j = w.rng.gen_range(0..self.names.len());
        let name = self.names[j].clone();
        let tmp = if w.rng.gen_bool(0.7) { "/rb/TEMPFILE".to_string() } else { "/rb/o/TEMPFILE".to_string() };
        w.rename(&name, &tmp)?;
        match w.rng.gen_range(0..5) {
            0 => w.fsync(&tmp)?,
            1 => w.write(&tmp, 0, 200)?,
            2 => {
                let other = self.names[(j + 1) % self.names.len()].clone();
                if other != name {
                    w.fsync(&other)?;
                }
            }
            _ => {}
        }
        w.rename(&tmp, &name)?;
        if w.rng.gen_bool(0.3) {
            w.fsync(&name)?;
        }
        if n.is_multiple_of(7) {
            let p = format!("/rb/new{n}");
            w.create(&p, 500)?;
            self.names.push(p);
        } else if n.is_multiple_of(11) && self.names.len() > 4 {
            let p = self.names.swap_remove(j);
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Overlayfs's copy-up and removal in its upper directory: files and directories renamed away
/// with RENAME_WHITEOUT (into another directory, over files there too), the whiteouts and the
/// moved files fsync'ed, whiteouts removed and their names taken by new files. Each renamed
/// inode keeps its old or new name; each fsync'ed whiteout (empty) and file keeps its name and
/// contents.
#[derive(Default)]
pub(super) struct RenameWhiteout {
    /// Files and directories in the upper directory that may be renamed away.
    upper: Vec<String>,
    /// Whiteouts in the upper directory.
    whiteouts: Vec<String>,
    /// Names in the work directory (renames may land on them).
    work: Vec<String>,
    n: usize,
}

impl Workload for RenameWhiteout {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/ow", "/ow/up", "/ow/up/sub", "/ow/work"] {
            w.mkdir(d)?;
        }
        for i in 0..6 {
            let p = if i % 3 == 2 { format!("/ow/up/sub/u{i}") } else { format!("/ow/up/u{i}") };
            w.create(&p, 1200 + i * 1700)?;
            self.upper.push(p);
        }
        w.mkdir("/ow/up/dir0")?;
        w.create("/ow/up/dir0/inside", 3000)?;
        self.upper.push("/ow/up/dir0".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        match w.rng.gen_range(0..10) {
            0..=5 if !self.upper.is_empty() => {
                let src = self.upper.swap_remove(w.rng.gen_range(0..self.upper.len()));
                let ino = w.resolve(&src)?;
                let is_dir = w.fs.getattr(ino)?.is_dir();
                let dst = match self.work.len() {
                    k if k > 0 && !is_dir && w.rng.gen_bool(0.3) => self.work.swap_remove(w.rng.gen_range(0..k)),
                    _ => format!("/ow/work/{}", w.name("m", n)),
                };
                w.rename_whiteout(&src, &dst)?;
                if w.rng.gen_bool(0.5) {
                    w.fsync(&src)?;
                }
                if !is_dir {
                    if w.rng.gen_bool(0.4) {
                        w.fsync(&dst)?;
                    }
                    self.work.push(dst);
                }
                self.whiteouts.push(src);
            }
            6..=7 if !self.whiteouts.is_empty() => {
                // The name comes back: its whiteout goes and a new file takes it.
                let p = self.whiteouts.swap_remove(w.rng.gen_range(0..self.whiteouts.len()));
                w.unlink(&p)?;
                let len = w.rng.gen_range(0..7000);
                w.create(&p, len)?;
                if w.rng.gen_bool(0.5) {
                    w.fsync(&p)?;
                }
                self.upper.push(p);
            }
            _ => {
                let p = if w.rng.gen_bool(0.5) { format!("/ow/up/n{n}") } else { format!("/ow/up/sub/n{n}") };
                let len = w.rng.gen_range(0..9000);
                w.create(&p, len)?;
                self.upper.push(p);
            }
        }
        Ok(true)
    }
}

/// Renames in a directory whose last fragments move: files in one directory are appended to
/// (their tails taking the fragments next to the directory's) and renamed, to new long names
/// (the directory grows a chunk, and past its run, which then moves) or over each other (the
/// old names stay on disk, hidden, until the new ones are there). Every rename's old name must
/// leave the directory at its block's new address. Some renamed files are fsync'ed.
#[derive(Default)]
pub(super) struct GrowRenames {
    names: Vec<String>,
    n: usize,
}

impl Workload for GrowRenames {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/gr")?;
        self.names = w.create_files("/gr/", 6, |i| 100 + i * 300)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let j = w.rng.gen_range(0..self.names.len());
        let src = self.names[j].clone();
        let size = w.size(&src)?;
        let more = w.rng.gen_range(1..1500);
        w.write(&src, size, more)?;
        let to_new = self.names.len() < 4 || w.rng.gen_bool(0.6);
        let dst = if to_new {
            // An entry of 208 bytes: the directory passes a fragment every few renames.
            format!("/gr/{}-{n:04}", "long-name-".repeat(19))
        } else {
            self.names[(j + w.rng.gen_range(1..self.names.len())) % self.names.len()].clone()
        };
        w.rename(&src, &dst)?;
        self.names.swap_remove(j);
        if to_new {
            self.names.push(dst.clone());
        }
        if w.rng.gen_bool(0.3) {
            w.fsync(&dst)?;
        }
        if self.names.len() < 6 {
            let p = format!("/gr/n{n}");
            let len = w.rng.gen_range(0..3000);
            w.create(&p, len)?;
            self.names.push(p);
        }
        Ok(true)
    }
}
