//! Hash maps and sets with a fixed hasher (foldhash's `FixedState`), for the state whose
//! iteration order decides what is written: which inodes fsync gathers, in which order the
//! blocks of a batch go to the device. With foldhash's default `RandomState` every map drew its
//! own seed, so the same workload wrote the same blocks in a different order from run to run,
//! and the crash tester, which picks subsets of a batch by position, judged different states.
//!
//! Invariant: the iteration order of these maps depends only on the operations done on them,
//! so a workload on the simulated clock replays exactly (DESIGN.md: deterministic where it can
//! be). Keys are block and inode numbers, not chosen by an adversary, so the fixed seed costs
//! no protection worth having.

pub use foldhash::{HashMapExt, HashSetExt};

/// A `HashMap` whose iteration order is the same in every run.
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
/// A `HashSet` whose iteration order is the same in every run.
pub type HashSet<T> = std::collections::HashSet<T, foldhash::fast::FixedState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_order_is_the_same_for_every_map() {
        let fill = || {
            let mut m = HashMap::new();
            for i in 0..1000u64 {
                m.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i);
            }
            m.into_values().collect::<Vec<u64>>()
        };
        let first = fill();
        assert_eq!(first, fill());
        // Not merely sorted by value: the order is the hasher's, the same each time.
        assert_ne!(first, (0..1000).collect::<Vec<u64>>());
    }
}
