//! A trivially correct model of a file tree (paths naming nodes, nodes shared by hard links),
//! the same operations by path on the library's file system, and the walk that compares the
//! two: each operation gives the errno the model predicts (or Ok) on both sides.

use std::collections::BTreeMap;

use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Fs, FsError, RenameFlags, SetAttr};

use super::{parent_of, pattern, resolve};

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Dir,
    File(Vec<u8>),
}

/// The model: every path that exists (slash-separated, from the root, no leading slash),
/// naming a node; nodes shared by hard links.
#[derive(Default)]
pub struct Model {
    pub paths: BTreeMap<String, usize>,
    pub nodes: Vec<Node>,
}

/// An operation's result: Ok or an errno.
pub type R<T> = Result<T, i32>;

pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

impl Model {
    pub fn resolve(&self, path: &str) -> R<Option<usize>> {
        // Every ancestor must be an existing directory.
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            match self.paths.get(&prefix) {
                None if i + 1 == parts.len() => return Ok(None),
                None => return Err(libc::ENOENT),
                Some(&n) if i + 1 < parts.len() && self.nodes[n] != Node::Dir => return Err(libc::ENOTDIR),
                Some(&n) if i + 1 == parts.len() => return Ok(Some(n)),
                Some(_) => {}
            }
        }
        unreachable!()
    }

    fn parent_ok(&self, path: &str) -> R<()> {
        let (dir, _) = split(path);
        if dir.is_empty() {
            return Ok(());
        }
        match self.resolve(dir)? {
            None => Err(libc::ENOENT),
            Some(n) if self.nodes[n] != Node::Dir => Err(libc::ENOTDIR),
            Some(_) => Ok(()),
        }
    }

    pub fn children(&self, dir: &str) -> Vec<String> {
        let pre = format!("{dir}/");
        self.paths.keys().filter(|k| k.starts_with(&pre) && !k[pre.len()..].contains('/')).cloned().collect()
    }

    pub fn add(&mut self, path: &str, node: Node) -> R<()> {
        self.parent_ok(path)?;
        if self.resolve(path)?.is_some() {
            return Err(libc::EEXIST);
        }
        self.nodes.push(node);
        self.paths.insert(path.to_string(), self.nodes.len() - 1);
        Ok(())
    }

    pub fn file(&mut self, path: &str) -> R<&mut Vec<u8>> {
        self.parent_ok(path)?;
        let n = self.resolve(path)?.ok_or(libc::ENOENT)?;
        match &mut self.nodes[n] {
            Node::Dir => Err(libc::EISDIR),
            Node::File(d) => Ok(d),
        }
    }

    pub fn write(&mut self, path: &str, off: usize, data: &[u8]) -> R<()> {
        let d = self.file(path)?;
        let end = off + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[off..end].copy_from_slice(data);
        Ok(())
    }

    pub fn truncate(&mut self, path: &str, size: usize) -> R<()> {
        self.file(path)?.resize(size, 0);
        Ok(())
    }

    pub fn unlink(&mut self, path: &str) -> R<()> {
        self.parent_ok(path)?;
        let n = self.resolve(path)?.ok_or(libc::ENOENT)?;
        if self.nodes[n] == Node::Dir {
            return Err(libc::EISDIR);
        }
        self.paths.remove(path);
        Ok(())
    }

    pub fn rmdir(&mut self, path: &str) -> R<()> {
        self.parent_ok(path)?;
        let n = self.resolve(path)?.ok_or(libc::ENOENT)?;
        if self.nodes[n] != Node::Dir {
            return Err(libc::ENOTDIR);
        }
        if !self.children(path).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.paths.remove(path);
        Ok(())
    }

    pub fn rename(&mut self, from: &str, to: &str) -> R<()> {
        self.parent_ok(from)?;
        let src = self.resolve(from)?.ok_or(libc::ENOENT)?;
        self.parent_ok(to)?;
        let dst = self.resolve(to)?;
        if dst == Some(src) {
            return Ok(());
        }
        let src_dir = self.nodes[src] == Node::Dir;
        if src_dir && split(from).0 != split(to).0 && to.starts_with(&format!("{from}/")) {
            return Err(libc::EINVAL);
        }
        if let Some(d) = dst {
            let dst_dir = self.nodes[d] == Node::Dir;
            match (src_dir, dst_dir) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.children(to).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        // Move the path and, for a directory, everything under it.
        let moved: Vec<(String, usize)> = self
            .paths
            .iter()
            .filter(|(k, _)| *k == from || k.starts_with(&format!("{from}/")))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        self.paths.remove(to);
        for (k, _) in &moved {
            self.paths.remove(k);
        }
        for (k, v) in moved {
            self.paths.insert(format!("{to}{}", &k[from.len()..]), v);
        }
        Ok(())
    }

    pub fn link(&mut self, existing: &str, new: &str) -> R<()> {
        self.parent_ok(existing)?;
        let src = self.resolve(existing)?.ok_or(libc::ENOENT)?;
        self.parent_ok(new)?;
        if self.nodes[src] == Node::Dir {
            return Err(libc::EPERM);
        }
        if self.resolve(new)?.is_some() {
            return Err(libc::EEXIST);
        }
        self.paths.insert(new.to_string(), src);
        Ok(())
    }

    /// The bytes `read(path, off, len)` returns.
    pub fn read(&mut self, path: &str, off: usize, len: usize) -> R<Vec<u8>> {
        let d = self.file(path)?;
        let end = (off + len).min(d.len());
        Ok(d.get(off..end).unwrap_or_default().to_vec())
    }
}

