//! Writes outside the file system's lock: a batch is prepared under the lock (the copies rolled
//! back by soft updates, as FreeBSD's initiate_write does, and the blocks marked in flight), its
//! device write runs without the lock (`Flight::issue`), and its completion (roll-forward,
//! dependencies retired, work queued) runs under the lock again (`Fs::land_flight`).
//!
//! Meanwhile requests go on: they may change a buffer in flight (it then stays dirty, since the
//! write did not carry the change), but anything that needs the device to be in a known state
//! (another write, a block freed, a sync, the unmount) first lands the flight: it issues the
//! write itself if nobody has yet, or waits for the writer, which needs no lock to finish. So a
//! single thread (the crash tester, the library) can use flights too, and no wait can deadlock.
//! One flight at a time.

use std::sync::{Condvar, Mutex};

use super::*;
use crate::cache::Prepared;

/// Where a flight's device write stands.
#[derive(Debug)]
enum State {
    /// Prepared, not yet sent to the device.
    Prepared,
    /// Being written (by the thread that took it).
    Issuing,
    /// Written, or failed: the device's answer, not yet landed.
    Done(Result<(), DevError>),
    /// Completed under the lock (`Fs::land_flight`).
    Landed,
}

/// A batch of buffers prepared under the lock, written outside it.
pub struct Flight {
    batch: Prepared,
    kind: WriteKind,
    dev: Arc<dyn BlockDevice>,
    state: Mutex<State>,
    done: Condvar,
}

impl Flight {
    /// Writes the batch if nobody has yet, else waits until whoever took it has: returns once
    /// the device has answered (at once for a flight already landed). Needs no lock of the
    /// file system.
    pub fn issue(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *st {
            State::Prepared => {
                *st = State::Issuing;
                drop(st);
                let result = self.dev.write_batch(&self.batch.requests(), self.kind);
                let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                assert!(matches!(*st, State::Issuing), "a flight issued twice: {st:?}");
                *st = State::Done(result);
                self.done.notify_all();
            }
            State::Issuing => {
                while matches!(*st, State::Issuing) {
                    st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            }
            State::Done(_) | State::Landed => {}
        }
    }

    /// True once the device has answered (landed or not).
    pub fn written(&self) -> bool {
        matches!(*self.state.lock().unwrap_or_else(|p| p.into_inner()), State::Done(_) | State::Landed)
    }

    /// Blocks in the batch.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// The device's answer, once `issue` has returned.
    fn take_result(&self) -> Result<(), DevError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *st, State::Landed) {
            State::Done(r) => r,
            other => panic!("a flight landed before its write finished: {other:?}"),
        }
    }
}

/// A request to a background flusher (the mount's syncer thread) to write what it can now,
/// outside the lock: soft updates' memory bound and a cache filling with dirty buffers ask for
/// it instead of writing under the lock in the middle of a request (FreeBSD's softdep_speedup
/// wakes its syncer the same way). Past the hard limits they still write themselves.
#[derive(Default)]
pub struct FlushRequest {
    wanted: Mutex<bool>,
    cv: Condvar,
}

impl FlushRequest {
    /// Asks for a flush (and wakes the flusher).
    pub fn request(&self) {
        *self.wanted.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Waits up to `timeout` for a request; true (and the request taken) if there was one.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let g = self.wanted.lock().unwrap_or_else(|p| p.into_inner());
        let (mut g, _) = self.cv.wait_timeout_while(g, timeout, |w| !*w).unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *g)
    }
}

impl Fs {
    /// From now on a background flusher serves this file system: the memory bound and a
    /// cache filling with dirty buffers ask it to write (`FlushRequest`) up to their hard
    /// limits instead of writing under the lock.
    pub fn attach_flusher(&mut self) -> Arc<FlushRequest> {
        self.flusher.get_or_insert_with(Default::default).clone()
    }

    /// True if a flush is wanted: soft updates' structures past half their bound, or dirty
    /// buffers past half the cache (the background flusher writes until neither holds).
    pub fn flush_wanted(&mut self) -> bool {
        let limit = self.softdep_limit;
        self.cache.dirty_count() > self.cache.capacity() / 2
            || self.hooks.softdep.as_mut().is_some_and(|s| s.count() > limit / 2)
    }

