//! Access times and synchronous mounts through the library (`fs::mountopt`): relatime,
//! strictatime, noatime and nodiratime on a simulated clock, what an atime change costs (no
//! write until the delayed writes go), that it survives unmount, and that `dirsync`/`sync`
//! changes are on the device before the call returns (a copy of the device taken right after
//! holds them).

mod common;

use std::sync::Arc;

use common::{assert_clean, new_image};
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, MemDevice};
use sufs_fs::format::{Dinode, ROOT_INO};
use sufs_fs::fs::mountopt::{AtimeMode, AtimePolicy, Change, Remount, SyncMode};
use sufs_fs::fs::{Fs, MountOptions, Ordering};

const SEC: u64 = 1_000_000_000;
const DAY: u64 = 24 * 3600 * SEC;

fn mount(dev: &Arc<MemDevice>, ordering: Ordering, clock: &Arc<SimClock>, readonly: bool) -> Fs {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(d, MountOptions { ordering, cache_blocks: 512, readonly }, clock.clone()).expect("mount")
}

fn atime(d: &Dinode) -> (i64, u32) {
    (d.atime, d.atime_ns)
}

fn writes(fs: &Fs) -> u64 {
    fs.stats().device.writes()
}

#[test]
fn relatime_updates_after_a_change_and_once_a_day_without_writing() {
    for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
        let dev = new_image(4096);
        let clock = Arc::new(SimClock::new());
        let mut fs = mount(&dev, ordering, &clock, false);
        assert_eq!(fs.atime_policy(), AtimePolicy::NOATIME, "the library starts with noatime");
        fs.set_atime_policy(AtimePolicy::default());
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, b"hello").unwrap();
        fs.sync_all().unwrap();
        let made = fs.getattr(f).unwrap();

        // First read after the write: atime moves to now, and nothing is written for it.
        clock.advance(SEC);
        let before = writes(&fs);
        assert_eq!(fs.read(f, 0, 5).unwrap(), b"hello");
        let d = fs.getattr(f).unwrap();
        assert_eq!(atime(&d), clock_wall(&clock), "{ordering}: first read after a change");
        assert_eq!((d.mtime, d.mtime_ns, d.ctime, d.ctime_ns), (made.mtime, made.mtime_ns, made.ctime, made.ctime_ns));
        assert_eq!(writes(&fs), before, "{ordering}: an atime change is a delayed write");

        // Again within the day: no change.
        clock.advance(3600 * SEC);
        fs.read(f, 0, 5).unwrap();
        assert_eq!(atime(&fs.getattr(f).unwrap()), atime(&d), "{ordering}: second read");
        // A day later: it moves.
        clock.advance(DAY);
        fs.read(f, 0, 1).unwrap();
        assert_eq!(atime(&fs.getattr(f).unwrap()), clock_wall(&clock), "{ordering}: a day later");
        // A read past the end is an access too.
        clock.advance(SEC);
        fs.write(f, 5, b"!").unwrap();
        clock.advance(SEC);
        assert!(fs.read(f, 100, 5).unwrap().is_empty());
        let last = clock_wall(&clock);
        assert_eq!(atime(&fs.getattr(f).unwrap()), last, "{ordering}: read at the end after a write");

        // The atime reaches the disk with the delayed writes, and the image stays clean.
        fs.unmount().unwrap();
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, &clock, false);
        assert_eq!(atime(&fs.getattr(f).unwrap()), last, "{ordering}: after a remount");
        fs.unmount().unwrap();
    }
}

fn clock_wall(c: &SimClock) -> (i64, u32) {
    use sufs_fs::clock::Clock;
    c.wall()
}

