//! `VolumeDevice`: the snapshot's start-up (`open`), `create` and `delete`, and the copy-on-write
//! under every write of the file system: old contents, then the exception, then the write.
//! Copy-on-write, exceptions and the store count in chunks of one file-system block (`store`);
//! the file system's requests come in device addresses (fragments on UFS2) and may cover part
//! of a chunk or several.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::clock::SimClock;
use crate::dev::{BlockDevice, DevResult, DevStats, WriteKind, WriteReq};
use crate::format::*;
use crate::fs::{Fs, MountOptions};

use super::store::{br_chunks, find_store, frag_of, gen_of, origin_chunks, read_sb, SnapBitmap, State, StoreMap};
use super::{PoolOptions, StoreKind, VolResult, VolumeError, VolumeStats, BR_STORE};

/// The volume under a file system that has a snapshot: every write of a chunk in use at
/// snapshot time first copies the chunk's old contents into the exception store.
pub struct VolumeDevice {
    pub(super) inner: Arc<dyn BlockDevice>,
    /// Device addresses per chunk: 1, or a UFS2 image's fragments per block.
    pub(super) frag: u64,
    pub(super) kind: StoreKind,
    pub(super) epa: usize,
    pub(super) pool: PoolOptions,
    pub(super) st: Mutex<State>,
    /// Set when the pool is below its low watermark; the refiller waits on it.
    pub(super) wanted: Mutex<bool>,
    pub(super) wake: Condvar,
    pub(super) refills: AtomicU64,
    pub(super) preserved: AtomicU64,
    /// Copy on write chunks that were free at snapshot time too (dm-snap's way: it cannot tell).
    pub(super) copy_free: AtomicBool,
    /// Writes of chunks free at snapshot time that were not copied.
    pub(super) skipped_free: AtomicU64,
}

impl VolumeDevice {
    /// §4's start-up: finds the snapshot's store (querying the file system read-only), loads its
    /// exception table and activates copy-on-write. None if the volume has no snapshot.
    pub fn open(inner: Arc<dyn BlockDevice>, pool: PoolOptions) -> VolResult<Option<Arc<VolumeDevice>>> {
        let Some((kind, header, map)) = find_store(&inner)? else { return Ok(None) };
        let frag = frag_of(inner.as_ref(), &read_sb(inner.as_ref())?)?;
        let bs = inner.block_size();
        let epa = bs / VOL_ENTRY_SIZE;
        let mut st = State {
            map,
            header,
            exceptions: HashMap::new(),
            area: 1,
            area_buf: vec![0xff; bs],
            area_used: 0,
            snap_used: None,
            last_cow: 0,
        };
        // The exception table: areas until one is not full.
        let gen = gen_of(&st.header);
        let mut buf = vec![0u8; bs];
        while let Some(p) = st.map.phys(st.area) {
            inner.read_block(p * frag, &mut buf)?;
            let mut used = 0;
            while used < epa {
                let want = st.area + 1 + used as u64;
                match vol_entry_get(&buf, used) {
                    Some((o, i)) if i == (want | gen) && o < st.header.origin_blocks => {
                        st.exceptions.insert(o, want);
                        used += 1;
                    }
                    _ => break,
                }
            }
            st.area_buf.copy_from_slice(&buf);
            st.area_used = used;
            if used < epa {
                break;
            }
            st.area += epa as u64 + 1;
            st.area_buf.fill(0xff);
            st.area_used = 0;
        }
        let vol = Arc::new(VolumeDevice {
            inner,
            frag,
            kind,
            epa,
            pool,
            st: Mutex::new(st),
            wanted: Mutex::new(false),
            wake: Condvar::new(),
            refills: AtomicU64::new(0),
            preserved: AtomicU64::new(0),
            copy_free: AtomicBool::new(false),
            skipped_free: AtomicU64::new(0),
        });
        {
            let mut st = vol.lock();
            if st.header.invalid == 0 {
                st.snap_used = Some(SnapBitmap::load(&vol, &mut st)?);
            }
        }
        Ok(Some(vol))
    }

