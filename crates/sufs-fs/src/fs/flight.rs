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
//!
//! One flight at a time, but for group commit: a group of fsyncs whose blocks are none of them
//! in the air may go beside the flights in the air (`MAX_IN_AIR` at most), so that the device
//! flushes of fsyncs at different stages overlap. That is safe because a batch is prepared
//! with every dependency not yet landed rolled back: a flight in the air is not yet on disk for
//! the next one, whatever order the device puts them in. Flights land in the order they were
//! prepared.

use std::sync::{Condvar, Mutex};

use super::*;
use crate::cache::Prepared;

/// Takes the lock of `fs` once no flight is being written (trying a few times), for a request
/// that lands the flight (a rename, a removal, a truncation, an inode freed): it would otherwise
/// wait for the flight's device write holding the lock, and every other request with it (the
/// fsyncs that could join the next group among them). A flight written it lands at once.
#[track_caller]
pub fn lock_landing(fs: &SharedFs) -> FsGuard<'_> {
    lock_landing_if(fs, |_| true)
}

/// `lock_landing` for a request that lands the flight in the air only when `lands` says so (a
/// rename that meets it, `Fs::rename_lands_flight`): only then is its device write waited for
/// without the lock.
#[track_caller]
pub fn lock_landing_if(fs: &SharedFs, mut lands: impl FnMut(&mut Fs) -> bool) -> FsGuard<'_> {
    for _ in 0..4 {
        let mut g = lock(fs);
        let unwritten = if lands(&mut g) { g.unwritten_flight() } else { None };
        match unwritten {
            None => return g,
            Some(f) => {
                drop(g);
                f.issue();
            }
        }
    }
    lock(fs)
}

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
    /// The group of fsyncs it carries (`Group`), or 0.
    ticket: u64,
    /// The fsyncs in that group.
    members: usize,
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
                // The blocks are put together here, outside the lock: a roll-back's patches laid
                // over the buffer's bytes (`Outgoing`).
                let result = self.batch.write_to(&*self.dev, self.kind);
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

/// How long a leader waits for the fsyncs in progress to join its group (`Group::active`):
/// about a tenth of a flush of an image file here, so that a flight waits far less than it
/// saves.
const LEAD_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// Flights in the air at once, at most: each after the first a group of fsyncs whose blocks are
/// none of them in the air (`Fs::write_grouped`). Two device flushes at once cost an image
/// file here about 1.3 times one.
pub const MAX_IN_AIR: usize = 2;

/// Group commit: fsyncs that arrive while a flight is being written wait together, and the
/// first of them to find the device free writes all their blocks in one flight, with one
/// device flush, as a journal's group commit does. Each waiter holds the ticket of the group
/// it joined; a group's ticket is carried by the flight that writes it, and its landing
/// answers every member.
#[derive(Debug)]
pub(super) struct Group {
    /// The blocks the members of the open group asked for.
    pending: Vec<u64>,
    /// The ticket of the group now collecting members.
    open: u64,
    /// The last group up to which every group is done: its flight landed, or it had nothing
    /// to write (groups' flights land in ticket order).
    landed: u64,
    /// Groups past `landed` done already: they had nothing to write, or failed to start.
    settled: std::collections::BTreeSet<u64>,
    /// Groups whose write failed (the last `FAILED_KEPT`, for their members to learn).
    failed: std::collections::BTreeSet<u64>,
    /// Members of the open group.
    members: usize,
    /// Members of the groups whose flights are in the air: fsyncs in progress that cannot join
    /// the open group until those land.
    in_air_members: usize,
    /// fsyncs in progress (`Fs::fsync_shared`, from its start to its end): each is a member
    /// of a group at each of its stages, and between them computes the next one. A leader
    /// finding fewer members in its group than this waits a little (`LEAD_WAIT`) for the
    /// others to join, so that the stages of fsyncs running side by side share flights instead
    /// of taking turns.
    pub(super) active: usize,
    /// How long a leader waits for them (`LEAD_WAIT`; tests make it long).
    lead_wait: std::time::Duration,
    /// Batches asked for, and the flights that wrote them (the mount's statistics).
    pub(super) batches: u64,
    pub(super) flights: u64,
    /// Of those flights, the ones that went beside another in the air.
    pub(super) beside: u64,
}

