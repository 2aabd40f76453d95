//! The work list's items run (soft updates' dirrem, freeblks and freefile, and the hidden names'
//! removals), and the memory bound that flushes when too many dependencies are held.

use super::*;

/// Structures a task is taken to make when it runs (`run_tasks_bounded`): a removal that
/// releases an inode makes its record, a freeblks and a freefile.
const TASK_DEPS: usize = 3;

/// A list this short runs at once, without counting: the bound's slack.
const TASK_CHUNK_MIN: usize = 64;

/// The tasks a shared file system's syncer runs under one taking of the lock
/// (`run_tasks_upto`): a task frees an inode or a file's blocks, some microseconds each.
pub const TASK_SLICE: usize = 64;

/// What a slice of the task list left (`Fs::run_tasks_upto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSlice {
    /// Tasks still queued.
    pub left: usize,
    /// The slice ended at its length with tasks that could run now: take another.
    pub more: bool,
}

impl Fs {
    /// Runs the task list: work that completed writes made possible (soft updates' dirrem,
    /// freeblks and freefile).
    pub fn run_tasks(&mut self) -> FsResult<()> {
        loop {
            while self.run_next_task()? {}
            // Deferred old names: only writes can make their paths durable, so they are tried
            // again only after some have completed.
            let stamp = (self.hooks.softdep.as_ref().map_or(0, |s| s.writes_completed()), self.renames.hidden_removed);
            if self.renames.deferred_old_names.is_empty() || stamp == self.renames.deferred_tried_at {
                assert_eq!(self.tasks_queued(), 0, "run_tasks drains the task list");
                self.tasks_left_at = None;
                return Ok(());
            }
            self.renames.deferred_tried_at = stamp;
            for t in std::mem::take(&mut self.renames.deferred_old_names) {
                self.run_task(t)?;
            }
        }
    }

    /// Runs the task list within soft updates' memory bound, as FreeBSD's
    /// `softdep_process_worklist` takes its work list in bounded batches: a written directory
    /// block completes all its removals at once, and each removal that runs makes about
    /// `TASK_DEPS` structures (the released inode's record, its freeblks and freefile; no
    /// freeblks for a file that holds no block) that only a later write retires. So a long list
    /// runs in chunks, each as long as the room left under the bound allows, the structures
    /// counted afresh before each; what does not fit stays queued (tasks are delayed work) until
    /// a write lets the chunk's structures retire. A short list runs at once, uncounted. Returns
    /// the tasks left queued. Callers that need the list drained (fsync, sync, unmount,
    /// snapshots) use `run_tasks`.
    pub fn run_tasks_bounded(&mut self) -> FsResult<usize> {
        self.run_tasks_upto(usize::MAX).map(|s| s.left)
    }

    /// `run_tasks_bounded`, at most `most` tasks: a shared file system's syncer runs the list a
    /// slice at a time (`TASK_SLICE`), the lock let go between slices, so that a long list (the
    /// removals of a whole tree, thousands of tasks) does not hold every request for tens of
    /// milliseconds.
    pub fn run_tasks_upto(&mut self, most: usize) -> FsResult<TaskSlice> {
        let limit = self.softdep_limit;
        let mut budget = most;
        loop {
            let Some(sd) = self.hooks.softdep.as_mut() else { return Ok(TaskSlice { left: 0, more: false }) };
            let queued = sd.tasks.len();
            if queued <= TASK_CHUNK_MIN && queued <= budget {
                self.run_tasks()?;
                return Ok(TaskSlice { left: self.tasks_queued(), more: false });
            }
            if budget == 0 {
                return Ok(TaskSlice { left: queued, more: true });
            }
            // Nothing retired since the list was last left for want of room: counting again
            // would find none (structures retire only when writes complete).
            let stamp = sd.writes_completed();
            if self.tasks_left_at == Some(stamp) {
                return Ok(TaskSlice { left: queued, more: false });
            }
            let room = limit.saturating_sub(sd.count()) / TASK_DEPS;
            if room < TASK_CHUNK_MIN {
                self.tasks_left_at = Some(stamp);
                return Ok(TaskSlice { left: queued, more: false });
            }
            self.tasks_left_at = None;
            for _ in 0..room.min(queued).min(budget) {
                if !self.run_next_task()? {
                    break;
                }
                budget -= 1;
            }
        }
    }

    /// Takes the next task off the work list and runs it; false when the list is empty.
    fn run_next_task(&mut self) -> FsResult<bool> {
        let Some(sd) = self.hooks.softdep.as_mut() else { return Ok(false) };
        let Some(t) = sd.tasks.pop() else { return Ok(false) };
        sd.stats.tasks_run += 1;
        self.run_task(t)?;
        Ok(true)
    }

