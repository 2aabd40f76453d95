//! FFS's dirhash: an in-memory index of a large directory, so that a lookup or an insert does not
//! scan every block (without it, creating n files in one directory costs O(n²)). It maps each
//! name to the (logical block, offset) of its entry and keeps, per chunk (`DIRBLKSIZ`: no record
//! crosses one), the largest record space a new entry could use, as FreeBSD's `dh_blkfree`
//! does: an insert then reads one chunk, not a block (of 32 KiB on UFS2). It is never written
//! to disk and is rebuilt from the blocks.
//!
//! Invariant: for an indexed directory, `names` holds exactly the live entries of its blocks at
//! the offsets they have there, and the slack of chunk `c` (`c * DIRBLKSIZ` bytes into the
//! directory) is the largest free space of its records. Entry offsets are stable (inserts split
//! a record, removes merge into the previous one), so only the changed entry and its chunk's
//! slack need updating.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::format::{dir_iter, DirError, DIRBLKSIZ};

#[derive(Debug)]
pub struct DirHash {
    /// Keyed by the name with the std hasher's random key: names a user picks do not pile up
    /// in one bucket.
    names: HashMap<Name, (u64, u32)>,
    /// The chunks' slack, chunk by chunk through the directory.
    slack: SlackTree,
    /// Chunks in a block.
    per_block: u64,
}

/// Names of at most this many bytes are kept in the index's own buckets.
const SHORT: usize = 22;

/// A name as the index keeps it: in the bucket when short (most are), so that a lookup compares
/// it where the hash led, not in an allocation of its own elsewhere in memory (a miss of the
/// processor's cache per lookup in a large directory, a sixth of a lookup's time); longer, in
/// a box.
#[derive(Debug, Clone)]
enum Name {
    Short { len: u8, bytes: [u8; SHORT] },
    Long(Box<[u8]>),
}

impl Name {
    fn new(name: &[u8]) -> Name {
        if name.len() > SHORT {
            return Name::Long(name.into());
        }
        let mut bytes = [0; SHORT];
        bytes[..name.len()].copy_from_slice(name);
        Name::Short { len: name.len() as u8, bytes }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Short { len, bytes } => &bytes[..*len as usize],
            Name::Long(b) => b,
        }
    }
}

