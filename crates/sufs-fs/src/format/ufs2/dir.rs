//! UFS2 directory blocks: FreeBSD's `struct direct` (sys/ufs/ufs/dir.h) in chunks of
//! `DIRBLKSIZ` (512) bytes, read with every check fsck_ffs's `dircheck` makes of an entry.
//!
//! The entry layout (`d_ino` u32, `d_reclen` u16, `d_type` u8, `d_namlen` u8, the name, a NUL,
//! padding to 4) is the one `format::dir` keeps, so entries are written with
//! `format::dirent_put` and sized with `format::dirent_size` (`DIRECTSIZ`); what is UFS2's here
//! is the reading, which holds a foreign disk to fsck_ffs's rules.

use super::*;
use crate::format::{dirent_size, DIRBLKSIZ, MAXNAMLEN};

/// A directory entry as FreeBSD's `struct direct` has it, borrowed from its block; `offset` is
/// its byte offset in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Direct<'a> {
    pub offset: u64,
    /// 0: an empty record (the first of a chunk whose entries were all removed).
    pub d_ino: u32,
    pub d_reclen: u16,
    pub d_type: u8,
    pub name: &'a [u8],
}

/// Walks the entries of directory data, chunk by chunk, checking each as fsck_ffs's `dircheck`
/// does and, as the kernel's lookup does, that `d_ino` is below the file system's inode count.
/// The first bad entry is answered as an error and ends the walk.
pub struct DirIter<'a> {
    data: &'a [u8],
    /// Byte offset of `data` in the directory.
    base: u64,
    /// Bytes of the directory from `data`'s start (`di_size - base`): an entry must fit in it.
    filesize: u64,
    maxino: u32,
    at: usize,
    failed: bool,
}

impl<'a> DirIter<'a> {
    /// The entries of `data`, a whole number of chunks read at byte `base` of a directory of
    /// `di_size` bytes in a file system of `maxino` inodes.
    pub fn new(data: &'a [u8], base: u64, di_size: u64, maxino: u32) -> DirIter<'a> {
        DirIter { data, base, filesize: di_size.saturating_sub(base), maxino, at: 0, failed: false }
    }

    fn entry(&self) -> Result<Direct<'a>, Ufs2Error> {
        let at = self.at;
        let offset = self.base + at as u64;
        let bad = |what| Err(Ufs2Error::Dir { offset, what });
        let spaceleft = DIRBLKSIZ - at % DIRBLKSIZ;
        let chunk_end = at - at % DIRBLKSIZ + DIRBLKSIZ;
        if chunk_end > self.data.len() {
            return bad("directory data is not a whole number of 512-byte chunks");
        }
        if spaceleft < 8 {
            return bad("entry header crosses a chunk");
        }
        let d = &self.data[at..chunk_end];
        let d_ino = u32::get(d, 0);
        let d_reclen = u16::get(d, 4);
        let (d_type, namlen) = (d[6], d[7] as usize);
        let size = dirent_size(namlen);
        let reclen = d_reclen as usize;
        if reclen == 0 || reclen > spaceleft || reclen < size || !reclen.is_multiple_of(4) {
            return bad("record length is 0, past its chunk, short of its name, or not a multiple of 4");
        }
        if self.filesize - (at as u64) < size as u64 {
            return bad("entry past the directory's size");
        }
        if d_ino == 0 {
            return Ok(Direct { offset, d_ino, d_reclen, d_type, name: &[] });
        }
        if namlen == 0 || namlen > MAXNAMLEN || d_type > 15 {
            return bad("empty name or a type above 15");
        }
        let name = &d[8..8 + namlen];
        if name.iter().any(|&c| c == 0 || c == b'/') {
            return bad("name holds NUL or '/'");
        }
        if d[8 + namlen] != 0 {
            return bad("name not followed by NUL");
        }
        if d_ino >= self.maxino {
            return bad("inode number past the file system's inodes");
        }
        Ok(Direct { offset, d_ino, d_reclen, d_type, name })
    }
}

impl<'a> Iterator for DirIter<'a> {
    type Item = Result<Direct<'a>, Ufs2Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.data.len() || self.at as u64 >= self.filesize {
            return None;
        }
        let r = self.entry();
        match &r {
            Ok(e) => self.at += e.d_reclen as usize,
            Err(_) => self.failed = true,
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{dir_init_block, dirent_put};

    fn block() -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        dir_init_block(&mut b);
        dirent_put(&mut b, 0, 2, 12, 4, b".");
        dirent_put(&mut b, 12, 2, 12, 4, b"..");
        dirent_put(&mut b, 24, 0, 12, 0, b"");
        dirent_put(&mut b, 36, 7, 476, 8, b"file1");
        b
    }

    fn walk(b: &[u8], size: u64) -> Result<Vec<(u64, u32, Vec<u8>)>, Ufs2Error> {
        DirIter::new(b, 0, size, 1024).map(|r| r.map(|e| (e.offset, e.d_ino, e.name.to_vec()))).collect()
    }

    #[test]
    fn entries_of_each_chunk_are_walked() {
        let b = block();
        let all = walk(&b, 1024).unwrap();
        let names: Vec<_> = all.iter().map(|(o, i, n)| (*o, *i, String::from_utf8_lossy(n).into_owned())).collect();
        assert_eq!(
            names,
            vec![
                (0, 2, ".".into()),
                (12, 2, "..".into()),
                (24, 0, "".into()),
                (36, 7, "file1".into()),
                (512, 0, "".into())
            ]
        );
        assert_eq!(walk(&b, 512).unwrap().len(), 4, "the walk stops at the directory's size");
    }

    #[test]
    fn dircheck_refuses_each_damage() {
        let cases: &[(usize, &[u8], &str)] = &[
            (40, &[0, 0], "reclen 0"),
            (40, &[0xe0, 0x01], "reclen past the chunk (480 at 36)"),
            (40, &[8, 0], "reclen short of its name"),
            (40, &[0xda, 0x01], "reclen not a multiple of 4"),
            (43, &[0], "empty name"),
            (42, &[16], "type above 15"),
            (45, b"/", "a slash in the name"),
            (45, &[0], "a NUL in the name"),
            (49, b"x", "no NUL after the name"),
            (36, &[0, 4, 0, 0], "inode past maxino"),
        ];
        for &(at, bytes, what) in cases {
            let mut b = block();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            let r = walk(&b, 1024);
            assert!(matches!(r, Err(Ufs2Error::Dir { offset: 36, .. })), "{what}: {r:?}");
        }
        assert!(walk(&block()[..700], 1024).is_err(), "a partial chunk");
        assert!(walk(&block(), 40).is_err(), "an entry past the size");
    }
}
