//! The volume snapshot under heavy writes, restarts, exports and a full store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::clock::SimClock;
use crate::dev::{BlockDevice, MemDevice};
use crate::format::{LOST_FOUND_INO, ROOT_INO};
use crate::fs::{lock, mkfs, Fs, MkfsOptions, MountOptions, SharedFs};

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
    mkfs(prefix, &MkfsOptions { ..Default::default() }, (1, 0)).unwrap();
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
        let snap =
            tree(&mut Fs::mount(Arc::new(SnapshotDevice(vol.clone())), ro.clone(), Arc::new(SimClock::new())).unwrap());
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
