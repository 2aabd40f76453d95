//! Renames over one name, as mail delivery, editors' saves and `t_mtab`-style lock files do
//! all day, through the mount: each costs soft updates a bounded number of tasks, the
//! dependency structures stay under the memory bound, and the daemon's memory stays small.
//! (Renames over an existing name once made soft updates' work grow with the square of their
//! number: 3,000 of them ran 4.5 million tasks, and a daemon grew to gigabytes.)

mod common;

use std::fs;
use std::process::Stdio;

use common::fuse::{fsck_clean, fuse_available, mkfs, mount_fg_with};

/// Renames over one name in this test: enough that quadratic work (N²/2 = 200 million tasks)
/// could not pass, few enough for a debug build in CI.
const N: u64 = 20_000;

/// The number after `key` in the unmount report.
fn count_after(report: &str, key: &str) -> u64 {
    report
        .split(key)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|w| w.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        .unwrap_or_else(|| panic!("no {key:?} in the unmount report: {report:?}"))
}

/// The daemon's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn renames_over_one_name_cost_bounded_tasks_and_memory() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = (dir.path().join("r.img"), dir.path().join("mnt"));
    mkfs(&img, "256M");
    // A small memory bound, so that staying under it is a real constraint here.
    let limit = 20_000u64;
    let m =
        mount_fg_with(&img, &mnt, &["--ordering", "softdep", "--softdep-limit", &limit.to_string()], Stdio::piped());
    let d = mnt.join("spool");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("mtab"), b"first\n").unwrap();
    for i in 0..N {
        // A new file, named over the old one: the old inode goes with the rename.
        fs::write(d.join("mtab~"), format!("version {i}\n")).unwrap();
        fs::rename(d.join("mtab~"), d.join("mtab")).unwrap();
    }
    assert_eq!(fs::read(d.join("mtab")).unwrap(), format!("version {}\n", N - 1).into_bytes());
    assert_eq!(fs::read_dir(&d).unwrap().count(), 1, "one name left");
    let rss = peak_rss_kib(m.child.id());
    let report = m.umount_report();
    fsck_clean(&img);
    let tasks = count_after(&report, "roll-backs, ");
    let peak = count_after(&report, "at most ");
    eprintln!("{N} renames over one name: {tasks} tasks, at most {peak} structures (bound {limit}), daemon peak RSS {rss} KiB");
    // A create, a write and a rename over: a few tasks each (an inode freed, a name's
    // removal, a block freed), not a number that grows with the renames before it.
    assert!(tasks <= 8 * N, "{tasks} soft-updates tasks for {N} renames");
    assert!(peak <= limit + limit / 20, "{peak} dependency structures at once, bound {limit}");
    assert!(rss < 512 * 1024, "the daemon reached {rss} KiB");
}
