//! The volume snapshot under heavy writes, restarts, exports and a full store, on UFS2 of one
//! fragment a block and with fragments (the device addressed in fragments, chunks of one block).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::clock::SimClock;
use crate::dev::{BlockDevice, FileDevice, MemDevice};
use crate::format::ROOT_INO;
use crate::fs::{lock, mkfs, Fs, MkfsOptions, MountOptions, SharedFs};

/// Bytes of each test volume.
const VOLUME: u64 = 128 << 20;

/// The file systems a volume is tested with: what `mkfs` makes (4 KiB blocks of one fragment),
/// and UFS2 as newfs makes it, with 4 KiB blocks of 1 KiB fragments and with newfs's default 32 KiB of 4 KiB.
#[derive(Debug, Clone, Copy)]
enum Geometry {
    Mkfs,
    Ufs2 { bsize: usize, fsize: usize },
}

const GEOMETRIES: [Geometry; 3] =
    [Geometry::Mkfs, Geometry::Ufs2 { bsize: 4096, fsize: 1024 }, Geometry::Ufs2 { bsize: 32768, fsize: 4096 }];

impl Geometry {
    fn bs(self) -> usize {
        match self {
            Geometry::Mkfs => 4096,
            Geometry::Ufs2 { bsize, .. } => bsize,
        }
    }
    /// Device addresses per chunk.
    fn frag(self) -> u64 {
        match self {
            Geometry::Mkfs => 1,
            Geometry::Ufs2 { bsize, fsize } => (bsize / fsize) as u64,
        }
    }
    /// Chunks (blocks) of the volume.
    fn chunks(self) -> u64 {
        VOLUME / self.bs() as u64
    }
    /// A br store's pool of 2 MiB, refilled by 4 MiB below 1.5 MiB.
    fn pool(self) -> PoolOptions {
        let initial = (2 << 20) / self.bs() as u64;
        PoolOptions { initial, low_watermark: initial * 25 / 32, grow: 2 * initial }
    }
    /// Reads the file system's device as an image file of this geometry.
    fn open(self, path: &std::path::Path) -> FileDevice {
        FileDevice::open_frags(path, self.bs(), self.bs() / self.frag() as usize, false).unwrap()
    }
}

