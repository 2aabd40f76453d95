//! Extended attributes: sets (new names and replacements, small values and ones that take
//! the area into its second block), removals, fsyncs that promise the attributes as they are,
//! new files given attributes, and removals of files that have some (their attribute blocks
//! freed with them).

use rand::Rng;

use sufs_fs::fs::xattr::XattrMode;
use sufs_fs::fs::{Fs, FsResult};

use super::super::promise::{Promise, PromiseKind};
use super::super::work::Work;
use super::{pick, Workload};

/// A digest of the attributes of `ino`: each name and value, in the listed order.
pub(in super::super) fn xattr_digest(fs: &mut Fs, ino: u32) -> FsResult<Vec<u8>> {
    let names = fs.listxattr(ino, 0)?;
    let mut out = Vec::new();
    for name in names.split(|&c| c == 0).filter(|n| !n.is_empty()) {
        let v = fs.getxattr(ino, name, 0)?;
        out.extend_from_slice(name);
        out.push(0);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(&v);
    }
    Ok(out)
}

/// An attribute operation on `path`: it ends the promises on the file's attributes.
fn attr_op(w: &mut Work, what: String, path: &str, op: impl FnOnce(&mut Fs, u32) -> FsResult<()>) -> FsResult<()> {
    let pos = w.begin(what)?;
    let ino = w.resolve(path)?;
    w.close(pos, |p| p.kind == PromiseKind::Xattrs && p.ino == ino);
    op(w.fs, ino)
}

/// fsync of `path`, which then promises its attributes as they are.
fn fsync_attrs(w: &mut Work, path: &str) -> FsResult<()> {
    w.fsync(path)?;
    let ino = w.resolve(path)?;
    let digest = xattr_digest(w.fs, ino)?;
    if w.rec.is_some() {
        let from = w.pos();
        w.promises.push(Promise {
            kind: PromiseKind::Xattrs,
            paths: vec![path.to_string()],
            ino,
            contents: Some(digest),
            runs: None,
            from,
            until: None,
        });
    }
    Ok(())
}

#[derive(Default)]
pub(super) struct XattrWork {
    files: Vec<String>,
    n: usize,
}

impl XattrWork {
    /// A value of `len` bytes that says which step made it.
    fn value(&self, len: usize) -> Vec<u8> {
        let tag = format!("{}:", self.n);
        tag.bytes().chain(std::iter::repeat(b'v')).take(len.max(tag.len())).collect()
    }
}

impl Workload for XattrWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/xa")?;
        for i in 0..3 {
            let p = format!("/xa/f{i}");
            w.create(&p, 3000)?;
            let ino = w.resolve(&p)?;
            w.fs.setxattr(ino, b"user.first", b"made in setup", XattrMode::Any, 0)?;
            self.files.push(p);
        }
        Ok(())
    }

    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let Some(path) = pick(w.rng, &self.files) else { return Ok(false) };
        match w.rng.gen_range(0..12) {
            0..=3 => {
                let name = format!("user.k{}", w.rng.gen_range(0..6));
                // Mostly small; now and then large enough for the area's second block.
                let len = if w.rng.gen_bool(0.2) { w.rng.gen_range(2000..3500) } else { w.rng.gen_range(0..200) };
                let v = self.value(len);
                let r = attr_op(w, format!("setxattr {path} {name} ({len} bytes)"), &path, |fs, ino| {
                    fs.setxattr(ino, name.as_bytes(), &v, XattrMode::Any, 0)
                });
                match r {
                    // The area holds two blocks; past that the set is refused.
                    Err(sufs_fs::fs::FsError::AttrAreaFull) => {}
                    r => r?,
                }
            }
            4 => {
                let v = self.value(20);
                let r = attr_op(w, format!("setxattr {path} user.first replace"), &path, |fs, ino| {
                    fs.setxattr(ino, b"user.first", &v, XattrMode::Replace, 0)
                });
                match r {
                    Err(sufs_fs::fs::FsError::NoAttr) => {}
                    r => r?,
                }
            }
            5..=6 => {
                let name = format!("user.k{}", w.rng.gen_range(0..6));
                let r = attr_op(w, format!("removexattr {path} {name}"), &path, |fs, ino| {
                    fs.removexattr(ino, name.as_bytes(), 0)
                });
                match r {
                    Err(sufs_fs::fs::FsError::NoAttr) => {}
                    r => r?,
                }
            }
            7..=9 => fsync_attrs(w, &path)?,
            10 => {
                let p = format!("/xa/n{n}");
                w.create(&p, 100)?;
                let v = self.value(300);
                attr_op(w, format!("setxattr {p} user.new"), &p, |fs, ino| {
                    fs.setxattr(ino, b"user.new", &v, XattrMode::Create, 0)
                })?;
                if w.rng.gen_bool(0.5) {
                    fsync_attrs(w, &p)?;
                }
                self.files.push(p);
            }
            _ => {
                if self.files.len() > 2 {
                    w.unlink(&path)?;
                    self.files.retain(|f| *f != path);
                }
            }
        }
        Ok(true)
    }
}
