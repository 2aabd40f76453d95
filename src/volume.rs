//! A volume snapshot layer under the file system (Block Register paper §4): `VolumeDevice` sits
//! between the file system and the real device and keeps the whole volume as it was when the
//! snapshot was taken, by copy-on-write of chunks (one block each) into an exception store, as
//! device-mapper's dm-snapshot does. The store is persistent, in dm-snapshot's persistent layout
//! (a header block, then exception areas: a metadata block of `(origin, store index)` entries
//! followed by the data blocks they name), so a snapshot survives a restart. Two stores:
//! - `reserved`: the blocks after the file system, set aside at mkfs (`--snapshot-reserve`), the
//!   LVM way; when they are used up the snapshot is invalidated, as LVM does, and says so;
//! - `br`: a Block Register reservation (`/.br/volume-snapshot`) in the file system on this very
//!   volume. A pool of store blocks with a low watermark is refilled by `refill` (a background
//!   thread, `Refiller`), which calls brexpand near the last copied block; never from inside a
//!   file-system operation or the I/O path. The store's own writes go to the device directly
//!   (they bypass copy-on-write), and its block map (brquery's runs) is cached and searched by
//!   binary search after a most-recently-used run.
//!
//! A block the br store gains after the snapshot may have been in use at snapshot time (a file
//! removed since): before the store uses it, its old contents are copied like any other chunk.
//!
//! Start-up (§4): `open` first opens the file system read-only to query the reservation, then
//! activates copy-on-write; the caller then mounts the file system read-write on it.
//!
//! Invariant: an origin block is written only after its old contents and the exception naming
//! them are on disk (data, then the area block, then the origin write, each a barrier).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::Serialize;
use thiserror::Error;

use crate::br::BrRun;
use crate::clock::SimClock;
use crate::dev::{BlockDevice, DevError, DevResult, DevStats, WriteKind, WriteReq};
use crate::format::*;
use crate::fs::{lock, SharedFs};
use crate::fs::{Fs, FsError, MountOptions};

/// The Block Register reservation that holds a `br` store.
pub const BR_STORE: &str = "volume-snapshot";

#[derive(Debug, Error)]
pub enum VolumeError {
    #[error(transparent)]
    Dev(#[from] DevError),
    #[error("file system: {0}")]
    Fs(#[from] FsError),
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("no volume snapshot on this volume")]
    NoSnapshot,
    #[error("a volume snapshot already exists ({0} store); delete it first")]
    Exists(StoreKind),
    #[error("no reserved area after the file system: make it with `sufs mkfs --snapshot-reserve SIZE`")]
    NoReservedArea,
    #[error("the snapshot is invalid: {0}")]
    Invalid(String),
}

pub type VolResult<T> = Result<T, VolumeError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// A fixed area after the file system (LVM's way).
    Reserved,
    /// A Block Register reservation in the file system itself.
    Br,
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoreKind::Reserved => "reserved",
            StoreKind::Br => "br",
        })
    }
}

/// Tuning of the br store's pool.
#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    /// Blocks reserved when the snapshot is created.
    pub initial: u64,
    /// The refill runs when fewer free store blocks than this remain.
    pub low_watermark: u64,
    /// Blocks each refill asks brexpand for.
    pub grow: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions { initial: 4096, low_watermark: 1024, grow: 4096 }
    }
}

/// Where the store's blocks are on the device.
enum StoreMap {
    Reserved {
        start: u64,
        len: u64,
    },
    /// brquery's runs, sorted by logical offset and contiguous from 0; `mru` is the run last hit.
    Br {
        runs: Vec<BrRun>,
        len: u64,
        mru: usize,
    },
}

impl StoreMap {
    fn len(&self) -> u64 {
        match self {
            StoreMap::Reserved { len, .. } | StoreMap::Br { len, .. } => *len,
        }
    }

