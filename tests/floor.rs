//! The floor (`sufs bench floor-serve`, the peer that measures FUSE itself) is a file system:
//! through its mount, on each transport here, files and directories are made, written, read,
//! listed, renamed, linked and removed as POSIX says, and its requests are counted by opcode.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::fuse::{fuse_available, spawn_mounted};

/// The transports to try: classic always, io_uring where root has switched it on.
fn transports() -> Vec<&'static str> {
    let uring = fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|s| s.trim() == "Y");
    if !uring {
        eprintln!("SKIPPED on io_uring: FUSE over io_uring is off here");
    }
    if uring {
        vec!["classic", "uring"]
    } else {
        vec!["classic"]
    }
}

/// Everything the smoke test asks of a file system, under `m`.
fn exercise(m: &Path) {
    // create, write, read, stat
    let a = m.join("a");
    let mut f = fs::File::create(&a).unwrap();
    f.write_all(b"hello, floor").unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::read(&a).unwrap(), b"hello, floor");
    let st = fs::metadata(&a).unwrap();
    assert_eq!((st.len(), st.nlink(), st.mode() & 0o7777, st.is_file()), (12, 1, 0o644, true));
    // A write past the end leaves a hole of zeros; a truncation shortens.
    let mut f = fs::OpenOptions::new().write(true).open(&a).unwrap();
    f.seek(SeekFrom::Start(20)).unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    assert_eq!(fs::read(&a).unwrap(), b"hello, floor\0\0\0\0\0\0\0\0!");
    fs::OpenOptions::new().write(true).open(&a).unwrap().set_len(5).unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"hello");
    fs::set_permissions(&a, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(&a).unwrap().mode() & 0o7777, 0o600);
    // mkdir, rename into it, rename over a file, a hard link, a symlink
    let d = m.join("d");
    fs::create_dir(&d).unwrap();
    assert_eq!(fs::metadata(m).unwrap().nlink(), 3, "the root's link count counts d's \"..\"");
    fs::rename(&a, d.join("b")).unwrap();
    assert!(!a.exists());
    fs::write(d.join("c"), b"c").unwrap();
    fs::rename(d.join("c"), d.join("b")).unwrap();
    assert_eq!(fs::read(d.join("b")).unwrap(), b"c");
    fs::hard_link(d.join("b"), m.join("h")).unwrap();
    assert_eq!(fs::metadata(m.join("h")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("d/b", m.join("s")).unwrap();
    assert_eq!(fs::read_link(m.join("s")).unwrap(), Path::new("d/b"));
    assert_eq!(fs::read(m.join("s")).unwrap(), b"c");
    // readdir: every name once, with its type
    let mut names: Vec<(String, bool)> = fs::read_dir(m)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().into_string().unwrap(), e.file_type().unwrap().is_dir()))
        .collect();
    names.sort();
    assert_eq!(names, [("d".into(), true), ("h".into(), false), ("s".into(), false)]);
    // A listing goes on right while names are removed behind it (as rm -r does).
    let many = m.join("many");
    fs::create_dir(&many).unwrap();
    for i in 0..600 {
        fs::write(many.join(format!("f{i}")), []).unwrap();
    }
    assert_eq!(fs::read_dir(&many).unwrap().count(), 600);
    fs::remove_dir_all(&many).unwrap();
    // rmdir of a directory that is not empty, of one that is; a directory renamed elsewhere
    assert_eq!(fs::remove_dir(&d).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    fs::create_dir(d.join("sub")).unwrap();
    fs::rename(d.join("sub"), m.join("sub")).unwrap();
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m).unwrap().nlink(), 4);
    fs::remove_dir(m.join("sub")).unwrap();
    // An unlinked file open for reading and writing lives until it is closed.
    let mut open = fs::OpenOptions::new().read(true).write(true).open(d.join("b")).unwrap();
    fs::remove_file(d.join("b")).unwrap();
    fs::remove_file(m.join("h")).unwrap();
    open.write_all(b"x").unwrap();
    open.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    open.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"x");
    drop(open);
    fs::remove_file(m.join("s")).unwrap();
    fs::remove_dir(&d).unwrap();
    assert_eq!(fs::read_dir(m).unwrap().count(), 0);
    assert_eq!(fs::metadata(m).unwrap().nlink(), 2);
}

#[test]
fn the_floor_is_a_file_system_and_counts_its_requests() {
    if !fuse_available() {
        return;
    }
    for transport in transports() {
        let t = tempfile::tempdir().unwrap();
        let (mnt, stats) = (t.path().join("mnt"), t.path().join("stats.json"));
        let mut server = Command::new(env!("CARGO_BIN_EXE_sufs"));
        server.args(["bench", "floor-serve"]).arg(&mnt).args(["--transport", transport, "--stats"]).arg(&stats);
        let m = spawn_mounted(&mut server, &mnt);
        exercise(&mnt);
        m.umount();
        let v: serde_json::Value = serde_json::from_slice(&fs::read(&stats).unwrap()).unwrap();
        let n = |op: &str| v["fuse_messages"][op].as_u64().unwrap();
        assert!(n("create") >= 602, "{transport}: {v}");
        assert!(n("unlink") >= 603 && n("rmdir") >= 3 && n("rename") >= 3, "{transport}: {v}");
        assert!(n("mkdir") >= 3 && n("symlink") == 1 && n("link") == 1 && n("fsync") >= 1, "{transport}: {v}");
        assert!(n("write") >= 3 && n("read") >= 1 && n("lookup") >= 1, "{transport}: {v}");
    }
}
