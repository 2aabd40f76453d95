//! Reading a UFS2 file through its block map, as FreeBSD's `ufs_bmaparray` walks it: twelve
//! direct pointers, then single, double and triple indirect blocks of `NINDIR` little-endian
//! `i64` fragment numbers; 0 is a hole; the last direct block of a small file may be only the
//! fragments its size reaches (`sblksize`). Read-only: every pointer is checked to lie in data
//! space (`Fs::check_blkno`) before it is read.
//!
//! The extended-attribute area is read the same way from `di_extb` (`di_extsize` bytes, its
//! last block possibly fragments).

use super::*;

/// A device read by byte offset.
pub trait ReadAt {
    /// Fills `buf` from byte `off`; a read past the end is `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()>;
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        let src = usize::try_from(off)
            .ok()
            .and_then(|o| self.get(o..o.checked_add(buf.len())?))
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl ReadAt for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, off)
    }
}

impl ReadAt for dyn crate::dev::BlockDevice {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        crate::dev::read_bytes(self, off, buf)
    }
}

/// One block of a file's tree: a data block (`level` 0, `lbn` its logical block) or an
/// indirect block (`level` 1 to 3, `lbn` the first logical block it maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBlock {
    pub level: u8,
    pub lbn: i64,
    pub fsb: i64,
    /// Bytes on disk: a block, or the fragments of a short last direct block.
    pub size: u64,
}

/// A file of a UFS2 file system, read through its dinode's block map.
pub struct FileReader<'a, D: ReadAt + ?Sized> {
    fs: &'a Fs,
    dev: &'a D,
    pub dip: &'a Dinode,
    ino: u32,
}

impl<'a, D: ReadAt + ?Sized> FileReader<'a, D> {
    pub fn new(fs: &'a Fs, dev: &'a D, dip: &'a Dinode, ino: u32) -> Self {
        FileReader { fs, dev, dip, ino }
    }

    /// A short symbolic link: its target is in `di_db`/`di_ib`, which hold no block numbers.
    fn shortlink(&self) -> Option<Vec<u8>> {
        self.dip.shortlink(self.fs)
    }

    fn bad(&self, what: String) -> Ufs2Error {
        Ufs2Error::Inode { ino: self.ino, what }
    }

    /// Reads `size` bytes at fragment `fsb` after checking it lies in data space.
    fn read_frags(&self, fsb: i64, size: u64, what: &str) -> Result<Vec<u8>, Ufs2Error> {
        if !self.fs.check_blkno(fsb, size) {
            return Err(self.bad(format!("{what} at fragment {fsb} ({size} bytes) is outside the data space")));
        }
        let mut b = vec![0u8; size as usize];
        self.dev.read_exact_at(&mut b, self.fs.fsb_offset(fsb))?;
        Ok(b)
    }

    fn read_indirect(&self, fsb: i64) -> Result<Vec<i64>, Ufs2Error> {
        let b = self.read_frags(fsb, self.fs.fs_bsize as u64, "indirect block")?;
        Ok(b.chunks_exact(8).map(|c| i64::get(c, 0)).collect())
    }

    /// Logical blocks the indirect block of each level maps: `NINDIR^level`.
    fn span(&self, level: u32) -> i64 {
        self.fs.nindir().pow(level)
    }

    /// `ufs_bmaparray`: the fragment holding logical block `lbn`, or `None` for a hole.
    pub fn bmap(&self, lbn: i64) -> Result<Option<i64>, Ufs2Error> {
        if lbn < 0 {
            return Err(self.bad(format!("logical block {lbn}")));
        }
        if self.shortlink().is_some() {
            return Ok(None);
        }
        if lbn < UFS_NDADDR as i64 {
            return Ok(Some(self.dip.di_db[lbn as usize]).filter(|&b| b != 0));
        }
        let mut rel = lbn - UFS_NDADDR as i64;
        for level in 1..=UFS_NIADDR as u32 {
            let span = self.span(level);
            if rel >= span {
                rel -= span;
                continue;
            }
            let mut ptr = self.dip.di_ib[level as usize - 1];
            for l in (0..level).rev() {
                if ptr == 0 {
                    return Ok(None);
                }
                let each = self.span(l);
                ptr = self.read_indirect(ptr)?[(rel / each) as usize];
                rel %= each;
            }
            return Ok(Some(ptr).filter(|&b| b != 0));
        }
        Err(self.bad(format!("logical block {lbn} is past the triple indirect block")))
    }

    /// Bytes of logical block `lbn` (`dblksize`).
    pub fn block_size(&self, lbn: i64) -> u64 {
        self.fs.dblksize(self.dip, lbn)
    }

    /// Logical block `lbn`'s bytes on disk (`block_size(lbn)` of them), zeros for a hole.
    pub fn read_block(&self, lbn: i64) -> Result<Vec<u8>, Ufs2Error> {
        let size = self.block_size(lbn);
        match self.bmap(lbn)? {
            Some(fsb) => self.read_frags(fsb, size, "data block"),
            None => Ok(vec![0; size as usize]),
        }
    }

