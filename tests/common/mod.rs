//! Shared helpers for the integration tests: images made through the library.

#![allow(dead_code)]

pub mod fuse;
pub mod le;
pub mod mutate;
pub mod tree;
pub mod ufs2;

use std::process::{Command, Output};
use std::sync::Arc;

use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, MemDevice};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{mkfs, Fs, FsError, MkfsOptions, MountOptions, Ordering};

pub fn new_image(nblocks: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(4096, nblocks));
    mkfs(dev.clone(), &MkfsOptions::default(), (1_700_000_000, 0)).expect("mkfs");
    dev
}

pub fn mount(dev: &Arc<MemDevice>, ordering: Ordering, cache_blocks: usize) -> Fs {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(d, MountOptions { ordering, cache_blocks, readonly: false }, Arc::new(SimClock::new())).expect("mount")
}

/// Resolves a slash-separated path from the root.
pub fn resolve(fs: &mut Fs, path: &str) -> Result<u32, FsError> {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes())?.0;
    }
    Ok(ino)
}

/// The parent directory's inode and the last name of a path.
pub fn parent_of<'a>(fs: &mut Fs, path: &'a str) -> Result<(u32, &'a str), FsError> {
    let (dir, name) = match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    };
    let dir = resolve(fs, dir)?;
    if !fs.getattr(dir)?.is_dir() {
        return Err(FsError::NotDir);
    }
    Ok((dir, name))
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// fsck of the device must find nothing.
pub fn assert_clean(dev: &MemDevice) {
    let report = sufs_fs::fsck::check(dev).expect("fsck runs");
    let found: Vec<String> = report.findings.iter().map(|f| format!("{:?}: {f}", f.class())).collect();
    assert!(found.is_empty(), "fsck findings:\n{}", found.join("\n"));
    let sb =
        sufs_fs::format::Superblock::probe(|off, buf| sufs_fs::dev::read_bytes(dev, off, buf)).expect("superblock");
    assert_eq!(sb.flags & sufs_fs::format::SB_NEEDS_FSCK, 0, "a mount marked the file system for fsck");
}

/// The `sufs` binary under test.
pub const SUFS: &str = env!("CARGO_BIN_EXE_sufs");

/// Runs `sufs` with `args`.
pub fn sufs(args: &[&str]) -> Output {
    Command::new(SUFS).args(args).output().expect("run sufs")
}

/// Runs `sufs` and returns its stdout, failing the test on a non-zero exit.
pub fn ok(args: &[&str]) -> String {
    let out = sufs(args);
    assert!(out.status.success(), "sufs {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the image at `path` holds a UFS2 superblock where FreeBSD's newfs puts it (the
/// magic `FS_UFS2_MAGIC` at byte 1372 of the superblock at 65536), as `sufs mkfs` makes one.
pub fn is_ufs2_image(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileExt;
    let mut magic = [0u8; 4];
    let f = std::fs::File::open(path).unwrap();
    f.read_exact_at(&mut magic, 65536 + 1372).is_ok() && u32::from_le_bytes(magic) == 0x1954_0119
}

/// Whether `sufs dumpfs` says the UFS2 image at `img` is clean: its `clean` line, `fs_clean`
/// (a mount clears it, a clean unmount sets it). Fails the test on any other image.
pub fn dumpfs_says_clean(img: &std::path::Path) -> bool {
    let dump = ok(&["dumpfs", img.to_str().unwrap()]);
    match dump.lines().find_map(|l| l.strip_prefix("clean ")).map(str::trim) {
        Some("yes") => true,
        Some("no") => false,
        _ => panic!("no clean line (a UFS2 image?) in:\n{dump}"),
    }
}