    /// Takes a snapshot of the (unmounted) volume on `inner` with the given store; a br store
    /// reserves `pool.initial` blocks, or `PoolOptions::cap` where that is fewer.
    pub fn create(inner: Arc<dyn BlockDevice>, kind: StoreKind, pool: PoolOptions, now: i64) -> VolResult<()> {
        if let Some((k, _, _)) = find_store(&inner)? {
            return Err(VolumeError::Exists(k));
        }
        let sb = read_sb(inner.as_ref())?;
        let (frag, origin) = (frag_of(inner.as_ref(), &sb)?, origin_chunks(&sb));
        let (first, second) = match kind {
            StoreKind::Reserved => {
                if inner.num_blocks() / frag < origin + 2 {
                    return Err(VolumeError::NoReservedArea);
                }
                (origin, origin + 1)
            }
            StoreKind::Br => {
                // The header and the first area block at least; no more than the pool's cap.
                let initial = pool.initial.min(PoolOptions::cap(&sb)).max(2);
                let mut fs = Fs::mount(inner.clone(), MountOptions::default(), Arc::new(SimClock::new()))?;
                let r = fs.brreserve(BR_STORE.as_bytes(), initial, None);
                let runs = r.and_then(|_| fs.brquery(BR_STORE.as_bytes(), 0, 2));
                fs.unmount()?;
                let runs = br_chunks(runs?, frag)?;
                let mut map = StoreMap::Br { len: 2, runs, mru: 0 };
                (map.phys(0).expect("2 blocks"), map.phys(1).expect("2 blocks"))
            }
        };
        let bs = inner.block_size();
        let mut area = vec![0u8; bs];
        vol_area_init(&mut area);
        let mut hdr = vec![0u8; bs];
        let kind_code = if kind == StoreKind::Reserved { VOL_STORE_RESERVED } else { VOL_STORE_BR };
        VolumeHeader { kind: kind_code, invalid: 0, origin_blocks: origin, created: now }.encode(&mut hdr);
        // The empty table first, then the header that makes the snapshot exist.
        inner.write_batch(&[WriteReq { bno: second * frag, data: &area }], WriteKind::Sync)?;
        inner.write_batch(&[WriteReq { bno: first * frag, data: &hdr }], WriteKind::Sync)?;
        Ok(())
    }

