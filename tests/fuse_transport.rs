//! The mount's two transports (`--transport classic|uring|auto`): each serves every request,
//! fsync means durable on each (a daemon killed with SIGKILL loses nothing fsync'ed), and the
//! mount says which it took. The io_uring parts need root to have switched FUSE over io_uring
//! on (`echo Y > /sys/module/fuse/parameters/enable_uring`; `.ci/run` does, and puts it back);
//! where it is off they say SKIPPED.

mod common;

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fuse::*;
use common::{sufs, SUFS};

const PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

fn uring_on() -> bool {
    fs::read_to_string(PARAMETER).is_ok_and(|s| s.trim() == "Y")
}

/// The transports this machine can test: classic always, io_uring where it is on.
fn transports() -> Vec<&'static str> {
    if uring_on() {
        vec!["classic", "uring"]
    } else {
        eprintln!("SKIPPED: the io_uring transport (FUSE over io_uring is off: {PARAMETER})");
        vec!["classic"]
    }
}

/// `sufs mount IMAGE DIR -f --transport T`, its messages going to `log`.
fn mount_on(img: &Path, mnt: &Path, transport: &str, log: &Path) -> Mounted {
    fs::create_dir_all(mnt).unwrap();
    let err = File::create(log).unwrap();
    let mut child = Command::new(SUFS)
        .args(["mount", img.to_str().unwrap(), mnt.to_str().unwrap(), "-f", "--transport", transport])
        .env_remove("SUFS_TRANSPORT")
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !is_mounted(mnt) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("sufs mount --transport {transport} exited early: {st}: {}", fs::read_to_string(log).unwrap());
        }
        assert!(start.elapsed() < Duration::from_secs(20), "mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    Mounted { child, dir: mnt.to_path_buf(), done: false }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed as usize * 131 + i * 7 + i / 4096) as u8).collect()
}

