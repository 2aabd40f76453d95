//! The syncer: the thread of a mount that runs its update policy (`sufs_fs::policy::Sweeper`)
//! in real time, looking every 50 ms whether a sweep is due, and answers the file system's wish
//! for a background flush (`Sweeper::flush_shared`). The decisions are the policy's; this file
//! only gives them a thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sufs_fs::fs::{lock, FsResult, SharedFs};
use sufs_fs::policy::{Sweeper, SyncerOptions};

/// A running syncer thread for a mount; dropping it (or `stop`) ends the thread.
pub struct Syncer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    pub fn start(fs: SharedFs, opts: SyncerOptions) -> Syncer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut sweeper = Sweeper::new(opts, &mut lock(&fs));
        let wanted = lock(&fs).attach_flusher();
        let thread = std::thread::Builder::new()
            .name("sufs-syncer".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if wanted.wait(Duration::from_millis(50)) {
                        report("background flush", Sweeper::flush_shared(&fs, 8));
                    }
                    let due = {
                        let g = lock(&fs);
                        g.now_ns() >= sweeper.next_due() && !g.is_shut_down()
                    };
                    if due {
                        report("sweep", sweeper.tick_shared(&fs));
                    }
                }
            })
            .ok();
        Syncer { stop, thread }
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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
