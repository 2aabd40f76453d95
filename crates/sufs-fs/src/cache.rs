//! The buffer cache (soft updates §3): every block the file system touches, data and metadata,
//! lives here, but for the runs of uncached data blocks a read takes in one request (`read_past`),
//! which stream past it. Clean buffers sit on an LRU list and are evicted from its cold end;
//! dirty buffers are delayed writes, kept in the order they were first dirtied (redirtying does
//! not reset the time, Mogul §3), so the syncer and the eviction path can push out the oldest
//! first.
//!
//! Writes go through `write`: each buffer's bytes, shared, are given to the `WriteHooks` as what
//! the write carries (`Outgoing`: this is where soft updates roll back unsatisfied dependencies,
//! as patches, and where group headers are sealed), the batch is put together and written, and
//! only when the device says the batch is durable are the buffers marked clean and `after_write`
//! called. Applications always see the buffer, never the rolled-back bytes.
//!
//! A buffer is a block, or on a UFS2 image a file's last block kept in fragments (FFS §2.3):
//! a run of `len` bytes, a whole number of fragments, after which the block's bytes on disk
//! belong to other files. Such a buffer is made, read, grown, shrunk and moved by the `_frags`
//! methods (FreeBSD's `bread` of a short size, `ffs_fragextend`, `ffs_realloccg`); its write
//! carries only the run, so the neighbouring fragments are never written.
//!
//! A buffer holds its run's bytes only, and the capacity counts bytes: a file's tail of one 4 KiB
//! fragment takes 4 KiB of the cache, not the 32 KiB of its block (a cache of whole blocks held
//! an eighth of the small files it could, and the rest were read again from the device).
//!
//! Invariants: a buffer is on the clean LRU list if and only if it is clean, and in `dirty` with
//! its first-dirtied time if and only if it is dirty. A buffer's bytes are its run's, never
//! another file's; its run changes length only when asked (`resize_frags`, `move_frags`); `bytes`
//! is the sum of the buffers' lengths.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::fixed_hash::{HashMap, HashMapExt};

use lru::LruCache;
use serde::Serialize;

use crate::clock::Clock;
use crate::dev::{BlockDevice, DevError, WriteKind, WriteReq};
pub use crate::outgoing::Outgoing;

/// Called around every write of a buffer.
pub trait WriteHooks {
    /// May change `copy` (what goes to the device) but not the buffer itself: `copy` shares
    /// the buffer's bytes, and a change is the write's own (`Outgoing::edit`, `whole`).
    fn before_write(&mut self, bno: u64, copy: &mut Outgoing);
    /// Called once the write of `bno` is durable. Returns true if the copy written was rolled
    /// back somewhere, so the buffer still holds changes that are not on disk and stays dirty.
    fn after_write(&mut self, bno: u64) -> bool;
    /// The write of `bno` failed: nothing of it may be taken as on disk (the buffer stays
    /// dirty, its dependencies stay as they were).
    fn write_failed(&mut self, _bno: u64) {}
}

/// Hooks that change nothing (the cache's own tests).
#[cfg(test)]
pub struct NoHooks;
#[cfg(test)]
impl WriteHooks for NoHooks {
    fn before_write(&mut self, _: u64, _: &mut Outgoing) {}
    fn after_write(&mut self, _: u64) -> bool {
        false
    }
}

/// One cached block: a whole block, or a run of fragments at the block's start.
struct Buf {
    /// The run's bytes: `len` of them. Shared with the writes in flight that carry them as
    /// they are (`prepare_write`): a change while they are in the air copies them first
    /// (`Arc::make_mut`, in `dirtied`), so a write never carries bytes changed after it was
    /// prepared.
    data: Arc<[u8]>,
    /// The run's length in bytes: a multiple of the device's address unit, at most the block
    /// size (the block size but for a file's last fragments).
    len: usize,
    /// Clock time at which the buffer was first dirtied; `None` when clean.
    dirty_since: Option<u64>,
    /// File data rather than metadata (the update policies treat the two apart).
    is_data: bool,
}

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Modifications of a buffer that was already dirty (writes saved by delaying).
    pub redirties: u64,
    /// Clean buffers made dirty: the writes a 4.3BSD kernel charges to a process (`ru_oublock`
    /// counts a block when it becomes a delayed write, not again when it is modified again).
    pub dirtied: u64,
    pub evictions: u64,
    /// Buffers changed (or dropped) while a write of theirs was in flight: they stayed dirty.
    pub changed_in_flight: u64,
    /// Reads outside the file system's lock done again under it, because a block was freed
    /// while they read.
    pub reads_redone: u64,
    /// Bytes of cached buffers zeroed for a new run at their address.
    pub zeroed: u64,
}

