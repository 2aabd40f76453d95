//! Walks whose length a user chooses: a chain of nested directories deeper than any constant a
//! walk up the ".." entries might stop at. Soft updates must decide the same however deep the
//! chain is: a rename's old name leaves the disk once its new path is, sync drains, and the
//! image is left clean.

mod common;

use common::fuse::*;
use common::*;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, MemDevice};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Fs, MkfsOptions, MountOptions, Ordering, RenameFlags};

const NO: RenameFlags = RenameFlags { noreplace: false, exchange: false };

/// `depth` nested directories named `a` under `top`; returns the deepest.
fn chain(fs: &mut Fs, top: u32, depth: usize) -> u32 {
    let mut d = top;
    for _ in 0..depth {
        d = fs.mkdir(d, b"a", 0o755, 0, 0).unwrap().0;
    }
    d
}

/// A file renamed into the bottom of a chain 5,000 directories deep (a cap of 4,096 on the walk
/// up to the root answered "path pending" for ever): the old name's removal runs, sync drains,
/// a rename back works, and the image unmounts clean.
#[test]
fn rename_into_a_chain_deeper_than_any_cap() {
    let dev = new_image(32768);
    let mut fs = mount(&dev, Ordering::Softdep, 16384);
    let (tmp, _) = fs.mkdir(ROOT_INO, b"tmp", 0o1777, 0, 0).unwrap();
    let bottom = chain(&mut fs, tmp, 5000);
    let (f, _) = fs.create(tmp, b"f", 0o644, 65534, 65534).unwrap();
    fs.write(f, 0, b"x").unwrap();
    fs.rename(tmp, b"f", bottom, b"f", NO).unwrap();
    fs.sync_all().expect("sync drains after a rename into a deep chain");
    assert_eq!(fs.getattr(f).unwrap().nlink, 1, "the old name's link dropped");
    fs.rename(bottom, b"f", tmp, b"f", NO).expect("rename back");
    fs.sync_all().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
}

/// A soft-updates mount on simulated time, with its clock.
fn mount_timed(dev: &Arc<MemDevice>, cache_blocks: usize) -> (Fs, Arc<SimClock>) {
    let clock = Arc::new(SimClock::new());
    let d: Arc<dyn BlockDevice> = dev.clone();
    let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks, readonly: false };
    (Fs::mount(d, opts, clock.clone()).expect("mount"), clock)
}

/// True if the device, as a crash would leave it now, still names `tmp/f`.
fn old_name_on_disk(dev: &MemDevice) -> bool {
    let copy = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
    let mut fs = mount(&copy, Ordering::Softdep, 64);
    resolve(&mut fs, "tmp/f").is_ok()
}

