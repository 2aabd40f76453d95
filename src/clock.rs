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
}

impl RealClock {
    pub fn new() -> RealClock {
        RealClock { start: Instant::now() }
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
