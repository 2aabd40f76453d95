//! Block devices (DESIGN.md "Layers"). A device takes reads of one block and writes in batches;
//! a batch is complete only when it is durable (`FileDevice` calls `fdatasync` before it returns),
//! which is the point where soft-updates dependencies may be satisfied. Every device counts its
//! reads and writes, split into synchronous (a caller waited for them) and asynchronous (delayed
//! writes pushed out by the cache or the syncer), and the size of each batch.

use std::fs::{File, OpenOptions};
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::Clock;

use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum DevError {
    #[error("I/O error on block {bno}: {source}")]
    Io { bno: u64, source: std::io::Error },
    #[error("block {bno} is beyond the end of the device ({nblocks} blocks)")]
    OutOfRange { bno: u64, nblocks: u64 },
    #[error("{0}")]
    Open(String),
    /// The device opened but holds no file system sufs reads (`FileDevice::open_image`).
    #[error("{0}")]
    NotAFileSystem(String),
    /// The file system was shut down: nothing more is written.
    #[error("the file system was shut down")]
    ShutDown,
}

pub type DevResult<T> = Result<T, DevError>;

/// Whether a caller waits for a write (FFS's bwrite) or not (bawrite/bdwrite pushed later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Sync,
    Async,
}

/// One block write in a batch.
pub struct WriteReq<'a> {
    pub bno: u64,
    pub data: &'a [u8],
}

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct DevStats {
    pub reads: u64,
    pub sync_writes: u64,
    pub async_writes: u64,
    pub batches: u64,
    /// Write requests: each batch's runs of blocks that follow each other on the device, each
    /// one request (one `pwritev` on an image; a run longer than `IOV_MAX` blocks takes more).
    pub write_requests: u64,
    pub flushes: u64,
    /// Largest batch seen, in blocks.
    pub max_batch: u64,
    /// Nanoseconds spent in batches' writes, their flushes included, and in the flushes alone
    /// (an image file's `fdatasync`): how busy the device kept its writers.
    pub write_ns: u64,
    pub flush_ns: u64,
    /// Nanoseconds with at least one batch being written: the device's busy time, as a block
    /// device's `io_ticks` (batches written side by side count once).
    pub busy_ns: u64,
}

impl DevStats {
    pub fn writes(&self) -> u64 {
        self.sync_writes + self.async_writes
    }
}

/// The most blocks one write request carries: Linux's `IOV_MAX`, the most buffers `pwritev`
/// takes.
const MAX_RUN: usize = 1024;

/// Hands `f` a batch's writes in address order, cut into runs of writes that follow each other
/// byte for byte on a device whose addresses are `unit` bytes apart (at most `MAX_RUN` each):
/// the requests of a device that merges neighbours. A write of `len` bytes at `bno` is followed
/// by one at `bno + len / unit`: the next block when blocks are the unit, the next fragment run
/// on a UFS2 image, where writes of fewer bytes than a block carry a file's last fragments.
/// Returns how many runs there were.
pub fn write_runs<E>(
    reqs: &[WriteReq],
    unit: usize,
    mut f: impl FnMut(&[&WriteReq]) -> Result<(), E>,
) -> Result<usize, E> {
    let mut order: Vec<&WriteReq> = reqs.iter().collect();
    order.sort_by_key(|r| r.bno);
    let follows = |a: &WriteReq, b: &WriteReq| {
        b.bno.checked_sub(a.bno).and_then(|d| d.checked_mul(unit as u64)) == Some(a.data.len() as u64)
    };
    let mut n = 0;
    for run in order.chunk_by(|a, b| follows(a, b)) {
        for part in run.chunks(MAX_RUN) {
            f(part)?;
            n += 1;
        }
    }
    Ok(n)
}

/// How many requests `write_runs` would make of a batch.
pub fn count_runs(reqs: &[WriteReq], unit: usize) -> usize {
    let Ok(n) = write_runs(reqs, unit, |_| Ok::<(), std::convert::Infallible>(()));
    n
}

/// An error if a write of `len` bytes at `bno`, on a device of `nblocks` addresses `unit` bytes
/// apart, starts or ends past the device's end.
pub fn check_write(bno: u64, len: usize, unit: usize, nblocks: u64) -> DevResult<()> {
    check_range(bno, nblocks)?;
    check_range(bno + (len.div_ceil(unit) as u64).saturating_sub(1), nblocks)
}

/// The units a write covers on a device kept in units of `unit` bytes (a block, or a UFS2
/// image's fragment), with their bytes: a write of `k` units changes those `k` and no other.
pub fn write_units(bno: u64, data: &[u8], unit: usize) -> impl Iterator<Item = (u64, &[u8])> {
    assert!(data.len().is_multiple_of(unit), "a write of {} bytes at {bno} in units of {unit}", data.len());
    data.chunks(unit).enumerate().map(move |(i, c)| (bno + i as u64, c))
}

/// Fills `buf` (a block, a whole number of units) with the units from `bno` on of a device kept
/// in units of `unit` bytes: `unit_at(a)` is unit `a`'s bytes, `None` for zeros (a unit never
/// written, or one past the device's end: a block there reads as zeros past it).
pub fn read_units<'a>(bno: u64, buf: &mut [u8], unit: usize, mut unit_at: impl FnMut(u64) -> Option<&'a [u8]>) {
    for (i, part) in buf.chunks_mut(unit).enumerate() {
        match unit_at(bno + i as u64) {
            Some(u) => part.copy_from_slice(u),
            None => part.fill(0),
        }
    }
}

/// Counters shared by all devices.
#[derive(Debug, Default)]
pub struct Counters {
    reads: AtomicU64,
    sync_writes: AtomicU64,
    async_writes: AtomicU64,
    batches: AtomicU64,
    write_requests: AtomicU64,
    flushes: AtomicU64,
    max_batch: AtomicU64,
    write_ns: AtomicU64,
    flush_ns: AtomicU64,
    busy_ns: AtomicU64,
    /// Batches being written now, and since when one has been.
    busy: Mutex<(usize, Option<std::time::Instant>)>,
}