    /// Tasks queued on the work list.
    pub(super) fn tasks_queued(&self) -> usize {
        self.hooks.softdep.as_ref().map_or(0, |s| s.tasks.len())
    }

    /// Soft updates hold freed blocks and inodes until the nullified pointers are on disk; when
    /// an allocation finds the maps full, write until those frees complete. Only the free-map
    /// tasks run here: this is called in the middle of an operation, which may hold inodes.
    pub(super) fn reclaim(&mut self) -> FsResult<bool> {
        let mut any = false;
        for _ in 0..8 {
            let (pb, pi) = match self.hooks.softdep.as_ref() {
                Some(s) => s.pending_frees(),
                None => return Ok(any),
            };
            if pb == 0 && pi == 0 {
                break;
            }
            let mut all: Vec<u64> = self.cache.dirty_oldest_first().map(|(_, b)| b).collect();
            all.sort_unstable();
            self.land_flight()?;
            self.snap_cow(&all)?;
            self.cache.write(&all, WriteKind::Async, &mut self.hooks)?;
            let free = self.sd().map(|s| s.take_free_tasks()).unwrap_or_default();
            for t in free {
                any = true;
                match t {
                    Task::FreeBlks(FreeBlks { blocks, then, .. }) => {
                        for b in blocks {
                            self.free_block(b)?;
                        }
                        // What follows (link drops) waits for the task list proper.
                        if let Some(sd) = self.sd() {
                            sd.tasks.extend(then);
                        }
                    }
                    other => self.run_task(other)?,
                }
            }
        }
        Ok(any)
    }

    // Long: one arm per kind of work item (FreeBSD's handle_workitem_*), each short; split, the
    // arms would only move.
    pub(super) fn run_task(&mut self, t: Task) -> FsResult<()> {
        log::trace!("task {t:?}");
        match t {
            Task::DropLink(ino) => {
                if let Some(sd) = self.sd() {
                    sd.take_pending_unlink(ino);
                }
                self.drop_link(ino)
            }
            Task::RmdirChild { child, parent } => {
                if let Some(sd) = self.sd() {
                    sd.take_pending_unlink(child);
                    sd.take_pending_unlink(child);
                }
                // Its name goes. Links still pending (the ".." of subdirectories removed before
                // it, an old name of a rename) keep it, and its "." with it, until the last of
                // those drops: only then does "." go and the directory is freed.
                let mut d = self.iget(child)?;
                d.nlink = d.nlink.saturating_sub(1);
                if d.nlink <= 1 {
                    d.nlink = 0;
                }
                self.touch_c(&mut d);
                let then: Vec<Task> = parent.into_iter().map(Task::DropLink).collect();
                if d.nlink > 0 {
                    self.iput_links(child, &d)?;
                    self.incore.removed_dirs.insert(child);
                    if let Some(p) = parent {
                        self.incore.parent_drop.insert(child, p);
                    }
                    Ok(())
                } else if self.incore.held(child) {
                    // Held (open, or known to the kernel), it stays allocated without a name
                    // until its last close; its "." and ".." go now with its blocks, as FreeBSD's
                    // rmdir truncates the directory. The parent's link goes once the truncated
                    // dinode is on disk, not before: an orphan whose ".." still named the parent
                    // on disk would leave that count too low after a crash.
                    self.incore.orphans.insert(child);
                    self.dirhash.remove(&child);
                    let old_size = std::mem::take(&mut d.size);
                    self.truncate_blocks(child, &mut d, 0, old_size, then)
                } else {
                    self.release_inode(child, d, then)
                }
            }
            Task::FreeBlks(FreeBlks { blocks, then, .. }) => {
                for b in blocks {
                    self.free_block(b)?;
                }
                for t in then {
                    self.run_task(t)?;
                }
                Ok(())
            }
            Task::FreeFrag(FreeFrag { bno, frags, .. }) => self.free_frags(bno, frags),
            Task::FreeFile(FreeFile { ino, is_dir }) => {
                if is_dir {
                    // Its number may name a directory anywhere next.
                    self.renames.paths.dir_moved();
                }
                self.alloc.free_inode(&mut self.cache, &self.sb, ino, is_dir)?;
                Ok(())
            }
            Task::NamesakeGone { dir, name, seq } => self.namesake_gone(dir, &name, seq),
            Task::RemoveOldName { dir, wait, bno, lbn, off, mut tasks } => {
                let waits = match wait {
                    NameWait::NewPath(newdir) => self.new_path_pending(newdir)?,
                    NameWait::Emptied(d) => self.renames.hidden.in_dir(d),
                };
                if waits {
                    self.renames.deferred_old_names.push(Task::RemoveOldName { dir, wait, bno, lbn, off, tasks });
                    return Ok(());
                }
                let Some(h) = self.renames.hidden.remove(&(bno, off)) else {
                    return Err(FsError::Corrupt(format!("a hidden name in directory {dir} vanished")));
                };
                self.renames.hidden_removed += 1;
                // Its namesakes made since wait until the removal is on disk.
                tasks.push(Task::NamesakeGone { dir: h.dir, name: h.name, seq: h.seq });
                if self.cache.in_flight(bno) {
                    self.land_flight()?;
                }
                let len = self.dir_len_at(dir, lbn)?;
                let buf = &mut self.cache.modify(bno)?[..len];
                dir_remove(buf, off)?;
                let slack = chunk_slack(buf, off)?;
                if let Some(h) = self.dirhash.get_mut(&dir) {
                    h.set_slack(lbn, off, slack);
                }
                let now = match self.sd() {
                    Some(sd) => sd.dir_remove(bno, off, tasks).unwrap_or_default(),
                    None => tasks,
                };
                for t in now {
                    self.run_task(t)?;
                }
                Ok(())
            }
        }
    }