// A name is its bytes, whichever way it is kept: equal, hashed and borrowed as them (the map
// is searched with a `&[u8]`).
impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl Borrow<[u8]> for Name {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The largest free record space of each block, in a tree of maxima over the blocks, so that
/// the first block with room for a new entry is found in O(log n) (FreeBSD's dirhash keeps the
/// first block of each free-space bucket, `dh_firstfree`, to the same end): a directory of a
/// million entries has thousands of blocks, and a scan of them all per create made filling it
/// quadratic.
///
/// Invariant: `t[cap + i]` is block `i`'s slack for `i < len` and 0 past it, and every inner
/// node `t[k]` (1 <= k < cap) is the larger of `t[2k]` and `t[2k + 1]`.
#[derive(Debug, Default, PartialEq, Eq)]
struct SlackTree {
    len: usize,
    /// Leaves: a power of two at least `len` (0 while empty).
    cap: usize,
    t: Vec<u32>,
}

impl SlackTree {
    fn len(&self) -> usize {
        self.len
    }

    /// Block `i`'s slack (none past the last).
    fn get(&self, i: usize) -> u32 {
        if i < self.len {
            self.t[self.cap + i]
        } else {
            0
        }
    }

    /// Block `i`'s slack is `s` (blocks up to `i` that were not there have none).
    fn set(&mut self, i: usize, s: u32) {
        if i >= self.cap {
            self.grow((i + 1).next_power_of_two());
        }
        self.len = self.len.max(i + 1);
        let mut k = self.cap + i;
        self.t[k] = s;
        while k > 1 {
            k /= 2;
            self.t[k] = self.t[2 * k].max(self.t[2 * k + 1]);
        }
    }

    fn grow(&mut self, cap: usize) {
        assert!(cap.is_power_of_two() && cap > self.cap);
        let mut t = vec![0; 2 * cap];
        t[cap..cap + self.len].copy_from_slice(&self.t[self.cap..self.cap + self.len]);
        for k in (1..cap).rev() {
            t[k] = t[2 * k].max(t[2 * k + 1]);
        }
        self.cap = cap;
        self.t = t;
    }

    /// The first block whose slack is at least `need` (> 0).
    fn first_at_least(&self, need: u32) -> Option<usize> {
        assert!(need > 0);
        if self.cap == 0 || self.t[1] < need {
            return None;
        }
        let mut k = 1;
        while k < self.cap {
            k = if self.t[2 * k] >= need { 2 * k } else { 2 * k + 1 };
        }
        debug_assert!(k - self.cap < self.len);
        Some(k - self.cap)
    }
}

/// Directories of at least this many bytes are indexed (they grow a chunk, `DIRBLKSIZ`, at a
/// time): FreeBSD's `vfs.ufs.dirhash_minsize`, five chunks. With UFS2's 32 KiB blocks a count
/// of blocks would leave a directory of a thousand names (one block) scanned on every lookup
/// and create.
pub const DIRHASH_MIN_SIZE: u64 = 2560;

/// Whether a directory of `size` bytes gets an index.
pub fn dirhash_wanted(size: u64) -> bool {
    size >= DIRHASH_MIN_SIZE
}

/// The largest free space of any record in the chunk of directory block `block` that holds
/// offset `off`.
pub fn chunk_slack(block: &[u8], off: usize) -> Result<u32, DirError> {
    let c = off / DIRBLKSIZ * DIRBLKSIZ;
    let mut best = 0;
    for e in dir_iter(&block[c..c + DIRBLKSIZ]) {
        best = best.max(e?.slack() as u32);
    }
    Ok(best)
}

impl DirHash {
    /// An empty index of a directory of `block_size`-byte blocks.
    pub fn new(block_size: usize) -> DirHash {
        assert!(block_size.is_multiple_of(DIRBLKSIZ), "blocks of {block_size} bytes are not whole chunks");
        DirHash { names: HashMap::new(), slack: SlackTree::default(), per_block: (block_size / DIRBLKSIZ) as u64 }
    }

    /// Chunk `off / DIRBLKSIZ` of block `lbn`, counted through the directory.
    fn chunk(&self, lbn: u64, off: usize) -> usize {
        (lbn * self.per_block) as usize + off / DIRBLKSIZ
    }

    /// Adds one block's entries (blocks are added in order; a hole is an empty block).
    pub fn add_block(&mut self, lbn: u64, block: Option<&[u8]>) -> Result<(), DirError> {
        self.add_block_except(lbn, block, |_| false)
    }

    /// As `add_block`, leaving out the entries at the offsets `hidden` accepts (names kept on
    /// disk but gone for users, which may share their name with a live entry).
    pub fn add_block_except(
        &mut self,
        lbn: u64,
        block: Option<&[u8]>,
        hidden: impl Fn(usize) -> bool,
    ) -> Result<(), DirError> {
        debug_assert_eq!(self.chunk(lbn, 0), self.slack.len());
        let Some(block) = block else {
            for c in 0..self.per_block as usize {
                self.slack.set(self.chunk(lbn, 0) + c, 0);
            }
            return Ok(());
        };
        for e in dir_iter(block) {
            let e = e?;
            if e.ino != 0 && !hidden(e.offset) {
                self.names.insert(Name::new(e.name), (lbn, e.offset as u32));
            }
        }
        self.set_chunks(lbn, block)
    }

    /// Takes the slack of every chunk of block `lbn` (its `block.len()` first bytes) again.
    pub fn set_chunks(&mut self, lbn: u64, block: &[u8]) -> Result<(), DirError> {
        for c in (0..block.len()).step_by(DIRBLKSIZ) {
            let s = chunk_slack(block, c)?;
            self.slack.set(self.chunk(lbn, c), s);
        }
        Ok(())
    }

    /// The largest free record space of the chunk holding `off` of block `lbn`, as last set.
    pub fn slack_at(&self, lbn: u64, off: usize) -> u32 {
        self.slack.get(self.chunk(lbn, off))
    }

    pub fn get(&self, name: &[u8]) -> Option<(u64, usize)> {
        self.names.get(name).map(|&(l, o)| (l, o as usize))
    }

    /// The first chunk with room for an entry needing `need` bytes: its block, and its offset
    /// in the block.
    pub fn chunk_with_room(&self, need: usize) -> Option<(u64, usize)> {
        let c = self.slack.first_at_least(need as u32)? as u64;
        Some((c / self.per_block, (c % self.per_block) as usize * DIRBLKSIZ))
    }

    /// `name` was put at `off` of block `lbn`, whose chunk has `new_slack` left.
    pub fn inserted(&mut self, name: &[u8], lbn: u64, off: usize, new_slack: u32) {
        self.names.insert(Name::new(name), (lbn, off as u32));
        self.set_slack(lbn, off, new_slack);
    }

    /// `name`'s entry at `off` of block `lbn` is gone; its chunk has `new_slack` now.
    pub fn removed(&mut self, name: &[u8], lbn: u64, off: usize, new_slack: u32) {
        self.names.remove(name);
        self.set_slack(lbn, off, new_slack);
    }

    /// Forgets a name whose entry is hidden (its space stays taken).
    pub fn hide(&mut self, name: &[u8], lbn: u64, off: usize) {
        if self.names.get(name) == Some(&(lbn, off as u32)) {
            self.names.remove(name);
        }
    }

    /// A hidden entry is live again (a rename undone before its old name left the disk).
    pub fn unhide(&mut self, name: &[u8], lbn: u64, off: usize) {
        self.names.insert(Name::new(name), (lbn, off as u32));
    }

    /// The chunk holding `off` of block `lbn` has `s` bytes of slack.
    pub fn set_slack(&mut self, lbn: u64, off: usize, s: u32) {
        self.slack.set(self.chunk(lbn, off), s);
    }

    /// The names indexed (the tests' view).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::*;

    /// A removal's freed space, with the chunk's largest free space before it, is the chunk's
    /// largest after it (what `remove_entry` keeps without walking the chunk), whichever record
    /// goes: the first of a chunk, one after a gap, the last.
    #[test]
    fn a_removal_gives_the_chunks_new_slack() {
        let mut b = vec![0u8; 4096];
        dir_init_block(&mut b);
        let mut offs = Vec::new();
        for i in 0..150u32 {
            let name = format!("n{}", "x".repeat((i % 13) as usize));
            let Some(at) = dir_find_space(&b, name.len()).unwrap() else { break };
            offs.push(dir_insert(&mut b, at, 10 + i, DT_REG, name.as_bytes()).unwrap());
        }
        assert!(offs.len() > 100, "the block filled: {}", offs.len());
        // Every third, then the rest backwards: first records, neighbours of gaps, last ones.
        let order: Vec<usize> =
            (0..offs.len()).step_by(3).chain((0..offs.len()).rev().filter(|i| i % 3 != 0)).collect();
        for i in order {
            let off = offs[i];
            let before = chunk_slack(&b, off).unwrap();
            let freed = dir_remove(&mut b, off).unwrap() as u32;
            assert_eq!(before.max(freed), chunk_slack(&b, off).unwrap(), "entry {i} at {off}");
        }
    }

    #[test]
    fn names_kept_inline_or_boxed_are_found_by_their_bytes() {
        use std::hash::BuildHasher;
        let lens = [1, SHORT - 1, SHORT, SHORT + 1, 255];
        let mut h = DirHash::new(4096);
        for (i, &n) in lens.iter().enumerate() {
            let name = vec![b'a' + i as u8; n];
            assert_eq!(matches!(Name::new(&name), Name::Short { .. }), n <= SHORT, "a name of {n} bytes");
            // The map hashes a key and the slice it is searched with alike.
            let rs = std::collections::hash_map::RandomState::new();
            assert_eq!(rs.hash_one(Name::new(&name)), rs.hash_one(&name[..]), "a name of {n} bytes");
            h.inserted(&name, 0, 16 * i, 0);
        }
        for (i, &n) in lens.iter().enumerate() {
            let name = vec![b'a' + i as u8; n];
            assert_eq!(h.get(&name), Some((0, 16 * i)), "a name of {n} bytes");
            // A name that is a prefix of one kept, or one kept with a byte more, is another.
            assert_eq!(h.get(&name[..n - 1]), None);
            assert_eq!(h.get(&[&name[..], b"a"].concat()), None);
        }
        h.removed(&[b'a' + 2; SHORT], 0, 32, 0);
        h.removed(&[b'a' + 3; SHORT + 1], 0, 48, 0);
        assert_eq!((h.get(&[b'a' + 2; SHORT]), h.get(&[b'a' + 3; SHORT + 1])), (None, None));
        assert_eq!(h.len(), lens.len() - 2);
    }

    #[test]
    fn index_follows_inserts_and_removes() {
        let mut blocks = vec![vec![0u8; 4096], vec![0u8; 4096]];
        for b in &mut blocks {
            dir_init_block(b);
        }
        let mut h = DirHash::new(4096);
        h.add_block(0, Some(&blocks[0])).unwrap();
        h.add_block(1, Some(&blocks[1])).unwrap();
        assert_eq!(h.chunk_with_room(20), Some((0, 0)));
        for i in 0..120u32 {
            let name = format!("entry-{i}");
            let (lbn, c) = h.chunk_with_room(dirent_size(name.len())).unwrap();
            let b = &mut blocks[lbn as usize];
            // The chunk named is the first with room in the directory.
            let at = dir_find_space(b, name.len()).unwrap().unwrap();
            assert_eq!(at / DIRBLKSIZ * DIRBLKSIZ, c, "entry {i}");
            let off = dir_insert(b, at, 10 + i, DT_REG, name.as_bytes()).unwrap();
            let s = chunk_slack(b, off).unwrap();
            h.inserted(name.as_bytes(), lbn, off, s);
        }
        // The first chunk with room, as a scan of the blocks finds it, for names of any length.
        for n in [1, 8, 20, 60, 200, 255] {
            let scan = blocks
                .iter()
                .enumerate()
                .find_map(|(l, b)| dir_find_space(b, n).unwrap().map(|at| (l as u64, at / DIRBLKSIZ * DIRBLKSIZ)));
            assert_eq!(h.chunk_with_room(dirent_size(n)), scan, "a name of {n} bytes");
        }
        assert_eq!(h.len(), 120);
        // Every indexed location holds its name.
        for i in 0..120u32 {
            let name = format!("entry-{i}");
            let (lbn, off) = h.get(name.as_bytes()).unwrap();
            let e = dir_iter(&blocks[lbn as usize]).map(|e| e.unwrap()).find(|e| e.offset == off).unwrap();
            assert_eq!(e.name, name.as_bytes());
        }
        let (lbn, off) = h.get(b"entry-7").unwrap();
        dir_remove(&mut blocks[lbn as usize], off).unwrap();
        let s = chunk_slack(&blocks[lbn as usize], off).unwrap();
        h.removed(b"entry-7", lbn, off, s);
        assert!(h.get(b"entry-7").is_none());
        assert_eq!(h.chunk_with_room(16), Some((0, 0)), "entry-7's room, in chunk 0");
        // A rebuilt index agrees with the maintained one.
        let mut r = DirHash::new(4096);
        r.add_block(0, Some(&blocks[0])).unwrap();
        r.add_block(1, Some(&blocks[1])).unwrap();
        assert_eq!(r.names, h.names);
        assert_eq!(r.slack, h.slack);
    }

    /// The tree finds what a scan of the blocks in order finds, as blocks come and change.
    #[test]
    fn slack_tree_finds_the_first_block_with_room() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut tree = SlackTree::default();
        let mut plain: Vec<u32> = Vec::new();
        for _ in 0..5000 {
            let i = rng.gen_range(0..plain.len() + 2);
            let s = rng.gen_range(0..4096);
            if i >= plain.len() {
                plain.resize(i + 1, 0);
            }
            plain[i] = s;
            tree.set(i, s);
            assert_eq!(tree.len(), plain.len());
            let need = rng.gen_range(1..4200);
            assert_eq!(tree.first_at_least(need), plain.iter().position(|&x| x >= need));
        }
    }
}