    /// Deletes the snapshot of the (unmounted) volume on `inner`: its header goes, and a br
    /// store's reservation is freed.
    pub fn delete(inner: Arc<dyn BlockDevice>) -> VolResult<StoreKind> {
        let Some((kind, _, mut map)) = find_store(&inner)? else { return Err(VolumeError::NoSnapshot) };
        let frag = frag_of(inner.as_ref(), &read_sb(inner.as_ref())?)?;
        let zero = vec![0u8; inner.block_size()];
        let first = map.phys(0).ok_or(VolumeError::NoSnapshot)?;
        inner.write_batch(&[WriteReq { bno: first * frag, data: &zero }], WriteKind::Sync)?;
        if kind == StoreKind::Br {
            let mut fs = Fs::mount(inner.clone(), MountOptions::default(), Arc::new(SimClock::new()))?;
            let r = fs.brfree(BR_STORE.as_bytes());
            fs.unmount()?;
            r?;
        }
        Ok(kind)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    pub fn volume_stats(&self) -> VolumeStats {
        let st = self.lock();
        VolumeStats {
            kind: Some(self.kind),
            valid: st.header.invalid == 0,
            exceptions: st.exceptions.len() as u64,
            store_used: (st.area + 1 + st.area_used as u64).min(st.map.len()),
            store_size: st.map.len(),
            refills: self.refills.load(AtOrd::Relaxed),
            preserved: self.preserved.load(AtOrd::Relaxed),
            skipped_free: self.skipped_free.load(AtOrd::Relaxed),
        }
    }

    /// Why the snapshot is invalid, if it is.
    pub fn invalid_reason(&self) -> Option<String> {
        let st = self.lock();
        match st.header.invalid {
            0 => None,
            VOL_INVALID_FULL => Some(format!(
                "the {} exception store filled up ({} blocks, {} exceptions); the snapshot was invalidated",
                self.kind,
                st.map.len(),
                st.exceptions.len()
            )),
            n => Some(format!("invalidated (reason {n})")),
        }
    }

    /// Every exception: the origin chunk, the chunk of its copy in the store, and the copy's
    /// store index (the order the copies were made in). A chunk is a file-system block, at
    /// device address `chunk * frag`.
    pub fn exception_blocks(&self) -> Vec<(u64, u64, u64)> {
        let mut st = self.lock();
        let ex: Vec<(u64, u64)> = st.exceptions.iter().map(|(&o, &i)| (o, i)).collect();
        ex.into_iter().filter_map(|(o, i)| Some((o, st.map.phys(i)?, i))).collect()
    }

    /// Chunks (file-system blocks) of the origin the snapshot covers.
    pub fn origin_blocks(&self) -> u64 {
        self.lock().header.origin_blocks
    }

    /// Store blocks not yet used.
    pub(super) fn available(&self, st: &State) -> u64 {
        st.map.len().saturating_sub(st.area + 1 + st.area_used as u64)
    }

    /// The next store index for data, opening a new area when the current one is full.
    fn alloc_data(&self, st: &mut State) -> Option<u64> {
        if st.area_used == self.epa {
            let next = st.area + self.epa as u64 + 1;
            if next + 1 >= st.map.len() {
                return None;
            }
            st.area = next;
            st.area_buf.fill(0xff);
            st.area_used = 0;
        }
        let d = st.area + 1 + st.area_used as u64;
        (d < st.map.len()).then_some(d)
    }

    /// Copies the old contents of chunks `blocks` into the store and commits their exceptions.
    pub(super) fn cow(&self, st: &mut State, blocks: &[u64]) -> DevResult<()> {
        let bs = self.inner.block_size();
        let gen = gen_of(&st.header);
        let mut old = vec![0u8; bs * blocks.len()];
        let mut targets = Vec::with_capacity(blocks.len());
        let mut areas: Vec<(u64, Vec<u8>)> = Vec::new();
        for (k, &b) in blocks.iter().enumerate() {
            let Some(d) = self.alloc_data(st) else {
                return self.invalidate(st);
            };
            if areas.last().is_none_or(|(a, _)| *a != st.area) {
                areas.push((st.area, Vec::new()));
            }
            vol_entry_set(&mut st.area_buf, st.area_used, b, d | gen);
            st.area_used += 1;
            areas.last_mut().expect("pushed").1 = st.area_buf.clone();
            self.inner.read_block(b * self.frag, &mut old[k * bs..(k + 1) * bs])?;
            let p = st.map.phys(d).expect("allocated inside the store");
            targets.push((b, d, p));
        }
        let mut data: Vec<WriteReq> = targets
            .iter()
            .enumerate()
            .map(|(k, t)| WriteReq { bno: t.2 * self.frag, data: &old[k * bs..(k + 1) * bs] })
            .collect();
        data.sort_by_key(|r| r.bno);
        self.inner.write_batch(&data, WriteKind::Sync)?;
        let mut meta = Vec::new();
        for (a, buf) in &areas {
            meta.push((st.map.phys(*a).expect("area inside the store") * self.frag, buf));
        }
        let reqs: Vec<WriteReq> = meta.iter().map(|(p, b)| WriteReq { bno: *p, data: b }).collect();
        self.inner.write_batch(&reqs, WriteKind::Sync)?;
        for (b, d, _) in targets {
            st.exceptions.insert(b, d);
            st.last_cow = b;
        }
        if self.kind == StoreKind::Br && self.available(st) < self.pool.low_watermark {
            *self.wanted.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.wake.notify_all();
        }
        Ok(())
    }

    /// The store is full: the snapshot becomes invalid (on disk too), and says so.
    fn invalidate(&self, st: &mut State) -> DevResult<()> {
        if st.header.invalid != 0 {
            return Ok(());
        }
        st.header.invalid = VOL_INVALID_FULL;
        let mut hdr = vec![0u8; self.inner.block_size()];
        st.header.encode(&mut hdr);
        let p = st.map.phys(0).expect("header");
        self.inner.write_batch(&[WriteReq { bno: p * self.frag, data: &hdr }], WriteKind::Sync)?;
        log::error!(
            "volume snapshot invalidated: the {} exception store is full ({} blocks, {} exceptions)",
            self.kind,
            st.map.len(),
            st.exceptions.len()
        );
        Ok(())
    }

    /// Reads chunk `c` as it was at snapshot time.
    pub(super) fn read_snapshot_locked(&self, st: &mut State, c: u64, buf: &mut [u8]) -> DevResult<()> {
        match st.exceptions.get(&c) {
            Some(&i) => self.inner.read_block(st.map.phys(i).expect("exception inside the store") * self.frag, buf),
            None => self.inner.read_block(c * self.frag, buf),
        }
    }

    /// The snapshot's lock, or why it cannot be read.
    fn lock_valid(&self) -> VolResult<MutexGuard<'_, State>> {
        let st = self.lock();
        if st.header.invalid != 0 {
            drop(st);
            return Err(VolumeError::Invalid(self.invalid_reason().unwrap_or_default()));
        }
        Ok(st)
    }