    /// The physical block of store index `i`.
    fn phys(&mut self, i: u64) -> Option<u64> {
        match self {
            StoreMap::Reserved { start, len } => (i < *len).then_some(*start + i),
            StoreMap::Br { runs, mru, .. } => {
                let hit = |r: &BrRun| r.offset <= i && i < r.offset + r.len;
                if let Some(r) = runs.get(*mru).filter(|r| hit(r)) {
                    return Some(r.start + (i - r.offset));
                }
                let k = runs.partition_point(|r| r.offset + r.len <= i);
                let r = runs.get(k).filter(|r| hit(r))?;
                *mru = k;
                Some(r.start + (i - r.offset))
            }
        }
    }

    /// True if physical block `b` is one of the store's.
    fn holds(&self, b: u64) -> bool {
        match self {
            StoreMap::Reserved { start, len } => *start <= b && b < *start + *len,
            StoreMap::Br { runs, .. } => runs.iter().any(|r| r.start <= b && b < r.start + r.len),
        }
    }

    /// Appends physical block `b` as the next store index (br only).
    fn push(&mut self, b: u64) {
        if let StoreMap::Br { runs, len, .. } = self {
            match runs.last_mut() {
                Some(r) if r.start + r.len == b => r.len += 1,
                _ => runs.push(BrRun { offset: *len, start: b, len: 1 }),
            }
            *len += 1;
        }
    }
}

struct State {
    map: StoreMap,
    header: VolumeHeader,
    /// Origin block -> store index of its old contents.
    exceptions: HashMap<u64, u64>,
    /// Store index of the current area's metadata block, its contents and entries used.
    area: u64,
    area_buf: Vec<u8>,
    area_used: usize,
    /// Which origin blocks were in use at snapshot time (from the snapshot's own cylinder-group
    /// bitmaps, read once at open): the br store copies a block it gains only if it was, and no
    /// store copies a chunk on write that was free (unless told to, as dm-snap does).
    snap_used: Option<SnapBitmap>,
    /// The origin block copied last: where the br store's next blocks are asked for.
    last_cow: u64,
}

/// Counters of a volume.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VolumeStats {
    pub kind: Option<StoreKind>,
    pub valid: bool,
    pub exceptions: u64,
    /// Store blocks in use (header, area blocks, data) and available in all.
    pub store_used: u64,
    pub store_size: u64,
    pub refills: u64,
    /// Blocks the br store gained that were in use at snapshot time, copied before reuse.
    pub preserved: u64,
    /// Writes to chunks free at snapshot time, not copied.
    pub skipped_free: u64,
}

pub struct VolumeDevice {
    inner: Arc<dyn BlockDevice>,
    kind: StoreKind,
    epa: usize,
    pool: PoolOptions,
    st: Mutex<State>,
    /// Set when the pool is below its low watermark; the refiller waits on it.
    wanted: Mutex<bool>,
    wake: Condvar,
    refills: AtomicU64,
    preserved: AtomicU64,
    /// Copy on write chunks that were free at snapshot time too (dm-snap's way: it cannot tell).
    copy_free: AtomicBool,
    /// Writes of chunks free at snapshot time that were not copied.
    skipped_free: AtomicU64,
}

/// The origin's blocks in use at snapshot time, one bit each; metadata blocks (superblocks,
/// group headers, inode tables) always count as in use.
struct SnapBitmap {
    bits: Vec<u8>,
    blocks: u64,
}

impl SnapBitmap {
    /// Reads the snapshot's cylinder-group headers through the snapshot view (they are metadata,
    /// so copied before any change): one read per group.
    fn load(vol: &VolumeDevice, st: &mut State) -> DevResult<SnapBitmap> {
        let bs = vol.inner.block_size();
        let mut b = vec![0u8; bs];
        vol.read_snapshot_locked(st, 0, &mut b)?;
        let sb = Superblock::decode(&b).map_err(|e| DevError::Open(format!("snapshot superblock: {e}")))?;
        let blocks = sb.num_blocks.min(st.header.origin_blocks);
        let mut bits = vec![0xffu8; blocks.div_ceil(8) as usize];
        for cg in 0..sb.ngroups {
            vol.read_snapshot_locked(st, sb.cg_header_block(cg), &mut b)?;
            let map = &b[CgHeader::block_map_offset(sb.inodes_per_group)..];
            let start = sb.cg_start(cg);
            for bno in sb.cg_data_start(cg)..(start + sb.cg_blocks(cg) as u64).min(blocks) {
                bit_set(&mut bits, bno as usize, bit_get(map, (bno - start) as usize));
            }
        }
        Ok(SnapBitmap { bits, blocks })
    }