#[test]
fn strict_no_nodir_and_read_only() {
    let dev = new_image(4096);
    let clock = Arc::new(SimClock::new());
    let mut fs = mount(&dev, Ordering::Softdep, &clock, false);
    let (dir, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(dir, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"x").unwrap();
    let (l, _) = fs.symlink(dir, b"l", b"f", 0, 0).unwrap();

    fs.set_atime_policy(AtimePolicy { mode: AtimeMode::Strictatime, nodiratime: false });
    for _ in 0..3 {
        clock.advance(SEC);
        fs.read(f, 0, 1).unwrap();
        assert_eq!(atime(&fs.getattr(f).unwrap()), clock_wall(&clock), "strictatime: every read");
        fs.readdir(dir, 0, 100).unwrap();
        assert_eq!(atime(&fs.getattr(dir).unwrap()), clock_wall(&clock), "strictatime: every listing");
        fs.readlink(l).unwrap();
        assert_eq!(atime(&fs.getattr(l).unwrap()), clock_wall(&clock), "strictatime: every readlink");
    }

    fs.set_atime_policy(AtimePolicy { mode: AtimeMode::Strictatime, nodiratime: true });
    let dir_before = atime(&fs.getattr(dir).unwrap());
    clock.advance(SEC);
    fs.readdir(dir, 0, 100).unwrap();
    fs.read(f, 0, 1).unwrap();
    assert_eq!(atime(&fs.getattr(dir).unwrap()), dir_before, "nodiratime: listings leave directories alone");
    assert_eq!(atime(&fs.getattr(f).unwrap()), clock_wall(&clock), "nodiratime: files still change");

    fs.set_atime_policy(AtimePolicy::NOATIME);
    let f_before = atime(&fs.getattr(f).unwrap());
    clock.advance(2 * DAY);
    fs.write(f, 0, b"y").unwrap();
    fs.read(f, 0, 1).unwrap();
    fs.readdir(dir, 0, 100).unwrap();
    assert_eq!(atime(&fs.getattr(f).unwrap()), f_before, "noatime");
    fs.unmount().unwrap();
    assert_clean(&dev);

    // A read-only mount changes nothing, whatever the rule.
    let image = dev.blocks();
    let mut ro = mount(&dev, Ordering::Softdep, &clock, true);
    ro.set_atime_policy(AtimePolicy { mode: AtimeMode::Strictatime, nodiratime: false });
    clock.advance(SEC);
    ro.read(f, 0, 1).unwrap();
    ro.readdir(dir, 0, 100).unwrap();
    assert_eq!(atime(&ro.getattr(f).unwrap()), f_before);
    ro.unmount().unwrap();
    assert!(dev.blocks() == image, "a read-only mount wrote to the device");
}

/// fsck may find what a crash leaves (leaks), but nothing that breaks the rules.
fn no_violations(dev: &MemDevice) {
    let report = sufs_fs::fsck::check(dev).expect("fsck runs");
    assert_eq!(report.violations(), 0, "{:?}", report.findings);
}

/// A copy of the device as it is now: what a crash would leave.
fn crash_copy(dev: &MemDevice) -> Arc<MemDevice> {
    Arc::new(MemDevice::from_blocks(dev.block_size(), dev.blocks()))
}

fn names(dev: &Arc<MemDevice>, dir_path: &[&[u8]]) -> Vec<Vec<u8>> {
    let clock = Arc::new(SimClock::new());
    let mut fs = mount(dev, Ordering::Async, &clock, true);
    let mut dir = ROOT_INO;
    for p in dir_path {
        dir = fs.lookup(dir, p).unwrap().0;
    }
    let mut v: Vec<Vec<u8>> =
        fs.readdir(dir, 0, 1000).unwrap().into_iter().map(|e| e.name).filter(|n| n != b"." && n != b"..").collect();
    v.sort();
    v
}

#[test]
fn dirsync_and_sync_changes_are_on_the_device_when_they_return() {
    for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
        let dev = new_image(4096);
        let clock = Arc::new(SimClock::new());
        let mut fs = mount(&dev, ordering, &clock, false);
        fs.set_sync_mode(SyncMode { sync: false, dirsync: true });
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        fs.settle(Change::Names, &[d]).unwrap();
        let (f, _) = fs.create(d, b"f", 0o644, 0, 0).unwrap();
        fs.settle(Change::Names, &[f]).unwrap();
        let (g, _) = fs.create(d, b"g", 0o644, 0, 0).unwrap();
        fs.settle(Change::Names, &[g]).unwrap();
        let crash = crash_copy(&dev);
        no_violations(&crash);
        assert_eq!(names(&crash, &[b"d"]), [b"f".to_vec(), b"g".to_vec()], "{ordering}: dirsync create");

        fs.unlink(d, b"g").unwrap();
        fs.settle(Change::Names, &[d]).unwrap();
        fs.rename(d, b"f", ROOT_INO, b"moved", Default::default()).unwrap();
        fs.settle(Change::Names, &[f, d]).unwrap();
        let crash = crash_copy(&dev);
        no_violations(&crash);
        assert!(names(&crash, &[b"d"]).is_empty(), "{ordering}: dirsync unlink and rename out");
        assert!(names(&crash, &[]).contains(&b"moved".to_vec()), "{ordering}: dirsync rename in");

        // dirsync leaves data delayed; sync does not.
        fs.write(f, 0, b"data").unwrap();
        fs.settle(Change::Data, &[f]).unwrap();
        let before = writes(&fs);
        fs.set_sync_mode(SyncMode { sync: true, dirsync: false });
        fs.write(f, 0, b"DATA").unwrap();
        fs.settle(Change::Data, &[f]).unwrap();
        assert!(writes(&fs) > before, "{ordering}: sync writes the data at once");
        let crash = crash_copy(&dev);
        let mut c = mount(&crash, Ordering::Async, &clock, true);
        let moved = c.lookup(ROOT_INO, b"moved").unwrap().0;
        assert_eq!(c.read(moved, 0, 10).unwrap(), b"DATA", "{ordering}: sync write");
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn remount_read_only_marks_clean_and_back() {
    let dev = new_image(4096);
    let clock = Arc::new(SimClock::new());
    let mut fs = mount(&dev, Ordering::Softdep, &clock, false);
    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"before").unwrap();
    let st = fs.remount(&Remount { readonly: Some(true), ..Default::default() }).unwrap();
    assert_eq!(st.readonly, Some(true));
    assert!(fs.is_readonly());
    // Everything is on the device and the image is clean, while still mounted.
    assert_clean(&crash_copy(&dev));
    assert!(fs.write(f, 0, b"x").is_err(), "read-only refuses writes");
    assert!(fs.remount(&Remount { ordering: Some(Ordering::Sync), ..Default::default() }).is_err());
    let st = fs
        .remount(&Remount {
            readonly: Some(false),
            atime: Some(AtimeMode::Strictatime),
            dirsync: Some(true),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        (st.readonly, st.atime, st.dirsync, st.sync),
        (Some(false), Some(AtimeMode::Strictatime), Some(true), Some(false))
    );
    fs.write(f, 0, b"after!").unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);

    // A read-only mount of a device that takes writes may become read-write only when allowed.
    let mut ro = mount(&dev, Ordering::Softdep, &clock, true);
    assert!(ro.remount(&Remount { readonly: Some(false), ..Default::default() }).is_err());
    ro.allow_remount_rw(true);
    ro.remount(&Remount { readonly: Some(false), ..Default::default() }).unwrap();
    assert_eq!(ro.read(f, 0, 6).unwrap(), b"after!");
    ro.write(f, 0, b"third!").unwrap();
    ro.unmount().unwrap();
    assert_clean(&dev);
}

/// A read-only mount of an image left unclean becomes read-write where FFS lets it: after soft
/// updates (a crash leaves only leaks and link counts too high), not after `sync` or `async`,
/// nor when a mount found damage. The crash here holds a file removed while open, whose inode
/// and blocks leak; fsck then finds leaks, no violation.
#[test]
fn remount_read_write_of_an_unclean_image_as_ffs_does() {
    let clock = Arc::new(SimClock::new());
    for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, &clock, false);
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[1u8; 20_000]).unwrap();
        fs.open(f, true).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.sync_all().unwrap();
        let crashed = crash_copy(&dev);
        let mut ro = mount(&crashed, ordering, &clock, true);
        ro.allow_remount_rw(true);
        let r = ro.remount(&Remount { readonly: Some(false), ..Default::default() });
        if ordering != Ordering::Softdep {
            assert!(r.is_err(), "{ordering}: an unclean {ordering} image needs fsck first");
            continue;
        }
        r.unwrap();
        let (g, _) = ro.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
        ro.write(g, 0, b"after the crash").unwrap();
        ro.unmount().unwrap();
        no_violations(&crashed);
        let mut again = mount(&crashed, ordering, &clock, true);
        assert_eq!(again.read(g, 0, 100).unwrap(), b"after the crash");
    }
    // An image a mount marked for fsck stays read-only.
    let dev = new_image(4096);
    let mut fs = mount(&dev, Ordering::Softdep, &clock, false);
    let _ = fs.damaged("a test's damage".into());
    let crashed = crash_copy(&dev);
    let mut ro = mount(&crashed, Ordering::Softdep, &clock, true);
    ro.allow_remount_rw(true);
    assert!(ro.remount(&Remount { readonly: Some(false), ..Default::default() }).is_err());
}