/// A batch being written, counted in `Counters::busy` while it lives.
pub struct Busy<'a>(&'a Counters);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut b = self.0.busy.lock().unwrap_or_else(|p| p.into_inner());
        assert!(b.0 > 0, "a batch ends that began");
        b.0 -= 1;
        if b.0 == 0 {
            let since = b.1.take().expect("busy since the first batch began");
            let ns = since.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.0.busy_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }
}

impl Counters {
    pub fn read(&self) {
        self.reads(1);
    }
    pub fn reads(&self, blocks: u64) {
        self.reads.fetch_add(blocks, Ordering::Relaxed);
    }
    /// A batch of `n` blocks written in `requests` requests.
    pub fn batch(&self, n: usize, requests: usize, kind: WriteKind) {
        let c = match kind {
            WriteKind::Sync => &self.sync_writes,
            WriteKind::Async => &self.async_writes,
        };
        c.fetch_add(n as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.write_requests.fetch_add(requests as u64, Ordering::Relaxed);
        self.max_batch.fetch_max(n as u64, Ordering::Relaxed);
    }
    pub fn flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    /// A batch begins: the device is busy until every batch begun has ended (the guard dropped).
    pub fn busy(&self) -> Busy<'_> {
        let mut b = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        b.0 += 1;
        b.1.get_or_insert_with(std::time::Instant::now);
        Busy(self)
    }
    /// Time spent writing one batch (`write`, flush included) and flushing it (`flush`).
    pub fn timed(&self, write: std::time::Duration, flush: std::time::Duration) {
        debug_assert!(flush <= write, "a batch's flush is part of its write");
        let ns = |d: std::time::Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        self.write_ns.fetch_add(ns(write), Ordering::Relaxed);
        self.flush_ns.fetch_add(ns(flush), Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> DevStats {
        DevStats {
            reads: self.reads.load(Ordering::Relaxed),
            sync_writes: self.sync_writes.load(Ordering::Relaxed),
            async_writes: self.async_writes.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            write_requests: self.write_requests.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            max_batch: self.max_batch.load(Ordering::Relaxed),
            write_ns: self.write_ns.load(Ordering::Relaxed),
            flush_ns: self.flush_ns.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
        }
    }
}

pub trait BlockDevice: Send + Sync {
    fn block_size(&self) -> usize;
    /// Bytes between consecutive block numbers: the block size, or a UFS2 image's fragment.
    fn addr_unit(&self) -> usize {
        self.block_size()
    }
    fn num_blocks(&self) -> u64;
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()>;
    /// Reads the `buf.len() / block_size` blocks from `bno` on, in one request where the device
    /// can (the default reads them one by one).
    fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        for (i, b) in buf.chunks_mut(self.block_size()).enumerate() {
            self.read_block(bno + i as u64, b)?;
        }
        Ok(())
    }
    /// Writes a batch; returns once every write in it is durable. Writes within a batch may reach
    /// the medium in any order; batches are ordered (a batch is a barrier).
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()>;
    fn stats(&self) -> DevStats;
    /// Tells the device that the addresses of `runs` (first address, count: blocks, or
    /// fragments on a device addressed in fragments) hold nothing of use
    /// (FITRIM): an image file has holes punched there, a block device discards them, and
    /// either may read back as zeros. False where the device cannot (the default: a volume
    /// snapshot's device, whose copy-on-write a discard would bypass, and the test devices).
    fn discard(&self, _runs: &[(u64, u64)]) -> DevResult<bool> {
        Ok(false)
    }
}

/// Writes `n` blocks of `bs` bytes, as `read` gives them, to a new sparse image file `out`: blocks
/// of zeros are skipped, and so are those `keep` refuses. Returns the blocks written.
pub fn write_sparse_image<E: From<DevError>>(
    out: &Path,
    n: u64,
    bs: usize,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    keep: impl Fn(u64) -> bool,
) -> Result<u64, E> {
    let file = crate::files::open_private(out, crate::files::Existing::Refuse)
        .map_err(|e| DevError::Open(format!("cannot create {e}")))?;
    file.set_len(n * bs as u64).map_err(|e| DevError::Open(format!("cannot size {}: {e}", out.display())))?;
    let dst = FileDevice::from_file(file, bs, out)?;
    let mut buf = vec![0u8; bs * 256];
    let mut written = 0;
    let mut b = 0;
    while b < n {
        let k = (n - b).min(256) as usize;
        for j in 0..k {
            read(b + j as u64, &mut buf[j * bs..(j + 1) * bs])?;
        }
        let reqs: Vec<WriteReq> = (0..k)
            .map(|j| WriteReq { bno: b + j as u64, data: &buf[j * bs..(j + 1) * bs] })
            .filter(|r| r.data.iter().any(|&x| x != 0) && keep(r.bno))
            .collect();
        written += reqs.len() as u64;
        if !reqs.is_empty() {
            dst.write_batch(&reqs, WriteKind::Async)?;
        }
        b += k as u64;
    }
    Ok(written)
}

/// Fills `buf` from byte `off` of `dev` (whose blocks start every `addr_unit` bytes):
/// `UnexpectedEof` if the range runs past the device's end. For reading a superblock wherever
/// its format puts it (`Superblock::probe`).
pub fn read_bytes(dev: &dyn BlockDevice, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let (bs, unit) = (dev.block_size() as u64, dev.addr_unit() as u64);
    if off + buf.len() as u64 > dev.num_blocks() * unit {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let mut block = vec![0u8; bs as usize];
    let mut done = 0;
    while done < buf.len() {
        let at = off + done as u64;
        dev.read_block(at / unit, &mut block).map_err(std::io::Error::other)?;
        let skip = (at % unit) as usize;
        let n = (bs as usize - skip).min(buf.len() - done);
        buf[done..done + n].copy_from_slice(&block[skip..skip + n]);
        done += n;
    }
    Ok(())
}

/// Writes `data` at byte `off` of `dev` (whose blocks start every `addr_unit` bytes) in one
/// batch of whole units: a unit the range covers only in part is read and patched first. For
/// writing a superblock or a summary area wherever its format puts it.
pub fn write_bytes(dev: &dyn BlockDevice, off: u64, data: &[u8], kind: WriteKind) -> DevResult<()> {
    let (bs, unit) = (dev.block_size() as u64, dev.addr_unit() as u64);
    let end = off + data.len() as u64;
    let mut bufs: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut bno = off / unit;
    while bno * unit < end {
        let (lo, hi) = (bno * unit, (bno * unit + bs).min(end.div_ceil(unit) * unit));
        let mut block = vec![0u8; bs as usize];
        if off > lo || end < hi {
            dev.read_block(bno, &mut block)?;
        }
        let (s, e) = (off.max(lo), end.min(hi));
        block[(s - lo) as usize..(e - lo) as usize].copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
        block.truncate((hi - lo) as usize);
        bufs.push((bno, block));
        bno = hi / unit;
    }
    let reqs: Vec<WriteReq> = bufs.iter().map(|(bno, data)| WriteReq { bno: *bno, data }).collect();
    dev.write_batch(&reqs, kind)
}

/// An error if block `bno` is past the end of a device of `nblocks` blocks.
pub fn check_range(bno: u64, nblocks: u64) -> DevResult<()> {
    if bno >= nblocks {
        Err(DevError::OutOfRange { bno, nblocks })
    } else {
        Ok(())
    }
}

/// An image file or a block device.
pub struct FileDevice {
    file: File,
    bs: usize,
    /// Bytes between block numbers: `bs`, or a UFS2 image's fragment (`open_frags`), where a
    /// block of `bs` bytes starts at any fragment.
    unit: usize,
    /// Addresses on the device: its size over `unit`.
    nblocks: u64,
    /// The device's size in bytes.
    size: u64,
    durable: bool,
    counters: Counters,
}

impl FileDevice {
    /// Opens an existing image or block device. The block count is its size over `bs`.
    pub fn open(path: &Path, bs: usize, writable: bool) -> DevResult<FileDevice> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| DevError::Open(format!("cannot open {}: {e}", path.display())))?;
        FileDevice::from_file(file, bs, path)
    }