impl CacheStats {
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

pub struct Cache {
    dev: Arc<dyn BlockDevice>,
    bs: usize,
    /// Bytes between block numbers: `bs`, or a UFS2 image's fragment.
    unit: usize,
    /// In blocks: the cache holds at most `capacity * bs` bytes of clean buffers.
    capacity: usize,
    /// The bytes of every buffer, clean and dirty.
    bytes: usize,
    /// A block read from the device, of which a run's bytes are kept.
    scratch: Box<[u8]>,
    clock: Arc<dyn Clock>,
    bufs: HashMap<u64, Buf>,
    /// The run length of every address last used as a fragment run (shorter than a block),
    /// kept past the buffer's eviction: a later `read` or `modify` of the address, which does
    /// not say a length, takes the run and never a whole block (whose write would cover the
    /// next file's fragments). Gone when the address is forgotten or used as a whole block.
    runs: HashMap<u64, usize>,
    clean: LruCache<u64, ()>,
    dirty: BTreeSet<(u64, u64)>,
    stats: CacheStats,
    /// The file system was shut down: `write` refuses everything, before any hook runs.
    down: bool,
    /// Blocks prepared for a write that has not finished (`prepare_write` .. `finish_write`),
    /// each with whether it was modified, made anew or dropped meanwhile: such a buffer holds
    /// what the write did not carry, and stays dirty.
    inflight: HashMap<u64, bool>,
}

/// A batch of buffers prepared for writing (their hooks' roll-backs applied to the copies):
/// what `Cache::write` writes at once, or a writer writes outside the file system's lock.
pub struct Prepared {
    /// Each block's bytes as they go to the device: the buffer's own, shared, with what the
    /// hooks rolled back for this write.
    pub copies: Vec<(u64, Outgoing)>,
}

impl Prepared {
    /// Each block's bytes as the device gets them, put together now (by the write's issuer,
    /// outside the file system's lock when it is a flight).
    pub fn bytes(&self) -> Vec<std::borrow::Cow<'_, [u8]>> {
        self.copies.iter().map(|(_, c)| c.bytes()).collect()
    }

    /// The device requests of the batch, over its `bytes`.
    pub fn requests<'a>(&self, bytes: &'a [std::borrow::Cow<'_, [u8]>]) -> Vec<WriteReq<'a>> {
        assert_eq!(bytes.len(), self.copies.len(), "one block's bytes per block of the batch");
        self.copies.iter().zip(bytes).map(|((bno, _), d)| WriteReq { bno: *bno, data: d }).collect()
    }

    /// Writes the batch to `dev`.
    pub fn write_to(&self, dev: &dyn BlockDevice, kind: WriteKind) -> Result<(), DevError> {
        let bytes = self.bytes();
        dev.write_batch(&self.requests(&bytes), kind)
    }
    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
    pub fn len(&self) -> usize {
        self.copies.len()
    }
}

impl Cache {
    /// A cache of at most `capacity` blocks' bytes of clean buffers over `dev` (dirty buffers
    /// are bounded by the caller, which must flush them; see `over_capacity`).
    pub fn new(dev: Arc<dyn BlockDevice>, capacity: usize, clock: Arc<dyn Clock>) -> Cache {
        let (bs, unit) = (dev.block_size(), dev.addr_unit());
        Cache {
            dev,
            bs,
            unit,
            capacity: capacity.max(16),
            bytes: 0,
            scratch: vec![0u8; bs].into_boxed_slice(),
            clock,
            bufs: HashMap::new(),
            runs: HashMap::new(),
            clean: LruCache::unbounded(),
            dirty: BTreeSet::new(),
            stats: CacheStats::default(),
            down: false,
            inflight: HashMap::new(),
        }
    }