    fn in_use(&self, b: u64) -> bool {
        b >= self.blocks || bit_get(&self.bits, b as usize)
    }
}

/// The superblock of the file system on `dev`.
fn read_sb(dev: &dyn BlockDevice) -> VolResult<Superblock> {
    let mut b = vec![0u8; dev.block_size()];
    dev.read_block(0, &mut b)?;
    Ok(Superblock::decode(&b)?)
}

fn gen_of(h: &VolumeHeader) -> u64 {
    (h.created as u64 & 0xffff) << 48
}

/// The store of the snapshot on `inner`, if any: header and map. Opens the file system read-only
/// to query a br store (the first step of §4's start-up).
fn find_store(inner: &Arc<dyn BlockDevice>) -> VolResult<Option<(StoreKind, VolumeHeader, StoreMap)>> {
    let sb = read_sb(inner.as_ref())?;
    let bs = inner.block_size();
    let mut b = vec![0u8; bs];
    if inner.num_blocks() > sb.num_blocks {
        inner.read_block(sb.num_blocks, &mut b)?;
        if let Some(h) = VolumeHeader::decode(&b).filter(|h| h.kind == VOL_STORE_RESERVED) {
            let map = StoreMap::Reserved { start: sb.num_blocks, len: inner.num_blocks() - sb.num_blocks };
            return Ok(Some((StoreKind::Reserved, h, map)));
        }
    }
    let opts = MountOptions { readonly: true, cache_blocks: 1024, ..Default::default() };
    let mut fs = Fs::mount(inner.clone(), opts, Arc::new(SimClock::new()))?;
    let runs = match fs.brquery(BR_STORE.as_bytes(), 0, u64::MAX) {
        Ok(r) => r,
        Err(FsError::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = runs.iter().map(|r| r.len).sum();
    if runs.first().is_none_or(|r| r.offset != 0) || runs.last().is_some_and(|r| r.offset + r.len != len) {
        return Err(VolumeError::Invalid("the br store's reservation has holes".into()));
    }
    inner.read_block(runs[0].start, &mut b)?;
    match VolumeHeader::decode(&b).filter(|h| h.kind == VOL_STORE_BR) {
        Some(h) => Ok(Some((StoreKind::Br, h, StoreMap::Br { runs, len, mru: 0 }))),
        None => Ok(None),
    }
}

impl VolumeDevice {
    /// §4's start-up: finds the snapshot's store (querying the file system read-only), loads its
    /// exception table and activates copy-on-write. None if the volume has no snapshot.
    pub fn open(inner: Arc<dyn BlockDevice>, pool: PoolOptions) -> VolResult<Option<Arc<VolumeDevice>>> {
        let Some((kind, header, map)) = find_store(&inner)? else { return Ok(None) };
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
            inner.read_block(p, &mut buf)?;
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

    /// Takes a snapshot of the (unmounted) volume on `inner` with the given store.
    pub fn create(inner: Arc<dyn BlockDevice>, kind: StoreKind, pool: PoolOptions, now: i64) -> VolResult<()> {
        if let Some((k, _, _)) = find_store(&inner)? {
            return Err(VolumeError::Exists(k));
        }
        let sb = read_sb(inner.as_ref())?;
        let (first, second) = match kind {
            StoreKind::Reserved => {
                if inner.num_blocks() < sb.num_blocks + 2 {
                    return Err(VolumeError::NoReservedArea);
                }
                (sb.num_blocks, sb.num_blocks + 1)
            }
            StoreKind::Br => {
                let mut fs = Fs::mount(inner.clone(), MountOptions::default(), Arc::new(SimClock::new()))?;
                let r = fs.brreserve(BR_STORE.as_bytes(), pool.initial.max(2), None);
                let runs = r.and_then(|_| fs.brquery(BR_STORE.as_bytes(), 0, 2));
                fs.unmount()?;
                let runs = runs?;
                let mut map = StoreMap::Br { len: 2, runs, mru: 0 };
                (map.phys(0).expect("2 blocks"), map.phys(1).expect("2 blocks"))
            }
        };
        let bs = inner.block_size();
        let mut area = vec![0u8; bs];
        vol_area_init(&mut area);
        let mut hdr = vec![0u8; bs];
        let kind_code = if kind == StoreKind::Reserved { VOL_STORE_RESERVED } else { VOL_STORE_BR };
        VolumeHeader { kind: kind_code, invalid: 0, origin_blocks: sb.num_blocks, created: now }.encode(&mut hdr);
        // The empty table first, then the header that makes the snapshot exist.
        inner.write_batch(&[WriteReq { bno: second, data: &area }], WriteKind::Sync)?;
        inner.write_batch(&[WriteReq { bno: first, data: &hdr }], WriteKind::Sync)?;
        Ok(())
    }

    /// Deletes the snapshot of the (unmounted) volume on `inner`: its header goes, and a br
    /// store's reservation is freed.
    pub fn delete(inner: Arc<dyn BlockDevice>) -> VolResult<StoreKind> {
        let Some((kind, _, mut map)) = find_store(&inner)? else { return Err(VolumeError::NoSnapshot) };
        let zero = vec![0u8; inner.block_size()];
        let first = map.phys(0).ok_or(VolumeError::NoSnapshot)?;
        inner.write_batch(&[WriteReq { bno: first, data: &zero }], WriteKind::Sync)?;
        if kind == StoreKind::Br {
            let mut fs = Fs::mount(inner.clone(), MountOptions::default(), Arc::new(SimClock::new()))?;
            let r = fs.brfree(BR_STORE.as_bytes());
            fs.unmount()?;
            r?;
        }
        Ok(kind)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
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

    /// Blocks of the origin the snapshot covers.
    pub fn origin_blocks(&self) -> u64 {
        self.lock().header.origin_blocks
    }

    /// Store blocks not yet used.
    fn available(&self, st: &State) -> u64 {
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

    /// Copies the old contents of `blocks` into the store and commits their exceptions.
    fn cow(&self, st: &mut State, blocks: &[u64]) -> DevResult<()> {
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
            self.inner.read_block(b, &mut old[k * bs..(k + 1) * bs])?;
            let p = st.map.phys(d).expect("allocated inside the store");
            targets.push((b, d, p));
        }
        let mut data: Vec<WriteReq> =
            targets.iter().enumerate().map(|(k, t)| WriteReq { bno: t.2, data: &old[k * bs..(k + 1) * bs] }).collect();
        data.sort_by_key(|r| r.bno);
        self.inner.write_batch(&data, WriteKind::Sync)?;
        let mut meta = Vec::new();
        for (a, buf) in &areas {
            meta.push((st.map.phys(*a).expect("area inside the store"), buf));
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
        self.inner.write_batch(&[WriteReq { bno: p, data: &hdr }], WriteKind::Sync)?;
        log::error!(
            "volume snapshot invalidated: the {} exception store is full ({} blocks, {} exceptions)",
            self.kind,
            st.map.len(),
            st.exceptions.len()
        );
        Ok(())
    }

    fn read_snapshot_locked(&self, st: &mut State, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        match st.exceptions.get(&bno) {
            Some(&i) => self.inner.read_block(st.map.phys(i).expect("exception inside the store"), buf),
            None => self.inner.read_block(bno, buf),
        }
    }

    /// Reads block `bno` of the volume as it was at snapshot time.
    pub fn read_snapshot(&self, bno: u64, buf: &mut [u8]) -> VolResult<()> {
        let mut st = self.lock();
        if st.header.invalid != 0 {
            drop(st);
            return Err(VolumeError::Invalid(self.invalid_reason().unwrap_or_default()));
        }
        Ok(self.read_snapshot_locked(&mut st, bno, buf)?)
    }

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
        let r = lock(fs).brexpand(name, grow, Some(hint));
        match r {
            Ok(_) => {}
            Err(FsError::NoSpace) => {
                log::warn!("volume snapshot: the file system is full; the br store cannot grow");
                return Ok(0);
            }
            Err(e) => return Err(e.into()),
        }
        let runs = lock(fs).brquery(name, old_len, grow)?;
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

    /// True if origin block `b` was in use at snapshot time (or if that is not known).
    pub fn in_use_at_snapshot(&self, b: u64) -> bool {
        self.lock().in_use_at_snapshot(b)
    }

    /// True if `export` writes origin block `b`: in use at snapshot time and not the store's.
    fn exported(&self, b: u64) -> bool {
        let st = self.lock();
        st.in_use_at_snapshot(b) && !st.map.holds(b)
    }

    /// Copy on write chunks that were free at snapshot time too, as dm-snap does (it cannot
    /// tell); by default they are not copied, since no file of the snapshot refers to them.
    pub fn set_copy_free(&self, on: bool) {
        self.copy_free.store(on, AtOrd::Relaxed);
    }
}

impl State {
    /// True if origin block `b` was in use at snapshot time (or if that is not known).
    fn in_use_at_snapshot(&self, b: u64) -> bool {
        self.snap_used.as_ref().is_none_or(|m| m.in_use(b))
    }
}

impl BlockDevice for VolumeDevice {
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
        {
            let mut st = self.lock();
            if st.header.invalid == 0 {
                let copy_free = self.copy_free.load(AtOrd::Relaxed);
                let mut todo: Vec<u64> = reqs
                    .iter()
                    .map(|r| r.bno)
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

/// The volume as it was at snapshot time, read-only (what `export` writes and a snapshot mount
/// reads).
pub struct SnapshotDevice(pub Arc<VolumeDevice>);

impl BlockDevice for SnapshotDevice {
    fn block_size(&self) -> usize {
        self.0.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.0.origin_blocks()
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        self.0.read_snapshot(bno, buf).map_err(|e| DevError::Open(e.to_string()))
    }
    fn write_batch(&self, reqs: &[WriteReq], _kind: WriteKind) -> DevResult<()> {
        Err(DevError::Io {
            bno: reqs.first().map_or(0, |r| r.bno),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "a volume snapshot is read-only"),
        })
    }
    fn stats(&self) -> DevStats {
        self.0.stats_dev()
    }
}

impl VolumeDevice {
    fn stats_dev(&self) -> DevStats {
        self.inner.stats()
    }
}

/// Writes the volume as it was at snapshot time to a new image file `out` (sparse: blocks of
/// zeros are skipped, and so are blocks free at snapshot time, whose contents may have changed
/// since, as they were not copied, and a br store's own blocks: the exported file system keeps
/// the reservation, empty, and so no snapshot). Returns the blocks written.
pub fn export(vol: &Arc<VolumeDevice>, out: &Path) -> VolResult<u64> {
    let read = |b, buf: &mut [u8]| vol.read_snapshot(b, buf);
    crate::dev::write_sparse_image(out, vol.origin_blocks(), vol.block_size(), read, |b| vol.exported(b))
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

/// The first `blocks` blocks of a device: where mkfs makes the file system when the rest is the
/// reserved area of a `reserved` store.
pub struct PrefixDevice {
    pub inner: Arc<dyn BlockDevice>,
    pub blocks: u64,
}

impl BlockDevice for PrefixDevice {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.blocks.min(self.inner.num_blocks())
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        if bno >= self.num_blocks() {
            return Err(DevError::OutOfRange { bno, nblocks: self.num_blocks() });
        }
        self.inner.read_block(bno, buf)
    }
    fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        let last = bno + (buf.len() / self.block_size()).saturating_sub(1) as u64;
        if last >= self.num_blocks() {
            return Err(DevError::OutOfRange { bno: last, nblocks: self.num_blocks() });
        }
        self.inner.read_run(bno, buf)
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        if let Some(r) = reqs.iter().find(|r| r.bno >= self.num_blocks()) {
            return Err(DevError::OutOfRange { bno: r.bno, nblocks: self.num_blocks() });
        }
        self.inner.write_batch(reqs, kind)
    }
    fn stats(&self) -> DevStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions};
    use std::collections::BTreeMap;

    const N: u64 = 32768;

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 / 7) % 251) as u8).collect()
    }

    /// Every file and directory under the root but /.br, with the files' bytes.
    fn tree(fs: &mut Fs) -> BTreeMap<String, Option<Vec<u8>>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(ROOT_INO, String::new())];
        while let Some((dir, path)) = stack.pop() {
            for e in fs.readdir(dir, 0, usize::MAX).unwrap() {
                if e.name == b"." || e.name == b".." || (dir == ROOT_INO && e.name == crate::br::BR_DIR) {
                    continue;
                }
                let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                let d = fs.getattr(e.ino).unwrap();
                if d.is_dir() {
                    stack.push((e.ino, p.clone()));
                    out.insert(p, None);
                } else {
                    out.insert(p, Some(fs.read(e.ino, 0, d.size as usize).unwrap()));
                }
            }
        }
        out
    }

    fn mount(dev: Arc<dyn BlockDevice>) -> Fs {
        let opts = MountOptions { cache_blocks: 256, ..Default::default() };
        Fs::mount(dev, opts, Arc::new(SimClock::new())).unwrap()
    }

    fn volume(kind: StoreKind, fs_blocks: u64) -> Arc<MemDevice> {
        let dev = Arc::new(MemDevice::new(4096, N));
        let prefix = Arc::new(PrefixDevice { inner: dev.clone(), blocks: fs_blocks });
        mkfs(prefix, &MkfsOptions { zeroed: true, ..Default::default() }, (1, 0)).unwrap();
        let mut fs = mount(dev.clone());
        fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        for i in 0..40u64 {
            let (ino, _) = fs
                .create(if i % 2 == 0 { ROOT_INO } else { LOST_FOUND_INO }, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.write(ino, 0, &pattern(i, 3000 + i as usize * 2500)).unwrap();
        }
        fs.unmount().unwrap();
        let _ = kind;
        dev
    }

    #[test]
    fn snapshot_survives_heavy_writes_deletes_and_restart() {
        let cases = [StoreKind::Reserved, StoreKind::Br].into_iter().flat_map(|k| [(k, false), (k, true)]);
        for (kind, copy_free) in cases {
            let fs_blocks = if kind == StoreKind::Reserved { N - 4096 } else { N };
            let dev = volume(kind, fs_blocks);
            let pool = PoolOptions { initial: 512, low_watermark: 400, grow: 1024 };
            let inner: Arc<dyn BlockDevice> = dev.clone();
            VolumeDevice::create(inner.clone(), kind, pool, 77).unwrap();
            assert!(matches!(VolumeDevice::create(inner.clone(), kind, pool, 78), Err(VolumeError::Exists(_))));
            let before = tree(&mut mount(inner.clone()));
            // Mount on the volume (§4: the store is found read-only first) and change a lot.
            let vol = VolumeDevice::open(inner.clone(), pool).unwrap().expect("a snapshot");
            vol.set_copy_free(copy_free);
            let shared: SharedFs = Arc::new(Mutex::new(mount(vol.clone())));
            let mut refiller = (kind == StoreKind::Br).then(|| Refiller::start(vol.clone(), shared.clone()));
            for round in 0..6u64 {
                let mut fs = lock(&shared);
                for i in (round..40).step_by(3) {
                    let dir = if i % 2 == 0 { ROOT_INO } else { LOST_FOUND_INO };
                    match fs.lookup(dir, format!("f{i}").as_bytes()) {
                        Ok((ino, _)) if round % 2 == 0 => {
                            fs.write(ino, 1000, &pattern(i + 100 * round, 20000)).unwrap();
                        }
                        Ok(_) => fs.unlink(dir, format!("f{i}").as_bytes()).unwrap(),
                        Err(_) => {
                            let (ino, _) = fs.create(dir, format!("f{i}").as_bytes(), 0o600, 0, 0).unwrap();
                            fs.write(ino, 0, &pattern(i * 7, 50000)).unwrap();
                        }
                    }
                }
                fs.sync_all().unwrap();
                drop(fs);
                // Give the refiller its turn, as time would.
                for _ in 0..200 {
                    if !vol.needs_refill() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            if let Some(r) = refiller.as_mut() {
                r.stop();
            }
            lock(&shared).unmount().unwrap();
            let st = vol.volume_stats();
            assert!(st.valid && st.exceptions > 256, "{kind}: more than one exception area: {st:?}");
            if kind == StoreKind::Br {
                assert!(st.refills > 0, "the br store grew: {st:?}");
            }
            assert_eq!(st.skipped_free == 0, copy_free, "{kind}: new files' blocks copied only if told: {st:?}");
            drop(shared);
            drop(refiller);
            drop(vol);
            // Restart: the table is read back; the export is the volume at snapshot time.
            let vol = VolumeDevice::open(inner.clone(), pool).unwrap().expect("the snapshot survives");
            assert_eq!(vol.volume_stats().exceptions, st.exceptions);
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("export.img");
            export(&vol, &out).unwrap();
            let img: Arc<dyn BlockDevice> = Arc::new(crate::dev::FileDevice::open(&out, 4096, false).unwrap());
            let report = crate::fsck::check(img.as_ref()).unwrap();
            assert!(report.is_clean(), "{kind}: {:?}", report.findings);
            let ro = MountOptions { readonly: true, ..Default::default() };
            let snap = tree(
                &mut Fs::mount(Arc::new(SnapshotDevice(vol.clone())), ro.clone(), Arc::new(SimClock::new())).unwrap(),
            );
            assert_eq!(snap, before, "{kind}: the snapshot mount shows the files of snapshot time");
            let exported = tree(&mut Fs::mount(img, ro, Arc::new(SimClock::new())).unwrap());
            assert_eq!(exported, before, "{kind}: the export holds the files of snapshot time");
            // The origin moved on and is consistent.
            let now = tree(&mut mount(inner.clone()));
            assert_ne!(now, before);
            assert!(crate::fsck::check(&PrefixDevice { inner: inner.clone(), blocks: fs_blocks }).unwrap().is_clean());
            drop(vol);
            assert_eq!(VolumeDevice::delete(inner.clone()).unwrap(), kind);
            assert!(VolumeDevice::open(inner.clone(), pool).unwrap().is_none());
        }
    }

    /// A digest of each block of the first `n` blocks of `dev`.
    fn digests(dev: &dyn BlockDevice, n: u64) -> Vec<u64> {
        let mut b = vec![0u8; dev.block_size()];
        (0..n)
            .map(|bno| {
                dev.read_block(bno, &mut b).unwrap();
                b.iter().fold(0xcbf29ce484222325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100000001b3))
            })
            .collect()
    }

    #[test]
    fn chunks_free_at_snapshot_time_are_not_copied_and_the_export_is_exact() {
        for kind in [StoreKind::Reserved, StoreKind::Br] {
            let fs_blocks = if kind == StoreKind::Reserved { N - 4096 } else { N };
            let dev = volume(kind, fs_blocks);
            let inner: Arc<dyn BlockDevice> = dev.clone();
            let pool = PoolOptions { initial: 512, low_watermark: 400, grow: 1024 };
            VolumeDevice::create(inner.clone(), kind, pool, 5).unwrap();
            let mut fs = mount(inner.clone());
            let free_then = fs.statfs().bfree;
            fs.unmount().unwrap();
            let then = digests(inner.as_ref(), fs_blocks);
            let vol = VolumeDevice::open(inner.clone(), pool).unwrap().expect("a snapshot");
            // The snapshot's own bitmaps agree with the file system's count of free blocks.
            let free_bits = (0..fs_blocks).filter(|&b| !vol.in_use_at_snapshot(b)).count() as u64;
            assert_eq!(free_bits, free_then, "{kind}");
            let mut fs = mount(vol.clone());
            let (ino, _) = fs.create(ROOT_INO, b"new", 0o644, 0, 0).unwrap();
            fs.write(ino, 0, &pattern(9, 300_000)).unwrap();
            let (f4, d4) = fs.lookup(ROOT_INO, b"f4").unwrap();
            fs.write(f4, 0, &pattern(10, d4.size as usize)).unwrap();
            fs.unlink(ROOT_INO, b"f6").unwrap();
            fs.unmount().unwrap();
            let now = digests(inner.as_ref(), fs_blocks);
            {
                let st = vol.lock();
                assert!(st.exceptions.keys().all(|&b| st.in_use_at_snapshot(b)), "{kind}: only in-use chunks copied");
            }
            let rewritten_free =
                (0..fs_blocks).filter(|&b| !vol.in_use_at_snapshot(b) && now[b as usize] != then[b as usize]);
            assert!(rewritten_free.count() >= 73, "{kind}: the new file went to free blocks");
            assert!(vol.volume_stats().skipped_free >= 73);
            // The export: every block in use at snapshot time as it was, every free one zero.
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("export.img");
            export(&vol, &out).unwrap();
            let img = crate::dev::FileDevice::open(&out, 4096, false).unwrap();
            let exported = digests(&img, fs_blocks);
            let zero = digests(&MemDevice::new(4096, 1), 1)[0];
            for b in 0..fs_blocks {
                let store = vol.lock().map.holds(b);
                let want = if vol.in_use_at_snapshot(b) && !store { then[b as usize] } else { zero };
                assert_eq!(exported[b as usize], want, "{kind}: block {b} of the export");
            }
            assert!(crate::fsck::check(&img).unwrap().is_clean());
            let img: Arc<dyn BlockDevice> = Arc::new(img);
            assert!(VolumeDevice::open(img, pool).unwrap().is_none(), "{kind}: the export has no snapshot of its own");
        }
    }

    #[test]
    fn a_full_reserved_store_invalidates_the_snapshot() {
        let dev = volume(StoreKind::Reserved, N - 40);
        let inner: Arc<dyn BlockDevice> = dev.clone();
        VolumeDevice::create(inner.clone(), StoreKind::Reserved, PoolOptions::default(), 1).unwrap();
        assert!(matches!(
            VolumeDevice::create(inner.clone(), StoreKind::Br, PoolOptions::default(), 1),
            Err(VolumeError::Exists(StoreKind::Reserved))
        ));
        let vol = VolumeDevice::open(inner.clone(), PoolOptions::default()).unwrap().unwrap();
        let mut fs = mount(vol.clone());
        // A new file goes to blocks free at snapshot time: nothing to copy.
        let (ino, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
        fs.write(ino, 0, &pattern(1, 400_000)).unwrap();
        fs.sync_all().unwrap();
        assert!(vol.invalid_reason().is_none() && vol.volume_stats().skipped_free >= 98);
        // Overwriting the files of snapshot time fills the 40 blocks.
        for i in (0..40u64).step_by(2) {
            let (ino, d) = fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
            fs.write(ino, 0, &pattern(i + 1, d.size as usize)).unwrap();
        }
        fs.unmount().unwrap();
        let reason = vol.invalid_reason().expect("invalidated");
        assert!(reason.contains("filled up"), "{reason}");
        let mut b = vec![0u8; 4096];
        assert!(matches!(vol.read_snapshot(0, &mut b), Err(VolumeError::Invalid(_))));
        // It stays invalid after a restart, and the file system is intact.
        let vol = VolumeDevice::open(inner.clone(), PoolOptions::default()).unwrap().unwrap();
        assert!(vol.invalid_reason().is_some());
        assert!(crate::fsck::check(&PrefixDevice { inner, blocks: N - 40 }).unwrap().is_clean());
    }
}