    /// A device over a file already open (`path` names it in messages).
    fn from_file(file: File, bs: usize, path: &Path) -> DevResult<FileDevice> {
        let size = device_size(&file).map_err(|e| DevError::Open(format!("cannot size {}: {e}", path.display())))?;
        Ok(FileDevice {
            file,
            bs,
            unit: bs,
            nblocks: size / bs as u64,
            size,
            durable: true,
            counters: Counters::default(),
        })
    }

    /// Opens an image as its superblock says (`Superblock::probe`), its blocks addressed in
    /// fragments.
    pub fn open_image(path: &Path, writable: bool) -> DevResult<(FileDevice, crate::format::Superblock)> {
        let probe = FileDevice::open(path, crate::format::MIN_BLOCK_SIZE as usize, false)?;
        if probe.num_blocks() == 0 {
            return Err(DevError::NotAFileSystem(format!("{}: too small to hold a file system", path.display())));
        }
        let sb = crate::format::Superblock::probe(|off, buf| read_bytes(&probe, off, buf))
            .map_err(|e| DevError::NotAFileSystem(format!("{}: {e}", path.display())))?;
        let dev = FileDevice::open_frags(path, sb.block_size as usize, sb.addr_unit() as usize, writable)?;
        Ok((dev, sb))
    }

    /// Opens a UFS2 image whose blocks of `bs` bytes are addressed in fragments of `unit`
    /// bytes (`Superblock::addr_unit`): block number `b` is the `bs` bytes from byte
    /// `b * unit`. A block that runs past the end of the device (a tail fragment in the last
    /// group) reads as zeros past it.
    pub fn open_frags(path: &Path, bs: usize, unit: usize, writable: bool) -> DevResult<FileDevice> {
        assert!(unit > 0 && unit <= bs && bs.is_multiple_of(unit), "fragment of {unit} bytes, block of {bs}");
        let mut d = FileDevice::open(path, bs, writable)?;
        d.unit = unit;
        d.nblocks = d.size / unit as u64;
        Ok(d)
    }

    /// Reads the block at `bno` when blocks and addresses differ in size: what the device
    /// holds, zeros past its end.
    fn read_frag_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        let off = bno * self.unit as u64;
        let have = self.size.saturating_sub(off).min(buf.len() as u64) as usize;
        buf[have..].fill(0);
        self.file.read_exact_at(&mut buf[..have], off).map_err(|source| DevError::Io { bno, source })
    }
    /// Creates (or extends) a sparse image file of `size` bytes. A new image is made 0600 (it
    /// holds every file's bytes); an existing one must be the caller's (`files::open_private`).
    pub fn create(path: &Path, size: u64) -> DevResult<()> {
        let f = crate::files::open_private(path, crate::files::Existing::Image)
            .map_err(|e| DevError::Open(format!("cannot create {e}")))?;
        let meta = f.metadata().map_err(|e| DevError::Open(e.to_string()))?;
        if meta.is_file() && meta.len() < size {
            f.set_len(size).map_err(|e| DevError::Open(format!("cannot size {}: {e}", path.display())))?;
        }
        Ok(())
    }

    /// Turns off `fdatasync` after each batch: for throw-away images in tests and experiments,
    /// where durability across power loss is not being measured.
    pub fn set_durable(&mut self, durable: bool) {
        self.durable = durable;
    }
}

