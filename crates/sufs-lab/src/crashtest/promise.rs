//! Promises: what must hold in every crash state inside an interval of the log (a name that
//! existed before the workload, a rename's old or new name, an fsync'ed file, a reservation, a
//! snapshot), and the path helpers the workloads and the judge share.

use std::collections::HashSet;

use sufs_fs::br::BrRun;
use sufs_fs::format::{DT_DIR, ROOT_INO};
use sufs_fs::fs::{Fs, FsResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromiseKind {
    /// A name that existed before the workload, until an operation removes or renames it.
    Stable,
    /// An inode that existed before the workload stays reachable from the root by some name,
    /// whatever renames moved it (and its ancestors), until an operation removes it.
    Kept,
    /// A renamed inode keeps its old or its new name, if the old one was durable when the rename
    /// began.
    Rename,
    /// An fsync'ed file keeps its name and its contents from the moment fsync returned.
    Fsync,
    /// A Block Register reservation keeps its name and exactly its blocks from the moment a
    /// Block Register call on it returned.
    Reservation,
    /// A snapshot keeps its name and shows the file system of its moment (`contents`: the digest
    /// of the frozen tree) from the moment its creation returned until it is deleted.
    Snapshot,
    /// An fsync'ed file keeps its name and its extended attributes (`contents`: their digest)
    /// from the moment fsync returned until they next change.
    Xattrs,
    /// A file whose flags were set and fsync'ed keeps its name and those flags (`contents`: the
    /// user flags, little-endian) until they are set again.
    Flags,
}

/// What must hold in every crash state whose writes all lie in `[from, until)` (log positions).
#[derive(Debug, Clone)]
pub struct Promise {
    pub kind: PromiseKind,
    /// One of these paths names `ino` (the first is its name when the promise was made).
    pub paths: Vec<String>,
    pub ino: u32,
    /// The file's full contents (fsync).
    pub contents: Option<Vec<u8>>,
    /// A reservation's runs, as brquery answered (reservation).
    pub runs: Option<Vec<BrRun>>,
    pub from: usize,
    /// The start of the operation that next touches the name (or, with contents, the data).
    pub until: Option<usize>,
}

/// Ends, at log position `pos`, every open promise `pred` picks.
pub(super) fn close(promises: &mut [Promise], pos: usize, pred: impl Fn(&Promise) -> bool) {
    for p in promises.iter_mut().filter(|p| p.until.is_none()) {
        if pred(p) {
            p.until = Some(pos);
        }
    }
}

/// `p` is `q` or lies under directory `q`.
pub(super) fn under(p: &str, q: &str) -> bool {
    p == q || (p.starts_with(q) && (q == "/" || p[q.len()..].starts_with('/')))
}

pub(super) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

pub(super) fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

pub(super) fn resolve(fs: &mut Fs, path: &str) -> FsResult<u32> {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes())?.0;
    }
    Ok(ino)
}

/// Every inode reachable from the root through directory entries.
pub(super) fn reachable_inodes(fs: &mut Fs) -> HashSet<u32> {
    let mut seen = HashSet::from([ROOT_INO]);
    let mut queue = vec![ROOT_INO];
    while let Some(d) = queue.pop() {
        let Ok(entries) = fs.readdir(d, 0, usize::MAX) else { continue };
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            if seen.insert(e.ino) && e.dtype == DT_DIR {
                queue.push(e.ino);
            }
        }
    }
    seen
}

/// A directory named inside its own tree, every name counted: a loop of names the root reaches
/// by other names (an unreachable one is fsck's finding). fsck_ffs keeps one name of each
/// directory, the first in disk block order, and may keep the loop's, cutting it off the root.
/// The first such directory a walk from the root meets, if any.
pub(super) fn name_loop(fs: &mut Fs) -> Option<u32> {
    fn subdirs(fs: &mut Fs, d: u32) -> Vec<u32> {
        let entries = fs.readdir(d, 0, usize::MAX).unwrap_or_default();
        entries.into_iter().filter(|e| e.dtype == DT_DIR && e.name != b"." && e.name != b"..").map(|e| e.ino).collect()
    }
    // Depth first: the directories on the path from the root, each with the subdirectories
    // left to walk, and the directories whose trees are walked.
    let mut path = vec![(ROOT_INO, subdirs(fs, ROOT_INO))];
    let mut on_path = HashSet::from([ROOT_INO]);
    let mut done = HashSet::new();
    while let Some(top) = path.len().checked_sub(1) {
        match path[top].1.pop() {
            Some(c) if on_path.contains(&c) => return Some(c),
            Some(c) if done.contains(&c) => {}
            Some(c) => {
                on_path.insert(c);
                let below = subdirs(fs, c);
                path.push((c, below));
            }
            None => {
                let (d, _) = path.pop().expect("the path is not empty");
                on_path.remove(&d);
                done.insert(d);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(under("/a/b", "/a"));
        assert!(under("/a", "/a"));
        assert!(!under("/ab", "/a"));
        assert!(under("/x", "/"));
        assert_eq!(split("/a"), ("/", "a"));
        assert_eq!(split("/a/b/c"), ("/a/b", "c"));
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }
}
