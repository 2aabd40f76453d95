//! Property test: random sequences of namespace and data operations, run against the file system
//! and against a simple in-memory model of a file tree, compared after every step, after
//! remounts, and checked by fsck at the end.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use sufs::format::ROOT_INO;
use sufs::fs::{Fs, FsError, Ordering, RenameFlags, SetAttr};

const POOL: [&str; 10] = ["d0", "d1", "d0/d2", "f0", "f1", "d0/f2", "d1/f3", "d0/d2/f4", "d1/d5", "d0/d2/d6"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Mkdir(usize),
    Write(usize, u32, u16, u8),
    Truncate(usize, u32),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize),
    Link(usize, usize),
    Remount,
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..POOL.len();
    prop_oneof![
        3 => p.clone().prop_map(Op::Create),
        3 => p.clone().prop_map(Op::Mkdir),
        4 => (p.clone(), 0u32..200_000, 1u16..12_000, any::<u8>()).prop_map(|(a, o, l, s)| Op::Write(a, o, l, s)),
        1 => (p.clone(), 0u32..200_000).prop_map(|(a, s)| Op::Truncate(a, s)),
        2 => p.clone().prop_map(Op::Unlink),
        2 => p.clone().prop_map(Op::Rmdir),
        3 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => Just(Op::Remount),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Dir,
    File(Vec<u8>),
}

/// The model: every path that exists, naming a node; nodes shared by hard links.
#[derive(Default)]
struct Model {
    paths: BTreeMap<String, usize>,
    nodes: Vec<Node>,
}

type R<T> = Result<T, i32>;

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

