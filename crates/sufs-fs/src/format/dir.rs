//! Directory blocks: entries in 512-byte chunks chained by `reclen`, parsed and checked
//! (`dir_iter`, `dir_entries`) and changed in place (`dir_insert`, `dir_remove`, ...).

use super::*;

/// Directory entries: `ino u32, reclen u16, type u8, namelen u8, name`, padded to 4 bytes, in
/// 512-byte chunks that never span a sector. Entries in a chunk chain by `reclen` to the chunk's
/// end; an entry's byte offset in the directory names it (diradd/dirrem need that).
pub const DIRENT_HDR: usize = 8;

/// Space an entry with a name of `namelen` bytes needs.
pub fn dirent_size(namelen: usize) -> usize {
    DIRENT_HDR + (namelen + 1).div_ceil(4) * 4
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Byte offset of the entry in its block.
    pub offset: usize,
    pub ino: u32,
    pub reclen: u16,
    pub dtype: u8,
    pub name: Vec<u8>,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad directory entry at offset {offset}: {what}")]
pub struct DirError {
    pub offset: usize,
    pub what: &'static str,
}

/// An entry of a directory block, borrowed from the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRef<'a> {
    pub offset: usize,
    pub ino: u32,
    pub reclen: u16,
    pub dtype: u8,
    pub name: &'a [u8],
}

impl DirRef<'_> {
    pub fn to_owned(&self) -> DirEntry {
        DirEntry {
            offset: self.offset,
            ino: self.ino,
            reclen: self.reclen,
            dtype: self.dtype,
            name: self.name.to_vec(),
        }
    }
    /// Bytes of the record not used by this entry.
    pub fn slack(&self) -> usize {
        let used = if self.ino == 0 { 0 } else { dirent_size(self.name.len()) };
        self.reclen as usize - used
    }
}

/// Walks every record (live or empty) of a directory block, checking the chunk structure; stops
/// at the first malformed record with its error.
pub struct DirIter<'a> {
    block: &'a [u8],
    off: usize,
    failed: bool,
}

pub fn dir_iter(block: &[u8]) -> DirIter<'_> {
    DirIter { block, off: 0, failed: false }
}

impl<'a> Iterator for DirIter<'a> {
    type Item = Result<DirRef<'a>, DirError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.off >= self.block.len() {
            return None;
        }
        let chunk = self.off / DIRBLKSIZ * DIRBLKSIZ;
        match dirent_at(self.block, self.off, chunk) {
            Ok(e) => {
                self.off += e.reclen as usize;
                Some(Ok(e))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The record starting at `off`, an offset an index (dirhash) holds for it: read in place, with
/// the same checks as a walk, instead of walking the block up to it (a walk touches half a block
/// of memory per lookup, which in a directory of a million entries is mostly cache misses).
pub fn dir_entry_at(block: &[u8], off: usize) -> Result<DirRef<'_>, DirError> {
    if !off.is_multiple_of(4) || off + DIRENT_HDR > block.len() {
        return Err(DirError { offset: off, what: "offset is not a record's" });
    }
    dirent_at(block, off, off / DIRBLKSIZ * DIRBLKSIZ)
}

/// Parses every entry (live or empty) of a directory block, checking the chunk structure.
pub fn dir_entries(block: &[u8]) -> Result<Vec<DirEntry>, DirError> {
    dir_iter(block).map(|r| r.map(|e| e.to_owned())).collect()
}

fn dirent_at(block: &[u8], off: usize, chunk: usize) -> Result<DirRef<'_>, DirError> {
    let err = |what| Err(DirError { offset: off, what });
    if off + DIRENT_HDR > chunk + DIRBLKSIZ {
        return err("header crosses a chunk");
    }
    let ino = get_u32(block, off);
    let reclen = get_u16(block, off + 4);
    let dtype = block[off + 6];
    let namelen = block[off + 7] as usize;
    if !(reclen as usize).is_multiple_of(4) || (reclen as usize) < DIRENT_HDR {
        return err("bad record length");
    }
    if off + reclen as usize > chunk + DIRBLKSIZ {
        return err("record crosses a chunk");
    }
    let mut name: &[u8] = &[];
    if ino != 0 {
        if namelen == 0 || dirent_size(namelen) > reclen as usize {
            return err("name does not fit its record");
        }
        name = &block[off + DIRENT_HDR..off + DIRENT_HDR + namelen];
        // One pass: names are short, and two `memchr` calls cost more than the bytes.
        if name.iter().any(|&c| c == 0 || c == b'/') {
            return err("name holds NUL or '/'");
        }
    }
    Ok(DirRef { offset: off, ino, reclen, dtype, name })
}

