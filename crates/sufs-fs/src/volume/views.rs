//! Views of the volume: the snapshot read-only (`SnapshotDevice`), its `export` to an image file,
//! and the first blocks of a device (`PrefixDevice`, where mkfs makes the file system before a
//! reserved area).

use std::path::Path;
use std::sync::Arc;

use crate::dev::{BlockDevice, DevError, DevResult, DevStats, WriteKind, WriteReq};

use super::{VolResult, VolumeDevice};

/// The volume as it was at snapshot time, read-only (what `export` writes and a snapshot mount
/// reads).
pub struct SnapshotDevice(pub Arc<VolumeDevice>);

impl BlockDevice for SnapshotDevice {
    fn block_size(&self) -> usize {
        self.0.block_size()
    }
    fn addr_unit(&self) -> usize {
        self.0.addr_unit()
    }
    fn num_blocks(&self) -> u64 {
        self.0.origin_blocks() * self.0.frag
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
/// the reservation, empty, and so no snapshot). Written chunk by chunk, chunk `c` at byte
/// `c * block size` as on the volume. Returns the blocks written.
pub fn export(vol: &Arc<VolumeDevice>, out: &Path) -> VolResult<u64> {
    let read = |b, buf: &mut [u8]| vol.read_snapshot_chunk(b, buf);
    crate::dev::write_sparse_image(out, vol.origin_blocks(), vol.block_size(), read, |b| vol.exported(b))
}

/// The first `blocks` blocks (device addresses: fragments on UFS2) of a device: where mkfs makes
/// the file system when the rest is the reserved area of a `reserved` store.
pub struct PrefixDevice {
    pub inner: Arc<dyn BlockDevice>,
    pub blocks: u64,
}

impl BlockDevice for PrefixDevice {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn addr_unit(&self) -> usize {
        self.inner.addr_unit()
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