    /// From now on no buffer is written (a forced shutdown): dirty ones stay dirty until the
    /// cache is dropped, as a crash would leave them.
    pub fn shut_down(&mut self) {
        self.down = true;
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }
    pub fn stats(&self) -> CacheStats {
        self.stats.clone()
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn dirty_count(&self) -> usize {
        self.dirty.len()
    }
    pub fn is_dirty(&self, bno: u64) -> bool {
        self.bufs.get(&bno).is_some_and(|b| b.dirty_since.is_some())
    }
    pub fn is_cached(&self, bno: u64) -> bool {
        self.bufs.contains_key(&bno)
    }

    /// The buffer of `bno`, read from the device on a miss: a whole block, or with `run` a run
    /// of that many bytes. A cached buffer is taken as it is, but for one whose run differs
    /// from `run`: a clean one is read again at the new length, a dirty one is the caller's
    /// mistake (its length changes only through `resize_frags` and `move_frags`).
    fn load(&mut self, bno: u64, run: Option<usize>) -> Result<&mut Buf, DevError> {
        let run = run.or_else(|| self.runs.get(&bno).copied());
        if let Some(len) = run {
            self.check_run(bno, len);
            self.note_run(bno, len);
        }
        match self.bufs.get_mut(&bno) {
            Some(b) if run.is_none_or(|len| len == b.len) => {
                self.stats.hits += 1;
                if self.clean.contains(&bno) {
                    self.clean.promote(&bno);
                }
            }
            Some(b) => {
                let len = run.expect("a run of another length");
                assert!(
                    b.dirty_since.is_none(),
                    "block {bno}: a dirty run of {} bytes taken as one of {len} (resize_frags changes a run)",
                    b.len
                );
                // Clean: the device holds the run; read it again at the length asked.
                self.stats.misses += 1;
                self.dev.read_block(bno, &mut self.scratch)?;
                let b = self.bufs.get_mut(&bno).expect("cached");
                self.bytes = self.bytes - b.len + len;
                b.data = Arc::from(&self.scratch[..len]);
                b.len = len;
                self.clean.promote(&bno);
            }
            None => {
                self.stats.misses += 1;
                self.dev.read_block(bno, &mut self.scratch)?;
                let len = run.unwrap_or(self.bs);
                let data = Arc::from(&self.scratch[..len]);
                self.evict_clean(len);
                self.insert(bno, Buf { data, len, dirty_since: None, is_data: false });
                self.clean.put(bno, ());
            }
        }
        Ok(self.bufs.get_mut(&bno).expect("just loaded"))
    }

    /// Remembers the run length of `bno` (none for a whole block).
    fn note_run(&mut self, bno: u64, len: usize) {
        if len < self.bs {
            self.runs.insert(bno, len);
        } else if !self.runs.is_empty() {
            self.runs.remove(&bno);
        }
    }

    /// Asserts that a run of `len` bytes at `bno` is a whole number of the device's addresses
    /// within one block.
    fn check_run(&self, bno: u64, len: usize) {
        assert!(
            len > 0 && len <= self.bs && len.is_multiple_of(self.unit),
            "block {bno}: a run of {len} bytes in blocks of {} addressed every {}",
            self.bs,
            self.unit
        );
    }

    /// The contents of a block, read from the device on a miss; for a fragment run, the run's
    /// bytes.
    pub fn read(&mut self, bno: u64) -> Result<&[u8], DevError> {
        Ok(&self.load(bno, None)?.data)
    }

    /// Reads `n` blocks from `bno` on, none of them cached, in one device request into `buf`,
    /// and keeps no copy: a sequential read's data, which the kernel's page cache keeps (through
    /// FUSE) or the reader does. Putting each block in the cache (an allocation, a map insert
    /// and an eviction each) was a quarter of the server's time in a sequential fio read.
    pub fn read_past(&mut self, bno: u64, n: usize, buf: &mut Vec<u8>) -> Result<(), DevError> {
        debug_assert!((bno..bno + n as u64).all(|b| !self.bufs.contains_key(&b)));
        buf.resize(n * self.bs, 0);
        self.dev.read_run(bno, buf)?;
        self.stats.misses += n as u64;
        Ok(())
    }

    /// Counts blocks read from the device for the cache's user, past the cache (the reads of a
    /// shared file system outside its lock).
    pub fn count_misses(&mut self, n: u64) {
        self.stats.misses += n;
    }

    /// Counts a read outside the lock done again under it.
    pub fn count_read_redone(&mut self) {
        self.stats.reads_redone += 1;
    }

    /// The contents of a block, to modify: the buffer becomes a delayed write. For a cached
    /// fragment run, its bytes only.
    pub fn modify(&mut self, bno: u64) -> Result<&mut [u8], DevError> {
        self.load(bno, None)?;
        Ok(self.dirtied(bno))
    }

    /// Marks a cached buffer dirty and hands out its run: its own bytes, copied first if a
    /// write in flight shares them.
    fn dirtied(&mut self, bno: u64) -> &mut [u8] {
        self.mark_dirty(bno);
        // Shared with a write in flight, or with a landed one whose batch the thread that
        // issued it still holds for a moment: copied then.
        Arc::make_mut(&mut self.bufs.get_mut(&bno).expect("cached").data)
    }

    /// A new buffer in the map, counted.
    fn insert(&mut self, bno: u64, b: Buf) {
        debug_assert_eq!(b.data.len(), b.len, "block {bno}: a buffer of another length than its run");
        self.bytes += b.len;
        let before = self.bufs.insert(bno, b);
        assert!(before.is_none(), "block {bno} cached twice");
    }

    /// A buffer out of the map, uncounted.
    fn remove(&mut self, bno: u64) -> Option<Buf> {
        let b = self.bufs.remove(&bno)?;
        self.bytes -= b.len;
        Some(b)
    }

    /// A newly allocated block: zeroed without reading it, and dirty.
    pub fn create(&mut self, bno: u64) -> &mut [u8] {
        self.install(bno, None, self.bs, false);
        self.dirtied(bno)
    }

    /// Puts at `bno` a buffer of `data` (zeros if `None`; `len` bytes) with a run of `len`
    /// bytes, in place of any cached there: what a newly allocated address holds. Not yet dirty.
    fn install(&mut self, bno: u64, data: Option<Arc<[u8]>>, len: usize, is_data: bool) {
        self.note_run(bno, len);
        assert!(data.as_ref().is_none_or(|d| d.len() == len), "block {bno}: a run of {len} bytes given other bytes");
        match self.bufs.get_mut(&bno) {
            Some(b) => {
                let old = b.len;
                let cleared = if data.is_none() { old } else { 0 };
                match data {
                    Some(d) => b.data = d,
                    // The buffer's own bytes, unless a write in flight shares them.
                    None if old == len && Arc::strong_count(&b.data) == 1 => {
                        Arc::get_mut(&mut b.data).expect("unshared").fill(0)
                    }
                    None => b.data = zeroed(len),
                }
                b.len = len;
                b.is_data = is_data;
                self.bytes = self.bytes - old + len;
                self.stats.zeroed += cleared as u64;
            }
            None => {
                self.evict_clean(len);
                let data = data.unwrap_or_else(|| zeroed(len));
                self.insert(bno, Buf { data, len, dirty_since: None, is_data });
                self.clean.put(bno, ());
            }
        }
    }

    fn mark_dirty(&mut self, bno: u64) {
        self.note_change_in_flight(bno);
        let b = self.bufs.get_mut(&bno).expect("mark_dirty on a cached buffer");
        match b.dirty_since {
            Some(_) => self.stats.redirties += 1,
            None => {
                self.stats.dirtied += 1;
                // The clock is read only here: most modifications find the buffer dirty already.
                let now = self.clock.now_ns();
                b.dirty_since = Some(now);
                self.clean.pop(&bno);
                self.dirty.insert((now, bno));
            }
        }
    }

    /// True if the cached buffer holds file data.
    pub fn is_data(&self, bno: u64) -> bool {
        self.bufs.get(&bno).is_some_and(|b| b.is_data)
    }

    /// Marks a cached buffer as holding file data (it stays so until it is dropped).
    pub fn set_data(&mut self, bno: u64) {
        if let Some(b) = self.bufs.get_mut(&bno) {
            b.is_data = true;
        }
    }

    /// Dirty metadata buffers (not file data).
    pub fn dirty_metadata(&self) -> Vec<u64> {
        self.dirty.iter().map(|&(_, b)| b).filter(|b| self.bufs.get(b).is_some_and(|x| !x.is_data)).collect()
    }

    /// True if a write of `bno` was prepared and has not finished.
    pub fn in_flight(&self, bno: u64) -> bool {
        !self.inflight.is_empty() && self.inflight.contains_key(&bno)
    }

    /// A buffer changed or dropped: if its write is in flight, the write does not carry that.
    /// (Every modification passes here, and nearly always nothing is in flight.)
    fn note_change_in_flight(&mut self, bno: u64) {
        if self.inflight.is_empty() {
            return;
        }
        if let Some(changed) = self.inflight.get_mut(&bno) {
            *changed = true;
        }
    }

    /// Drops a buffer without writing it (its block was freed).
    pub fn forget(&mut self, bno: u64) {
        self.note_change_in_flight(bno);
        self.runs.remove(&bno);
        if let Some(b) = self.remove(bno) {
            match b.dirty_since {
                Some(t) => {
                    self.dirty.remove(&(t, bno));
                }
                None => {
                    self.clean.pop(&bno);
                }
            }
        }
    }

    /// Dirty buffers, oldest first, with the time each was first dirtied.
    pub fn dirty_oldest_first(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.dirty.iter().copied()
    }

    /// True when the cache holds more bytes than its capacity and dirty buffers must be
    /// written before they can be evicted.
    pub fn over_capacity(&self) -> bool {
        self.bytes > self.capacity * self.bs
    }

    /// Evicts clean buffers until `room` more bytes fit within the capacity.
    fn evict_clean(&mut self, room: usize) {
        while self.bytes + room > self.capacity * self.bs {
            match self.clean.pop_lru() {
                Some((bno, ())) => {
                    self.remove(bno);
                    self.stats.evictions += 1;
                }
                None => break,
            }
        }
    }

    /// Writes the dirty buffers among `bnos` as one batch and waits until it is durable. Clean or
    /// uncached blocks in `bnos` are skipped.
    pub fn write(&mut self, bnos: &[u64], kind: WriteKind, hooks: &mut dyn WriteHooks) -> Result<usize, DevError> {
        let batch = self.prepare_write(bnos, hooks)?;
        if batch.is_empty() {
            return Ok(0);
        }
        let result = batch.write_to(&*self.dev, kind);
        self.finish_write(&batch, result, hooks)
    }

    /// The first half of a write: the dirty buffers among `bnos` (clean or uncached ones
    /// skipped), each as `hooks.before_write` leaves it (shared with the buffer, or a copy
    /// rolled back), and the blocks marked in flight until `finish_write`. The buffers may
    /// change meanwhile (into copies of their own: `dirtied`); a block in flight is not
    /// prepared again (its writes would race on the device).
    pub fn prepare_write(&mut self, bnos: &[u64], hooks: &mut dyn WriteHooks) -> Result<Prepared, DevError> {
        if self.down {
            return Err(DevError::ShutDown);
        }
        let mut copies: Vec<(u64, Outgoing)> = Vec::with_capacity(bnos.len());
        for &bno in bnos {
            let Some(b) = self.bufs.get(&bno) else {
                continue;
            };
            if b.dirty_since.is_none() || self.inflight.contains_key(&bno) {
                assert!(
                    b.dirty_since.is_none() || copies.iter().any(|(c, _)| *c == bno),
                    "block {bno} prepared for a write while its last write is in flight"
                );
                continue;
            }
            // The run only: a fragment run's neighbours on disk are other files'.
            let mut copy = Outgoing::new(Arc::clone(&b.data));
            hooks.before_write(bno, &mut copy);
            self.inflight.insert(bno, false);
            copies.push((bno, copy));
        }
        Ok(Prepared { copies })
    }

    /// The second half: the device's answer for a prepared batch. On success each buffer the
    /// write carried in full becomes clean; one rolled back (`hooks.after_write` says so) or
    /// changed while in flight stays dirty, as of now. On failure nothing is taken as written.
    pub fn finish_write(
        &mut self,
        batch: &Prepared,
        result: Result<(), DevError>,
        hooks: &mut dyn WriteHooks,
    ) -> Result<usize, DevError> {
        let changed: Vec<bool> = batch
            .copies
            .iter()
            .map(|(bno, _)| {
                self.inflight.remove(bno).unwrap_or_else(|| panic!("block {bno} finished but not in flight"))
            })
            .collect();
        if let Err(e) = result {
            for (bno, _) in &batch.copies {
                hooks.write_failed(*bno);
            }
            return Err(e);
        }
        let now = self.clock.now_ns();
        for ((bno, _), changed) in batch.copies.iter().zip(changed) {
            self.stats.changed_in_flight += changed as u64;
            let rolled_back = hooks.after_write(*bno);
            let Some(b) = self.bufs.get_mut(bno) else {
                assert!(changed, "written buffer {bno} dropped but not noted");
                continue;
            };
            if rolled_back || changed {
                // Rolled back: the current contents still have to go, once what they wait for
                // has. They count as dirtied now (as FreeBSD redirties such a buffer), or the
                // buffer, still the oldest, would go again, rolled back again, in every batch
                // of the oldest that does not hold what it waits for. Changed in flight: the
                // changes are not on disk.
                if let Some(t) = b.dirty_since.replace(now) {
                    self.dirty.remove(&(t, *bno));
                }
                self.dirty.insert((now, *bno));
                self.clean.pop(bno);
                continue;
            }
            if let Some(t) = b.dirty_since.take() {
                self.dirty.remove(&(t, *bno));
                self.clean.put(*bno, ());
            }
        }
        self.evict_clean(0);
        Ok(batch.copies.len())
    }
}

/// A new run of `len` zero bytes, owned by whoever takes it. Asked of the allocator as zeros
/// (`calloc`), which writes none when it hands out memory fresh from the kernel: a new file's
/// block is then written once, with its data, not cleared first (a byte-by-byte collect was a
/// third of a copy's write handler, its memset and faults).
fn zeroed(len: usize) -> Arc<[u8]> {
    let run = Arc::<[u8]>::new_zeroed_slice(len);
    // SAFETY: every bit pattern, zeros included, is a valid u8.
    unsafe { run.assume_init() }
}

/// Fragment runs: a UFS2 file's last block kept in fragments.
impl Cache {
    /// The fragment run of `len` bytes at `bno` (a file's last block, below the direct
    /// blocks' end, in `len / addr_unit` fragments): its bytes (never those of the files whose
    /// fragments follow it). Read from the device on a miss.
    pub fn read_frags(&mut self, bno: u64, len: usize) -> Result<&[u8], DevError> {
        Ok(&self.load(bno, Some(len))?.data)
    }