    /// Reads chunk `c` of the volume as it was at snapshot time.
    pub(super) fn read_snapshot_chunk(&self, c: u64, buf: &mut [u8]) -> VolResult<()> {
        let mut st = self.lock_valid()?;
        Ok(self.read_snapshot_locked(&mut st, c, buf)?)
    }

    /// Reads `buf` (a whole number of the device's address units) from device address `bno` of
    /// the volume as it was at snapshot time. On UFS2 a block read at a fragment address may
    /// start inside one chunk and end in the next: each chunk is read as it was.
    pub fn read_snapshot(&self, bno: u64, buf: &mut [u8]) -> VolResult<()> {
        let mut st = self.lock_valid()?;
        let bs = self.inner.block_size();
        if bno.is_multiple_of(self.frag) && buf.len() == bs {
            return Ok(self.read_snapshot_locked(&mut st, bno / self.frag, buf)?);
        }
        let start = bno * self.inner.addr_unit() as u64;
        let first = start / bs as u64;
        let last = (start + buf.len().max(1) as u64 - 1) / bs as u64;
        let mut chunks = vec![0u8; (last - first + 1) as usize * bs];
        for (k, c) in (first..=last).enumerate() {
            self.read_snapshot_locked(&mut st, c, &mut chunks[k * bs..(k + 1) * bs])?;
        }
        let from = (start - first * bs as u64) as usize;
        buf.copy_from_slice(&chunks[from..from + buf.len()]);
        Ok(())
    }

    /// True if origin chunk `b` was in use at snapshot time (or if that is not known).
    pub fn in_use_at_snapshot(&self, b: u64) -> bool {
        self.lock().in_use_at_snapshot(b)
    }

    /// True if `export` writes origin chunk `b`: in use at snapshot time and not the store's.
    pub(super) fn exported(&self, b: u64) -> bool {
        let st = self.lock();
        st.in_use_at_snapshot(b) && !st.map.holds(b)
    }

    /// Copy on write chunks that were free at snapshot time too, as dm-snap does (it cannot
    /// tell); by default they are not copied, since no file of the snapshot refers to them.
    pub fn set_copy_free(&self, on: bool) {
        self.copy_free.store(on, AtOrd::Relaxed);
    }
}

impl BlockDevice for VolumeDevice {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn addr_unit(&self) -> usize {
        self.inner.addr_unit()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_block(bno, buf)
    }
    fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_run(bno, buf)
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        {
            let mut st = self.lock();
            if st.header.invalid == 0 {
                let copy_free = self.copy_free.load(AtOrd::Relaxed);
                // The chunks each write covers: a UFS2 write of fragments lies inside one; a
                // write longer than a block (a superblock of 8 KiB) may cover several.
                let unit = self.inner.addr_unit() as u64;
                let mut todo: Vec<u64> = reqs
                    .iter()
                    .flat_map(|r| {
                        let units = (r.data.len() as u64).div_ceil(unit).max(1);
                        r.bno / self.frag..=(r.bno + units - 1) / self.frag
                    })
                    .filter(|b| *b < st.header.origin_blocks && !st.exceptions.contains_key(b))
                    .collect();
                if !copy_free {
                    let before = todo.len();
                    todo.retain(|&b| st.in_use_at_snapshot(b));
                    self.skipped_free.fetch_add((before - todo.len()) as u64, AtOrd::Relaxed);
                }
                todo.sort_unstable();
                todo.dedup();
                if !todo.is_empty() {
                    self.cow(&mut st, &todo)?;
                }
            }
        }
        self.inner.write_batch(reqs, kind)
    }
    fn stats(&self) -> DevStats {
        self.inner.stats()
    }
}
