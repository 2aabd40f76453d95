//! A directory read while its entries are renamed, through the mount (fstests'
//! readdir-while-renames, generic/736, at its full size): each entry seen is renamed to a
//! temporary name and back. The reader must end, seeing each entry about once; the unmount
//! that follows must not hang, and soft updates must write no more than synchronous writes
//! do. Skipped, with a message, where /dev/fuse is missing.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;

use common::fuse::*;

const N: usize = 5000;

/// What one ordering showed: entries seen, device writes, seconds the unmount took.
fn run(ordering: &str, dir: &Path) -> (usize, u64, f64) {
    let (img, mnt) = (dir.join(format!("{ordering}.img")), dir.join(format!("{ordering}.mnt")));
    mkfs(&img, "256M");
    let m = mount_fg_with(&img, &mnt, &["--ordering", ordering], Stdio::piped());
    let t = mnt.join("testdir");
    fs::create_dir(&t).unwrap();
    for i in 1..=N {
        fs::File::create(t.join(i.to_string())).unwrap();
    }
    let mut seen = 2; // "." and ".."
    for e in fs::read_dir(&t).unwrap() {
        let name = e.unwrap().file_name();
        seen += 1;
        assert!(seen <= 3 * N, "{ordering}: readdir never ends ({seen} entries seen)");
        fs::rename(t.join(&name), t.join("TEMPFILE")).unwrap();
        fs::rename(t.join("TEMPFILE"), t.join(&name)).unwrap();
    }
    let names = fs::read_dir(&t).unwrap().count();
    assert_eq!(names, N, "{ordering}: the directory lost or gained names");
    let start = Instant::now();
    let report = m.umount_report();
    let took = start.elapsed().as_secs_f64();
    fsck_clean(&img);
    // "... device reads R, writes W (S sync, A async) ..."
    let writes = report
        .split("writes ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no write count in the unmount report: {report:?}"));
    (seen, writes, took)
}

#[test]
fn readdir_while_renaming_ends_and_the_unmount_is_quick() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let soft = run("softdep", dir.path());
    let sync = run("sync", dir.path());
    eprintln!("readdir while renaming {N} files: softdep {soft:?}, sync {sync:?} (seen, writes, unmount s)");
    // Each entry seen about once: the renamed entry goes back where it was.
    assert!(soft.0 <= N + 2 + N / 50, "softdep: {} entries seen for {N} files", soft.0);
    assert!(soft.1 <= sync.1, "soft updates wrote more than sync: {} against {}", soft.1, sync.1);
    // A hang guard, not a speed target: the unmount once took half an hour here.
    assert!(soft.2 < Duration::from_secs(120).as_secs_f64(), "softdep unmount took {} s", soft.2);
}