/// Writes `slices` one after the other from byte `off` of `file`, in one `pwritev` where the
/// kernel takes them all (std's `write_vectored_at` is not stable yet).
fn write_all_vectored_at(file: &File, slices: &mut [IoSlice], mut off: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut rest = slices;
    while !rest.is_empty() {
        let n = rest.len().min(MAX_RUN) as libc::c_int;
        // SAFETY: `IoSlice` has `iovec`'s layout on Unix, and the `n` slices outlive the call.
        let r = unsafe { libc::pwritev(file.as_raw_fd(), rest.as_ptr().cast::<libc::iovec>(), n, off as libc::off_t) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        off += r as u64;
        IoSlice::advance_slices(&mut rest, r as usize);
    }
    Ok(())
}

/// Size in bytes of a regular file or a block device.
pub fn device_size(file: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::End(0))
}

impl BlockDevice for FileDevice {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn addr_unit(&self) -> usize {
        self.unit
    }
    fn num_blocks(&self) -> u64 {
        self.nblocks
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        check_range(bno, self.nblocks)?;
        self.counters.read();
        if self.unit != self.bs {
            return self.read_frag_block(bno, buf);
        }
        self.file.read_exact_at(buf, bno * self.bs as u64).map_err(|source| DevError::Io { bno, source })
    }
    fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        let n = (buf.len() / self.bs) as u64;
        check_range(bno, self.nblocks)?;
        check_range(bno + n.saturating_sub(1), self.nblocks)?;
        if self.unit != self.bs {
            // Block numbers that follow each other are fragments, not blocks, apart.
            for (i, b) in buf.chunks_mut(self.bs).enumerate() {
                self.read_block(bno + i as u64, b)?;
            }
            return Ok(());
        }
        self.counters.reads(n);
        self.file.read_exact_at(buf, bno * self.bs as u64).map_err(|source| DevError::Io { bno, source })
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        for r in reqs {
            check_write(r.bno, r.data.len(), self.unit, self.nblocks)?;
        }
        let _busy = self.counters.busy();
        let start = std::time::Instant::now();
        // Each write goes at its own bytes (a fragment run changes only its fragments), and
        // writes that follow each other byte for byte go in one `pwritev`.
        let runs = write_runs(reqs, self.unit, |run| {
            let mut slices: Vec<IoSlice> = run.iter().map(|r| IoSlice::new(r.data)).collect();
            write_all_vectored_at(&self.file, &mut slices, run[0].bno * self.unit as u64)
                .map_err(|source| DevError::Io { bno: run[0].bno, source })
        })?;
        let mut flush = std::time::Duration::ZERO;
        if self.durable {
            self.counters.flush();
            let t = std::time::Instant::now();
            self.file.sync_data().map_err(|source| DevError::Io { bno: reqs[0].bno, source })?;
            flush = t.elapsed();
        }
        self.counters.batch(reqs.len(), runs, kind);
        self.counters.timed(start.elapsed(), flush);
        Ok(())
    }
    fn stats(&self) -> DevStats {
        self.counters.snapshot()
    }
    /// Holes punched in an image file (`fallocate(PUNCH_HOLE | KEEP_SIZE)`, which gives the
    /// space back to the host's file system), BLKDISCARD on a block device. False if the first
    /// run is refused as unsupported (an image on a file system without holes, a device
    /// without discard).
    fn discard(&self, runs: &[(u64, u64)]) -> DevResult<bool> {
        use std::os::fd::AsRawFd;
        let is_file = self.file.metadata().map_err(|source| DevError::Io { bno: 0, source })?.is_file();
        for (i, &(bno, n)) in runs.iter().enumerate() {
            check_range(bno, self.nblocks)?;
            check_range(bno + n.saturating_sub(1), self.nblocks)?;
            let (off, len) = (bno * self.unit as u64, n * self.unit as u64);
            let r = if is_file {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                // SAFETY: a plain system call on an open descriptor.
                unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) }
            } else {
                const BLKDISCARD: libc::c_ulong = 0x1277; // _IO(0x12, 119)
                let range = [off, len];
                // SAFETY: BLKDISCARD reads two u64s, which `range` holds for the call.
                unsafe { libc::ioctl(self.file.as_raw_fd(), BLKDISCARD, range.as_ptr()) }
            };
            if r != 0 {
                let source = std::io::Error::last_os_error();
                if i == 0 && matches!(source.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY)) {
                    return Ok(false);
                }
                return Err(DevError::Io { bno, source });
            }
        }
        Ok(true)
    }
}

/// A device in memory, for tests and the crash tester. Its contents are kept in units of the
/// address (`addr_unit`): whole blocks (`new`), or fragments (`new_frags`), where block `b` is the `block_size` bytes from unit `b` on, and a write of `k`
/// units (a file's last fragments) changes those `k` units and no other.
pub struct MemDevice {
    bs: usize,
    unit: usize,
    /// One entry per address, `unit` bytes each; `None` reads as zeros.
    units: Mutex<Vec<Option<Box<[u8]>>>>,
    counters: Counters,
}