/// Writes an entry header and name at `off` (the record length is given).
pub fn dirent_put(block: &mut [u8], off: usize, ino: u32, reclen: usize, dtype: u8, name: &[u8]) {
    debug_assert!(name.len() <= MAXNAMLEN && dirent_size(name.len()) <= reclen);
    put_u32(block, off, ino);
    put_u16(block, off + 4, reclen as u16);
    block[off + 6] = dtype;
    block[off + 7] = name.len() as u8;
    block[off + DIRENT_HDR..off + DIRENT_HDR + name.len()].copy_from_slice(name);
    let end = off + dirent_size(name.len());
    block[off + DIRENT_HDR + name.len()..end].fill(0);
}

/// Sets the inode number of the entry at `off` (used by rename and roll-back).
pub fn dirent_set_ino(block: &mut [u8], off: usize, ino: u32) {
    put_u32(block, off, ino)
}
pub fn dirent_set_type(block: &mut [u8], off: usize, dtype: u8) {
    block[off + 6] = dtype;
}

/// Formats `block` as an empty directory block: each chunk one empty record.
pub fn dir_init_block(block: &mut [u8]) {
    block.fill(0);
    for chunk in (0..block.len()).step_by(DIRBLKSIZ) {
        dirent_put(block, chunk, 0, DIRBLKSIZ, DT_UNKNOWN, b"");
    }
}

/// Whether `chunk` (`DIRBLKSIZ` bytes) is an empty directory chunk: one record, naming nothing.
pub fn dir_chunk_empty(chunk: &[u8]) -> bool {
    debug_assert_eq!(chunk.len(), DIRBLKSIZ);
    dir_entry_at(chunk, 0).is_ok_and(|e| e.ino == 0 && e.reclen as usize == DIRBLKSIZ)
}

/// Finds room for an entry of `namelen` bytes; returns the offset of the record to split.
pub fn dir_find_space(block: &[u8], namelen: usize) -> Result<Option<usize>, DirError> {
    let need = dirent_size(namelen);
    for e in dir_iter(block) {
        let e = e?;
        if e.slack() >= need {
            return Ok(Some(e.offset));
        }
    }
    Ok(None)
}

/// Inserts an entry into the record at `at` (found by `dir_find_space`); returns the new entry's
/// offset.
pub fn dir_insert(block: &mut [u8], at: usize, ino: u32, dtype: u8, name: &[u8]) -> Result<usize, DirError> {
    let chunk = at / DIRBLKSIZ * DIRBLKSIZ;
    let e = dirent_at(block, at, chunk)?;
    if e.ino == 0 {
        dirent_put(block, at, ino, e.reclen as usize, dtype, name);
        return Ok(at);
    }
    let used = dirent_size(e.name.len());
    let rest = e.reclen as usize - used;
    if rest < dirent_size(name.len()) {
        return Err(DirError { offset: at, what: "no room in record" });
    }
    put_u16(block, at + 4, used as u16);
    dirent_put(block, at + used, ino, rest, dtype, name);
    Ok(at + used)
}