/// The same operations by path on the file system, their errors as errnos.
pub mod ops {
    use super::*;

    fn e(e: FsError) -> i32 {
        e.errno()
    }

    pub fn create(fs: &mut Fs, path: &str) -> R<()> {
        let (dir, name) = parent_of(fs, path).map_err(e)?;
        fs.create(dir, name.as_bytes(), 0o644, 0, 0).map(|_| ()).map_err(e)
    }

    pub fn mkdir(fs: &mut Fs, path: &str) -> R<()> {
        let (dir, name) = parent_of(fs, path).map_err(e)?;
        fs.mkdir(dir, name.as_bytes(), 0o755, 0, 0).map(|_| ()).map_err(e)
    }

    /// Writes `pattern(seed, len)` at `off`.
    pub fn write(fs: &mut Fs, path: &str, off: u64, len: usize, seed: u64) -> R<()> {
        let ino = resolve(fs, path).map_err(e)?;
        let n = fs.write(ino, off, &pattern(seed, len)).map_err(e)?;
        assert_eq!(n, len, "write {path}: short write");
        Ok(())
    }

    pub fn truncate(fs: &mut Fs, path: &str, size: u64) -> R<()> {
        let ino = resolve(fs, path).map_err(e)?;
        fs.setattr(ino, &SetAttr { size: Some(size), ..Default::default() }).map(|_| ()).map_err(e)
    }

    pub fn read(fs: &mut Fs, path: &str, off: u64, len: usize) -> R<Vec<u8>> {
        let ino = resolve(fs, path).map_err(e)?;
        fs.read(ino, off, len).map_err(e)
    }

    pub fn unlink(fs: &mut Fs, path: &str) -> R<()> {
        let (dir, name) = parent_of(fs, path).map_err(e)?;
        fs.unlink(dir, name.as_bytes()).map_err(e)
    }

    pub fn rmdir(fs: &mut Fs, path: &str) -> R<()> {
        let (dir, name) = parent_of(fs, path).map_err(e)?;
        fs.rmdir(dir, name.as_bytes()).map_err(e)
    }

    pub fn rename(fs: &mut Fs, from: &str, to: &str) -> R<()> {
        let (d1, n1) = parent_of(fs, from).map_err(e)?;
        fs.lookup(d1, n1.as_bytes()).map_err(e)?;
        let (d2, n2) = parent_of(fs, to).map_err(e)?;
        fs.rename(d1, n1.as_bytes(), d2, n2.as_bytes(), RenameFlags::default()).map_err(e)
    }

    pub fn link(fs: &mut Fs, existing: &str, new: &str) -> R<()> {
        let ino = resolve(fs, existing).map_err(e)?;
        let (d2, n2) = parent_of(fs, new).map_err(e)?;
        fs.link(ino, d2, n2.as_bytes()).map(|_| ()).map_err(e)
    }
}

/// Walks the file system from `top` (a path; "" for the root, whose lost+found and newfs's .snap
/// are left out) and
/// compares every name, kind, link count and byte with the model's paths at and under `top`.
pub fn compare(fs: &mut Fs, m: &Model, top: &str) {
    let mut seen = BTreeMap::new();
    let start = resolve(fs, top).unwrap_or_else(|e| panic!("{top}: {e}"));
    if !top.is_empty() {
        seen.insert(top.to_string(), (start, fs.getattr(start).unwrap()));
    }
    let mut stack = vec![(top.to_string(), start)];
    while let Some((path, ino)) = stack.pop() {
        for e in fs.readdir(ino, 0, usize::MAX).unwrap() {
            if e.name == b"."
                || e.name == b".."
                || (ino == ROOT_INO && [&b"lost+found"[..], b".snap"].contains(&&e.name[..]))
            {
                continue;
            }
            let name = String::from_utf8(e.name).unwrap();
            let p = if path.is_empty() { name } else { format!("{path}/{name}") };
            let d = fs.getattr(e.ino).unwrap();
            if d.is_dir() {
                stack.push((p.clone(), e.ino));
            }
            seen.insert(p, (e.ino, d));
        }
    }
    let inside = |k: &String| top.is_empty() || *k == top || k.starts_with(&format!("{top}/"));
    let want: Vec<&String> = m.paths.keys().filter(|k| inside(k)).collect();
    let got: Vec<&String> = seen.keys().collect();
    assert_eq!(got, want, "names differ under /{top}");
    for (p, (ino, d)) in &seen {
        let n = m.paths[p];
        match &m.nodes[n] {
            Node::Dir => {
                assert!(d.is_dir(), "{p} should be a directory");
                let subdirs = m.children(p).iter().filter(|c| m.nodes[m.paths[*c]] == Node::Dir).count();
                assert_eq!(d.nlink as usize, 2 + subdirs, "{p} link count");
            }
            Node::File(data) => {
                assert!(d.is_reg(), "{p} should be a file");
                assert_eq!(d.size as usize, data.len(), "{p} size");
                let links = m.paths.values().filter(|&&x| x == n).count();
                assert_eq!(d.nlink as usize, links, "{p} link count");
                assert!(fs.read(*ino, 0, data.len() + 10).unwrap() == *data, "{p} contents");
            }
        }
    }
}