    /// Keeps the cache within its size: when it is full of dirty buffers, the oldest are written.
    pub(super) fn balance(&mut self) -> FsResult<()> {
        // A mount's request runs a slice of the list, not all of it: the removals of a tree
        // queue thousands of tasks as a flight lands, and the request that met them held every
        // other for tens of milliseconds. The syncer runs what is left, a slice at a time.
        let most = if self.flusher.is_some() { TASK_SLICE } else { usize::MAX };
        let tasks = self.run_tasks_upto(most)?;
        if tasks.left > 0 && !tasks.more {
            // Tasks wait for room under the bound: writes retire what the last chunk made, by
            // the flusher (outside the lock) or, without one, here.
            match &self.flusher {
                Some(f) => f.request(),
                None => self.sync_all()?,
            }
        }
        self.ops += 1;
        let limit = self.softdep_limit;
        if self.ops >= self.next_count_at {
            if let Some(n) = self.hooks.softdep.as_mut().map(|s| s.count()) {
                self.next_count_at = self.ops + self.count_interval(n, limit);
                match &self.flusher {
                    // Past the bound the flusher is asked to write (outside the lock); the
                    // operations go on, and are checked again soon.
                    Some(f) if n > limit && n <= 2 * limit => {
                        f.request();
                        self.next_count_at = self.ops + 64;
                    }
                    // The memory bound: new dependencies wait until old ones retire.
                    _ if n > limit => {
                        self.sync_all()?;
                        // Nearly nothing is left: the next rate counts from zero.
                        self.last_count = (self.ops, 0);
                    }
                    _ => {}
                }
            }
        }
        if self.write_through {
            self.sync_all()?;
            return Ok(());
        }
        self.make_room()
    }

    /// Operations until soft updates' structures are counted again, `n` counted now against
    /// `limit`. Counting is a scan of every structure, so it is done only as often as the room
    /// left needs at the rate they grew since the last count (doubled, and at least 8 an
    /// operation: a create adds three, an unlink in a removed tree some two dozen), and at
    /// least every 4096 operations, which bounds how far a change of workload can overshoot.
    /// (Every 1024 operations whatever the room, counting took a seventh of the CPU time of a
    /// million creates; every (room / 8) operations, a million-file `rm -rf` reached three
    /// times the bound.)
    fn count_interval(&mut self, n: usize, limit: usize) -> u64 {
        let (ops0, n0) = self.last_count;
        let rate = (n.saturating_sub(n0) as u64).div_ceil(self.ops.saturating_sub(ops0).max(1));
        self.last_count = (self.ops, n);
        (limit.saturating_sub(n) as u64 / (2 * rate).max(8)).clamp(16, 4096)
    }

    /// Writes the oldest dirty buffers if the cache is full of them. Unlike `balance`, safe in
    /// the middle of an operation, while an inode's new block pointers are only in memory: it
    /// neither waits for dependencies to drain (which those pointers hold) nor runs the task
    /// list (which may change that inode).
    pub(super) fn make_room(&mut self) -> FsResult<()> {
        if !self.cache.over_capacity() && self.cache.dirty_count() < self.cache.capacity() * 3 / 4 {
            return Ok(());
        }
        if let Some(f) = self.flusher.as_ref().filter(|_| !self.cache.over_capacity()) {
            // Three quarters dirty: the flusher writes, outside the lock; full: this does.
            f.request();
            return Ok(());
        }
        let n = (self.cache.capacity() / 8).max(16);
        let old: Vec<u64> = self.cache.dirty_oldest_first().take(n).map(|(_, b)| b).collect();
        self.write_delayed(old, usize::MAX)
    }