    /// Prepares the dirty buffers among `bnos` for a write outside the lock and returns the
    /// flight (None when none is dirty). Copy-on-write for snapshots happens here, before the
    /// copies are made. The caller issues it (`Flight::issue`) and lands it (`land_flight`);
    /// anything in between that needs it landed lands it.
    pub fn start_flight(&mut self, bnos: &[u64], kind: WriteKind) -> FsResult<Option<Arc<Flight>>> {
        self.check_live()?;
        assert!(self.ordering != Ordering::Sync, "sync ordering writes in order, under the lock");
        self.land_flight()?;
        self.snap_cow(bnos)?;
        let batch = self.cache.prepare_write(bnos, &mut self.hooks)?;
        if batch.is_empty() {
            return Ok(None);
        }
        let dev = self.cache.device().clone();
        let flight = Arc::new(Flight { batch, kind, dev, state: Mutex::new(State::Prepared), done: Condvar::new() });
        self.flight = Some(flight.clone());
        Ok(Some(flight))
    }

    /// Lands the flight in progress, if any: issues its write if nobody has (or waits for the
    /// writer), then completes it under the lock. Returns the blocks it wrote.
    pub fn land_flight(&mut self) -> FsResult<usize> {
        let Some(flight) = self.flight.take() else { return Ok(0) };
        flight.issue();
        let result = flight.take_result();
        let n = self.cache.finish_write(&flight.batch, result, &mut self.hooks)?;
        Ok(n)
    }

    /// Writes the dirty buffers among `bnos` in a flight, the device write outside the lock of
    /// `fs`: a flight in progress is waited for first without the lock, so that a writer never
    /// holds the lock while it waits for someone else's device write. Returns the blocks written.
    pub fn write_in_flight(fs: &SharedFs, bnos: &[u64], kind: WriteKind) -> FsResult<usize> {
        let flight = loop {
            let mut g = lock(fs);
            if let Some(other) = g.flight.clone().filter(|f| !f.written()) {
                drop(g);
                other.issue();
                continue;
            }
            // (a flight written but not landed lands in `start_flight`, quickly)
            match g.start_flight(bnos, kind)? {
                Some(f) => break f,
                None => return Ok(0),
            }
        };
        flight.issue();
        lock(fs).land_flight()
    }

    /// True while a flight is prepared and not landed.
    pub fn has_flight(&self) -> bool {
        self.flight.is_some()
    }

    /// Drops the buffer of a freed block; one in flight lands first, so that the block is
    /// never handed out again while an old write of it may still reach the device.
    pub(super) fn forget_block(&mut self, bno: u64) -> FsResult<()> {
        if self.cache.in_flight(bno) {
            self.land_flight()?;
        }
        self.cache.forget(bno);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions};

    fn mounted(ordering: Ordering) -> (Fs, Arc<MemDevice>) {
        let dev = Arc::new(MemDevice::new(4096, 4096));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
        (Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap(), dev)
    }