    /// Reads up to `buf.len()` bytes of the file at byte `off`, holes as zeros; answers the
    /// bytes read (fewer at the end of the file). A short symbolic link reads as its target.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize, Ufs2Error> {
        let size = self.dip.di_size;
        let end = size.min(off.saturating_add(buf.len() as u64));
        if let Some(target) = self.shortlink() {
            let (from, to) = ((off as usize).min(target.len()), (end as usize).min(target.len()));
            buf[..to - from].copy_from_slice(&target[from..to]);
            return Ok(to - from);
        }
        let mut at = off;
        while at < end {
            let lbn = self.fs.lblkno(at);
            let boff = self.fs.blkoff(at) as usize;
            let n = ((self.fs.fs_bsize as u64 - boff as u64).min(end - at)) as usize;
            let dst = &mut buf[(at - off) as usize..(at - off) as usize + n];
            match self.bmap(lbn)? {
                None => dst.fill(0),
                Some(fsb) => {
                    let block = self.read_frags(fsb, self.block_size(lbn), "data block")?;
                    if boff + n > block.len() {
                        return Err(self.bad(format!("block {lbn} is shorter than the size reaches")));
                    }
                    dst.copy_from_slice(&block[boff..boff + n]);
                }
            }
            at += n as u64;
        }
        Ok(end.saturating_sub(off) as usize)
    }

    /// The whole file; refused past `limit` bytes (a sparse file may be far larger than the
    /// memory it would take).
    pub fn read_all(&self, limit: u64) -> Result<Vec<u8>, Ufs2Error> {
        if self.dip.di_size > limit {
            return Err(self.bad(format!("{} bytes, past the limit of {limit}", self.dip.di_size)));
        }
        let mut b = vec![0u8; self.dip.di_size as usize];
        self.read_at(0, &mut b)?;
        Ok(b)
    }

    /// Every block the file holds, data and indirect, walking the tree (holes cost nothing).
    pub fn blocks(&self) -> Result<Vec<FileBlock>, Ufs2Error> {
        let mut out = Vec::new();
        if self.shortlink().is_some() {
            return Ok(out);
        }
        for (lbn, &fsb) in self.dip.di_db.iter().enumerate() {
            if fsb != 0 {
                out.push(FileBlock { level: 0, lbn: lbn as i64, fsb, size: self.block_size(lbn as i64) });
            }
        }
        let mut first = UFS_NDADDR as i64;
        for level in 1..=UFS_NIADDR as u32 {
            let fsb = self.dip.di_ib[level as usize - 1];
            if fsb != 0 {
                self.walk(level, fsb, first, &mut out)?;
            }
            first += self.span(level);
        }
        Ok(out)
    }

    fn walk(&self, level: u32, fsb: i64, first: i64, out: &mut Vec<FileBlock>) -> Result<(), Ufs2Error> {
        let bsize = self.fs.fs_bsize as u64;
        out.push(FileBlock { level: level as u8, lbn: first, fsb, size: bsize });
        let each = self.span(level - 1);
        for (i, &p) in self.read_indirect(fsb)?.iter().enumerate() {
            let lbn = first + i as i64 * each;
            if p == 0 {
                continue;
            }
            if level == 1 {
                if !self.fs.check_blkno(p, bsize) {
                    return Err(self.bad(format!("data block at fragment {p} is outside the data space")));
                }
                out.push(FileBlock { level: 0, lbn, fsb: p, size: bsize });
            } else {
                self.walk(level - 1, p, lbn, out)?;
            }
        }
        Ok(())
    }

    /// The extended-attribute area: `di_extsize` bytes from `di_extb`.
    pub fn read_ext(&self) -> Result<Vec<u8>, Ufs2Error> {
        let extsize = self.dip.di_extsize as u64;
        let bsize = self.fs.fs_bsize as u64;
        if extsize > UFS_NXADDR as u64 * bsize {
            return Err(self.bad(format!("di_extsize {extsize} past {UFS_NXADDR} blocks")));
        }
        let mut out = Vec::with_capacity(extsize as usize);
        let mut lbn = 0;
        while (out.len() as u64) < extsize {
            let size = self.fs.sblksize(extsize, lbn);
            let fsb = self.dip.di_extb[lbn as usize];
            let want = (extsize - out.len() as u64).min(size) as usize;
            if fsb == 0 {
                return Err(self.bad(format!("extended-attribute block {lbn} is a hole")));
            }
            out.extend_from_slice(&self.read_frags(fsb, size, "extended-attribute block")?[..want]);
            lbn += 1;
        }
        Ok(out)
    }

    /// The extended-attribute area's blocks (for accounting).
    pub fn ext_blocks(&self) -> Vec<FileBlock> {
        let extsize = self.dip.di_extsize as u64;
        (0..UFS_NXADDR as i64)
            .filter(|&lbn| self.dip.di_extb[lbn as usize] != 0)
            .map(|lbn| FileBlock {
                level: 0,
                lbn: -1 - lbn,
                fsb: self.dip.di_extb[lbn as usize],
                size: self.fs.sblksize(extsize, lbn),
            })
            .collect()
    }
}