    /// The run's length in bytes of a cached buffer (the block size but for a fragment run).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn buf_len(&self, bno: u64) -> Option<usize> {
        self.bufs.get(&bno).map(|b| b.len)
    }

    /// The fragment run of `len` bytes at `bno`, to modify (`read_frags`, then a delayed write):
    /// its bytes only.
    pub fn modify_frags(&mut self, bno: u64, len: usize) -> Result<&mut [u8], DevError> {
        self.load(bno, Some(len))?;
        Ok(self.dirtied(bno))
    }

    /// A newly allocated fragment run of `len` bytes at `bno`: zeroed without reading it, and
    /// dirty.
    pub fn create_frags(&mut self, bno: u64, len: usize) -> &mut [u8] {
        self.check_run(bno, len);
        self.install(bno, None, len, false);
        self.dirtied(bno)
    }

    /// The buffer `create_frags` (or `create`) just made for the new run of `len` bytes at
    /// `bno`, to fill: cached, zeroed and dirty, so neither zeroed nor counted dirty again.
    pub fn fresh_frags(&mut self, bno: u64, len: usize) -> &mut [u8] {
        let b = self.bufs.get_mut(&bno).unwrap_or_else(|| panic!("new run {bno} is not cached"));
        assert_eq!(b.len, len, "new run {bno} cached with another length");
        assert!(b.dirty_since.is_some(), "new run {bno} is not dirty");
        Arc::make_mut(&mut b.data)
    }

