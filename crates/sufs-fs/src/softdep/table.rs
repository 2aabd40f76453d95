//! The inode records (`InodeDep`s) by inode number, with their count kept as they change
//! (FreeBSD keeps `dep_current[D_INODEDEP]` and the others the same way). The memory bound
//! counts every record; a scan of the table for it cost a tenth of an unlink near the bound
//! (the table then holds about as many records as the bound). Here every change of a record
//! goes through `get_mut`, `get_or_insert_with`, `insert` or `remove`, which note it
//! (`touched`); a count looks at the records noted since the last one only, recounts them and
//! lets the idle ones go.
//!
//! Invariant (checked by `Softdep::count` in debug builds against a full scan): after `recount`,
//! `total` is the sum of `InodeDep::records` over the table, and no record left in it is
//! removable (each one that became so was changed, so noted, and went).

use super::deps::InodeDep;
use crate::fixed_hash::{HashMap, HashMapExt};

#[derive(Debug)]
pub(crate) struct InodeTable {
    /// Each record in a box of its own: a create makes one and most go at the next count, so
    /// the map grows and fills with tombstones and is rehashed often; it moves a pointer, not
    /// the record's couple of hundred bytes (the moves were a tenth of a create's time).
    map: HashMap<u32, Box<InodeDep>>,
    /// Records changed since the last `recount`, each once (`InodeDep::touched`).
    touched: Vec<u32>,
    /// The records of the table as of the last `recount` (the sum of each one's `counted`).
    total: usize,
}

impl InodeTable {
    pub(crate) fn new() -> InodeTable {
        InodeTable { map: HashMap::new(), touched: Vec::new(), total: 0 }
    }

    fn note(touched: &mut Vec<u32>, ino: u32, d: &mut InodeDep) {
        if !d.touched {
            d.touched = true;
            touched.push(ino);
        }
    }

    pub(crate) fn get(&self, ino: &u32) -> Option<&InodeDep> {
        self.map.get(ino).map(|d| &**d)
    }

    #[cfg(test)]
    pub(crate) fn contains_key(&self, ino: &u32) -> bool {
        self.map.contains_key(ino)
    }

    /// The record of `ino`, to change: noted for the next count.
    pub(crate) fn get_mut(&mut self, ino: &u32) -> Option<&mut InodeDep> {
        let d = self.map.get_mut(ino)?;
        Self::note(&mut self.touched, *ino, d);
        Some(d)
    }

    /// The record of `ino`, made by `new` if there is none: noted for the next count.
    pub(crate) fn get_or_insert_with(&mut self, ino: u32, new: impl FnOnce() -> InodeDep) -> &mut InodeDep {
        let d = self.map.entry(ino).or_insert_with(|| Box::new(new()));
        Self::note(&mut self.touched, ino, d);
        d
    }

    /// Puts `d` in place of the record of `ino`, if any.
    pub(crate) fn insert(&mut self, ino: u32, mut d: InodeDep) {
        d.counted = 0;
        d.touched = false;
        let slot = match self.map.get_mut(&ino) {
            Some(old) => {
                // In place: its box and its slot serve again (no tombstone left behind).
                self.total -= old.counted;
                **old = d;
                old
            }
            None => self.map.entry(ino).or_insert_with(|| Box::new(d)),
        };
        Self::note(&mut self.touched, ino, slot);
    }

    pub(crate) fn remove(&mut self, ino: &u32) -> Option<InodeDep> {
        let d = self.map.remove(ino)?;
        self.total -= d.counted;
        Some(*d)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &InodeDep> {
        self.map.values().map(|d| &**d)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u32, &InodeDep)> {
        self.map.iter().map(|(ino, d)| (ino, &**d))
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The records of the whole table, after recounting those changed since the last time and
    /// letting the idle ones among them go (`InodeDep::removable`).
    pub(crate) fn recount(&mut self) -> usize {
        for ino in std::mem::take(&mut self.touched) {
            // Gone since (removed, or put back by `insert` and noted again): nothing to do.
            let Some(d) = self.map.get_mut(&ino).filter(|d| d.touched) else { continue };
            d.touched = false;
            self.total -= d.counted;
            if d.removable() {
                self.map.remove(&ino);
                continue;
            }
            d.counted = d.records();
            self.total += d.counted;
        }
        self.total
    }
}

impl std::ops::Index<&u32> for InodeTable {
    type Output = InodeDep;
    fn index(&self, ino: &u32) -> &InodeDep {
        &self.map[ino]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::softdep::{DepState, Task};

    fn record(tasks: usize) -> InodeDep {
        let mut d = InodeDep::new(DepState::ATTACHED | DepState::DEPCOMPLETE, false);
        d.inowait.extend((0..tasks as u32).map(Task::DropLink));
        d
    }

    /// Records made, changed, put back and removed at random, counted now and then: each count
    /// is what a scan of the table counts, and no idle record outlives a count.
    #[test]
    fn the_count_kept_is_the_count_a_scan_makes() {
        let mut t = InodeTable::new();
        let mut x = 1u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let ino = (x >> 33) as u32 % 64;
            match (x >> 20) % 5 {
                0 => t.get_or_insert_with(ino, || record(0)).inowait.push(Task::DropLink(ino)),
                1 => {
                    if let Some(d) = t.get_mut(&ino) {
                        d.inowait.pop();
                    }
                }
                2 => {
                    t.remove(&ino);
                }
                3 => t.insert(ino, record(2)),
                _ => {
                    let n = t.recount();
                    assert_eq!(n, t.values().map(InodeDep::records).sum::<usize>());
                    assert!(t.values().all(|d| !d.removable()), "an idle record outlived the count");
                }
            }
        }
    }
}