/// Failed groups remembered for their members.
const FAILED_KEPT: usize = 64;

impl Group {
    /// Whether the group `ticket` is done: Some(true) written (or nothing to write), Some(false)
    /// failed, None not yet.
    fn outcome(&self, ticket: u64) -> Option<bool> {
        if self.failed.contains(&ticket) {
            return Some(false);
        }
        (self.landed >= ticket || self.settled.contains(&ticket)).then_some(true)
    }

    /// The group `ticket`'s flight landed (`ok`: written): every earlier group is done too,
    /// since flights land in the order they were prepared.
    fn landed(&mut self, ticket: u64, members: usize, ok: bool) {
        assert!(ticket > self.landed, "groups land in order: {ticket} after {}", self.landed);
        assert!(self.in_air_members >= members, "members in the air counted");
        self.in_air_members -= members;
        self.landed = ticket;
        self.done(ticket, ok);
    }

    /// The group `ticket` is done without a flight (nothing to write, or its start failed).
    fn settle(&mut self, ticket: u64, ok: bool) {
        assert!(ticket > self.landed && ticket < self.open, "a group settles once, after it closed");
        self.settled.insert(ticket);
        self.done(ticket, ok);
    }

    fn done(&mut self, ticket: u64, ok: bool) {
        if !ok {
            self.failed.insert(ticket);
            while self.failed.len() > FAILED_KEPT {
                self.failed.pop_first();
            }
        }
        while self.settled.remove(&(self.landed + 1)) {
            self.landed += 1;
        }
        self.settled.retain(|&t| t > self.landed);
    }
}

