//! The file system's one lock, counted: every request, the syncer, the control channel and the
//! unmount take it (`SharedFs`), so the time it is held bounds the requests a second the mount
//! can serve however many CPUs serve them (Amdahl's law: at most one second of held time a
//! second). `lock` hands out an `FsGuard` that adds to `LockStats` how long it waited and how
//! long it held the lock; the mount's `--stats` reports them (`FsStats::lock`), and where in the
//! code the lock was held (`FsStats::lock_sites`): on a machine with more CPUs than this one, the
//! places that hold it longest are the ones a split of the lock would have to take out first.

use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::sync::{MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::{Fs, SharedFs};

/// The lock's counters since the mount (kept under the lock itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockStats {
    /// Times it was taken.
    pub acquisitions: u64,
    /// Times it was taken after waiting for another holder.
    pub contended: u64,
    /// Nanoseconds spent waiting for it, and holding it.
    pub wait_ns: u64,
    pub held_ns: u64,
}

impl LockStats {
    /// The most lock acquisitions a second that the held time allows: what one lock caps a
    /// machine of any size at (0 before any was counted).
    pub fn ceiling_per_sec(&self) -> f64 {
        if self.held_ns == 0 {
            return 0.0;
        }
        self.acquisitions as f64 * 1e9 / self.held_ns as f64
    }
}

/// One place in the code that takes the lock: how often, and how long it held it in all and at
/// most at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SiteStats {
    pub taken: u64,
    pub held_ns: u64,
    pub longest_ns: u64,
}

/// A site's figures as reported: the place (`file:line` of the call that took the lock, or of
/// the request handler's call through `lock_landing`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LockSite {
    pub at: String,
    #[serde(flatten)]
    pub stats: SiteStats,
}

/// Where the lock has been held since the mount, by the caller of `lock` (`#[track_caller]`):
/// a few dozen places, so a list searched from the front. Kept under the lock itself.
#[derive(Debug, Default)]
pub struct LockSites {
    sites: Vec<(&'static Location<'static>, SiteStats)>,
}

impl LockSites {
    /// Adds one holding of `held_ns` at `at`.
    fn note(&mut self, at: &'static Location<'static>, held_ns: u64) {
        let i = match self.sites.iter().position(|(l, _)| same_place(l, at)) {
            Some(i) => i,
            None => {
                self.sites.push((at, SiteStats::default()));
                self.sites.len() - 1
            }
        };
        let s = &mut self.sites[i].1;
        s.taken += 1;
        s.held_ns = s.held_ns.saturating_add(held_ns);
        s.longest_ns = s.longest_ns.max(held_ns);
        debug_assert!(s.longest_ns <= s.held_ns, "one holding is part of the whole");
    }

    /// The sites, the longest held in all first.
    pub fn report(&self) -> Vec<LockSite> {
        let mut v: Vec<LockSite> =
            self.sites.iter().map(|(l, s)| LockSite { at: format!("{}:{}", l.file(), l.line()), stats: *s }).collect();
        v.sort_by(|a, b| b.stats.held_ns.cmp(&a.stats.held_ns).then_with(|| a.at.cmp(&b.at)));
        v
    }
}

/// Whether two callers' locations are one place (the same call site hands out the same
/// location; the comparison of lines first keeps the search to integers for the others).
fn same_place(a: &Location<'_>, b: &Location<'_>) -> bool {
    std::ptr::eq(a, b) || (a.line() == b.line() && a.column() == b.column() && a.file() == b.file())
}

/// The file system, locked: dereferences to `Fs`, and counts its holding time (and where it
/// was taken) when dropped.
pub struct FsGuard<'a> {
    guard: MutexGuard<'a, Fs>,
    since: Instant,
    at: &'static Location<'static>,
}

/// Takes the lock of the shared file system, counting the wait (`LockStats`) and the place of
/// the caller (`LockSites`).
#[track_caller]
pub fn lock(fs: &SharedFs) -> FsGuard<'_> {
    // A panic while holding the lock must not wedge the mount: the data is still consistent
    // as far as the on-disk rules go, so keep serving.
    let (mut guard, waited) = match fs.try_lock() {
        Ok(g) => (g, None),
        Err(TryLockError::Poisoned(p)) => (p.into_inner(), None),
        Err(TryLockError::WouldBlock) => {
            let t = Instant::now();
            let g = fs.lock().unwrap_or_else(|p| p.into_inner());
            (g, Some(t.elapsed()))
        }
    };
    let st = &mut guard.lock_stats;
    st.acquisitions += 1;
    if let Some(w) = waited {
        st.contended += 1;
        st.wait_ns += nanos(w);
    }
    debug_assert!(st.contended <= st.acquisitions);
    FsGuard { guard, since: Instant::now(), at: Location::caller() }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl Deref for FsGuard<'_> {
    type Target = Fs;
    fn deref(&self) -> &Fs {
        &self.guard
    }
}

