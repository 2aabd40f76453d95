//! Time for the file system and the syncer (Mogul §3): real time for mounts, simulated time that
//! an experiment advances, so that a ten-minute run takes seconds and repeats exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync {
    /// Monotonic time in nanoseconds since an arbitrary start.
    fn now_ns(&self) -> u64;
    /// Wall-clock time for inode timestamps: seconds and nanoseconds since the epoch.
    fn wall(&self) -> (i64, u32);
}

/// The machine's clocks.
pub struct RealClock {
    start: Instant,
    /// Timestamps from the kernel's tick clock (`CLOCK_REALTIME_COARSE`, as the kernel's own
    /// `current_time` for a file system without fine-grained stamps), not the precise one.
    coarse: bool,
}

impl RealClock {
    pub fn new() -> RealClock {
        RealClock { start: Instant::now(), coarse: false }
    }

    /// Stamps from the clock the kernel stamps with. Under FUSE's writeback cache the kernel
    /// sets a regular file's mtime and ctime itself from its tick clock, which may lag the
    /// precise one by a tick (4 ms at HZ 250): stamps of sufs's own from the precise clock
    /// would then order a file written after another created before it.
    pub fn coarse() -> RealClock {
        RealClock { start: Instant::now(), coarse: true }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    fn wall(&self) -> (i64, u32) {
        if self.coarse {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes the timespec it is given.
            if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
                return (ts.tv_sec, ts.tv_nsec as u32);
            }
        }
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
            Err(_) => (0, 0),
        }
    }
}

/// Simulated time: it moves only when `advance` is called.
#[derive(Default)]
pub struct SimClock {
    ns: AtomicU64,
}

impl SimClock {
    pub fn new() -> SimClock {
        SimClock::default()
    }
    pub fn advance(&self, ns: u64) {
        self.ns.fetch_add(ns, Ordering::SeqCst);
    }
    pub fn set(&self, ns: u64) {
        self.ns.store(ns, Ordering::SeqCst);
    }
}

/// Simulated wall-clock time starts at 2000-01-01 so timestamps look plausible.
const SIM_EPOCH: i64 = 946_684_800;

impl Clock for SimClock {
    fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::SeqCst)
    }
    fn wall(&self) -> (i64, u32) {
        let ns = self.now_ns();
        (SIM_EPOCH + (ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_clock_moves_only_when_advanced() {
        let c = SimClock::new();
        assert_eq!(c.now_ns(), 0);
        c.advance(1_500_000_000);
        assert_eq!(c.now_ns(), 1_500_000_000);
        assert_eq!(c.wall(), (SIM_EPOCH + 1, 500_000_000));
    }
}
