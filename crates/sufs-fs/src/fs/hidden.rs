//! Hidden names: a rename's old entry kept in its directory block (so on disk) until the new
//! name is reachable on disk (rule 3 of the soft updates paper: never reset the old pointer to a
//! live resource before the new pointer has been set), but gone for users: lookups, listings and
//! new entries skip it. A removed directory's name may be kept the same way while the hidden
//! names it holds wait.
//!
//! Indexed three ways, because every rename asks: by place (block, offset), by directory and
//! name (a new entry of the same name must not land behind a hidden one), and by directory (a
//! directory holding hidden names cannot go yet). A scan of all hidden names per operation made
//! a rename of many files quadratic.
//!
//! `Namesakes` orders the new entries that wait for hidden names of their own name (a new entry
//! must not reach the disk while an older namesake is still there: a lookup after a crash would
//! find the old one first).

use crate::fixed_hash::{HashMap, HashMapExt};
use std::collections::BTreeSet;

/// Where a hidden entry is: the directory block and the byte offset in it.
pub type Place = (u64, usize);

/// One hidden entry: its directory, the directory's logical block holding it, its name, the
/// inode it names, and its sequence number among hidden names (`Namesakes`).
#[derive(Debug, Clone)]
pub struct HiddenName {
    pub dir: u32,
    pub lbn: u64,
    pub name: Vec<u8>,
    pub ino: u32,
    pub seq: u64,
}

#[derive(Debug, Default)]
pub struct HiddenNames {
    by_place: HashMap<Place, HiddenName>,
    by_name: HashMap<(u32, Vec<u8>), Vec<Place>>,
    per_dir: HashMap<u32, u32>,
}

impl HiddenNames {
    pub fn new() -> HiddenNames {
        HiddenNames { by_place: HashMap::new(), by_name: HashMap::new(), per_dir: HashMap::new() }
    }

    pub fn insert(&mut self, at: Place, h: HiddenName) {
        self.by_name.entry((h.dir, h.name.clone())).or_default().push(at);
        *self.per_dir.entry(h.dir).or_default() += 1;
        let old = self.by_place.insert(at, h);
        assert!(old.is_none(), "two hidden names at {at:?}");
    }

    /// True if directory block `bno` holds a hidden name (a scan: asked only before the block
    /// moves, which is rare).
    pub fn in_block(&self, bno: u64) -> bool {
        self.by_place.keys().any(|p| p.0 == bno)
    }

    pub fn remove(&mut self, at: &Place) -> Option<HiddenName> {
        let h = self.by_place.remove(at)?;
        let key = (h.dir, h.name.clone());
        let places = self.by_name.get_mut(&key).expect("a hidden name is indexed by name");
        places.retain(|p| p != at);
        if places.is_empty() {
            self.by_name.remove(&key);
        }
        let n = self.per_dir.get_mut(&h.dir).expect("a hidden name is counted in its directory");
        *n -= 1;
        if *n == 0 {
            self.per_dir.remove(&h.dir);
        }
        Some(h)
    }

    pub fn get(&self, at: &Place) -> Option<&HiddenName> {
        self.by_place.get(at)
    }

    pub fn contains(&self, at: &Place) -> bool {
        self.by_place.contains_key(at)
    }

    /// The hidden entries named `name` in `dir`.
    pub fn named(&self, dir: u32, name: &[u8]) -> impl Iterator<Item = (Place, &HiddenName)> + '_ {
        let places = self.by_name.get(&(dir, name.to_vec())).map(|v| v.as_slice()).unwrap_or_default();
        places.iter().map(|p| (*p, &self.by_place[p]))
    }

    /// Every hidden entry, with its place.
    pub fn iter(&self) -> impl Iterator<Item = (Place, &HiddenName)> + '_ {
        self.by_place.iter().map(|(p, h)| (*p, h))
    }

    /// True if `dir` holds a hidden entry.
    pub fn in_dir(&self, dir: u32) -> bool {
        self.per_dir.contains_key(&dir)
    }

    pub fn len(&self) -> usize {
        self.by_place.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_place.is_empty()
    }
}

/// A new entry waiting for the hidden namesakes that were there when it was made: its directory
/// and name, the newest such namesake's sequence number, and the inode the entry names (a rename
/// over the entry changes it).
#[derive(Debug)]
pub struct NamesakeWaiter {
    pub dir: u32,
    pub name: Vec<u8>,
    pub seq: u64,
    pub ino: u32,
}

