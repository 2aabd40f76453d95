//! The snapshot workload: files overwritten, grown, truncated and removed while snapshots are
//! taken and deleted; each snapshot promises the tree of its moment.

use std::sync::Arc;

use rand::Rng;

use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, MemDevice, WriteKind, WriteReq};
use sufs_fs::fs::{Fs, FsResult};

use super::super::promise::{Promise, PromiseKind};
use super::super::readonly;
use super::super::work::Work;
use super::{pick, tree_digest, Workload};

/// Files overwritten, grown, truncated and removed while snapshots are taken and deleted: every
/// snapshot must keep showing the tree of its moment in every crash state (copy-on-write and
/// claims ordered before the overwrite and the reuse).
#[derive(Default)]
pub(super) struct SnapWork {
    files: Vec<String>,
    snaps: Vec<String>,
    n: usize,
}

impl Workload for SnapWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/s")?;
        self.files = w.create_files("/s/f", 6, |i| 3000 + i * 9000)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        match w.rng.gen_range(0..14) {
            0..=1 if self.snaps.len() < 3 => {
                let name = format!("s{n}");
                create_snapshot(w, &name)?;
                self.snaps.push(name);
            }
            2 => {
                if self.snaps.is_empty() {
                    return Ok(true);
                }
                let name = self.snaps.remove(w.rng.gen_range(0..self.snaps.len()));
                let pos = w.begin(format!("snapshot delete {name}"))?;
                w.touch_name(pos, &format!("/.snap/{name}"));
                w.fs.snapshot_delete(name.as_bytes())?;
            }
            3..=7 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    let off = w.rng.gen_range(0..80_000);
                    let len = w.rng.gen_range(1..20_000);
                    w.write(&p, off, len)?;
                }
            }
            8 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    let size = w.size(&p)?;
                    let to = w.rng.gen_range(0..=size);
                    w.truncate(&p, to)?;
                }
            }
            9..=10 => {
                let p = format!("/s/n{n}");
                let len = w.rng.gen_range(0..60_000);
                w.create(&p, len)?;
                self.files.push(p);
            }
            11 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    w.fsync(&p)?;
                }
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.files) {
                    w.unlink(&p)?;
                    self.files.retain(|x| *x != p);
                }
            }
        }
        Ok(true)
    }
}

/// Snapshot `name` made; once made, it promises the tree of its moment (the digest of the tree
/// its blocks hold, read back through `snapshot_block`).
fn create_snapshot(w: &mut Work, name: &str) -> FsResult<()> {
    let pos = w.begin(format!("snapshot create {name}"))?;
    let path = format!("/.snap/{name}");
    w.touch_name(pos, &path);
    w.fs.snapshot_create(name.as_bytes())?;
    let ino = w.resolve(&path)?;
    let d = w.fs.snapshot_ino(name.as_bytes())?;
    debug_assert_eq!(d, ino);
    let mut ffs = snapshot_copy(w, ino)?;
    let digest = tree_digest(&mut ffs)?;
    if w.rec.is_some() {
        let from = w.pos();
        w.promises.push(Promise {
            kind: PromiseKind::Snapshot,
            paths: vec![path],
            ino,
            contents: Some(digest),
            runs: None,
            from,
            until: None,
        });
    }
    Ok(())
}

/// The file system snapshot `ino` holds, copied block by block into memory (addressed as the
/// image is: in fragments on UFS2) and mounted read-only.
fn snapshot_copy(w: &mut Work, ino: u32) -> FsResult<Fs> {
    let (bs, unit) = (w.fs.sb.block_size as usize, w.fs.sb.addr_unit() as usize);
    let frag = (bs / unit) as u64;
    let nblocks = w.fs.sb.num_blocks.div_ceil(frag);
    let mem = Arc::new(MemDevice::new_frags(bs, unit, nblocks * frag));
    let mut buf = vec![0u8; bs];
    for x in 0..nblocks {
        w.fs.snapshot_block(ino, x, &mut buf)?;
        mem.write_batch(&[WriteReq { bno: x * frag, data: &buf }], WriteKind::Sync)?;
    }
    Fs::mount(mem, readonly(), Arc::new(SimClock::new()))
}