    // ---------------------------------------------------------------- inodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions};

    /// Directory "d" made with `n` files, synced, and the files unlinked: their removals wait
    /// for the directory's next write.
    fn names_made_and_removed(fs: &mut Fs, n: usize) {
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        for i in 0..n {
            // A byte each: a file that holds a block is freed with a freeblks as well as its
            // freefile (`TASK_DEPS`); an empty one makes one structure fewer.
            let (ino, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
            fs.write(ino, 0, b"x").unwrap();
        }
        fs.sync_all().unwrap();
        for i in 0..n {
            fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
        }
    }

    /// On a mount (a flusher attached), a request runs one slice of the task list, not all of
    /// it, and asks no flush for the rest (it is not waiting for room); the syncer's
    /// `run_tasks_shared` runs the rest, a slice under each taking of the lock.
    #[test]
    fn a_request_runs_a_slice_of_the_task_list_and_the_syncer_the_rest() {
        let dev = Arc::new(MemDevice::new(4096, 16384));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 4096, readonly: false };
        let mut fs = Fs::mount(dev, opts, Arc::new(SimClock::new())).unwrap();
        let flusher = fs.attach_flusher();
        let free0 = fs.statfs().ffree;
        names_made_and_removed(&mut fs, 400);
        // The directory's write completes the removals: their tasks queue, none run yet.
        let dirty: Vec<u64> = fs.cache.dirty_oldest_first().map(|(_, b)| b).collect();
        fs.write_delayed(dirty, 1024).unwrap();
        let queued = fs.tasks_queued();
        assert!(queued > 4 * TASK_SLICE, "{queued} tasks queued");
        let ran = |fs: &Fs| fs.hooks.softdep.as_ref().unwrap().stats.tasks_run;
        let before = ran(&fs);
        fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap();
        assert_eq!(ran(&fs) - before, TASK_SLICE as u64, "a request runs one slice");
        assert_eq!(fs.tasks_queued(), queued - TASK_SLICE);
        assert!(!flusher.wait(std::time::Duration::ZERO), "no flush asked for runnable tasks");
        let shared: SharedFs = Arc::new(std::sync::Mutex::new(fs));
        crate::policy::Sweeper::run_tasks_shared(&shared).unwrap();
        let mut fs = lock(&shared);
        assert_eq!(fs.tasks_queued(), 0, "the syncer ran the rest");
        fs.unlink(ROOT_INO, b"x").unwrap();
        fs.rmdir(ROOT_INO, b"d").unwrap();
        fs.sync_all().unwrap();
        assert_eq!(fs.statfs().ffree, free0, "every inode freed");
    }

    /// A directory block's write completes hundreds of removals at once: their tasks run a
    /// chunk at a time within the bound, the rest left queued for after the next write, and
    /// `sync_all` still drains them all.
    #[test]
    fn removals_completed_at_once_run_within_the_bound() {
        let dev = Arc::new(MemDevice::new(4096, 16384));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 4096, readonly: false };
        let mut fs = Fs::mount(dev, opts, Arc::new(SimClock::new())).unwrap();
        let limit = 1000;
        fs.set_softdep_limit(limit);
        // Served by nobody: the bound only asks for writes, which this test makes itself.
        fs.attach_flusher();
        let free0 = fs.statfs().ffree;
        names_made_and_removed(&mut fs, 500);
        // The flusher's rounds: each write lets the last chunk's structures retire and the
        // next chunk run.
        let mut deferred = 0;
        for _ in 0..50 {
            fs.flush_all().unwrap();
            let count = fs.hooks.softdep.as_mut().unwrap().count();
            assert!(count <= limit + TASK_DEPS * TASK_CHUNK_MIN, "{count} structures against a bound of {limit}");
            deferred = deferred.max(fs.tasks_queued());
        }
        assert!(deferred > TASK_CHUNK_MIN, "the removals past the room waited ({deferred} at most)");
        assert_eq!(fs.tasks_queued(), 0, "writes drained the list");
        fs.rmdir(ROOT_INO, b"d").unwrap();
        fs.sync_all().unwrap();
        assert_eq!(fs.statfs().ffree, free0, "every inode freed");
    }
}
