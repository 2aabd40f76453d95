//! File data: read, write (with the Block Register's placement), truncate and setattr.

use super::*;

impl Fs {
    pub fn read(&mut self, ino: u32, off: u64, len: usize) -> FsResult<Vec<u8>> {
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if off >= d.size {
            self.accessed(ino, &mut d)?;
            return Ok(Vec::new());
        }
        if d.flags & DI_UNMOVABLE != 0 {
            // A reservation's blocks belong to its owner, who writes them on the device.
            return self.br_read(ino, &mut d, off, len);
        }
        if d.flags & DI_SNAPSHOT != 0 {
            // A snapshot reads as the frozen file system.
            return self.snap_read(&d, off, len);
        }
        let end = d.size.min(off.saturating_add(len as u64));
        let bs = self.sb.block_size as u64;
        let mut out = Vec::with_capacity((end - off) as usize);
        let mut run = Vec::new();
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let boff = (pos % bs) as usize;
            let (bno, _) = self.bmap(ino, &mut d, lbn, false)?;
            // The blocks of the request that follow this one on disk, none of them cached, come
            // in one device read (a sequential read's requests are up to 1 MiB), past the cache.
            let mut nblk = 1;
            if bno != 0 && !self.cache.is_cached(bno) {
                while (lbn + nblk) * bs < end && nblk < MAX_READ_RUN {
                    let (next, _) = self.bmap(ino, &mut d, lbn + nblk, false)?;
                    if next != bno + nblk || self.cache.is_cached(next) {
                        break;
                    }
                    nblk += 1;
                }
            }
            let n = (((lbn + nblk) * bs).min(end) - pos) as usize;
            if bno == 0 {
                out.resize(out.len() + n, 0);
            } else if nblk == 1 {
                out.extend_from_slice(&self.cache.read(bno)?[boff..boff + n]);
            } else {
                self.cache.read_past(bno, nblk as usize, &mut run)?;
                out.extend_from_slice(&run[boff..boff + n]);
            }
            pos += n as u64;
        }
        self.accessed(ino, &mut d)?;
        Ok(out)
    }

    /// Writes `data` at `off`. A write that runs out of space part way is tried again whole
    /// after the frees soft updates hold have completed (`retry_nospace`): the same bytes at the
    /// same offset.
    pub fn write(&mut self, ino: u32, off: u64, data: &[u8]) -> FsResult<usize> {
        self.retry_nospace(|fs| fs.write_once(ino, off, data))
    }

    pub(super) fn write_once(&mut self, ino: u32, off: u64, data: &[u8]) -> FsResult<usize> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        let r = self.write_inner(ino, &mut d, off, data);
        let n = match r {
            Ok(n) => n,
            Err(FsError::NoSpace) if d.size > 0 => 0,
            Err(e) => return Err(e),
        };
        self.touch_mc(&mut d);
        // A write by a non-owner clears set-id bits, as POSIX asks.
        d.mode &= !(libc::S_ISUID as u16);
        self.iput(ino, &d)?;
        self.balance()?;
        if n == 0 && !data.is_empty() {
            return Err(FsError::NoSpace);
        }
        Ok(n)
    }

    /// Writes data into the file's blocks, allocating as needed; updates `d` in memory (size,
    /// block pointers, block count). On ENOSPC part-way, returns what was written.
    pub(super) fn write_inner(&mut self, ino: u32, d: &mut Dinode, off: u64, data: &[u8]) -> FsResult<usize> {
        let end = off.checked_add(data.len() as u64).ok_or(FsError::TooBig)?;
        if end > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let bs = self.sb.block_size as u64;
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let boff = (pos % bs) as usize;
            let n = ((bs - boff as u64).min(end - pos)) as usize;
            let (bno, fresh) = match self.bmap(ino, d, lbn, true) {
                Ok(x) => x,
                Err(FsError::NoSpace) if pos > off => break,
                Err(e) => return Err(e),
            };
            let src = &data[(pos - off) as usize..(pos - off) as usize + n];
            let buf = if fresh || n == bs as usize { self.cache.create(bno) } else { self.cache.modify(bno)? };
            buf[boff..boff + n].copy_from_slice(src);
            self.cache.set_data(bno);
            if self.async_full_blocks && boff + n == bs as usize {
                self.write_bufs(&[bno], WriteKind::Async)?;
            }
            pos += n as u64;
            if pos > d.size {
                d.size = pos;
            }
            if self.cache.over_capacity() {
                self.make_room()?;
            }
        }
        Ok((pos - off) as usize)
    }

    pub fn setattr(&mut self, ino: u32, a: &SetAttr) -> FsResult<Dinode> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        let immutable = d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0;
        if let Some(size) = a.size {
            if d.is_dir() {
                return Err(FsError::IsDir);
            }
            if !d.is_reg() {
                return Err(FsError::Invalid("truncate of a non-regular file"));
            }
            if immutable {
                return Err(FsError::Perm);
            }
            self.truncate(ino, &mut d, size)?;
            self.touch_mc(&mut d);
        }
        if let Some(m) = a.mode {
            d.mode = (d.mode & S_IFMT) | (m as u16 & 0o7777);
            self.touch_c(&mut d);
        }
        if let Some(u) = a.uid {
            d.uid = u;
            self.touch_c(&mut d);
        }
        if let Some(g) = a.gid {
            d.gid = g;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.atime {
            d.atime = s;
            d.atime_ns = ns;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.mtime {
            d.mtime = s;
            d.mtime_ns = ns;
            self.touch_c(&mut d);
        }
        self.iput(ino, &d)?;
        self.balance()?;
        Ok(self.eff(ino, d))
    }

    /// Sets the size of a regular file: shrinking frees the blocks past the end and zeroes the
    /// tail of the last block, so a later extension reads zeros.
    pub(super) fn truncate(&mut self, ino: u32, d: &mut Dinode, size: u64) -> FsResult<()> {
        if size > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let bs = self.sb.block_size as u64;
        if size < d.size {
            if !size.is_multiple_of(bs) {
                let (bno, _) = self.bmap(ino, d, size / bs, false)?;
                if bno != 0 {
                    self.cache.modify(bno)?[(size % bs) as usize..].fill(0);
                    self.cache.set_data(bno);
                }
            }
            d.size = size;
            self.truncate_blocks(ino, d, size.div_ceil(bs), vec![])?;
        } else {
            d.size = size;
        }
        Ok(())
    }
}