/// A rename into the bottom of a chain `depth` deep whose old name's removal waits for the
/// chain's top, renamed and not yet on disk; then `rounds` fsyncs of other files (each a
/// completed write, after which the waiting removal is tried again). Returns the steps walked
/// up the tree and the time the fsyncs took; the removal runs once the top is written, and the
/// image unmounts clean.
fn retried_under_a_pending_top(depth: usize, rounds: usize) -> (u64, std::time::Duration) {
    let dev = Arc::new(MemDevice::new(4096, depth as u64 * 2 + 16384));
    let opts = MkfsOptions { inodes: Some(depth as u64 + 4096), ..MkfsOptions::default() };
    sufs_fs::fs::mkfs(dev.clone(), &opts, (1_700_000_000, 0)).expect("mkfs");
    let (mut fs, clock) = mount_timed(&dev, depth * 3 + 4096);
    let (tmp, _) = fs.mkdir(ROOT_INO, b"tmp", 0o1777, 0, 0).unwrap();
    let bottom = chain(&mut fs, tmp, depth);
    let (f, _) = fs.create(tmp, b"f", 0o644, 0, 0).unwrap();
    fs.sync_all().unwrap();
    fs.rename(tmp, b"f", bottom, b"f", NO).unwrap();
    // The new name and f's inode age past the sweep's 30 s; the chain's top is then renamed,
    // so the sweep writes the new name (its removal task runs) but not the top's new name.
    clock.advance(31_000_000_000);
    fs.rename(tmp, b"a", tmp, b"b", NO).unwrap();
    let t = Instant::now();
    for _ in 0..4 {
        fs.flush_older_than(30_000_000_000).unwrap();
    }
    assert!(old_name_on_disk(&dev), "the old name waits for the top's new name");
    let first = fs.path_walk_steps();
    assert!(first + 1 >= depth as u64, "the first try walked up to the top ({first} steps)");
    eprintln!("depth {depth}: the first try walked {first} steps, with the sweep's writes in {:?}", t.elapsed());
    let t = Instant::now();
    for i in 0..rounds {
        let (g, _) = fs.create(ROOT_INO, format!("g{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(g, 0, b"data").unwrap();
        fs.fsync(g).unwrap();
    }
    let spent = t.elapsed();
    let steps = fs.path_walk_steps() - first;
    assert!(old_name_on_disk(&dev), "the top's new name was not written, so the old name stays");
    fs.sync_all().unwrap();
    assert!(!old_name_on_disk(&dev), "the old name went with the top's new name");
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
    (steps, spent)
}

/// A removal waiting for a deep path is tried again after every completed write: what the first
/// walk found (the top's pending name) answers each retry while it holds, so a chain a user
/// made deep costs one walk, not one per write of anyone's.
#[test]
fn retries_of_a_deep_path_do_not_walk_it_again() {
    let depth = 3000;
    let (steps, _) = retried_under_a_pending_top(depth, 50);
    assert_eq!(steps, 0, "{steps} steps walked for 50 retries of a path {depth} deep");
}

/// The same with a chain 100,000 deep, timed (run by hand: `cargo test --release --test
/// hostile_walks -- --ignored --nocapture`).
#[test]
#[ignore]
fn retries_of_a_100000_deep_path_timed() {
    let (steps, spent) = retried_under_a_pending_top(100_000, 200);
    eprintln!("100000 deep, 200 fsyncs while a removal waits: {steps} more steps walked, {spent:?}");
}

/// Runs a Python program as user nobody (uid and gid 65534, no groups) in directory `cwd`;
/// its standard output.
fn as_nobody(cwd: &Path, program: &str) -> String {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", program])
        .current_dir(cwd)
        .output()
        .expect("run setpriv and python3");
    assert!(out.status.success(), "as nobody: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Walks down the chain of `a`s under `tmp` (a path longer than PATH_MAX: one directory at a
/// time) and leaves `d` open on the bottom one: Python text for `as_nobody`.
const WALK_DOWN: &str = "import os
top=os.open('tmp',os.O_RDONLY)
d=os.dup(top)
while True:
    try: n=os.open('a',os.O_RDONLY,dir_fd=d)
    except FileNotFoundError: break
    os.close(d); d=n
";

/// The audit's reproduction through a real mount: user nobody makes 4,097 nested directories in
/// a world-writable directory and renames a file into the bottom one. `sufs sync` must succeed
/// for everyone, the rename back must work, the unmount must leave the image clean, and fsck
/// must find nothing (a walk capped at 4,096 steps kept the old name pending for ever).
#[test]
fn a_user_chain_deeper_than_any_cap_does_not_wedge_the_mount() {
    // 64 MiB has too few inodes for the chain.
    let Some((_t, img, mnt, m)) = sized_mount("256M") else { return };
    std::fs::create_dir(mnt.join("tmp")).unwrap();
    let mut perm = std::fs::metadata(mnt.join("tmp")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o1777);
    std::fs::set_permissions(mnt.join("tmp"), perm).unwrap();
    as_nobody(
        &mnt,
        "import os
d=os.open('tmp',os.O_RDONLY)
for i in range(4097):
    os.mkdir('a',dir_fd=d); n=os.open('a',os.O_RDONLY,dir_fd=d); os.close(d); d=n
open('tmp/f','w').write('x')
os.rename('tmp/f',f'/proc/self/fd/{d}/f')",
    );
    let sync = sufs(&["sync", mnt.to_str().unwrap()]);
    assert!(
        sync.status.success(),
        "sufs sync after a rename into a deep chain: {}",
        String::from_utf8_lossy(&sync.stderr)
    );
    let depth = as_nobody(
        &mnt,
        &format!("{WALK_DOWN}os.rename('f','f',src_dir_fd=d,dst_dir_fd=top)\nprint(open('tmp/f').read())"),
    );
    assert_eq!(depth.trim(), "x", "the file renamed back");
    let sync = sufs(&["sync", mnt.to_str().unwrap()]);
    assert!(sync.status.success(), "sufs sync after the rename back: {}", String::from_utf8_lossy(&sync.stderr));
    m.umount();
    assert!(common::dumpfs_says_clean(&img), "the unmount left the image unclean");
    fsck_clean(&img);
}

/// fsync of a file at the bottom of a chain of new directories, every name on the way not yet
/// on disk: its path up is walked once a round, not once per directory in it (each walked the whole
/// path: 20,000 deep took 676 s under the mount's lock, release), and a second fsync, with
/// nothing pending, walks nothing. The file is durable under its path.
#[test]
fn fsync_below_a_new_deep_chain_walks_it_once_a_round() {
    let depth = 3000;
    let dev = new_image(16384);
    let (mut fs, _clock) = mount_timed(&dev, 16384);
    let (tmp, _) = fs.mkdir(ROOT_INO, b"tmp", 0o1777, 0, 0).unwrap();
    fs.sync_all().unwrap();
    let bottom = chain(&mut fs, tmp, depth);
    let (f, _) = fs.create(bottom, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"x").unwrap();
    let steps0 = fs.path_walk_steps();
    fs.fsync(f).unwrap();
    let steps = fs.path_walk_steps() - steps0;
    // One walk a round (an fsync makes at most 16 before it writes everything).
    assert!(steps <= 16 * (depth as u64 + 1), "fsync walked {steps} steps up a chain {depth} deep");
    let copy = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
    let path = format!("tmp/{}f", "a/".repeat(depth));
    assert!(resolve(&mut mount(&copy, Ordering::Softdep, 64), &path).is_ok(), "the file is durable");
    let steps0 = fs.path_walk_steps();
    fs.fsync(f).unwrap();
    assert_eq!(fs.path_walk_steps(), steps0, "nothing pending: nothing walked");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
}