/// The hidden names of one (directory, name) still on disk, and the new entries of that name
/// waiting for them, ordered by the newest hidden name each waits for.
#[derive(Debug, Default)]
struct NameQueue {
    hidden: BTreeSet<u64>,
    waiters: BTreeSet<(u64, Place)>,
}

/// Rule 3's namesake order. Each hidden name gets a sequence number when it is hidden (numbers
/// only grow) and keeps it until its removal is on disk (or it is revived by an undone rename).
/// A new entry made while the newest of its namesakes still on disk has number `s` waits until
/// none numbered `s` or less remains: those are the hidden names that were there when it was
/// made. A namesake hidden later is the entry itself, renamed away, or a later entry of that
/// name, which was made after it and cannot shadow it on disk. Hidden names may leave the disk
/// in any order (each waits for its own new path), so an entry is released when the lowest
/// number left passes its `s`: every removal releases, in one pass, the waiters below the new
/// lowest, each once. (A list of waiters per hidden name, with a count per waiter, made n
/// renames over one name cost n * n / 2 records and tasks.)
#[derive(Debug, Default)]
pub struct Namesakes {
    next: u64,
    queues: HashMap<(u32, Vec<u8>), NameQueue>,
    waiting: HashMap<Place, NamesakeWaiter>,
    records: usize,
}

impl Namesakes {
    pub fn new() -> Namesakes {
        Namesakes { next: 0, queues: HashMap::new(), waiting: HashMap::new(), records: 0 }
    }

    /// A name of `dir` is hidden: its sequence number.
    pub fn hidden(&mut self, dir: u32, name: &[u8]) -> u64 {
        self.next += 1;
        let q = self.queues.entry((dir, name.to_vec())).or_default();
        q.hidden.insert(self.next);
        self.records += 1;
        self.next
    }

    /// The new entry at `at`, named `name` in `dir` and naming `ino`, waits for the hidden
    /// namesakes on disk now, if any; false if there are none. A waiter left at that place by an
    /// entry since removed is replaced: the place's entry is this one now.
    pub fn wait(&mut self, dir: u32, name: &[u8], at: Place, ino: u32) -> bool {
        // Every create asks; nearly always nothing is hidden, and the key would cost a copy.
        if self.queues.is_empty() {
            assert!(self.waiting.is_empty(), "every waiter has its name's queue");
            return false;
        }
        let key = (dir, name.to_vec());
        let Some(&seq) = self.queues.get(&key).and_then(|q| q.hidden.last()) else {
            return false;
        };
        self.forget_waiter(at);
        let q = self.queues.get_mut(&key).expect("a queue with a hidden name");
        q.waiters.insert((seq, at));
        self.waiting.insert(at, NamesakeWaiter { dir, name: key.1, seq, ino });
        self.records += 1;
        true
    }

    fn forget_waiter(&mut self, at: Place) {
        let Some(w) = self.waiting.remove(&at) else { return };
        let key = (w.dir, w.name);
        let q = self.queues.get_mut(&key).expect("a waiter's queue");
        let was = q.waiters.remove(&(w.seq, at));
        assert!(was, "a waiter at {at:?} is queued");
        self.records -= 1;
        if q.hidden.is_empty() && q.waiters.is_empty() {
            self.queues.remove(&key);
        }
    }

    /// The hidden name `seq` of `name` in `dir` has left the disk (or is live again): the places
    /// of the entries that no longer wait for any namesake.
    pub fn gone(&mut self, dir: u32, name: &[u8], seq: u64) -> Vec<Place> {
        let key = (dir, name.to_vec());
        let q = self.queues.get_mut(&key).expect("a hidden name has a queue");
        let was = q.hidden.remove(&seq);
        assert!(was, "hidden name {seq} of directory {dir} is outstanding");
        self.records -= 1;
        let lowest = q.hidden.first().copied().unwrap_or(u64::MAX);
        let mut released = Vec::new();
        while let Some(&(s, at)) = q.waiters.first().filter(|(s, _)| *s < lowest) {
            q.waiters.pop_first();
            let w = self.waiting.remove(&at).expect("a queued waiter is indexed by place");
            assert_eq!(w.seq, s, "the waiter at {at:?} is the one queued");
            self.records -= 1;
            released.push(at);
        }
        if q.hidden.is_empty() && q.waiters.is_empty() {
            self.queues.remove(&key);
        }
        released
    }