    /// Grows or shrinks the fragment run of `old_len` bytes at `bno` in place to `new_len`
    /// (`ffs_fragextend`, or a truncation that frees a tail's last fragments): the bytes kept
    /// stay, new ones are zeros, those cut off are zeroed. The buffer becomes a delayed write of
    /// the new run. The caller owns the fragments a run grows into; those a run gives up may
    /// still be written by a write in flight of the old run (the buffer stays dirty then), so
    /// they are not to be reused until that write is done.
    pub fn resize_frags(&mut self, bno: u64, old_len: usize, new_len: usize) -> Result<&mut [u8], DevError> {
        self.check_run(bno, new_len);
        self.load(bno, Some(old_len))?;
        self.note_run(bno, new_len);
        let b = self.bufs.get_mut(&bno).expect("just loaded");
        let mut data = zeroed(new_len);
        let kept = old_len.min(new_len);
        Arc::get_mut(&mut data).expect("a new run")[..kept].copy_from_slice(&b.data[..kept]);
        b.data = data;
        b.len = new_len;
        self.bytes = self.bytes - old_len + new_len;
        Ok(self.dirtied(bno))
    }

    /// Moves the fragment run of `old_len` bytes at `old` to `new_len` bytes at `new`
    /// (`ffs_realloccg` moving a file's last fragments where they can grow): the new buffer
    /// takes the old one's bytes (zeros after them) and is a delayed write; the old one is
    /// forgotten, as a freed block's is. The two runs must not overlap.
    pub fn move_frags(&mut self, old: u64, old_len: usize, new: u64, new_len: usize) -> Result<&mut [u8], DevError> {
        self.check_run(new, new_len);
        assert!(new_len >= old_len, "run at {old} of {old_len} bytes moved to one of {new_len} bytes at {new}");
        let units = |len: usize| (len / self.unit) as u64;
        assert!(
            new + units(new_len) <= old || old + units(old_len) <= new,
            "run at {old} of {old_len} bytes moved onto itself at {new}"
        );
        let b = self.load(old, Some(old_len))?;
        let (old_data, is_data) = (std::mem::take(&mut b.data), b.is_data);
        let mut data = zeroed(new_len);
        Arc::get_mut(&mut data).expect("a new run")[..old_len].copy_from_slice(&old_data);
        self.forget(old);
        self.install(new, Some(data), new_len, is_data);
        Ok(self.dirtied(new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;

    fn cache(cap: usize) -> (Cache, Arc<MemDevice>, Arc<SimClock>) {
        let dev = Arc::new(MemDevice::new(4096, 1000));
        let clock = Arc::new(SimClock::new());
        (Cache::new(dev.clone(), cap, clock.clone()), dev, clock)
    }

    #[test]
    fn cached_reads_do_not_touch_the_device() {
        let (mut c, dev, _) = cache(64);
        c.read(5).unwrap();
        c.read(5).unwrap();
        c.read(5).unwrap();
        assert_eq!(dev.stats().reads, 1);
        assert_eq!(c.stats().hits, 2);
    }

    #[test]
    fn dirty_age_is_first_dirtied_and_write_cleans() {
        let (mut c, dev, clock) = cache(64);
        c.modify(1).unwrap()[0] = 1;
        clock.advance(10);
        c.modify(2).unwrap()[0] = 2;
        clock.advance(10);
        c.modify(1).unwrap()[1] = 3; // redirty: keeps time 0
        let order: Vec<_> = c.dirty_oldest_first().collect();
        assert_eq!(order, vec![(0, 1), (10, 2)]);
        assert_eq!(c.stats().redirties, 1);
        c.write(&[1, 2, 3], WriteKind::Async, &mut NoHooks).unwrap();
        assert_eq!(c.dirty_count(), 0);
        assert_eq!(dev.stats().async_writes, 2);
        let mut b = vec![0u8; 4096];
        dev.read_block(1, &mut b).unwrap();
        assert_eq!(&b[..2], &[1, 3]);
    }

    #[test]
    fn a_new_run_zeroes_only_the_old_run() {
        let dev = Arc::new(MemDevice::new_frags(32768, 4096, 800));
        let mut c = Cache::new(dev, 64, Arc::new(SimClock::new()));
        c.create_frags(8, 4096)[..4096].fill(5);
        assert_eq!(c.stats().zeroed, 0);
        // The address given to a new run (a file's tail moved, a fragment reused): the old
        // run's bytes are cleared, not the whole block's.
        let b = c.create_frags(8, 8192);
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(c.stats().zeroed, 4096);
        c.create_frags(8, 4096);
        assert_eq!(c.stats().zeroed, 4096 + 8192);
        assert!(c.read(8).unwrap().iter().all(|&x| x == 0));
    }

    #[test]
    fn hooks_change_the_copy_not_the_buffer() {
        struct Zero;
        impl WriteHooks for Zero {
            fn before_write(&mut self, _: u64, copy: &mut Outgoing) {
                copy.edit(0..1)[0] = 0;
            }
            fn after_write(&mut self, _: u64) -> bool {
                false
            }
        }
        let (mut c, dev, _) = cache(64);
        c.create(7)[0] = 9;
        c.write(&[7], WriteKind::Sync, &mut Zero).unwrap();
        assert_eq!(c.read(7).unwrap()[0], 9);
        let mut b = vec![1u8; 4096];
        dev.read_block(7, &mut b).unwrap();
        assert_eq!(b[0], 0);
    }

    /// A write in the air shares the bytes of the buffers it carries unchanged (no copy when
    /// prepared), and every way of changing a buffer meanwhile (a modification, a new block
    /// zeroed in its place, a run resized or moved) changes a copy of the buffer's own: the
    /// write carries the bytes as they were when it was prepared, and each changed buffer
    /// stays dirty with its new bytes.
    #[test]
    fn a_write_in_the_air_shares_the_bytes_and_never_sees_a_later_change() {
        // Addressed in fragments of 1 KiB: whole blocks at 0, 4, 8 and 12, runs at 16 and 20.
        let dev = Arc::new(MemDevice::new_frags(4096, 1024, 64));
        let mut c = Cache::new(dev.clone(), 64, Arc::new(SimClock::new()));
        for bno in [0, 4, 8, 12] {
            c.create(bno).fill(bno as u8 + 1);
        }
        c.create_frags(16, 2048).fill(17);
        c.create_frags(20, 1024).fill(21);
        let all = [0, 4, 8, 12, 16, 20];
        let batch = c.prepare_write(&all, &mut NoHooks).unwrap();
        for (bno, copy) in &batch.copies {
            assert!(copy.shares(&c.bufs[bno].data), "block {bno}: copied although no hook changed it");
        }
        c.modify(0).unwrap()[0] = 0xa0;
        c.create(4)[1] = 0xa4;
        c.resize_frags(16, 2048, 3072).unwrap()[0] = 0xb0;
        c.move_frags(20, 1024, 24, 2048).unwrap()[0] = 0xb4;
        for (bno, copy) in &batch.copies {
            let len = match bno {
                16 => 2048,
                20 => 1024,
                _ => 4096,
            };
            assert_eq!(copy.len(), len, "block {bno}");
            assert!(copy.bytes().iter().all(|&x| x == *bno as u8 + 1), "block {bno}: the write in the air changed");
        }
        let result = batch.write_to(&*dev, WriteKind::Async);
        assert_eq!(c.finish_write(&batch, result, &mut NoHooks).unwrap(), all.len());
        for (bno, first) in [(0, 0xa0), (4, 0), (16, 0xb0), (24, 0xb4)] {
            assert!(c.is_dirty(bno), "block {bno} changed in flight and stays dirty");
            assert_eq!(c.read(bno).unwrap()[0], first, "block {bno}");
        }
        assert!(!c.is_dirty(8) && !c.is_dirty(12) && c.read(8).unwrap()[0] == 9);
        let mut b = vec![0u8; 4096];
        dev.read_block(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 1), "the device got the bytes prepared");
    }

    #[test]
    fn eviction_keeps_dirty_buffers() {
        let (mut c, _, _) = cache(16);
        for i in 0..16 {
            c.modify(i).unwrap()[0] = 1;
        }
        for i in 100..200 {
            c.read(i).unwrap();
        }
        assert_eq!(c.dirty_count(), 16);
        assert!(c.bufs.len() <= 17);
        for i in 0..16 {
            assert!(c.is_dirty(i));
        }
    }

    /// The capacity counts bytes: runs of one fragment (an eighth of a block) fit eight to a
    /// block's room, and a whole block read past the capacity evicts as many bytes.
    #[test]
    fn small_runs_take_their_bytes_of_the_capacity() {
        let dev = Arc::new(MemDevice::new_frags(32768, 4096, 4096));
        let mut c = Cache::new(dev.clone(), 16, Arc::new(SimClock::new()));
        for i in 0..128 {
            c.read_frags(i * 8, 4096).unwrap();
        }
        assert_eq!((c.bufs.len(), c.stats().evictions), (128, 0), "16 blocks' room holds 128 fragments");
        assert!(!c.over_capacity());
        c.read(2048).unwrap();
        assert_eq!(c.stats().evictions, 8, "a whole block makes room for itself");
        assert_eq!(c.bytes, 16 * 32768);
        c.resize_frags(8 * 127, 4096, 8192).unwrap();
        assert!(c.over_capacity(), "a dirty run grown past the room");
        assert_eq!(c.bytes, 16 * 32768 + 4096);
    }

    /// A cache over 64 fragments of 1 KiB, blocks of 4 KiB, whose block at fragment 8 holds
    /// file A's run (fragments 8-9, 0xaa), file B's (10, 0xbb) and a freed fragment's stale
    /// bytes (11, 0xcc).
    fn frag_cache() -> (Cache, Arc<MemDevice>) {
        let dev = Arc::new(MemDevice::new_frags(4096, 1024, 64));
        let mut block = vec![0xaa; 4096];
        block[2048..3072].fill(0xbb);
        block[3072..].fill(0xcc);
        dev.write_batch(&[WriteReq { bno: 8, data: &block }], WriteKind::Sync).unwrap();
        (Cache::new(dev.clone(), 64, Arc::new(SimClock::new())), dev)
    }

    /// The block of the device at fragment `bno`.
    fn on_disk(dev: &MemDevice, bno: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        dev.read_block(bno, &mut b).unwrap();
        b
    }

    /// Each of `spans` (start, end, byte) of `b` holds that byte.
    fn holds(b: &[u8], spans: &[(usize, usize, u8)]) -> bool {
        spans.iter().all(|&(s, e, x)| b[s..e].iter().all(|&y| y == x))
    }

    /// Hooks that note the length of every copy written.
    struct Lens(Vec<(u64, usize)>);
    impl WriteHooks for Lens {
        fn before_write(&mut self, bno: u64, copy: &mut Outgoing) {
            self.0.push((bno, copy.len()));
        }
        fn after_write(&mut self, _: u64) -> bool {
            false
        }
    }

    #[test]
    fn a_fragment_run_is_read_and_written_alone() {
        let (mut c, dev) = frag_cache();
        let a = c.read_frags(8, 2048).unwrap();
        assert!(a.len() == 2048 && holds(a, &[(0, 2048, 0xaa)]), "the run's bytes only");
        assert_eq!(c.buf_len(8), Some(2048));
        let a = c.modify_frags(8, 2048).unwrap();
        assert_eq!(a.len(), 2048);
        a.fill(0x11);
        c.modify_frags(10, 1024).unwrap().fill(0x22);
        // A new run beside a fragment of another file's.
        dev.write_batch(&[WriteReq { bno: 32, data: &[0xee; 1024] }], WriteKind::Sync).unwrap();
        let n = c.create_frags(30, 2048);
        assert!(n.len() == 2048 && holds(n, &[(0, 2048, 0)]));
        n.fill(0x55);
        let mut hooks = Lens(Vec::new());
        c.write(&[8, 10, 30], WriteKind::Async, &mut hooks).unwrap();
        hooks.0.sort();
        assert_eq!(hooks.0, vec![(8, 2048), (10, 1024), (30, 2048)], "the hooks see each run's copy");
        let b = on_disk(&dev, 8);
        assert!(holds(&b, &[(0, 2048, 0x11), (2048, 3072, 0x22), (3072, 4096, 0xcc)]), "neighbours kept");
        assert!(holds(&on_disk(&dev, 30), &[(0, 2048, 0x55), (2048, 3072, 0xee), (3072, 4096, 0)]));
        // A clean run read at another length is read again, at that length.
        let a = c.read_frags(8, 1024).unwrap();
        assert!(a.len() == 1024 && holds(a, &[(0, 1024, 0x11)]));
        let a = c.read_frags(8, 3072).unwrap();
        assert!(a.len() == 3072 && holds(a, &[(0, 2048, 0x11), (2048, 3072, 0x22)]));
    }

    #[test]
    fn fragment_runs_grow_shrink_and_move_with_their_bytes() {
        let (mut c, dev) = frag_cache();
        // B grows in place over the freed fragment: its bytes stay, the new ones are zeros.
        let b = c.resize_frags(10, 1024, 2048).unwrap();
        assert!(b.len() == 2048 && holds(b, &[(0, 1024, 0xbb), (1024, 2048, 0)]));
        b[1024] = 0x33;
        c.write(&[10], WriteKind::Async, &mut NoHooks).unwrap();
        let mut want = vec![0xaa; 4096];
        want[2048..].fill(0);
        want[2048..3072].fill(0xbb);
        want[3072] = 0x33;
        assert_eq!(on_disk(&dev, 8), want);
        // B moves to a whole block at 20: the old address is forgotten, not written.
        let b = c.move_frags(10, 2048, 20, 4096).unwrap();
        assert!(holds(b, &[(0, 1024, 0xbb), (1025, 4096, 0)]) && b[1024] == 0x33);
        assert!(!c.is_cached(10) && c.buf_len(20) == Some(4096));
        assert_eq!(c.write(&[10, 20], WriteKind::Async, &mut NoHooks).unwrap(), 1);
        assert_eq!(on_disk(&dev, 8), want);
        assert!(holds(&on_disk(&dev, 20), &[(0, 1024, 0xbb), (1025, 4096, 0)]));
        // Truncated to one fragment, whose neighbours go to another file: its write leaves them.
        dev.write_batch(&[WriteReq { bno: 21, data: &[0xdd; 3072] }], WriteKind::Sync).unwrap();
        let b = c.resize_frags(20, 4096, 1024).unwrap();
        assert_eq!(b.len(), 1024);
        b[0] = 0x44;
        let b = c.read(20).unwrap();
        assert!(b.len() == 1024 && holds(b, &[(1, 1024, 0xbb)]));
        c.write(&[20], WriteKind::Async, &mut NoHooks).unwrap();
        assert!(holds(&on_disk(&dev, 20), &[(0, 1, 0x44), (1, 1024, 0xbb), (1024, 4096, 0xdd)]));
    }

    #[test]
    #[should_panic(expected = "a dirty run of 2048 bytes taken as one of 1024")]
    fn a_dirty_run_changes_length_only_when_asked() {
        let (mut c, _) = frag_cache();
        c.modify_frags(8, 2048).unwrap()[0] = 1;
        let _ = c.read_frags(8, 1024);
    }
}
