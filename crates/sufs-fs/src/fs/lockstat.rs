//! The file system's one lock, counted: every request, the syncer, the control channel and the
//! unmount take it (`SharedFs`), so the time it is held bounds the requests a second the mount
//! can serve however many CPUs serve them (Amdahl's law: at most one second of held time a
//! second). `lock` hands out an `FsGuard` that adds to `LockStats` how long it waited and how
//! long it held the lock; the mount's `--stats` reports them (`FsStats::lock`).

use std::ops::{Deref, DerefMut};
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

/// The file system, locked: dereferences to `Fs`, and counts its holding time when dropped.
pub struct FsGuard<'a> {
    guard: MutexGuard<'a, Fs>,
    since: Instant,
}

/// Takes the lock of the shared file system, counting the wait (`LockStats`).
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
    FsGuard { guard, since: Instant::now() }
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions, ROOT_INO};
    use std::sync::{Arc, Mutex};

    /// Every taking of the lock is counted, a wait for another holder as contended, and the
    /// time held adds up to at least what the holders slept with it.
    #[test]
    fn the_lock_counts_its_holders_and_waiters() {
        let dev = Arc::new(MemDevice::new(4096, 4096));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let fs: SharedFs =
            Arc::new(Mutex::new(Fs::mount(dev, MountOptions::default(), Arc::new(SimClock::new())).unwrap()));
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
}