/// The UFS2 checker's findings on the file system of `dev`.
fn findings(dev: &(dyn BlockDevice + 'static)) -> Vec<String> {
    let len = dev.num_blocks() * dev.addr_unit() as u64;
    let r = crate::fsck::ufs2::check(dev, len, &Default::default()).unwrap();
    r.findings.iter().map(|f| f.to_string()).collect()
}

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

/// A volume of `geo` with a file system over its first `fs_chunks` chunks (the rest for a
/// reserved store), holding 40 files in the root and in /d; also /d's inode.
fn volume(geo: Geometry, fs_chunks: u64) -> (Arc<MemDevice>, u32) {
    let dev = match geo {
        Geometry::Mkfs => {
            let dev = Arc::new(MemDevice::new(4096, geo.chunks()));
            let prefix = Arc::new(PrefixDevice { inner: dev.clone(), blocks: fs_chunks });
            mkfs(prefix, &MkfsOptions { ..Default::default() }, (1, 0)).unwrap();
            dev
        }
        Geometry::Ufs2 { bsize, fsize } => {
            crate::format::ufs2::newfs::mem_volume(VOLUME, fs_chunks * bsize as u64, bsize, fsize)
        }
    };
    let mut fs = mount(dev.clone());
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..40u64 {
        let (ino, _) =
            fs.create(if i % 2 == 0 { ROOT_INO } else { d }, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(ino, 0, &pattern(i, 3000 + i as usize * 2500)).unwrap();
    }
    fs.unmount().unwrap();
    (dev, d)
}

/// The store kinds, each on every geometry.
fn cases() -> impl Iterator<Item = (StoreKind, Geometry)> {
    [StoreKind::Reserved, StoreKind::Br].into_iter().flat_map(|k| GEOMETRIES.map(|g| (k, g)))
}

/// The file system's chunks: the whole volume but a reserved store's eighth.
fn fs_chunks(kind: StoreKind, geo: Geometry) -> u64 {
    if kind == StoreKind::Reserved {
        geo.chunks() - geo.chunks() / 8
    } else {
        geo.chunks()
    }
}

#[test]
fn snapshot_survives_heavy_writes_deletes_and_restart() {
    for ((kind, geo), copy_free) in cases().flat_map(|c| [(c, false), (c, true)]) {
        let fs_chunks = fs_chunks(kind, geo);
        let (dev, d) = volume(geo, fs_chunks);
        let pool = geo.pool();
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
                let dir = if i % 2 == 0 { ROOT_INO } else { d };
                match fs.lookup(dir, format!("f{i}").as_bytes()) {
                    Ok((ino, _)) if round % 2 == 0 => {
                        fs.write(ino, 1000, &pattern(i + 100 * round, 40000)).unwrap();
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
        let what = format!("{kind} store on {geo:?}, copy_free {copy_free}");
        // 4 KiB blocks: more than one exception area (256 entries each); 32 KiB blocks hold
        // 2048 entries an area, more than this workload copies.
        let many = if geo.bs() == 4096 { 256 } else { 32 };
        assert!(st.valid && st.exceptions > many, "{what}: {st:?}");
        if kind == StoreKind::Br {
            assert!(st.refills > 0, "{what}: the br store grew: {st:?}");
        }
        assert_eq!(st.skipped_free == 0, copy_free, "{what}: new files' blocks copied only if told: {st:?}");
        drop(shared);
        drop(refiller);
        drop(vol);
        // Restart: the table is read back; the export is the volume at snapshot time.
        let vol = VolumeDevice::open(inner.clone(), pool).unwrap().expect("the snapshot survives");
        assert_eq!(vol.volume_stats().exceptions, st.exceptions);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("export.img");
        export(&vol, &out).unwrap();
        let img: Arc<dyn BlockDevice> = Arc::new(geo.open(&out));
        assert_eq!(findings(img.as_ref()), Vec::<String>::new(), "{what}: the export is clean");
        let ro = MountOptions { readonly: true, ..Default::default() };
        let snap =
            tree(&mut Fs::mount(Arc::new(SnapshotDevice(vol.clone())), ro.clone(), Arc::new(SimClock::new())).unwrap());
        assert_eq!(snap, before, "{what}: the snapshot mount shows the files of snapshot time");
        let exported = tree(&mut Fs::mount(img, ro, Arc::new(SimClock::new())).unwrap());
        assert_eq!(exported, before, "{what}: the export holds the files of snapshot time");
        // The origin moved on and is consistent.
        let now = tree(&mut mount(inner.clone()));
        assert_ne!(now, before);
        let origin = PrefixDevice { inner: inner.clone(), blocks: fs_chunks * geo.frag() };
        assert_eq!(findings(&origin), Vec::<String>::new(), "{what}: the origin is clean");
        drop(vol);
        assert_eq!(VolumeDevice::delete(inner.clone()).unwrap(), kind);
        assert!(VolumeDevice::open(inner.clone(), pool).unwrap().is_none());
    }
}

/// A digest of each of the first `n` chunks (blocks, `frag` addresses apart) of `dev`.
fn digests(dev: &dyn BlockDevice, n: u64) -> Vec<u64> {
    let mut b = vec![0u8; dev.block_size()];
    let frag = (dev.block_size() / dev.addr_unit()) as u64;
    (0..n)
        .map(|c| {
            dev.read_block(c * frag, &mut b).unwrap();
            b.iter().fold(0xcbf29ce484222325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100000001b3))
        })
        .collect()
}

#[test]
fn chunks_free_at_snapshot_time_are_not_copied_and_the_export_is_exact() {
    for (kind, geo) in cases() {
        let what = format!("{kind} store on {geo:?}");
        let fs_blocks = fs_chunks(kind, geo);
        let (dev, _) = volume(geo, fs_blocks);
        let inner: Arc<dyn BlockDevice> = dev.clone();
        let pool = geo.pool();
        VolumeDevice::create(inner.clone(), kind, pool, 5).unwrap();
        let mut fs = mount(inner.clone());
        // Whole free blocks: the summary's cs_nbfree (statfs counts fragments).
        fs.unmount().unwrap();
        let sb = super::store::read_sb(inner.as_ref()).unwrap();
        let free_then = sb.ufs2().fs_cstotal.cs_nbfree as u64;
        let then = digests(inner.as_ref(), fs_blocks);
        let vol = VolumeDevice::open(inner.clone(), pool).unwrap().expect("a snapshot");
        // The snapshot's own bitmaps agree with the file system's count of free blocks.
        let free_bits = (0..fs_blocks).filter(|&b| !vol.in_use_at_snapshot(b)).count() as u64;
        assert_eq!(free_bits, free_then, "{what}");
        let mut fs = mount(vol.clone());
        let (ino, _) = fs.create(ROOT_INO, b"new", 0o644, 0, 0).unwrap();
        fs.write(ino, 0, &pattern(9, 300_000)).unwrap();
        let new_chunks = 300_000 / geo.bs();
        let (f4, d4) = fs.lookup(ROOT_INO, b"f4").unwrap();
        fs.write(f4, 0, &pattern(10, d4.size as usize)).unwrap();
        fs.unlink(ROOT_INO, b"f6").unwrap();
        fs.unmount().unwrap();
        let now = digests(inner.as_ref(), fs_blocks);
        {
            let st = vol.lock();
            assert!(st.exceptions.keys().all(|&b| st.in_use_at_snapshot(b)), "{what}: only in-use chunks copied");
        }
        let rewritten_free =
            (0..fs_blocks).filter(|&b| !vol.in_use_at_snapshot(b) && now[b as usize] != then[b as usize]);
        assert!(rewritten_free.count() >= new_chunks, "{what}: the new file went to free blocks");
        assert!(vol.volume_stats().skipped_free >= new_chunks as u64, "{what}");
        // The export: every block in use at snapshot time as it was, every free one zero.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("export.img");
        export(&vol, &out).unwrap();
        let img = geo.open(&out);
        let exported = digests(&img, fs_blocks);
        let zero = digests(&MemDevice::new(geo.bs(), 1), 1)[0];
        for b in 0..fs_blocks {
            let store = vol.lock().map.holds(b);
            let want = if vol.in_use_at_snapshot(b) && !store { then[b as usize] } else { zero };
            assert_eq!(exported[b as usize], want, "{what}: block {b} of the export");
        }
        assert_eq!(findings(&img), Vec::<String>::new(), "{what}: the export is clean");
        let img: Arc<dyn BlockDevice> = Arc::new(img);
        assert!(VolumeDevice::open(img, pool).unwrap().is_none(), "{what}: the export has no snapshot of its own");
    }
}

/// A br store taken with the default pool fits on a file system of any block size: it reserves
/// 4096 blocks, or an eighth of the file system's where that is fewer (4096 of UFS2's 32 KiB
/// blocks are the whole 128 MiB volume: the reservation failed for want of space).
#[test]
fn the_default_br_store_fits_a_file_system_of_large_blocks() {
    for geo in GEOMETRIES {
        let (dev, _) = volume(geo, geo.chunks());
        let inner: Arc<dyn BlockDevice> = dev.clone();
        VolumeDevice::create(inner.clone(), StoreKind::Br, PoolOptions::default(), 1)
            .unwrap_or_else(|e| panic!("{geo:?}: {e}"));
        let vol = VolumeDevice::open(inner, PoolOptions::default()).unwrap().unwrap();
        let want = 4096.min(geo.chunks() / 8);
        assert_eq!(vol.volume_stats().store_size, want, "{geo:?}");
        assert!(vol.invalid_reason().is_none(), "{geo:?}");
    }
}

#[test]
fn a_full_reserved_store_invalidates_the_snapshot() {
    for geo in GEOMETRIES {
        let fs_chunks = geo.chunks() - 40;
        let (dev, d) = volume(geo, fs_chunks);
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
        let skipped = vol.volume_stats().skipped_free;
        assert!(vol.invalid_reason().is_none() && skipped >= 400_000 / geo.bs() as u64, "{geo:?}: {skipped}");
        // Overwriting the files of snapshot time fills the 40 blocks (38 for data).
        for i in 0..40u64 {
            let dir = if i % 2 == 0 { ROOT_INO } else { d };
            let (ino, d) = fs.lookup(dir, format!("f{i}").as_bytes()).unwrap();
            fs.write(ino, 0, &pattern(i + 1, d.size as usize)).unwrap();
        }
        fs.unmount().unwrap();
        let reason = vol.invalid_reason().expect("invalidated");
        assert!(reason.contains("filled up"), "{geo:?}: {reason}");
        let mut b = vec![0u8; geo.bs()];
        assert!(matches!(vol.read_snapshot(0, &mut b), Err(VolumeError::Invalid(_))));
        // It stays invalid after a restart, and the file system is intact.
        let vol = VolumeDevice::open(inner.clone(), PoolOptions::default()).unwrap().unwrap();
        assert!(vol.invalid_reason().is_some());
        let origin = PrefixDevice { inner, blocks: fs_chunks * geo.frag() };
        assert_eq!(findings(&origin), Vec::<String>::new(), "{geo:?}");
    }
}

/// On UFS2 the device is addressed in fragments: a write of fragments from inside one chunk into
/// the next copies both chunks first, and a snapshot read at such an address is put together
/// from the chunks as they were.
#[test]
fn a_write_across_two_chunks_of_fragments_copies_both() {
    use crate::dev::{WriteKind, WriteReq};
    let geo = Geometry::Ufs2 { bsize: 4096, fsize: 1024 };
    let (bs, frag) = (geo.bs(), geo.frag());
    let fs_chunks = geo.chunks() - geo.chunks() / 8;
    let (dev, _) = volume(geo, fs_chunks);
    let inner: Arc<dyn BlockDevice> = dev.clone();
    VolumeDevice::create(inner.clone(), StoreKind::Reserved, geo.pool(), 3).unwrap();
    let vol = VolumeDevice::open(inner.clone(), geo.pool()).unwrap().expect("a snapshot");
    // Two neighbouring chunks in use at snapshot time (group 0's metadata).
    let c = (1..fs_chunks).find(|&c| vol.in_use_at_snapshot(c) && vol.in_use_at_snapshot(c + 1)).unwrap();
    let mut old = vec![0u8; 2 * bs];
    dev.read_block(c * frag, &mut old[..bs]).unwrap();
    dev.read_block((c + 1) * frag, &mut old[bs..]).unwrap();
    // A block's worth from chunk c's third fragment: its last two and chunk c + 1's first two.
    let at = c * frag + 2;
    let new = vec![0xa5u8; bs];
    vol.write_batch(&[WriteReq { bno: at, data: &new }], WriteKind::Sync).unwrap();
    let copied: Vec<u64> = vol.exception_blocks().iter().map(|e| e.0).collect();
    assert_eq!(copied.len(), 2, "{copied:?}");
    assert!(copied.contains(&c) && copied.contains(&(c + 1)), "{copied:?}");
    let mut b = vec![0u8; bs];
    dev.read_block(at, &mut b).unwrap();
    assert_eq!(b, new, "the write reached the device");
    vol.read_snapshot(at, &mut b).unwrap();
    assert!(b == old[2048..2048 + bs], "the snapshot read across the two chunks is as it was");
    for k in 0..2 {
        vol.read_snapshot((c + k) * frag, &mut b).unwrap();
        assert!(b == old[k as usize * bs..(k as usize + 1) * bs], "chunk {} as it was", c + k);
    }
    // Written again: nothing more to copy.
    vol.write_batch(&[WriteReq { bno: at, data: &new }], WriteKind::Sync).unwrap();
    assert_eq!(vol.volume_stats().exceptions, 2);
}