impl DerefMut for FsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Fs {
        &mut self.guard
    }
}

impl Drop for FsGuard<'_> {
    fn drop(&mut self) {
        let held = nanos(self.since.elapsed());
        self.guard.lock_stats.held_ns = self.guard.lock_stats.held_ns.saturating_add(held);
        self.guard.lock_sites.note(self.at, held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions, ROOT_INO};
    use std::sync::{Arc, Mutex};

    /// A new file system in memory, shared as a mount shares it.
    fn shared() -> SharedFs {
        let dev = Arc::new(MemDevice::new(4096, 4096));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        Arc::new(Mutex::new(Fs::mount(dev, MountOptions::default(), Arc::new(SimClock::new())).unwrap()))
    }

    /// Every taking of the lock is counted, a wait for another holder as contended, and the
    /// time held adds up to at least what the holders slept with it.
    #[test]
    fn the_lock_counts_its_holders_and_waiters() {
        let fs = shared();
        let before = lock(&fs).lock_stats;
        std::thread::scope(|s| {
            let g = lock(&fs);
            let waiter = s.spawn(|| lock(&fs).create(ROOT_INO, b"f", 0o644, 0, 0).map(|_| ()));
            std::thread::sleep(Duration::from_millis(30));
            drop(g);
            waiter.join().unwrap().unwrap();
        });
        let after = lock(&fs).lock_stats;
        assert_eq!(after.acquisitions - before.acquisitions, 3, "the holder, the waiter, this one: {after:?}");
        assert!(after.contended > before.contended, "the waiter waited: {after:?}");
        assert!(after.wait_ns - before.wait_ns >= 10_000_000, "{after:?}");
        assert!(after.held_ns - before.held_ns >= 30_000_000, "held while sleeping: {after:?}");
        assert!(after.ceiling_per_sec() > 0.0);
        assert_eq!(LockStats::default().ceiling_per_sec(), 0.0);
    }

    /// Each place that takes the lock has its own count and time, a request's handler through
    /// `lock_landing` its own line; together they are the lock's, the longest held first.
    #[test]
    fn the_lock_counts_where_it_was_held() {
        let fs = shared();
        fn helper(fs: &SharedFs) -> FsGuard<'_> {
            lock(fs)
        }
        let helper_line = line!() - 2;
        for _ in 0..3 {
            drop(helper(&fs));
        }
        let (g, slept_line) = (lock(&fs), line!());
        std::thread::sleep(Duration::from_millis(20));
        drop(g);
        let (g, landing_line) = (crate::fs::flight::lock_landing(&fs), line!());
        drop(g);
        let g = lock(&fs);
        let (sites, total) = (g.lock_sites.report(), g.lock_stats);
        drop(g);
        let at = |line: u32| {
            let place = format!("{}:{line}", file!());
            sites.iter().find(|s| s.at == place).unwrap_or_else(|| panic!("{place} in {sites:?}")).stats
        };
        assert_eq!(at(helper_line).taken, 3, "{sites:?}");
        assert_eq!(at(slept_line).taken, 1);
        assert!(at(slept_line).held_ns >= 20_000_000 && at(slept_line).longest_ns == at(slept_line).held_ns);
        assert_eq!(at(landing_line).taken, 1, "the handler's line, not the landing's own");
        assert_eq!(sites[0].stats, at(slept_line), "the longest held in all first: {sites:?}");
        // The guard that read them had not been dropped: everything before it is counted.
        assert_eq!(sites.iter().map(|s| s.stats.taken).sum::<u64>(), total.acquisitions - 1);
        assert_eq!(sites.iter().map(|s| s.stats.held_ns).sum::<u64>(), total.held_ns);
        assert!(sites.iter().all(|s| s.stats.longest_ns <= s.stats.held_ns));
    }
}
