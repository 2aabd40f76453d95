//! Pass 2, fsck_ffs's pass2.c with dir.c's `dircheck`: every directory's data, 512-byte chunk
//! by chunk (`DirIter` makes `dircheck`'s checks; a chunk it refuses is reported and the rest
//! of that chunk skipped, as fsck_ffs salvages it). The first entry is "." naming the directory,
//! the second ".." (its target kept for pass 3); every other entry names an inode in use, with
//! its type, and is counted toward that inode's links (pass 4). A directory named twice is an
//! extra hard link. Holes inside a directory's size are reported; directory data is read only
//! from blocks pass 1 found in range.

use super::*;
use crate::format::{DIRBLKSIZ, DT_DIR};

/// `DT_WHT`: a whiteout entry (inode 1).
const DT_WHT: u8 = 14;
/// `UFS_WINO`: the whiteout inode.
const UFS_WINO: u32 = 1;

impl<D: ReadAt + ?Sized> Check<'_, D> {
    pub(super) fn pass2(&mut self) -> Result<(), Ufs2Error> {
        // The root has its name from the superblock: any entry naming it is an extra link.
        if let Some(root) = self.inodes.get_mut(UFS_ROOTINO) {
            (root.parent, root.names) = (UFS_ROOTINO, 1);
        }
        let dirs: Vec<u32> = self.dir_blocks.keys().copied().collect();
        for dir in dirs {
            self.directory(dir)?;
        }
        for (ino, dir, name) in std::mem::take(&mut self.extra_links) {
            let t = self.inodes.get(ino);
            let counted = t.nlink as i64 >= t.counted as i64;
            self.find(Finding::ExtraDirLink { ino, dir, name, names: t.names, counted });
        }
        Ok(())
    }

    fn directory(&mut self, dir: u32) -> Result<(), Ufs2Error> {
        let size = self.inodes.get(dir).size;
        let bsize = self.sb.fs_bsize as u64;
        let blocks = self.dir_blocks.get(&dir).cloned().unwrap_or_default();
        let nblk = size.div_ceil(bsize) as i64;
        let mut expect = 0;
        for &(lbn, _, _) in &blocks {
            if lbn >= nblk {
                break;
            }
            if lbn != expect {
                break;
            }
            expect += 1;
        }
        if expect < nblk {
            self.find(Finding::DirHole { ino: dir, lbn: expect });
        }
        let mut first = Vec::new();
        for (lbn, fsb, frags) in blocks {
            if lbn >= nblk {
                continue;
            }
            let b = self.read(fsb, (frags * self.sb.fs_fsize as i64) as usize)?;
            let base = self.sb.lblktosize(lbn);
            for (k, chunk) in b.chunks_exact(DIRBLKSIZ).enumerate() {
                let off = base + (k * DIRBLKSIZ) as u64;
                if off >= size {
                    break;
                }
                for e in DirIter::new(chunk, off, size, self.sb.maxino()) {
                    match e {
                        Ok(e) if off == 0 && first.len() < 2 => {
                            first.push(e.d_ino);
                            self.dot_entry(dir, first.len(), &e);
                        }
                        Ok(e) => self.entry(dir, &e),
                        Err(Ufs2Error::Dir { offset, what }) => {
                            self.find(Finding::DirCorrupt { dir, offset, what: what.into() })
                        }
                        Err(e) => self.find(Finding::DirCorrupt { dir, offset: off, what: e.to_string() }),
                    }
                }
                if off == 0 && first.len() < 2 {
                    // The first chunk ended (or was refused) before "." and "..".
                    if first.is_empty() {
                        self.find(Finding::MissingDot { dir });
                    }
                    self.find(Finding::MissingDotDot { dir });
                    first.resize(2, 0);
                }
            }
        }
        Ok(())
    }

    /// The first (`nth` 1) or second (2) entry of a directory: "." or "..".
    fn dot_entry(&mut self, dir: u32, nth: usize, e: &Direct<'_>) {
        let want: &[u8] = if nth == 1 { b"." } else { b".." };
        if e.d_ino == 0 || e.name != want {
            self.find(if nth == 1 { Finding::MissingDot { dir } } else { Finding::MissingDotDot { dir } });
            // Whatever is there is an ordinary entry.
            self.entry(dir, e);
            return;
        }
        // `dir` is a directory in use, which pass 1 read.
        let Some(d) = self.inodes.get_mut(dir) else { unreachable!("directory {dir} was not read") };
        if nth == 1 {
            if e.d_ino == dir {
                d.counted += 1;
            } else {
                self.find(Finding::BadDot { dir, stored: e.d_ino });
            }
            return;
        }
        d.dotdot = e.d_ino;
        if let Some(t) = self.inodes.get_mut(e.d_ino).filter(|t| t.state == State::InUse) {
            t.counted += 1;
        }
    }

    /// An entry past "." and "..".
    fn entry(&mut self, dir: u32, e: &Direct<'_>) {
        if e.d_ino == 0 {
            return;
        }
        let name = String::from_utf8_lossy(e.name).into_owned();
        if e.name == b"." || e.name == b".." {
            self.find(Finding::ExtraDot { dir, name });
            return;
        }
        if e.d_ino < UFS_ROOTINO {
            if !(e.d_ino == UFS_WINO && e.d_type == DT_WHT) {
                self.find(Finding::InoOutOfRange { dir, name, ino: e.d_ino });
            }
            return;
        }
        let ino = e.d_ino;
        let t = *self.inodes.get(ino);
        match t.state {
            State::Free => return self.find(Finding::Unallocated { dir, name, ino }),
            State::Bad => return,
            State::InUse => {}
        }
        if e.d_type != t.dtype {
            self.find(Finding::BadType { dir, name: name.clone(), ino, stored: e.d_type, actual: t.dtype });
        }
        if t.dtype == DT_DIR && t.size == 0 {
            // A name for a directory without a block (fsck_ffs's "ZERO LENGTH DIRECTORY").
            self.find(Finding::DirLength { ino, size: 0 });
        }
        if dir == UFS_ROOTINO && e.name == crate::fs::br::BR_DIR && t.dtype == DT_DIR {
            self.br_dir = Some(ino);
        }
        if t.unmovable {
            self.unmovable_names.push((ino, dir));
        }
        let Some(t) = self.inodes.get_mut(ino) else { unreachable!("inode {ino} in use was not read") };
        t.counted += 1;
        if t.dtype == DT_DIR {
            t.names += 1;
            if t.parent == 0 {
                t.parent = dir;
                self.children.entry(dir).or_default().push(ino);
            } else {
                self.extra_links.push((ino, dir, name));
            }
        }
    }
}