impl MemDevice {
    pub fn new(bs: usize, nblocks: u64) -> MemDevice {
        MemDevice::from_units(bs, bs, vec![None; nblocks as usize])
    }
    /// A zeroed device of `naddrs` fragments of `unit` bytes, holding blocks of `bs` bytes
    /// (`FileDevice::open_frags` in memory).
    pub fn new_frags(bs: usize, unit: usize, naddrs: u64) -> MemDevice {
        MemDevice::from_units(bs, unit, vec![None; naddrs as usize])
    }
    /// A device holding a copy of `image` (block contents; `None` reads as zeros).
    pub fn from_blocks(bs: usize, blocks: Vec<Option<Box<[u8]>>>) -> MemDevice {
        MemDevice::from_units(bs, bs, blocks)
    }
    /// A device addressed in units of `unit` bytes holding `units` (as `blocks` gives them).
    pub fn from_units(bs: usize, unit: usize, units: Vec<Option<Box<[u8]>>>) -> MemDevice {
        assert!(unit > 0 && unit <= bs && bs.is_multiple_of(unit), "unit of {unit} bytes, block of {bs}");
        assert!(units.iter().flatten().all(|u| u.len() == unit), "every unit is {unit} bytes");
        MemDevice { bs, unit, units: Mutex::new(units), counters: Counters::default() }
    }
    /// A copy of every unit (every block, or every fragment when addressed in fragments), for
    /// building crash images.
    pub fn blocks(&self) -> Vec<Option<Box<[u8]>>> {
        self.lock().clone()
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Box<[u8]>>>> {
        self.units.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl BlockDevice for MemDevice {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn addr_unit(&self) -> usize {
        self.unit
    }
    fn num_blocks(&self) -> u64 {
        self.lock().len() as u64
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        let units = self.lock();
        check_range(bno, units.len() as u64)?;
        self.counters.read();
        if self.unit == self.bs {
            match &units[bno as usize] {
                Some(b) => buf.copy_from_slice(b),
                None => buf.fill(0),
            }
        } else {
            read_units(bno, buf, self.unit, |a| units.get(a as usize).and_then(|u| u.as_deref()));
        }
        Ok(())
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        let mut units = self.lock();
        for r in reqs {
            check_write(r.bno, r.data.len(), self.unit, units.len() as u64)?;
        }
        for r in reqs {
            for (a, u) in write_units(r.bno, r.data, self.unit) {
                units[a as usize] = Some(u.into());
            }
        }
        self.counters.batch(reqs.len(), count_runs(reqs, self.unit), kind);
        Ok(())
    }
    fn stats(&self) -> DevStats {
        self.counters.snapshot()
    }
    /// The units forgotten: they read as zeros.
    fn discard(&self, runs: &[(u64, u64)]) -> DevResult<bool> {
        let mut units = self.lock();
        for &(bno, n) in runs {
            check_range(bno + n.saturating_sub(1), units.len() as u64)?;
            units[bno as usize..(bno + n) as usize].fill(None);
        }
        Ok(true)
    }
}

/// One logged event of a `RecordingDevice`.
#[derive(Debug, Clone)]
pub enum Record {
    /// A write handed to the device by the batch `batch`.
    Write { bno: u64, data: Arc<[u8]>, batch: u64 },
    /// The end of the batch `batch`: its writes are durable.
    Barrier { batch: u64 },
}

/// A device that logs every write and barrier in order, over an inner device, for the crash
/// tester: the writes of the batches whose barriers are logged, plus any subset of the writes
/// of the batches in the air (logged, their barriers not yet), is a state the medium could be
/// in after a power loss. Batches written one after another are in the air one at a time;
/// batches written at once from several threads (flights side by side) are in the air together.
pub struct RecordingDevice<D: BlockDevice> {
    inner: D,
    log: Mutex<Vec<Record>>,
    /// Batches handed to it so far (each batch's number in the log).
    next_batch: AtomicU64,
    /// How long a write batch takes (`slow`): zero but for the concurrent crash workload, whose
    /// threads then have batches in the air together as on a real device.
    delay: std::time::Duration,
}

impl<D: BlockDevice> RecordingDevice<D> {
    pub fn new(inner: D) -> Self {
        let (next_batch, delay) = (AtomicU64::new(0), std::time::Duration::ZERO);
        RecordingDevice { inner, log: Mutex::new(Vec::new()), next_batch, delay }
    }
    /// The same device whose write batches each take `delay` between the writes being handed
    /// over and the barrier.
    pub fn slow(self, delay: std::time::Duration) -> Self {
        RecordingDevice { delay, ..self }
    }
    pub fn log(&self) -> Vec<Record> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// The number of records logged so far (a position in the log), without copying it.
    pub fn log_len(&self) -> usize {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

impl<D: BlockDevice> BlockDevice for RecordingDevice<D> {
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
    /// The writes are logged as they are handed to the device and the barrier once it has
    /// answered, so that batches written at once from several threads are in the air together
    /// in the log. (A batch that fails is logged too: its writes may have reached the medium.)
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        let batch = self.next_batch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            for r in reqs {
                log.push(Record::Write { bno: r.bno, data: r.data.into(), batch });
            }
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let result = self.inner.write_batch(reqs, kind);
        self.log.lock().unwrap_or_else(|p| p.into_inner()).push(Record::Barrier { batch });
        result
    }
    fn stats(&self) -> DevStats {
        self.inner.stats()
    }
}

/// A device whose writes fail while `failing` is set (simulated storage with faults): a whole
/// batch fails before any of it reaches the inner device, as an I/O error does to the caller.
pub struct FaultDevice<D: BlockDevice> {
    inner: D,
    pub failing: std::sync::atomic::AtomicBool,
}

impl<D: BlockDevice> FaultDevice<D> {
    pub fn new(inner: D) -> Self {
        FaultDevice { inner, failing: std::sync::atomic::AtomicBool::new(false) }
    }
    pub fn set_failing(&self, on: bool) {
        self.failing.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl<D: BlockDevice> BlockDevice for FaultDevice<D> {
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
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            let bno = reqs.first().map_or(0, |r| r.bno);
            return Err(DevError::Io { bno, source: std::io::Error::from_raw_os_error(libc::EIO) });
        }
        self.inner.write_batch(reqs, kind)
    }
    fn stats(&self) -> DevStats {
        self.inner.stats()
    }
}

/// Mechanical parameters of a disk (Ruemmler & Wilkes's model): a seek curve that is a square
/// root for short seeks and linear for long ones, a rotation, and a media transfer rate.
#[derive(Debug, Clone, Serialize)]
pub struct DiskModel {
    pub name: &'static str,
    pub cylinders: u64,
    pub rpm: f64,
    /// Seek time in ms for a distance of `d` cylinders: `short_a + short_b * sqrt(d)` below
    /// `boundary`, `long_a + long_b * d` from it on.
    pub short_a: f64,
    pub short_b: f64,
    pub long_a: f64,
    pub long_b: f64,
    pub boundary: u64,
    /// Media transfer rate, MB/s.
    pub transfer_mb_s: f64,
    /// Whether a request for the next block, issued as soon as the previous one is done,
    /// streams under the head (a drive that reads ahead or a driver that chains requests).
    /// When false it arrives after the block's start has passed and waits most of a
    /// revolution: a 1990s SCSI drive fed one request at a time by a driver that neither sorts
    /// nor chains, as Mogul's were (§4: 600 queued writes took 8-9 s, about 15 ms each).
    pub streams: bool,
}

impl DiskModel {
    /// A DEC RZ58 (1.38 GB, 5400 RPM) as in Mogul's experiments, about 18 ms per random access:
    /// 10.4 ms average seek, 5.6 ms average rotational latency, 2 ms to move 8 KiB.
    pub fn rz58() -> DiskModel {
        DiskModel {
            name: "rz58",
            cylinders: 2117,
            rpm: 5400.0,
            short_a: 3.0,
            short_b: 0.4,
            long_a: 8.0,
            long_b: 0.0035,
            boundary: 400,
            transfer_mb_s: 4.0,
            streams: true,
        }
    }

    /// A DEC RZ58 as the paper's Table 4-1 has it and as its driver fed it: 18 ms average
    /// access, one request at a time, so that writes of neighbouring blocks miss a revolution.
    pub fn rz58_unchained() -> DiskModel {
        DiskModel { name: "rz58-unchained", streams: false, ..Self::rz58() }
    }

    /// A DEC RZ57 (1.0 GB, 3600 RPM), the paper's slower system (Table 4-1: 23 ms average
    /// access, 2.2 MB/s): 8.3 ms average rotational latency and 3.7 ms to move 8 KiB, so about
    /// 11 ms average seek; fed one request at a time like `rz58_unchained`.
    pub fn rz57() -> DiskModel {
        DiskModel {
            name: "rz57",
            cylinders: 1925,
            rpm: 3600.0,
            short_a: 4.0,
            short_b: 0.3,
            long_a: 7.3,
            long_b: 0.0065,
            boundary: 400,
            transfer_mb_s: 2.2,
            streams: false,
        }
    }

    /// A 7200 RPM drive of the 2010s: 8.5 ms average seek, 150 MB/s.
    pub fn modern() -> DiskModel {
        DiskModel {
            name: "modern",
            cylinders: 100_000,
            rpm: 7200.0,
            short_a: 1.0,
            short_b: 0.05,
            long_a: 4.0,
            long_b: 0.000135,
            boundary: 3000,
            transfer_mb_s: 150.0,
            streams: true,
        }
    }

    pub fn by_name(name: &str) -> Option<DiskModel> {
        match name {
            "rz58" => Some(Self::rz58()),
            "modern" => Some(Self::modern()),
            "rz57" => Some(Self::rz57()),
            "rz58-unchained" => Some(Self::rz58_unchained()),
            _ => None,
        }
    }

    pub fn seek_ms(&self, d: u64) -> f64 {
        if d == 0 {
            0.0
        } else if d < self.boundary {
            self.short_a + self.short_b * (d as f64).sqrt()
        } else {
            self.long_a + self.long_b * d as f64
        }
    }

    pub fn rotation_ms(&self) -> f64 {
        60_000.0 / self.rpm
    }
}

/// One request served by a `ModelDevice`, in simulated nanoseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ModelRequest {
    pub write: bool,
    pub sync: bool,
    pub bno: u64,
    pub arrival: u64,
    pub start: u64,
    pub done: u64,
}

struct ModelState {
    free_at: u64,
    head_cyl: u64,
    last_bno: Option<u64>,
    rng: rand::rngs::SmallRng,
    log: Vec<ModelRequest>,
}

/// A 1990s disk on a simulated clock (Mogul §4): one FIFO queue, a seek curve, rotational latency
/// and transfer time. Asynchronous writes are queued at the current simulated time and occupy the
/// disk without advancing the clock; a read or a synchronous write waits behind everything queued
/// before it, and the clock moves to its completion (the caller waited that long). The contents
/// live in an inner device, so the file system runs on it unchanged; the same seed gives the
/// same times.
pub struct ModelDevice<D: BlockDevice> {
    inner: D,
    model: DiskModel,
    clock: Arc<crate::clock::SimClock>,
    state: Mutex<ModelState>,
}

impl<D: BlockDevice> ModelDevice<D> {
    pub fn new(inner: D, model: DiskModel, clock: Arc<crate::clock::SimClock>, seed: u64) -> Self {
        use rand::SeedableRng;
        ModelDevice {
            inner,
            model,
            clock,
            state: Mutex::new(ModelState {
                free_at: 0,
                head_cyl: 0,
                last_bno: None,
                rng: rand::rngs::SmallRng::seed_from_u64(seed),
                log: Vec::new(),
            }),
        }
    }

    /// Every request served so far.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().log.clone()
    }

    pub fn clear_requests(&self) {
        self.lock().log.clear();
    }

    /// When the queue drains, in simulated ns.
    pub fn idle_at(&self) -> u64 {
        self.lock().free_at
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ModelState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one request arriving now; returns its completion time.
    fn serve(&self, st: &mut ModelState, bno: u64, write: bool, sync: bool) -> u64 {
        use rand::Rng;
        let now = self.clock.now_ns();
        let start = now.max(st.free_at);
        let per_cyl = self.inner.num_blocks().div_ceil(self.model.cylinders).max(1);
        let cyl = bno / per_cyl;
        let bytes = self.inner.block_size() as f64;
        let transfer_ms = bytes / (self.model.transfer_mb_s * 1e6) * 1e3;
        // The next block, asked for as soon as the previous one is done, streams under the head.
        let next = st.last_bno == Some(bno.wrapping_sub(1)) && start == st.free_at;
        let ms = if next && self.model.streams {
            transfer_ms
        } else if next {
            // The request came just after the block's start had passed under the head: a whole
            // revolution goes by before it comes round again.
            self.model.rotation_ms() + transfer_ms
        } else {
            let seek = self.model.seek_ms(cyl.abs_diff(st.head_cyl));
            let rot = st.rng.gen::<f64>() * self.model.rotation_ms();
            seek + rot + transfer_ms
        };
        let done = start + (ms * 1e6) as u64;
        st.free_at = done;
        st.head_cyl = cyl;
        st.last_bno = Some(bno);
        st.log.push(ModelRequest { write, sync, bno, arrival: now, start, done });
        done
    }
}

impl<D: BlockDevice> BlockDevice for ModelDevice<D> {
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
        self.inner.read_block(bno, buf)?;
        let mut st = self.lock();
        let done = self.serve(&mut st, bno, false, true);
        self.clock.set(done);
        Ok(())
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        self.inner.write_batch(reqs, kind)?;
        let mut st = self.lock();
        let sync = kind == WriteKind::Sync;
        let mut last = 0;
        for r in reqs {
            last = self.serve(&mut st, r.bno, true, sync);
        }
        if sync {
            self.clock.set(last);
        }
        Ok(())
    }
    fn stats(&self) -> DevStats {
        self.inner.stats()
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for Arc<T> {
    fn block_size(&self) -> usize {
        (**self).block_size()
    }
    fn addr_unit(&self) -> usize {
        (**self).addr_unit()
    }
    fn num_blocks(&self) -> u64 {
        (**self).num_blocks()
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        (**self).read_block(bno, buf)
    }
    fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        (**self).read_run(bno, buf)
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        (**self).write_batch(reqs, kind)
    }
    fn stats(&self) -> DevStats {
        (**self).stats()
    }
    fn discard(&self, runs: &[(u64, u64)]) -> DevResult<bool> {
        (**self).discard(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_device_counts_and_round_trips() {
        let d = MemDevice::new(4096, 10);
        let a = vec![7u8; 4096];
        d.write_batch(&[WriteReq { bno: 3, data: &a }], WriteKind::Sync).unwrap();
        d.write_batch(&[WriteReq { bno: 4, data: &a }, WriteReq { bno: 5, data: &a }], WriteKind::Async).unwrap();
        let mut b = vec![0u8; 4096];
        d.read_block(3, &mut b).unwrap();
        assert_eq!(a, b);
        d.read_block(9, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        assert!(d.read_block(10, &mut b).is_err());
        let s = d.stats();
        assert_eq!((s.reads, s.sync_writes, s.async_writes, s.batches, s.max_batch), (2, 1, 2, 2, 2));
        assert_eq!(s.write_requests, 2, "blocks 4 and 5 are one request");
    }

    #[test]
    fn file_device_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        FileDevice::create(&p, 4096 * 8).unwrap();
        let d = FileDevice::open(&p, 4096, true).unwrap();
        assert_eq!(d.num_blocks(), 8);
        let a = vec![9u8; 4096];
        d.write_batch(&[WriteReq { bno: 7, data: &a }], WriteKind::Sync).unwrap();
        let mut b = vec![0u8; 4096];
        d.read_block(7, &mut b).unwrap();
        assert_eq!(a, b);
        let st = d.stats();
        assert_eq!(st.flushes, 1);
        assert!(st.write_ns >= st.flush_ns && st.flush_ns > 0, "the write and its flush are timed: {st:?}");
    }

    #[test]
    fn file_device_writes_neighbours_in_one_request() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let n = MAX_RUN as u64 + 40;
        FileDevice::create(&p, 4096 * n).unwrap();
        let d = FileDevice::open(&p, 4096, true).unwrap();
        // Out of order: a run of MAX_RUN + 2 blocks (two requests), a lone block, a pair.
        let data: Vec<Vec<u8>> = (0..n).map(|b| vec![b as u8 ^ 0x5a; 4096]).collect();
        let mut bnos: Vec<u64> = (3..MAX_RUN as u64 + 5).rev().collect();
        bnos.extend([n - 1, MAX_RUN as u64 + 20, MAX_RUN as u64 + 21]);
        let reqs: Vec<WriteReq> = bnos.iter().map(|&b| WriteReq { bno: b, data: &data[b as usize] }).collect();
        d.write_batch(&reqs, WriteKind::Async).unwrap();
        let s = d.stats();
        assert_eq!((s.async_writes, s.write_requests, s.batches), (bnos.len() as u64, 4, 1));
        let mut b = vec![0u8; 4096];
        for bno in 0..n {
            d.read_block(bno, &mut b).unwrap();
            let want = if bnos.contains(&bno) { &data[bno as usize][..] } else { &[0u8; 4096][..] };
            assert_eq!(b, want, "block {bno}");
        }
        // A block past the end fails the batch before anything is written.
        let before = d.stats().write_requests;
        let bad = [WriteReq { bno: 0, data: &data[0] }, WriteReq { bno: n, data: &data[0] }];
        assert!(d.write_batch(&bad, WriteKind::Sync).is_err());
        d.read_block(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(d.stats().write_requests, before);
    }

    /// Fragment runs side by side in one block (fragments of 1 KiB, blocks of 4 KiB): a whole
    /// block at 0, then a run of two fragments at 1 and of one at 3, and a block at 14 running
    /// past the device's end (16 fragments).
    fn runs_side_by_side(d: &dyn BlockDevice) {
        assert_eq!((d.block_size(), d.addr_unit(), d.num_blocks()), (4096, 1024, 16));
        d.write_batch(&[WriteReq { bno: 0, data: &[0x11; 4096] }], WriteKind::Sync).unwrap();
        d.write_batch(
            &[WriteReq { bno: 1, data: &[0x22; 2048] }, WriteReq { bno: 3, data: &[0x33; 1024] }],
            WriteKind::Sync,
        )
        .unwrap();
        let mut b = vec![0u8; 4096];
        d.read_block(0, &mut b).unwrap();
        let want: Vec<u8> = [[0x11; 1024], [0x22; 1024], [0x22; 1024], [0x33; 1024]].concat();
        assert_eq!(b, want, "each run changed only its fragments");
        d.read_block(2, &mut b).unwrap();
        assert_eq!(b, [[0x22; 1024], [0x33; 1024], [0; 1024], [0; 1024]].concat());
        d.write_batch(&[WriteReq { bno: 14, data: &[0x44; 2048] }], WriteKind::Sync).unwrap();
        d.read_block(14, &mut b).unwrap();
        assert_eq!(b, [[0x44; 2048], [0; 2048]].concat(), "zeros past the end");
        assert!(d.write_batch(&[WriteReq { bno: 14, data: &[1; 4096] }], WriteKind::Sync).is_err());
        assert!(d.read_block(16, &mut b).is_err());
        let s = d.stats();
        assert_eq!((s.sync_writes, s.write_requests), (4, 3), "the runs at 1 and 3 are one request");
        // A discard counts in addresses: the two fragments at 1 read as zeros, their
        // neighbours stay (where the device can discard).
        if d.discard(&[(1, 2)]).unwrap() {
            d.read_block(0, &mut b).unwrap();
            assert_eq!(b, [[0x11; 1024], [0; 1024], [0; 1024], [0x33; 1024]].concat());
        }
    }

    #[test]
    fn mem_device_in_fragments_writes_only_each_runs_bytes() {
        runs_side_by_side(&MemDevice::new_frags(4096, 1024, 16));
    }

    #[test]
    fn file_device_in_fragments_writes_neighbouring_runs_in_one_request() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        FileDevice::create(&p, 16 * 1024).unwrap();
        runs_side_by_side(&FileDevice::open_frags(&p, 4096, 1024, true).unwrap());
    }

    #[test]
    fn runs_follow_each_other_byte_for_byte() {
        let a = [0u8; 4096];
        let req = |bno, len| WriteReq { bno, data: &a[..len] };
        // Fragments of 1 KiB: 0+2 is followed by 2+4, then 6+1; 8 leaves a gap at 7.
        let reqs = [req(6, 1024), req(0, 2048), req(2, 4096), req(8, 1024)];
        assert_eq!(count_runs(&reqs, 1024), 2);
        let mut runs = Vec::new();
        write_runs(&reqs, 1024, |r| {
            runs.push(r.iter().map(|w| w.bno).collect::<Vec<_>>());
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(runs, vec![vec![0, 2, 6], vec![8]]);
        // Blocks as the unit: neighbouring block numbers, as before.
        let blocks = [req(5, 4096), req(4, 4096), req(7, 4096)];
        assert_eq!(count_runs(&blocks, 4096), 2);
    }

    #[test]
    fn model_device_queues_writes_and_charges_reads() {
        let clock = Arc::new(crate::clock::SimClock::new());
        let d = ModelDevice::new(MemDevice::new(8192, 100_000), DiskModel::rz58(), clock.clone(), 7);
        let a = vec![1u8; 8192];
        // A random read costs about the average access time.
        let mut b = vec![0u8; 8192];
        let mut total = 0;
        for i in 0..200u64 {
            let t0 = clock.now_ns();
            d.read_block((i * 7919 * 13) % 100_000, &mut b).unwrap();
            total += clock.now_ns() - t0;
        }
        let avg_ms = total as f64 / 200.0 / 1e6;
        assert!((12.0..24.0).contains(&avg_ms), "average access {avg_ms} ms");
        // Queued writes do not move the clock, but a read waits behind them.
        let reqs: Vec<WriteReq> = (0..50).map(|i| WriteReq { bno: i * 1000, data: &a }).collect();
        let t0 = clock.now_ns();
        d.write_batch(&reqs, WriteKind::Async).unwrap();
        assert_eq!(clock.now_ns(), t0);
        d.read_block(5, &mut b).unwrap();
        assert!(clock.now_ns() - t0 > 50 * 8_000_000, "the read waited for the queued writes");
        // The same seed gives the same times.
        let c2 = Arc::new(crate::clock::SimClock::new());
        let d2 = ModelDevice::new(MemDevice::new(8192, 100_000), DiskModel::rz58(), c2.clone(), 7);
        for i in 0..200u64 {
            d2.read_block((i * 7919 * 13) % 100_000, &mut b).unwrap();
        }
        d2.write_batch(&reqs, WriteKind::Async).unwrap();
        d2.read_block(5, &mut b).unwrap();
        assert_eq!(c2.now_ns(), clock.now_ns());
    }

    /// Busy time is the time with any batch being written: two batches side by side count once
    /// (their sum would exceed the wall-clock time they spanned).
    #[test]
    fn busy_time_counts_batches_side_by_side_once() {
        let c = Counters::default();
        let ms = std::time::Duration::from_millis(20);
        let t = std::time::Instant::now();
        let a = c.busy();
        std::thread::sleep(ms);
        let b = c.busy();
        std::thread::sleep(ms);
        drop(a);
        std::thread::sleep(ms);
        drop(b);
        let wall = t.elapsed().as_nanos() as u64;
        let busy = c.snapshot().busy_ns;
        assert!(busy >= 3 * ms.as_nanos() as u64 && busy <= wall, "busy {busy} ns of {wall}");
        drop(c.busy());
        assert!(c.snapshot().busy_ns >= busy, "a later batch adds");
    }

    #[test]
    fn recording_device_logs_barriers() {
        let d = RecordingDevice::new(MemDevice::new(4096, 4));
        let a = vec![1u8; 4096];
        d.write_batch(&[WriteReq { bno: 1, data: &a }, WriteReq { bno: 2, data: &a }], WriteKind::Async).unwrap();
        let log = d.log();
        assert_eq!(log.len(), 3);
        assert!(matches!(log[2], Record::Barrier { batch: 0 }));
    }
}
