//! The exception store: where its blocks are on the device (`StoreMap`: the reserved area, or a
//! br reservation's runs), the state behind the device's lock (the exception table, the current
//! area), the origin's blocks in use at snapshot time, and finding a store on a device.
//!
//! Everything here counts in chunks: one file-system block each, chunk `c` at device address
//! `c * frag` (the image is addressed in fragments, `frag` its `fs_frag`), so chunks are block-aligned and never overlap. The origin is chunks
//! `0..ceil(fs_size / frag)`; a reserved area starts at the first whole chunk after it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::br::BrRun;
use crate::clock::SimClock;
use crate::dev::{BlockDevice, DevError, DevResult};
use crate::format::ufs2::Cg;
use crate::format::*;
use crate::fs::{Fs, FsError, MountOptions};

use super::{StoreKind, VolResult, VolumeDevice, VolumeError, BR_STORE};

/// Where the store's chunks are on the device.
pub(super) enum StoreMap {
    Reserved {
        start: u64,
        len: u64,
    },
    /// brquery's runs in chunks (a run's `start` is its first chunk, not the file system's
    /// address), sorted by logical offset and contiguous from 0; `mru` is the run last hit.
    Br {
        runs: Vec<BrRun>,
        len: u64,
        mru: usize,
    },
}

impl StoreMap {
    pub(super) fn len(&self) -> u64 {
        match self {
            StoreMap::Reserved { len, .. } | StoreMap::Br { len, .. } => *len,
        }
    }

    /// The chunk of store index `i`.
    pub(super) fn phys(&mut self, i: u64) -> Option<u64> {
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

    /// True if chunk `b` is one of the store's.
    pub(super) fn holds(&self, b: u64) -> bool {
        match self {
            StoreMap::Reserved { start, len } => *start <= b && b < *start + *len,
            StoreMap::Br { runs, .. } => runs.iter().any(|r| r.start <= b && b < r.start + r.len),
        }
    }

    /// Appends chunk `b` as the next store index (br only).
    pub(super) fn push(&mut self, b: u64) {
        if let StoreMap::Br { runs, len, .. } = self {
            match runs.last_mut() {
                Some(r) if r.start + r.len == b => r.len += 1,
                _ => runs.push(BrRun { offset: *len, start: b, len: 1 }),
            }
            *len += 1;
        }
    }
}

pub(super) struct State {
    pub(super) map: StoreMap,
    pub(super) header: VolumeHeader,
    /// Origin block -> store index of its old contents.
    pub(super) exceptions: HashMap<u64, u64>,
    /// Store index of the current area's metadata block, its contents and entries used.
    pub(super) area: u64,
    pub(super) area_buf: Vec<u8>,
    pub(super) area_used: usize,
    /// Which origin blocks were in use at snapshot time (from the snapshot's own cylinder-group
    /// bitmaps, read once at open): the br store copies a block it gains only if it was, and no
    /// store copies a chunk on write that was free (unless told to, as dm-snap does).
    pub(super) snap_used: Option<SnapBitmap>,
    /// The origin block copied last: where the br store's next blocks are asked for.
    pub(super) last_cow: u64,
}

/// The origin's chunks in use at snapshot time, one bit each; metadata (superblocks, group
/// headers, inode tables) always counts as in use, and so does a chunk past the groups.
pub(super) struct SnapBitmap {
    bits: Vec<u8>,
    blocks: u64,
}

impl SnapBitmap {
    /// Reads the snapshot's cylinder groups through the snapshot view (they are metadata, so
    /// copied before any change): one read per group. On UFS2 a chunk (a block) is in use if
    /// any of its fragments is (`cg_blksfree`).
    pub(super) fn load(vol: &VolumeDevice, st: &mut State) -> DevResult<SnapBitmap> {
        let bs = vol.inner.block_size() as u64;
        let blocks = st.header.origin_blocks;
        let end = blocks * bs;
        let mut chunk = vec![0u8; bs as usize];
        // Bytes of the snapshot, chunk by chunk.
        let mut read_at = |off: u64, buf: &mut [u8]| -> std::io::Result<()> {
            if off + buf.len() as u64 > end {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let mut done = 0;
            while done < buf.len() {
                let at = off + done as u64;
                vol.read_snapshot_locked(st, at / bs, &mut chunk).map_err(std::io::Error::other)?;
                let from = (at % bs) as usize;
                let n = (bs as usize - from).min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&chunk[from..from + n]);
                done += n;
            }
            Ok(())
        };
        let sb = Superblock::probe(&mut read_at).map_err(|e| DevError::Open(format!("snapshot superblock: {e}")))?;
        let mut bits = vec![0xffu8; blocks.div_ceil(8) as usize];
        let u = sb.ufs2();
        let frag = u.fs_frag as u32;
        let mut b = vec![0u8; u.fs_cgsize as usize];
        for cg in 0..u.fs_ncg {
            read_at(u.fsb_offset(u.cgtod(cg)), &mut b)
                .map_err(|e| DevError::Open(format!("snapshot group {cg}: {e}")))?;
            let g = Cg::decode(&b, u, cg, false).map_err(|e| DevError::Open(format!("snapshot group {cg}: {e}")))?;
            // Groups start at multiples of fs_fpg, itself a multiple of fs_frag.
            let base = u.cgbase(cg) as u64 / frag as u64;
            let nblk = (g.hdr.cg_ndblk as u32).div_ceil(frag);
            for k in 0..nblk.min((blocks - base.min(blocks)) as u32) {
                bit_set(&mut bits, (base + k as u64) as usize, !g.block_free(k));
            }
        }
        Ok(SnapBitmap { bits, blocks })
    }