impl Default for Group {
    fn default() -> Self {
        Group {
            pending: Vec::new(),
            open: 1,
            landed: 0,
            settled: Default::default(),
            failed: Default::default(),
            members: 0,
            in_air_members: 0,
            active: 0,
            lead_wait: LEAD_WAIT,
            batches: 0,
            flights: 0,
            beside: 0,
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

    /// True if a flush is wanted: soft updates' structures past half their bound, tasks left
    /// queued for want of room under it (`run_tasks_bounded`), or dirty buffers past half the
    /// cache (the background flusher writes until none holds).
    pub fn flush_wanted(&mut self) -> bool {
        let limit = self.softdep_limit;
        self.cache.dirty_count() > self.cache.capacity() / 2
            || self.tasks_left_at.is_some()
            || self.hooks.softdep.as_mut().is_some_and(|s| s.count() > limit / 2)
    }

    /// Prepares the dirty buffers among `bnos` for a write outside the lock and returns the
    /// flight (None when none is dirty). Copy-on-write for snapshots happens here, before the
    /// copies are made. The caller issues it (`Flight::issue`) and lands it (`land_flight`);
    /// anything in between that needs it landed lands it.
    pub fn start_flight(&mut self, bnos: &[u64], kind: WriteKind) -> FsResult<Option<Arc<Flight>>> {
        self.start_flight_with(bnos, kind, 0)
    }

    /// `start_flight`, the flight carrying the group `ticket` (0: none): the flights in the air
    /// land first.
    fn start_flight_with(&mut self, bnos: &[u64], kind: WriteKind, ticket: u64) -> FsResult<Option<Arc<Flight>>> {
        self.check_live()?;
        self.land_flight()?;
        self.snap_cow(bnos)?;
        self.prepare_flight(bnos, kind, ticket, 0)
    }

    /// Whether a flight of `bnos` may go beside the flights in the air: room for one more, no
    /// snapshot to copy blocks into first (its copies are writes of their own), and none of
    /// the blocks in the air (a block is in one write at a time).
    fn may_go_beside(&self, bnos: &[u64]) -> bool {
        self.flights.len() < MAX_IN_AIR
            && self.snapshots.active.is_empty()
            && !bnos.iter().any(|&b| self.cache.in_flight(b))
    }

    /// Prepares a flight of the dirty buffers among `bnos` after the flights in the air, which
    /// stay there; its copies are rolled back for every dependency not yet landed, theirs
    /// among them.
    fn prepare_flight(
        &mut self,
        bnos: &[u64],
        kind: WriteKind,
        ticket: u64,
        members: usize,
    ) -> FsResult<Option<Arc<Flight>>> {
        self.check_live()?;
        assert!(self.ordering != Ordering::Sync, "sync ordering writes in order, under the lock");
        assert!(self.flights.len() < MAX_IN_AIR, "at most {MAX_IN_AIR} flights in the air");
        debug_assert!(!bnos.iter().any(|&b| self.cache.in_flight(b)), "a block in two flights");
        let batch = self.cache.prepare_write(bnos, &mut self.hooks)?;
        if batch.is_empty() {
            return Ok(None);
        }
        let dev = self.cache.device().clone();
        let state = Mutex::new(State::Prepared);
        let flight = Arc::new(Flight { batch, kind, ticket, members, dev, state, done: Condvar::new() });
        self.flights.push_back(flight.clone());
        Ok(Some(flight))
    }

    /// The oldest flight whose device write has not yet answered.
    pub(super) fn unwritten_flight(&self) -> Option<Arc<Flight>> {
        self.flights.iter().find(|f| !f.written()).cloned()
    }

    /// Lands the flights in the air, if any, oldest first: issues each write nobody has (or
    /// waits for its writer), then completes it under the lock. Returns the blocks they wrote;
    /// the first failure after all of them have landed.
    pub fn land_flight(&mut self) -> FsResult<usize> {
        let mut written = 0;
        let mut failure = None;
        while let Some(flight) = self.flights.pop_front() {
            flight.issue();
            match self.land(&flight) {
                Ok(n) => written += n,
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        failure.map_or(Ok(written), Err)
    }

    /// Lands the oldest flights whose writes have answered, none waited for; true if one did.
    fn land_written(&mut self) -> FsResult<bool> {
        let mut any = false;
        let mut failure = None;
        while self.flights.front().is_some_and(|f| f.written()) {
            let flight = self.flights.pop_front().expect("a front flight");
            any = true;
            if let Err(e) = self.land(&flight) {
                failure = failure.or(Some(e));
            }
        }
        failure.map_or(Ok(any), Err)
    }

    /// Completes a flight taken from the front of the queue, its write answered.
    fn land(&mut self, flight: &Flight) -> FsResult<usize> {
        let result = flight.take_result();
        let n = self.cache.finish_write(&flight.batch, result, &mut self.hooks);
        if flight.ticket != 0 {
            self.group.landed(flight.ticket, flight.members, n.is_ok());
        }
        Ok(n?)
    }

    /// Writes the dirty buffers among `bnos` durably, sharing the flight and its device flush
    /// with the other fsyncs that wait meanwhile (`Group`); outside the lock of `fs`, as
    /// `write_in_flight`. Returns once a flight carrying them has landed.
    pub fn write_grouped(fs: &SharedFs, bnos: &[u64]) -> FsResult<()> {
        // When this member, about to lead, first found fsyncs in progress missing from its group.
        let mut waiting_since: Option<std::time::Instant> = None;
        let ticket = {
            let mut g = lock(fs);
            // Nothing dirty: all of it is on disk (a buffer in flight stays dirty until it
            // lands), and there is nothing to wait for.
            if !bnos.iter().any(|&b| g.cache.is_dirty(b)) {
                return Ok(());
            }
            g.group.pending.extend_from_slice(bnos);
            g.group.members += 1;
            g.group.batches += 1;
            g.group.open
        };
        loop {
            let mut g = lock(fs);
            match g.group.outcome(ticket) {
                Some(true) => return Ok(()),
                Some(false) => {
                    let source = std::io::Error::other("the write of a group of fsyncs failed");
                    return Err(FsError::Io(DevError::Io { bno: bnos.first().copied().unwrap_or(0), source }));
                }
                None => {}
            }
            if g.land_written()? {
                continue;
            }
            if g.group.open == ticket && (g.flights.is_empty() || g.may_go_beside(&g.group.pending)) {
                // This group is not written yet and may go now. fsyncs in progress that are
                // neither in it nor in a group in the air are between two of their stages, a
                // few microseconds from joining: wait for them, without the lock, a little.
                debug_assert!(g.group.members >= 1, "this member is in its group");
                let expected = g.group.active.saturating_sub(g.group.in_air_members);
                if g.group.members < expected
                    && waiting_since.get_or_insert_with(std::time::Instant::now).elapsed() < g.group.lead_wait
                {
                    drop(g);
                    std::thread::yield_now();
                    continue;
                }
                if let Some(flight) = g.lead(ticket)? {
                    drop(g);
                    flight.issue();
                }
                continue;
            }
            // Wait for the oldest flight's write (this group's, or one before it) without the
            // lock; the next turn lands it. (None: its write answered since `land_written`
            // looked, without the lock.)
            debug_assert!(!g.flights.is_empty(), "a group not done is open or in the air");
            if let Some(oldest) = g.unwritten_flight() {
                drop(g);
                oldest.issue();
            }
        }
    }

    /// Starts the flight of the open group `ticket` (its leader): beside the flights in the air
    /// when there are any (the caller checked it may), else alone. None when nothing of it was
    /// dirty any more (its members are done) or its start failed (they learn it).
    fn lead(&mut self, ticket: u64) -> FsResult<Option<Arc<Flight>>> {
        assert_eq!(self.group.open, ticket, "a group is written before the next one opens");
        let blocks = std::mem::take(&mut self.group.pending);
        let members = std::mem::take(&mut self.group.members);
        self.group.open += 1;
        let beside = !self.flights.is_empty();
        let started = if beside {
            self.prepare_flight(&blocks, WriteKind::Sync, ticket, members)
        } else {
            self.snap_cow(&blocks).and_then(|()| self.prepare_flight(&blocks, WriteKind::Sync, ticket, members))
        };
        match started {
            Ok(Some(flight)) => {
                self.group.flights += 1;
                self.group.beside += beside as u64;
                self.group.in_air_members += members;
                Ok(Some(flight))
            }
            Ok(None) => {
                self.group.settle(ticket, true);
                Ok(None)
            }
            Err(e) => {
                // Its members learn of it from `failed`.
                self.group.settle(ticket, false);
                Err(e)
            }
        }
    }

    /// Writes the dirty buffers among `bnos` in a flight, the device write outside the lock of
    /// `fs`: the flights in the air are waited for first without the lock, so that a writer
    /// never holds the lock while it waits for someone else's device write. Returns the blocks
    /// written.
    pub fn write_in_flight(fs: &SharedFs, bnos: &[u64], kind: WriteKind) -> FsResult<usize> {
        let flight = loop {
            let mut g = lock(fs);
            if let Some(other) = g.unwritten_flight() {
                drop(g);
                other.issue();
                continue;
            }
            // (flights written but not landed land in `start_flight`, quickly)
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
        !self.flights.is_empty()
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

#[cfg(test)]
mod group_tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{DevResult, DevStats, MemDevice, WriteReq};
    use crate::fs::{mkfs, MkfsOptions, MountOptions};

    /// A device whose writes wait while its gate is shut.
    struct Gated {
        inner: MemDevice,
        /// (open, writes waiting)
        gate: Mutex<(bool, usize)>,
        cv: Condvar,
    }

    impl Gated {
        fn set(&self, open: bool) {
            self.gate.lock().unwrap().0 = open;
            self.cv.notify_all();
        }
        fn wait_for_writer(&self) {
            self.wait_for_writers(1);
        }
        /// Waits (10 s at most) until `n` writes wait at the gate.
        fn wait_for_writers(&self, n: usize) {
            let g = self.gate.lock().unwrap();
            let ten = std::time::Duration::from_secs(10);
            let (g, _) = self.cv.wait_timeout_while(g, ten, |(_, waiting)| *waiting < n).unwrap();
            assert!(g.1 >= n, "{} writes at the gate, not {n}", g.1);
        }
        fn writers(&self) -> usize {
            self.gate.lock().unwrap().1
        }
    }

    impl BlockDevice for Gated {
        fn block_size(&self) -> usize {
            self.inner.block_size()
        }
        fn num_blocks(&self) -> u64 {
            self.inner.num_blocks()
        }
        fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
            self.inner.read_block(bno, buf)
        }
        fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
            let mut g = self.gate.lock().unwrap();
            g.1 += 1;
            self.cv.notify_all();
            let mut g = self.cv.wait_while(g, |(open, _)| !*open).unwrap();
            g.1 -= 1;
            drop(g);
            self.inner.write_batch(reqs, kind)
        }
        fn stats(&self) -> DevStats {
            self.inner.stats()
        }
    }

    /// Three files in three directories, written and not yet durable.
    fn three_dirty_files(dev: &Arc<Gated>) -> (SharedFs, Vec<u32>) {
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 1024, readonly: false };
        let mut fs = Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap();
        let dirs: Vec<u32> =
            (0..3).map(|k| fs.mkdir(ROOT_INO, format!("d{k}").as_bytes(), 0o755, 0, 0).unwrap().0).collect();
        fs.sync_all().unwrap();
        let mut files = Vec::new();
        for (k, &dir) in dirs.iter().enumerate() {
            let (f, _) = fs.create(dir, b"f", 0o644, 0, 0).unwrap();
            fs.write(f, 0, &vec![k as u8 + 1; 20_000]).unwrap();
            files.push(f);
        }
        (Arc::new(Mutex::new(fs)), files)
    }

    /// The directories `three_dirty_files` made, d0 to d2.
    fn three_dirs(fs: &SharedFs) -> Vec<u32> {
        (0..3).map(|k| lock(fs).lookup(ROOT_INO, format!("d{k}").as_bytes()).unwrap().0).collect()
    }

    fn gated() -> Arc<Gated> {
        let inner = MemDevice::new(4096, 1 << 16);
        let dev = Arc::new(Gated { inner, gate: Mutex::new((true, 0)), cv: Condvar::new() });
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        dev
    }

    /// A group of fsyncs whose blocks are none of them in the air goes beside the flight in the
    /// air: two device writes at once, each landing for its own members; one whose block is in
    /// the air (changed again since) waits for that flight instead.
    #[test]
    fn a_group_goes_beside_a_flight_in_the_air_unless_it_shares_a_block() {
        for shares in [false, true] {
            let dev = gated();
            let (fs, files) = three_dirty_files(&dev);
            let block = |f: u32| vec![lock(&fs).sb.inode_location(f).0];
            let (a, b) = (block(files[0]), if shares { block(files[0]) } else { block(files[1]) });
            assert!(shares || a != b, "the two inodes are in different blocks");
            let before = dev.stats().batches;
            dev.set(false);
            std::thread::scope(|s| {
                let first = s.spawn(|| Fs::write_grouped(&fs, &a));
                dev.wait_for_writer();
                if shares {
                    lock(&fs).cache.modify(b[0]).unwrap();
                }
                let second = s.spawn(|| Fs::write_grouped(&fs, &b));
                if shares {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    assert_eq!(dev.writers(), 1, "a group whose block is in the air waits for it");
                    assert_eq!(lock(&fs).flights.len(), 1);
                } else {
                    dev.wait_for_writers(2);
                    assert_eq!(lock(&fs).flights.len(), 2, "two flights in the air");
                }
                dev.set(true);
                first.join().unwrap().unwrap();
                second.join().unwrap().unwrap();
            });
            assert_eq!(dev.stats().batches - before, 2, "both written");
            let g = lock(&fs);
            assert!(g.flights.is_empty());
            assert_eq!((g.group.flights, g.group.beside), (2, u64::from(!shares)));
            assert_eq!((g.group.members, g.group.in_air_members, g.group.landed, g.group.open), (0, 0, 2, 3));
        }
    }

    /// A rename that meets the flight in the air (the source's inode block is in it) waits for
    /// the flight's write without the lock, so other requests go on meanwhile, and then lands
    /// it and renames; a rename that meets no flight goes at once.
    #[test]
    fn a_rename_that_meets_a_flight_waits_for_its_write_without_the_lock() {
        let dev = gated();
        let (fs, files) = three_dirty_files(&dev);
        let dirs = three_dirs(&fs);
        let inode_block = vec![lock(&fs).sb.inode_location(files[0]).0];
        let rename = |d: u32| {
            let mut g = lock_landing_if(&fs, |fs| fs.rename_lands_flight(d, b"f", d, b"g"));
            g.rename(d, b"f", d, b"g", RenameFlags::default())
        };
        dev.set(false);
        std::thread::scope(|s| {
            let fsync = s.spawn(|| Fs::write_grouped(&fs, &inode_block));
            dev.wait_for_writer();
            assert!(lock(&fs).rename_lands_flight(dirs[0], b"f", dirs[0], b"g"), "the flight holds the source's inode");
            let waiting = s.spawn(|| rename(dirs[0]));
            std::thread::sleep(std::time::Duration::from_millis(50));
            let seen = fs.try_lock().ok().map(|mut g| (g.lookup(dirs[0], b"g").ok(), g.lookup(dirs[0], b"f").ok()));
            // Elsewhere a rename goes while the flight is still in the air.
            let elsewhere = seen.as_ref().map(|_| rename(dirs[1]));
            let in_air = (dev.writers(), fs.try_lock().map(|g| g.flights.len()).ok());
            dev.set(true); // (before any assertion: a failed one must not leave the writers waiting)
            let (renamed, source) = seen.expect("the lock is free while the rename waits for the device");
            assert!(renamed.is_none(), "the rename waits for the flight");
            assert_eq!(source.map(|x| x.0), Some(files[0]));
            elsewhere.unwrap().unwrap();
            assert_eq!(in_air, (1, Some(1)), "the flight was still in the air");
            fsync.join().unwrap().unwrap();
            waiting.join().unwrap().unwrap();
        });
        let mut g = lock(&fs);
        assert!(g.flights.is_empty(), "the waiting rename landed the flight");
        for (k, d) in dirs.iter().enumerate() {
            let renamed = k < 2;
            assert_eq!(g.lookup(*d, b"g").map(|x| x.0).ok(), renamed.then_some(files[k]), "d{k}");
            assert_eq!(g.lookup(*d, b"f").is_ok(), !renamed, "d{k}");
        }
    }

    /// An unlink of a name whose add may be in the flight in the air (its entry not yet on
    /// disk, its block in the flight) waits for the flight's write without the lock, then lands
    /// it and unlinks; an unlink or rmdir of a name on disk goes at once while the flight is in
    /// the air, its block in the flight or not, and its removal waits for a later write of the
    /// block.
    #[test]
    fn only_an_unlink_that_meets_the_flight_waits_for_its_write() {
        let dev = gated();
        let (fs, files) = three_dirty_files(&dev);
        let dirs = three_dirs(&fs);
        let dir_block = {
            let mut g = lock(&fs);
            g.mkdir(dirs[0], b"e", 0o755, 0, 0).unwrap();
            g.sync_all().unwrap();
            g.create(dirs[0], b"h", 0o644, 0, 0).unwrap();
            let mut dd = g.dir_inode(dirs[0]).unwrap();
            g.find_entry(dirs[0], &mut dd, b"f").unwrap().expect("f in d0").bno
        };
        let unlink = |d: u32, name: &[u8]| {
            let mut g = lock_landing_if(&fs, |fs| fs.unlink_lands_flight(d, name));
            g.unlink(d, name)
        };
        dev.set(false);
        std::thread::scope(|s| {
            let fsync = s.spawn(|| Fs::write_grouped(&fs, &[dir_block]));
            dev.wait_for_writer();
            let mut lands: Vec<bool> = [(dirs[0], &b"h"[..]), (dirs[0], b"f"), (dirs[1], b"f")]
                .iter()
                .map(|&(d, n)| lock(&fs).unlink_lands_flight(d, n))
                .collect();
            lands.push(lock(&fs).rmdir_lands_flight(dirs[0], b"e"));
            let waiting = s.spawn(|| unlink(dirs[0], b"h"));
            std::thread::sleep(std::time::Duration::from_millis(50));
            let seen = fs.try_lock().ok().map(|mut g| g.lookup(dirs[0], b"h").is_ok());
            // The names on disk go while the flight is still in the air, d0's in the block the
            // flight carries.
            let others = s.spawn(|| {
                let mut g = lock_landing_if(&fs, |fs| fs.rmdir_lands_flight(dirs[0], b"e"));
                let gone = g.rmdir(dirs[0], b"e");
                drop(g);
                (unlink(dirs[0], b"f"), unlink(dirs[1], b"f"), gone)
            });
            let t = std::time::Instant::now();
            while !others.is_finished() && t.elapsed() < std::time::Duration::from_secs(2) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let went = others.is_finished();
            let in_air = (dev.writers(), fs.try_lock().map(|g| (g.flights.len(), g.cache.in_flight(dir_block))).ok());
            dev.set(true); // (before any assertion: a failed one must not leave the writers waiting)
            assert_eq!(lands, [true, false, false, false], "only h's add may be in the flight");
            assert_eq!(seen, Some(true), "the lock is free while the unlink of h waits for the device");
            assert!(went, "the unlinks of names on disk went while the flight was in the air");
            let (a, b, c) = others.join().unwrap();
            a.unwrap();
            b.unwrap();
            c.unwrap();
            assert_eq!(in_air, (1, Some((1, true))), "the flight, with d0's block, was still in the air");
            fsync.join().unwrap().unwrap();
            waiting.join().unwrap().unwrap();
        });
        let mut g = lock(&fs);
        assert!(g.flights.is_empty(), "the waiting unlink landed the flight");
        assert!(g.cache.is_dirty(dir_block), "f's removal, made in flight, is still to be written");
        for (k, d) in dirs.iter().enumerate() {
            assert_eq!(g.lookup(*d, b"f").map(|x| x.0).ok(), (k == 2).then_some(files[k]), "d{k}");
        }
        assert!(g.lookup(dirs[0], b"h").is_err() && g.lookup(dirs[0], b"e").is_err());
        g.unmount().unwrap();
        drop(g);
        let report = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }

    /// A group with nothing left to write, its turn come while an earlier group is in the air,
    /// is done at once; the earlier one still lands in order.
    #[test]
    fn group_outcomes_settle_in_order() {
        let mut g = Group { open: 4, in_air_members: 2, ..Default::default() };
        g.settle(2, true);
        assert_eq!((g.outcome(1), g.outcome(2), g.outcome(3)), (None, Some(true), None));
        g.settle(3, false);
        assert_eq!(g.outcome(3), Some(false));
        g.landed(1, 2, true);
        assert_eq!((g.landed, g.in_air_members), (3, 0), "the settled groups behind it are passed");
        assert!(g.settled.is_empty());
        assert_eq!((g.outcome(1), g.outcome(2), g.outcome(3)), (Some(true), Some(true), Some(false)));
    }

    /// A member about to lead a group while another fsync in progress has not joined it yet
    /// (between two of its stages) waits for it, and both go in one flight.
    #[test]
    fn a_leader_waits_for_the_fsyncs_in_progress_to_join() {
        let dev = gated();
        let (fs, files) = three_dirty_files(&dev);
        let blocks = |f: u32| vec![lock(&fs).sb.inode_location(f).0];
        let (a, b) = (blocks(files[0]), blocks(files[1]));
        assert_ne!(a, b, "the two inodes are in different blocks");
        {
            let mut g = lock(&fs);
            g.group.lead_wait = std::time::Duration::from_secs(30);
            g.group.active = 2;
        }
        let before = dev.stats().batches;
        std::thread::scope(|s| {
            let first = s.spawn(|| Fs::write_grouped(&fs, &a));
            let t = std::time::Instant::now();
            while lock(&fs).group.members < 1 && t.elapsed().as_secs() < 5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(dev.stats().batches, before, "the leader waits for the other fsync in progress");
            Fs::write_grouped(&fs, &b).unwrap();
            first.join().unwrap().unwrap();
        });
        assert_eq!(dev.stats().batches - before, 1, "one flight for both");
        let g = lock(&fs);
        assert_eq!((g.group.batches, g.group.flights, g.group.members), (2, 1, 0));
    }

    /// Two fsyncs that arrive while a third one's write is on the device share the next
    /// flight: fewer device writes and flushes than the same fsyncs one after another, and
    /// every file is durable (an image copied at once holds them all).
    #[test]
    fn fsyncs_waiting_together_share_one_flight() {
        let dev = gated();
        let (fs, files) = three_dirty_files(&dev);
        let before = dev.stats();
        for &f in &files {
            Fs::fsync_shared(&fs, f).unwrap();
        }
        let alone = dev.stats().batches - before.batches;

        let dev = gated();
        let (fs, files) = three_dirty_files(&dev);
        let before = dev.stats();
        dev.set(false);
        std::thread::scope(|s| {
            let first = s.spawn(|| Fs::fsync_shared(&fs, files[0]));
            dev.wait_for_writer();
            let others: Vec<_> = files[1..]
                .iter()
                .map(|&f| {
                    s.spawn({
                        let fs = &fs;
                        move || Fs::fsync_shared(fs, f)
                    })
                })
                .collect();
            let t = std::time::Instant::now();
            while lock(&fs).group.members < 2 && t.elapsed().as_secs() < 5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            dev.set(true);
            first.join().unwrap().unwrap();
            others.into_iter().for_each(|h| h.join().unwrap().unwrap());
        });
        let grouped = dev.stats().batches - before.batches;
        assert!(grouped < alone, "grouped fsyncs wrote {grouped} batches, one after another {alone}");
        let image = MemDevice::from_blocks(
            4096,
            (0..dev.num_blocks())
                .map(|b| {
                    let mut buf = vec![0u8; 4096];
                    dev.read_block(b, &mut buf).unwrap();
                    buf.iter().any(|&x| x != 0).then(|| buf.into_boxed_slice())
                })
                .collect(),
        );
        let report = crate::fsck::check(&image).unwrap();
        assert!(report.findings.iter().all(|f| f.class() == crate::fsck::Class::Allowed), "{:?}", report.findings);
        let d: Arc<dyn BlockDevice> = Arc::new(image);
        let mut fs =
            Fs::mount(d, MountOptions { readonly: true, ..Default::default() }, Arc::new(SimClock::new())).unwrap();
        for k in 0..3u8 {
            let (dir, _) = fs.lookup(ROOT_INO, format!("d{k}").as_bytes()).unwrap();
            let (f, _) = fs.lookup(dir, b"f").unwrap();
            assert_eq!(fs.read(f, 0, 30_000).unwrap(), vec![k + 1; 20_000], "file {k} is durable");
        }
    }
}