impl Model {
    fn resolve(&self, path: &str) -> R<Option<usize>> {
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
    fn children(&self, dir: &str) -> Vec<String> {
        let pre = format!("{dir}/");
        self.paths.keys().filter(|k| k.starts_with(&pre) && !k[pre.len()..].contains('/')).cloned().collect()
    }
    fn add(&mut self, path: &str, node: Node) -> R<()> {
        self.parent_ok(path)?;
        if self.resolve(path)?.is_some() {
            return Err(libc::EEXIST);
        }
        self.nodes.push(node);
        self.paths.insert(path.to_string(), self.nodes.len() - 1);
        Ok(())
    }
    fn file(&mut self, path: &str) -> R<&mut Vec<u8>> {
        self.parent_ok(path)?;
        let n = self.resolve(path)?.ok_or(libc::ENOENT)?;
        match &mut self.nodes[n] {
            Node::Dir => Err(libc::EISDIR),
            Node::File(d) => Ok(d),
        }
    }
    fn apply(&mut self, op: &Op) -> R<()> {
        match *op {
            Op::Create(a) => self.add(POOL[a], Node::File(Vec::new())),
            Op::Mkdir(a) => self.add(POOL[a], Node::Dir),
            Op::Write(a, off, len, seed) => {
                let d = self.file(POOL[a])?;
                let end = off as usize + len as usize;
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[off as usize..end].copy_from_slice(&pattern(seed as u64, len as usize));
                Ok(())
            }
            Op::Truncate(a, size) => {
                self.file(POOL[a])?.resize(size as usize, 0);
                Ok(())
            }
            Op::Unlink(a) => {
                self.parent_ok(POOL[a])?;
                let n = self.resolve(POOL[a])?.ok_or(libc::ENOENT)?;
                if self.nodes[n] == Node::Dir {
                    return Err(libc::EISDIR);
                }
                self.paths.remove(POOL[a]);
                Ok(())
            }
            Op::Rmdir(a) => {
                self.parent_ok(POOL[a])?;
                let n = self.resolve(POOL[a])?.ok_or(libc::ENOENT)?;
                if self.nodes[n] != Node::Dir {
                    return Err(libc::ENOTDIR);
                }
                if !self.children(POOL[a]).is_empty() {
                    return Err(libc::ENOTEMPTY);
                }
                self.paths.remove(POOL[a]);
                Ok(())
            }
            Op::Rename(a, b) => {
                let (from, to) = (POOL[a], POOL[b]);
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
            Op::Link(a, b) => {
                self.parent_ok(POOL[a])?;
                let src = self.resolve(POOL[a])?.ok_or(libc::ENOENT)?;
                self.parent_ok(POOL[b])?;
                if self.nodes[src] == Node::Dir {
                    return Err(libc::EPERM);
                }
                if self.resolve(POOL[b])?.is_some() {
                    return Err(libc::EEXIST);
                }
                self.paths.insert(POOL[b].to_string(), src);
                Ok(())
            }
            Op::Remount => Ok(()),
        }
    }
}

fn fs_apply(fs: &mut Fs, op: &Op) -> R<()> {
    let e = |e: FsError| e.errno();
    match *op {
        Op::Create(a) => {
            let (dir, name) = parent_of(fs, POOL[a]).map_err(e)?;
            fs.create(dir, name.as_bytes(), 0o644, 0, 0).map(|_| ()).map_err(e)
        }
        Op::Mkdir(a) => {
            let (dir, name) = parent_of(fs, POOL[a]).map_err(e)?;
            fs.mkdir(dir, name.as_bytes(), 0o755, 0, 0).map(|_| ()).map_err(e)
        }
        Op::Write(a, off, len, seed) => {
            let ino = resolve(fs, POOL[a]).map_err(e)?;
            let n = fs.write(ino, off as u64, &pattern(seed as u64, len as usize)).map_err(e)?;
            assert_eq!(n, len as usize);
            Ok(())
        }
        Op::Truncate(a, size) => {
            let ino = resolve(fs, POOL[a]).map_err(e)?;
            fs.setattr(ino, &SetAttr { size: Some(size as u64), ..Default::default() }).map(|_| ()).map_err(e)
        }
        Op::Unlink(a) => {
            let (dir, name) = parent_of(fs, POOL[a]).map_err(e)?;
            fs.unlink(dir, name.as_bytes()).map_err(e)
        }
        Op::Rmdir(a) => {
            let (dir, name) = parent_of(fs, POOL[a]).map_err(e)?;
            fs.rmdir(dir, name.as_bytes()).map_err(e)
        }
        Op::Rename(a, b) => {
            let (d1, n1) = parent_of(fs, POOL[a]).map_err(e)?;
            fs.lookup(d1, n1.as_bytes()).map_err(e)?;
            let (d2, n2) = parent_of(fs, POOL[b]).map_err(e)?;
            fs.rename(d1, n1.as_bytes(), d2, n2.as_bytes(), RenameFlags::default()).map_err(e)
        }
        Op::Link(a, b) => {
            let ino = resolve(fs, POOL[a]).map_err(e)?;
            let (d2, n2) = parent_of(fs, POOL[b]).map_err(e)?;
            fs.link(ino, d2, n2.as_bytes()).map(|_| ()).map_err(e)
        }
        Op::Remount => Ok(()),
    }
}

/// Walks the file system from the root and compares every name, kind, link count and byte.
fn compare(fs: &mut Fs, m: &Model) {
    let mut seen = BTreeMap::new();
    let mut stack = vec![(String::new(), ROOT_INO)];
    while let Some((path, ino)) = stack.pop() {
        for e in fs.readdir(ino, 0, usize::MAX).unwrap() {
            if e.name == b"." || e.name == b".." || (path.is_empty() && e.name == b"lost+found") {
                continue;
            }
            let p = if path.is_empty() {
                String::from_utf8(e.name).unwrap()
            } else {
                format!("{path}/{}", String::from_utf8(e.name).unwrap())
            };
            let d = fs.getattr(e.ino).unwrap();
            if d.is_dir() {
                stack.push((p.clone(), e.ino));
            }
            seen.insert(p, (e.ino, d));
        }
    }
    let want: Vec<&String> = m.paths.keys().collect();
    let got: Vec<&String> = seen.keys().collect();
    assert_eq!(got, want, "names differ");
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

fn run(ordering: Ordering, ops: &[Op]) {
    let dev = new_image(4096);
    let mut fs = mount(&dev, ordering, 64);
    let mut m = Model::default();
    for op in ops {
        if let Op::Remount = op {
            fs.unmount().unwrap();
            fs = mount(&dev, ordering, 64);
        }
        let want = m.apply(op);
        let got = fs_apply(&mut fs, op);
        assert_eq!(got, want, "{op:?}");
        compare(&mut fs, &m);
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
    let mut fs = mount(&dev, ordering, 64);
    compare(&mut fs, &m);
    fs.unmount().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn sync_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Ordering::Sync, &ops);
    }

    #[test]
    fn softdep_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Ordering::Softdep, &ops);
    }

    #[test]
    fn async_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Ordering::Async, &ops);
    }
}

/// A fixed sequence in which every operation succeeds, so the comparison is known to be
/// exercised (and a model that accepted nothing could not pass).
#[test]
fn a_known_sequence_succeeds_step_by_step() {
    let ops = [
        Op::Mkdir(0),
        Op::Mkdir(2),
        Op::Create(7),
        Op::Write(7, 70_000, 5000, 1),
        Op::Link(7, 3),
        Op::Remount,
        Op::Rename(0, 1),
        Op::Truncate(3, 1000),
        Op::Unlink(3),
        Op::Create(6),
        Op::Rename(6, 8),
    ];
    for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, 64);
        let mut m = Model::default();
        for op in &ops {
            if let Op::Remount = op {
                fs.unmount().unwrap();
                fs = mount(&dev, ordering, 64);
            }
            assert_eq!(m.apply(op), Ok(()), "model {op:?}");
            assert_eq!(fs_apply(&mut fs, op), Ok(()), "fs {op:?}");
            compare(&mut fs, &m);
        }
        assert_eq!(m.paths.len(), 4, "{:?}", m.paths.keys().collect::<Vec<_>>());
        fs.unmount().unwrap();
    }
}