    pub(super) fn in_use(&self, b: u64) -> bool {
        b >= self.blocks || bit_get(&self.bits, b as usize)
    }
}

/// The superblock of the file system on `dev`.
pub(super) fn read_sb(dev: &dyn BlockDevice) -> VolResult<Superblock> {
    Ok(Superblock::probe(|off, buf| crate::dev::read_bytes(dev, off, buf))?)
}

pub(super) fn gen_of(h: &VolumeHeader) -> u64 {
    (h.created as u64 & 0xffff) << 48
}

/// Device addresses per chunk on `inner` (1, or a UFS2 image's fragments per block), checked
/// against the file system's superblock `sb`.
pub(super) fn frag_of(inner: &dyn BlockDevice, sb: &Superblock) -> VolResult<u64> {
    let (bs, unit) = (inner.block_size(), inner.addr_unit());
    if bs != sb.block_size as usize || unit != sb.addr_unit() as usize {
        return Err(VolumeError::Invalid(format!(
            "the device is kept in blocks of {bs} bytes addressed every {unit}, the file system's are {} every {}",
            sb.block_size,
            sb.addr_unit()
        )));
    }
    Ok(sb.frag())
}

/// The chunks of the origin: the file system's blocks (a UFS2 `fs_size` in fragments rounded
/// up to a whole block).
pub(super) fn origin_chunks(sb: &Superblock) -> u64 {
    sb.num_blocks.div_ceil(sb.frag())
}

/// The store of the snapshot on `inner`, if any: header and map. Opens the file system read-only
/// to query a br store (the first step of §4's start-up).
pub(super) fn find_store(inner: &Arc<dyn BlockDevice>) -> VolResult<Option<(StoreKind, VolumeHeader, StoreMap)>> {
    let sb = read_sb(inner.as_ref())?;
    let frag = frag_of(inner.as_ref(), &sb)?;
    let (origin, chunks) = (origin_chunks(&sb), inner.num_blocks() / frag);
    let bs = inner.block_size();
    let mut b = vec![0u8; bs];
    if chunks > origin {
        inner.read_block(origin * frag, &mut b)?;
        if let Some(h) = VolumeHeader::decode(&b).filter(|h| h.kind == VOL_STORE_RESERVED) {
            let map = StoreMap::Reserved { start: origin, len: chunks - origin };
            return Ok(Some((StoreKind::Reserved, h, map)));
        }
    }
    let opts = MountOptions { readonly: true, cache_blocks: 1024, ..Default::default() };
    let mut fs = Fs::mount(inner.clone(), opts, Arc::new(SimClock::new()))?;
    let runs = match fs.brquery(BR_STORE.as_bytes(), 0, u64::MAX) {
        Ok(r) => br_chunks(r, frag)?,
        Err(FsError::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = runs.iter().map(|r| r.len).sum();
    if runs.first().is_none_or(|r| r.offset != 0) || runs.last().is_some_and(|r| r.offset + r.len != len) {
        return Err(VolumeError::Invalid("the br store's reservation has holes".into()));
    }
    inner.read_block(runs[0].start * frag, &mut b)?;
    match VolumeHeader::decode(&b).filter(|h| h.kind == VOL_STORE_BR) {
        Some(h) => Ok(Some((StoreKind::Br, h, StoreMap::Br { runs, len, mru: 0 }))),
        None => Ok(None),
    }
}

/// brquery's runs (file-system addresses: fragment numbers on UFS2) in chunks. A reservation
/// holds whole block-aligned blocks only, so anything else is damage.
pub(super) fn br_chunks(runs: Vec<BrRun>, frag: u64) -> VolResult<Vec<BrRun>> {
    runs.into_iter()
        .map(|r| match r.start.is_multiple_of(frag) {
            true => Ok(BrRun { start: r.start / frag, ..r }),
            false => Err(VolumeError::Invalid(format!("the br store's run at {} is not block-aligned", r.start))),
        })
        .collect()
}

impl State {
    /// True if origin block `b` was in use at snapshot time (or if that is not known).
    pub(super) fn in_use_at_snapshot(&self, b: u64) -> bool {
        self.snap_used.as_ref().is_none_or(|m| m.in_use(b))
    }
}
