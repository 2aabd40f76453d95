//! The syncer (Mogul §3): decides when delayed writes go to disk. This first version runs the
//! default policy, approximate interval periodic update (AIPU): every `interval` it writes the
//! buffers that have been dirty for at least `age`, collecting them first and writing them after,
//! so one sweep is linear in the number of dirty buffers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::fuse::{lock, SharedFs};

#[derive(Debug, Clone, Copy)]
pub struct SyncerOptions {
    pub age: Duration,
    pub interval: Duration,
}

impl Default for SyncerOptions {
    fn default() -> Self {
        SyncerOptions { age: Duration::from_secs(30), interval: Duration::from_secs(1) }
    }
}

/// A running syncer thread; dropping it (or `stop`) ends the thread.
pub struct Syncer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    pub fn start(fs: SharedFs, opts: SyncerOptions) -> Syncer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sufs-syncer".into())
            .spawn(move || {
                let tick = Duration::from_millis(50).min(opts.interval);
                let mut waited = Duration::ZERO;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    waited += tick;
                    if waited < opts.interval {
                        continue;
                    }
                    waited = Duration::ZERO;
                    if let Err(e) = lock(&fs).flush_older_than(opts.age.as_nanos() as u64) {
                        log::error!("syncer: {e}");
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