    /// True if an entry waits for the hidden name `seq` of `name` in `dir`.
    pub fn waited_for(&self, dir: u32, name: &[u8], seq: u64) -> bool {
        self.queues.get(&(dir, name.to_vec())).and_then(|q| q.waiters.last()).is_some_and(|(s, _)| *s >= seq)
    }

    /// The waiting entry at `at` names `ino` now (a rename over it).
    pub fn set_ino(&mut self, at: Place, ino: u32) {
        if let Some(w) = self.waiting.get_mut(&at) {
            w.ino = ino;
        }
    }

    /// What the waiting entries naming `ino` wait for: (directory, name, newest sequence).
    pub fn waits_of(&self, ino: u32) -> Vec<(u32, Vec<u8>, u64)> {
        self.waiting.values().filter(|w| w.ino == ino).map(|w| (w.dir, w.name.clone(), w.seq)).collect()
    }

    /// True if an entry of directory block `bno` waits (a scan: asked only before the block
    /// moves).
    pub fn waits_in(&self, bno: u64) -> bool {
        self.waiting.keys().any(|p| p.0 == bno)
    }

    /// True if no entry waits.
    pub fn no_waiters(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Records held: hidden names on disk and waiting entries (counted by the memory bound).
    pub fn len(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(dir: u32, name: &str, ino: u32) -> HiddenName {
        HiddenName { dir, lbn: 0, name: name.into(), ino, seq: 0 }
    }

    /// Hidden namesakes leaving the disk in any order: an entry goes once every namesake hidden
    /// before it was made has left, whatever came after.
    #[test]
    fn a_waiter_goes_when_the_namesakes_before_it_have_left() {
        let mut ns = Namesakes::new();
        let h1 = ns.hidden(2, b"a");
        assert!(ns.wait(2, b"a", (10, 0), 7));
        let h2 = ns.hidden(2, b"a");
        assert!(ns.wait(2, b"a", (10, 16), 8));
        assert!(!ns.wait(2, b"b", (10, 32), 9), "no namesake of b: nothing to wait for");
        assert!(ns.waited_for(2, b"a", h2) && ns.waited_for(2, b"a", h1));
        // The later namesake leaves first: neither waiter goes (both wait for h1).
        assert!(ns.gone(2, b"a", h2).is_empty());
        assert_eq!(ns.gone(2, b"a", h1), vec![(10, 0), (10, 16)]);
        assert!(ns.is_empty() && ns.no_waiters());
        // In order: each removal releases the waiters made before the next namesake.
        let h3 = ns.hidden(2, b"a");
        assert!(ns.wait(2, b"a", (10, 0), 7));
        let h4 = ns.hidden(2, b"a");
        assert!(ns.wait(2, b"a", (10, 16), 8));
        ns.set_ino((10, 16), 11);
        assert_eq!(ns.waits_of(11), vec![(2, b"a".to_vec(), h4)]);
        assert_eq!(ns.gone(2, b"a", h3), vec![(10, 0)]);
        assert!(!ns.waited_for(2, b"a", h4 + 1));
        assert_eq!(ns.gone(2, b"a", h4), vec![(10, 16)]);
        assert!(ns.is_empty());
    }

    #[test]
    fn the_three_indexes_agree() {
        let mut hn = HiddenNames::new();
        hn.insert((10, 0), h(2, "a", 5));
        hn.insert((10, 16), h(2, "a", 6));
        hn.insert((11, 0), h(3, "b", 7));
        assert_eq!(hn.named(2, b"a").count(), 2);
        assert!(hn.in_dir(2) && hn.in_dir(3) && !hn.in_dir(4));
        assert_eq!(hn.remove(&(10, 0)).unwrap().ino, 5);
        assert_eq!(hn.named(2, b"a").map(|(p, _)| p).collect::<Vec<_>>(), vec![(10, 16)]);
        assert!(hn.remove(&(10, 0)).is_none());
        hn.remove(&(10, 16));
        assert!(!hn.in_dir(2) && hn.named(2, b"a").next().is_none());
        assert_eq!(hn.len(), 1);
    }
}
