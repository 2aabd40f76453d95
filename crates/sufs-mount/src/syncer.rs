//! The syncer: the thread of a mount that runs its update policy (`sufs_fs::policy::Sweeper`)
//! in real time, looking every 50 ms whether a sweep is due, and answers the file system's wish
//! for a background flush (`Sweeper::flush_shared`). The decisions are the policy's; this file
//! only gives them a thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sufs_fs::fs::{lock, SharedFs};
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
                        if let Err(e) = Sweeper::flush_shared(&fs, 8) {
                            log::error!("syncer: background flush: {e}");
                        }
                    }
                    let due = {
                        let g = lock(&fs);
                        g.now_ns() >= sweeper.next_due() && !g.is_shut_down()
                    };
                    if due {
                        if let Err(e) = sweeper.tick_shared(&fs) {
                            log::error!("syncer: {e}");
                        }
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

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}