/// Waits for the mount's log to name its transport.
fn transport_said(log: &Path) -> String {
    let start = Instant::now();
    loop {
        let text = fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains("transport: ")) {
            return l.to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the mount did not say its transport: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Files written and fsync'ed (small ones, one of 9 MiB through the double indirect block, a
/// directory's entries), then SIGKILL: after a preen and a remount on the same transport,
/// every fsync'ed byte is there.
#[test]
fn fsynced_data_survives_a_kill_on_each_transport() {
    if !fuse_available() {
        return;
    }
    for transport in transports() {
        let t = tempfile::tempdir().unwrap();
        let (img, mnt, log) = (t.path().join("img"), t.path().join("mnt"), t.path().join("log"));
        mkfs(&img, "256M");
        let m = mount_on(&img, &mnt, transport, &log);
        let said = transport_said(&log);
        let want = if transport == "uring" { "io_uring" } else { "classic" };
        assert!(said.contains(want), "{transport}: {said}");
        let d = mnt.join("d");
        fs::create_dir(&d).unwrap();
        for i in 0..40u64 {
            let mut f = File::create(d.join(format!("f{i}"))).unwrap();
            f.write_all(&pattern(i, 1 + i as usize * 997)).unwrap();
            f.sync_all().unwrap();
        }
        File::open(&d).unwrap().sync_all().unwrap();
        let mut big = File::create(mnt.join("big")).unwrap();
        big.write_all(&pattern(99, 9 << 20)).unwrap();
        big.sync_all().unwrap();
        fs::write(mnt.join("late"), b"not fsync'ed: may be lost").unwrap();
        crash(m);

        let out = sufs(&["fsck", "-p", img.to_str().unwrap()]);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{transport}: {}", String::from_utf8_lossy(&out.stdout));
        fsck_clean(&img);
        let m = mount_on(&img, &mnt, transport, &log);
        for i in 0..40u64 {
            assert_eq!(
                fs::read(d.join(format!("f{i}"))).unwrap(),
                pattern(i, 1 + i as usize * 997),
                "{transport}: f{i}"
            );
        }
        assert_eq!(fs::read(mnt.join("big")).unwrap(), pattern(99, 9 << 20), "{transport}: big");
        m.umount();
        fsck_clean(&img);
    }
}

/// Eight threads at once, each with files of its own: creates, 1 MiB writes and reads (the
/// largest requests and replies a ring's buffers carry), random small writes read back,
/// renames, a directory of 3,000 names listed whole (replies filled to the brim), removals.
/// Every result is checked, then unmount, fsck, remount and a second look.
#[test]
fn many_threads_at_once_on_each_transport() {
    if !fuse_available() {
        return;
    }
    for transport in transports() {
        let t = tempfile::tempdir().unwrap();
        let (img, mnt, log) = (t.path().join("img"), t.path().join("mnt"), t.path().join("log"));
        mkfs(&img, "512M");
        let m = mount_on(&img, &mnt, transport, &log);
        let workers: Vec<_> = (0..8u64)
            .map(|w| {
                let dir = mnt.join(format!("w{w}"));
                std::thread::spawn(move || work(w, &dir))
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let names = fs::read_dir(mnt.join("w0/many")).unwrap().count();
        assert_eq!(names, 3000, "{transport}");
        m.umount();
        fsck_clean(&img);
        let m = mount_on(&img, &mnt, transport, &log);
        for w in 0..8u64 {
            check(w, &mnt.join(format!("w{w}")));
        }
        m.umount();
        fsck_clean(&img);
    }
}

/// One worker's files (`check` knows what they hold at the end).
fn work(w: u64, dir: &PathBuf) {
    fs::create_dir(dir).unwrap();
    let mut big = File::options().read(true).write(true).create(true).truncate(true).open(dir.join("big")).unwrap();
    let data = pattern(w, 4 << 20);
    for chunk in data.chunks(1 << 20) {
        big.write_all(chunk).unwrap();
    }
    big.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    big.read_to_end(&mut back).unwrap();
    assert!(back == data, "worker {w}: 4 MiB read back");
    for i in 0..50u64 {
        let off = (i * 65_537 + w * 4099) % (4 << 20);
        big.seek(SeekFrom::Start(off)).unwrap();
        big.write_all(&[w as u8 ^ i as u8; 100]).unwrap();
    }
    for i in 0..200u64 {
        let p = dir.join(format!("s{i}"));
        fs::write(&p, pattern(w * 1000 + i, (i as usize * 61) % 9000)).unwrap();
        if i % 3 == 0 {
            fs::rename(&p, dir.join(format!("r{i}"))).unwrap();
        }
        if i % 5 == 0 {
            let _ = fs::remove_file(dir.join(format!("s{i}")));
        }
    }
    if w == 0 {
        fs::create_dir(dir.join("many")).unwrap();
        for i in 0..3000 {
            File::create(dir.join("many").join(format!("a-rather-long-name-to-fill-a-reply-{i:05}"))).unwrap();
        }
    }
    check(w, dir);
}

fn check(w: u64, dir: &Path) {
    let mut want = pattern(w, 4 << 20);
    for i in 0..50u64 {
        let off = ((i * 65_537 + w * 4099) % (4 << 20)) as usize;
        if want.len() < off + 100 {
            want.resize(off + 100, 0);
        }
        want[off..off + 100].fill(w as u8 ^ i as u8);
    }
    assert!(fs::read(dir.join("big")).unwrap() == want, "worker {w}: big");
    for i in 0..200u64 {
        let body = pattern(w * 1000 + i, (i as usize * 61) % 9000);
        let (s, r) = (dir.join(format!("s{i}")), dir.join(format!("r{i}")));
        if i % 3 == 0 {
            assert_eq!(fs::read(&r).unwrap(), body, "worker {w}: r{i}");
            assert!(!s.exists());
        } else if i % 5 == 0 {
            assert!(!s.exists(), "worker {w}: s{i} removed");
        } else {
            assert_eq!(fs::read(&s).unwrap(), body, "worker {w}: s{i}");
        }
    }
}

/// On io_uring each queue's threads (`sufs-ringQ.N`) may run only on their queue's CPU Q, the
/// one whose callers' requests the kernel puts on that queue (where this process may run on
/// it: a thread of another queue is left as the process was).
#[test]
fn ring_threads_run_on_their_queues_cpu() {
    if !fuse_available() {
        return;
    }
    if !uring_on() {
        eprintln!("SKIPPED: the io_uring transport (FUSE over io_uring is off: {PARAMETER})");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt, log) = (t.path().join("img"), t.path().join("mnt"), t.path().join("log"));
    mkfs(&img, "64M");
    let m = mount_on(&img, &mnt, "uring", &log);
    assert!(transport_said(&log).contains("io_uring"));
    let ours = cpus_allowed(&fs::read_to_string("/proc/self/status").unwrap());
    let mut rings = 0;
    for task in fs::read_dir(format!("/proc/{}/task", m.child.id())).unwrap() {
        let task = task.unwrap().path();
        let comm = fs::read_to_string(task.join("comm")).unwrap();
        let Some(qid) = comm.trim().strip_prefix("sufs-ring").and_then(|q| q.split('.').next()) else {
            continue;
        };
        let qid: usize = qid.parse().unwrap();
        let allowed = cpus_allowed(&fs::read_to_string(task.join("status")).unwrap());
        let want = if ours.contains(&qid) { vec![qid] } else { ours.clone() };
        assert_eq!(allowed, want, "{}", comm.trim());
        rings += 1;
    }
    assert!(rings >= 2, "two threads a queue by default, {rings} found");
    m.umount();
    fsck_clean(&img);
}

/// The CPUs of a /proc status's `Cpus_allowed_list` ("0-3,6").
fn cpus_allowed(status: &str) -> Vec<usize> {
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// `--transport uring` where the kernel does not offer it is refused with the way to switch
/// it on; `auto` then takes the classic transport and says why.
#[test]
fn uring_not_offered_is_refused_and_auto_falls_back() {
    if !fuse_available() {
        return;
    }
    if uring_on() {
        eprintln!("SKIPPED: FUSE over io_uring is on here, so it cannot be refused");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt, log) = (t.path().join("img"), t.path().join("mnt"), t.path().join("log"));
    mkfs(&img, "64M");
    fs::create_dir_all(&mnt).unwrap();
    let out = Command::new(SUFS)
        .args(["mount", img.to_str().unwrap(), mnt.to_str().unwrap(), "-f", "--transport", "uring"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("io_uring") && err.contains(PARAMETER), "{err}");
    assert!(!is_mounted(&mnt));
    let m = mount_on(&img, &mnt, "auto", &log);
    assert!(transport_said(&log).contains("classic"));
    fs::write(mnt.join("f"), b"served").unwrap();
    m.umount();
    fsck_clean(&img);
}
