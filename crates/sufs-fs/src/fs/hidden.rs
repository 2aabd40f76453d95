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

use crate::fixed_hash::{HashMap, HashMapExt};

/// Where a hidden entry is: the directory block and the byte offset in it.
pub type Place = (u64, usize);

/// One hidden entry: its directory, the directory's logical block holding it, its name, and
/// the inode it names.
#[derive(Debug, Clone)]
pub struct HiddenName {
    pub dir: u32,
    pub lbn: u64,
    pub name: Vec<u8>,
    pub ino: u32,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn h(dir: u32, name: &str, ino: u32) -> HiddenName {
        HiddenName { dir, lbn: 0, name: name.into(), ino }
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
