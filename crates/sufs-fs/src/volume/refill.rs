//! The br store's pool: `refill` grows it by brexpand near the last copied block, and the
//! `Refiller` thread runs it when the pool falls below its low watermark.

use std::sync::atomic::{AtomicBool, Ordering as AtOrd};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::fs::{lock, FsError, SharedFs};

use super::{StoreKind, VolResult, VolumeDevice, BR_STORE};

impl VolumeDevice {
    /// True when a br store's pool is below its low watermark.
    pub fn needs_refill(&self) -> bool {
        let st = self.lock();
        self.kind == StoreKind::Br && st.header.invalid == 0 && self.available(&st) < self.pool.low_watermark
    }

    /// Grows a br store's pool by brexpand near the last copied block. Runs outside any
    /// file-system operation and any I/O (the paper's deadlock rule): it takes the mount's lock
    /// itself. Returns the blocks added (0 when the file system is full).
    pub fn refill(&self, fs: &SharedFs) -> VolResult<u64> {
        let (old_len, hint) = {
            let st = self.lock();
            (st.map.len(), st.last_cow)
        };
        let name = BR_STORE.as_bytes();
        let grow = self.pool.grow;
        let r = lock(fs).brexpand(name, grow, Some(hint * self.frag));
        match r {
            Ok(_) => {}
            Err(FsError::NoSpace) => {
                log::warn!("volume snapshot: the file system is full; the br store cannot grow");
                return Ok(0);
            }
            Err(e) => return Err(e.into()),
        }
        let runs = super::store::br_chunks(lock(fs).brquery(name, old_len, grow)?, self.frag)?;
        self.refills.fetch_add(1, AtOrd::Relaxed);
        let mut st = self.lock();
        if st.header.invalid != 0 {
            return Ok(0);
        }
        let gained: Vec<u64> = runs.iter().flat_map(|r| r.start..r.start + r.len).collect();
        // Blocks in use at snapshot time (a file removed since) and never copied: their old
        // contents are copied, all in one batch, before the store may write them.
        let keep: Vec<u64> = gained
            .iter()
            .copied()
            .filter(|b| *b < st.header.origin_blocks && !st.exceptions.contains_key(b) && st.in_use_at_snapshot(*b))
            .collect();
        if !keep.is_empty() {
            self.cow(&mut st, &keep)?;
            self.preserved.fetch_add(keep.len() as u64, AtOrd::Relaxed);
        }
        for &b in &gained {
            st.map.push(b);
        }
        Ok(gained.len() as u64)
    }
}

/// The br store's background thread: waits until the pool is below its low watermark, then
/// refills it through the mount's lock.
pub struct Refiller {
    stop: Arc<AtomicBool>,
    vol: Arc<VolumeDevice>,
    thread: Option<JoinHandle<()>>,
}

impl Refiller {
    pub fn start(vol: Arc<VolumeDevice>, fs: SharedFs) -> Refiller {
        let stop = Arc::new(AtomicBool::new(false));
        let (v, s) = (vol.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("sufs-volume-refill".into())
            .spawn(move || loop {
                if s.load(AtOrd::Acquire) {
                    return;
                }
                if v.needs_refill() {
                    match v.refill(&fs) {
                        Ok(0) => std::thread::sleep(std::time::Duration::from_secs(1)),
                        Ok(_) => {}
                        Err(e) => {
                            log::error!("volume snapshot: refill of the br store failed: {e}");
                            std::thread::sleep(std::time::Duration::from_secs(1));
                        }
                    }
                    continue;
                }
                // Not under the state lock: `cow` takes this one inside it.
                let mut w = v.wanted.lock().unwrap_or_else(|p| p.into_inner());
                if !*w {
                    w = v.wake.wait_timeout(w, std::time::Duration::from_secs(1)).unwrap_or_else(|p| p.into_inner()).0;
                }
                *w = false;
            })
            .ok();
        Refiller { stop, vol, thread }
    }

    pub fn stop(&mut self) {
        let Some(t) = self.thread.take() else { return };
        self.stop.store(true, AtOrd::Release);
        self.vol.wake.notify_all();
        let _ = t.join();
    }
}

impl Drop for Refiller {
    fn drop(&mut self) {
        self.stop();
    }
}