/// Removes the entry at `off`: merged into the previous record of its chunk, or, as the first
/// record of a chunk, marked empty (inode 0). Returns the free space of the record that holds
/// the entry's bytes now: the chunk's other records are as they were, so its largest free space
/// is the larger of this and what it was.
pub fn dir_remove(block: &mut [u8], off: usize) -> Result<usize, DirError> {
    let chunk = off / DIRBLKSIZ * DIRBLKSIZ;
    let reclen = dirent_at(block, off, chunk)?.reclen;
    if off == chunk {
        put_u32(block, off, 0);
        return Ok(reclen as usize);
    }
    let mut prev = chunk;
    loop {
        let e = dirent_at(block, prev, chunk)?;
        let next = prev + e.reclen as usize;
        if next == off {
            let (prev_reclen, prev_slack) = (e.reclen, e.slack());
            put_u16(block, prev + 4, prev_reclen + reclen);
            return Ok(prev_slack + reclen as usize);
        }
        if next > off || next >= chunk + DIRBLKSIZ {
            return Err(DirError { offset: off, what: "entry not on the chunk's chain" });
        }
        prev = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_insert_find_remove() {
        let mut b = vec![0u8; 4096];
        dir_init_block(&mut b);
        assert!(dir_entries(&b).unwrap().iter().all(|e| e.ino == 0));
        let mut offs = Vec::new();
        for i in 0..100u32 {
            let name = format!("file-{i:03}");
            let at = dir_find_space(&b, name.len()).unwrap().unwrap();
            offs.push(dir_insert(&mut b, at, 100 + i, DT_REG, name.as_bytes()).unwrap());
        }
        let live: Vec<_> = dir_entries(&b).unwrap().into_iter().filter(|e| e.ino != 0).collect();
        assert_eq!(live.len(), 100);
        assert!(offs.iter().all(|o| o % DIRBLKSIZ + 8 <= DIRBLKSIZ));
        for (i, o) in offs.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
            dir_remove(&mut b, *o).unwrap();
            let _ = i;
        }
        let live: Vec<_> = dir_entries(&b).unwrap().into_iter().filter(|e| e.ino != 0).collect();
        assert_eq!(live.len(), 50);
        assert!(live.iter().all(|e| (e.ino - 100) % 2 == 1));
        let long = vec![b'x'; MAXNAMLEN];
        let at = dir_find_space(&b, MAXNAMLEN).unwrap().unwrap();
        dir_insert(&mut b, at, 7, DT_DIR, &long).unwrap();
        assert!(dir_entries(&b).unwrap().iter().any(|e| e.name == long));
    }

    #[test]
    fn an_entry_is_read_in_place_at_its_offset() {
        let mut b = vec![0u8; 4096];
        dir_init_block(&mut b);
        let at = dir_find_space(&b, 3).unwrap().unwrap();
        let off = dir_insert(&mut b, at, 7, 1, b"abc").unwrap();
        let e = dir_entry_at(&b, off).unwrap();
        assert_eq!((e.ino, e.name), (7, &b"abc"[..]));
        assert_eq!(dir_iter(&b).map(|e| e.unwrap()).find(|e| e.offset == off).unwrap().name, b"abc");
        assert!(dir_entry_at(&b, off + 2).is_err(), "not a multiple of 4");
        assert!(dir_entry_at(&b, 4096).is_err(), "past the block");
        assert!(dir_entry_at(&b, 4092).is_err(), "a header past the block");
    }

    #[test]
    fn directory_parse_rejects_garbage() {
        let mut b = vec![0u8; 4096];
        dir_init_block(&mut b);
        put_u16(&mut b, 4, 6); // reclen not a multiple of 4 / too small
        assert!(dir_entries(&b).is_err());
        dir_init_block(&mut b);
        put_u16(&mut b, 4, 1024); // crosses a chunk
        assert!(dir_entries(&b).is_err());
        // A name holding '/' or NUL, at its start, middle or end, is refused; its neighbours pass.
        for bad in [&b"/ab"[..], b"a/b", b"ab\0", b"\0"] {
            dir_init_block(&mut b);
            let at = dir_find_space(&b, 3).unwrap().unwrap();
            dir_insert(&mut b, at, 9, DT_REG, b"abc").unwrap();
            let e = dir_entries(&b).unwrap().into_iter().find(|e| e.ino == 9).unwrap();
            b[e.offset + DIRENT_HDR..e.offset + DIRENT_HDR + 3].fill(b'x');
            b[e.offset + DIRENT_HDR..e.offset + DIRENT_HDR + bad.len()].copy_from_slice(bad);
            let err = dir_entries(&b).unwrap_err();
            assert_eq!((err.offset, err.what), (e.offset, "name holds NUL or '/'"), "{bad:?}");
        }
        b[DIRENT_HDR..DIRENT_HDR + 3].copy_from_slice(b"xyz");
        assert!(dir_entries(&b).is_ok());
    }
}