    /// A batch in flight while creates, writes and removes go on: what changed in flight stays
    /// dirty, a removal lands the flight first, and after the unmount the image holds exactly
    /// what the operations left and fsck finds nothing.
    #[test]
    fn operations_go_on_while_a_batch_is_in_flight() {
        for ordering in [Ordering::Softdep, Ordering::Async] {
            let (mut fs, dev) = mounted(ordering);
            for i in 0..40u32 {
                let (f, _) = fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
                fs.write(f, 0, &[i as u8; 5000]).unwrap();
            }
            let plan = fs.plan_delayed(fs.dirty_blocks(None), 1024);
            let before = dev.stats().writes();
            let flight = fs.start_flight(&plan[plan.len() - 1], WriteKind::Async).unwrap().expect("dirty blocks");
            assert!(fs.has_flight() && !flight.is_empty());
            assert_eq!(dev.stats().writes(), before, "nothing is written before the flight is issued");
            // Additions go on without landing it.
            let (g, _) = fs.create(ROOT_INO, b"during", 0o644, 0, 0).unwrap();
            fs.write(g, 0, b"written while a batch was in flight").unwrap();
            assert!(fs.has_flight(), "an addition does not land the flight");
            flight.issue();
            assert_eq!(dev.stats().writes(), before + flight.len() as u64);
            assert_eq!(fs.land_flight().unwrap(), flight.len());
            assert!(fs.stats().cache.changed_in_flight > 0, "the root directory changed in flight");
            flight.issue(); // landed: nothing happens
            assert_eq!(dev.stats().writes(), before + flight.len() as u64);
            // A removal lands a flight first (here without anyone issuing it).
            let plan = fs.plan_delayed(fs.dirty_blocks(None), 1024);
            let flight = fs.start_flight(&plan[plan.len() - 1], WriteKind::Async).unwrap().expect("dirty blocks");
            fs.unlink(ROOT_INO, b"f3").unwrap();
            assert!(!fs.has_flight(), "{ordering:?}: unlink landed the flight");
            flight.issue();
            fs.unmount().unwrap();
            let report = crate::fsck::check(dev.as_ref()).unwrap();
            assert!(report.findings.is_empty(), "{ordering:?}: {:?}", report.findings);
            let d: Arc<dyn BlockDevice> = dev.clone();
            let mut fs = Fs::mount(d, MountOptions::default(), Arc::new(SimClock::new())).unwrap();
            let (g, _) = fs.lookup(ROOT_INO, b"during").unwrap();
            assert_eq!(fs.read(g, 0, 100).unwrap(), b"written while a batch was in flight");
            assert!(fs.lookup(ROOT_INO, b"f3").is_err());
            let (f, _) = fs.lookup(ROOT_INO, b"f39").unwrap();
            assert_eq!(fs.read(f, 0, 5000).unwrap(), vec![39u8; 5000]);
        }
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions};

    /// Writers, fsyncs (their writes outside the lock) and a sweeper's flights on one shared
    /// file system from four threads: every fsync'ed file is whole, and after the unmount fsck
    /// finds nothing and every file holds what was written last.
    #[test]
    fn fsyncs_and_sweeps_outside_the_lock_race_with_writers() {
        let dev = Arc::new(MemDevice::new(4096, 8192));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 512, readonly: false };
        let fs: SharedFs = Arc::new(Mutex::new(Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap()));
        let workers: Vec<_> = (0..3u32)
            .map(|w| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    for i in 0..60u32 {
                        let name = format!("w{w}-{}", i % 12);
                        let ino = {
                            let mut g = lock(&fs);
                            let ino = match g.lookup(ROOT_INO, name.as_bytes()) {
                                Ok((ino, _)) => ino,
                                Err(_) => g.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().0,
                            };
                            g.write(ino, 0, &vec![(i % 251) as u8; 3000 + (i as usize * 97) % 9000]).unwrap();
                            ino
                        };
                        if i % 3 == 0 {
                            Fs::fsync_shared(&fs, ino).unwrap();
                        }
                        if i % 7 == 0 {
                            let _ = lock(&fs).unlink(ROOT_INO, format!("w{w}-{}", (i + 5) % 12).as_bytes());
                        }
                    }
                })
            })
            .collect();
        let sweeper = {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for _ in 0..40 {
                    let plan = {
                        let g = lock(&fs);
                        g.plan_delayed(g.dirty_blocks(None), 64)
                    };
                    for chunk in plan {
                        Fs::write_in_flight(&fs, &chunk, WriteKind::Async).unwrap();
                    }
                    lock(&fs).run_tasks().unwrap();
                }
            })
        };
        for w in workers {
            w.join().unwrap();
        }
        sweeper.join().unwrap();
        let mut g = lock(&fs);
        let expect: Vec<(String, Option<Vec<u8>>)> = (0..3)
            .flat_map(|w| (0..12).map(move |k| format!("w{w}-{k}")))
            .map(|n| {
                let data =
                    g.lookup(ROOT_INO, n.as_bytes()).ok().map(|(ino, d)| g.read(ino, 0, d.size as usize).unwrap());
                (n, data)
            })
            .collect();
        g.unmount().unwrap();
        drop(g);
        let report = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        let d: Arc<dyn BlockDevice> = dev.clone();
        let mut fs = Fs::mount(d, MountOptions::default(), Arc::new(SimClock::new())).unwrap();
        for (n, data) in expect {
            let got = fs.lookup(ROOT_INO, n.as_bytes()).ok().map(|(ino, d)| fs.read(ino, 0, d.size as usize).unwrap());
            assert_eq!(got, data, "{n}");
        }
    }
}
