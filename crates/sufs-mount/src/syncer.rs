//! The syncer: the thread of a mount that runs its update policy (`sufs_fs::policy::Sweeper`)
//! in real time, looking every 50 ms whether a sweep is due, and answers the file system's wish
//! for a background flush (`Sweeper::flush_shared`). The decisions are the policy's; this file
//! only gives them a thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sufs_fs::fs::flight::FlushRequest;
use sufs_fs::fs::{lock, FsResult, SharedFs};
use sufs_fs::policy::{Sweeper, SyncerOptions};

/// A running syncer thread for a mount; dropping it (or `stop`) ends the thread.
pub struct Syncer {
    stop: Arc<AtomicBool>,
    wanted: Arc<FlushRequest>,
    thread: Option<JoinHandle<u64>>,
    /// Waits that ran out their whole period, counted when the thread ends (tests).
    pub timed_out: u64,
}

/// How often the syncer looks whether a sweep is due.
const PERIOD: Duration = Duration::from_millis(50);

impl Syncer {
    pub fn start(fs: SharedFs, opts: SyncerOptions) -> Syncer {
        Self::start_every(fs, opts, PERIOD)
    }

    fn start_every(fs: SharedFs, opts: SyncerOptions, period: Duration) -> Syncer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut sweeper = Sweeper::new(opts, &mut lock(&fs));
        let wanted = lock(&fs).attach_flusher();
        let wish = wanted.clone();
        let thread = std::thread::Builder::new()
            .name("sufs-syncer".into())
            .spawn(move || {
                let mut timed_out = 0;
                while !flag.load(Ordering::Acquire) {
                    let asked = wish.wait(period);
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    if asked {
                        report("background flush", Sweeper::flush_shared(&fs, 8));
                    } else {
                        timed_out += 1;
                    }
                    let due = {
                        let g = lock(&fs);
                        g.now_ns() >= sweeper.next_due() && !g.is_shut_down()
                    };
                    if due {
                        report("sweep", sweeper.tick_shared(&fs));
                    }
                    report("tasks", Sweeper::run_tasks_shared(&fs));
                }
                timed_out
            })
            .ok();
        Syncer { stop, wanted, thread, timed_out: 0 }
    }

    /// Ends the thread, woken at once: waiting out its period held up every unmount (up to
    /// 50 ms, before `sufs umount` returns).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wanted.request();
        if let Some(t) = self.thread.take() {
            self.timed_out = t.join().unwrap_or(0);
        }
    }
}

/// Logs a flush or sweep that failed, unless a shutdown cut it short: both look whether the
/// file system is shut down before they plan, then write outside its lock, and a shutdown
/// meanwhile refuses the writes, as it should (it logs itself). fstests' generic/051 saw that
/// race logged as an error.
fn report(what: &str, r: FsResult<()>) {
    match r {
        Ok(()) => {}
        Err(e) if e.is_shutdown() => log::debug!("syncer: {what} ended by the shutdown"),
        Err(e) => log::error!("syncer: {what}: {e}"),
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stop` wakes the thread rather than waiting for its period to run out: with a period of
    /// an hour, the thread ends having timed out never.
    #[test]
    fn stop_wakes_the_syncer() {
        let dev = Arc::new(sufs_fs::dev::MemDevice::new(4096, 4096));
        sufs_fs::fs::mkfs(dev.clone(), &Default::default(), (1, 0)).unwrap();
        let clock = Arc::new(sufs_fs::clock::SimClock::new());
        let fs = sufs_fs::fs::Fs::mount(dev, Default::default(), clock).unwrap();
        let shared: SharedFs = Arc::new(std::sync::Mutex::new(fs));
        let mut s = Syncer::start_every(shared.clone(), SyncerOptions::default(), Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(20));
        s.stop();
        assert_eq!(s.timed_out, 0);
        lock(&shared).unmount().unwrap();
    }
}
