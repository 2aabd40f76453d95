//! Four threads churn a small set of names on a real soft updates mount for ten seconds:
//! create and write, rename (across directories, over existing names), swaps through a
//! temporary name and by RENAME_EXCHANGE, hard links, unlinks and fsyncs, each thread with its
//! own system calls. The server must survive until unmount, and fsck must find the image
//! clean. Skipped, with a message, where /dev/fuse is missing.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::fuse::*;

const THREADS: u64 = 4;
const CHURN: Duration = Duration::from_secs(10);
const DIRS: [&str; 3] = ["", "d/", "d/e/"];
const NAMES: [&str; 5] = ["a", "b", "c", "f", "g"];

/// Errors a racing operation may meet: the name went or came meanwhile, or is of the other kind.
fn expected(e: &std::io::Error) -> bool {
    let ok = [libc::ENOENT, libc::EEXIST, libc::EISDIR, libc::ENOTDIR, libc::ENOTEMPTY, libc::EMLINK];
    e.raw_os_error().is_some_and(|c| ok.contains(&c))
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn path(&mut self, m: &Path) -> PathBuf {
        let d = DIRS[self.below(DIRS.len() as u64) as usize];
        m.join(format!("{d}{}", NAMES[self.below(NAMES.len() as u64) as usize]))
    }
}

fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let c = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let (a, b) = (c(a), c(b));
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One operation on the shared names; unexpected errors are returned with what was tried.
fn churn_once(m: &Path, rng: &mut Rng, t: u64, n: u64) -> Result<(), String> {
    let (x, y) = (rng.path(m), rng.path(m));
    let tmp = m.join(format!("tmp{t}-{n}"));
    let what = rng.below(8);
    let r = match what {
        0 => fs::File::create(&x).and_then(|mut f| f.write_all(&vec![t as u8; 1 + rng.below(20_000) as usize])),
        1 => fs::rename(&x, &y),
        2 => fs::rename(&x, &tmp).and_then(|_| fs::rename(&y, &x)).and_then(|_| fs::rename(&tmp, &y)),
        3 => exchange(&x, &y),
        4 => fs::hard_link(&x, &y),
        5 => fs::remove_file(&x),
        _ => fs::OpenOptions::new().append(true).open(&x).and_then(|mut f| {
            f.write_all(b"fsync me")?;
            f.sync_all()
        }),
    };
    // A swap broken off half-way leaves its temporary name: it goes, to keep the set small.
    let _ = fs::remove_file(&tmp);
    match r {
        Err(e) if !expected(&e) => Err(format!("operation {what} on {x:?}, {y:?}: {e}")),
        _ => Ok(()),
    }
}

#[test]
fn four_threads_churn_names_on_a_softdep_mount() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = (dir.path().join("img"), dir.path().join("mnt"));
    mkfs(&img, "64M");
    let mut mounted = mount_fg(&img, &mnt, &["--ordering", "softdep", "--threads", "4"]);
    fs::create_dir_all(mnt.join("d/e")).unwrap();
    let ops = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (m, ops) = (mnt.clone(), ops.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
                let mut n = 0;
                while start.elapsed() < CHURN {
                    churn_once(&m, &mut rng, t, n)?;
                    n += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
                Ok(())
            })
        })
        .collect();
    let results: Vec<Result<(), String>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let alive = mounted.child.try_wait().unwrap();
    assert!(alive.is_none(), "the server died during the churn: {alive:?}");
    for r in results {
        r.unwrap();
    }
    let done = ops.load(Ordering::Relaxed);
    eprintln!("{done} operations in {CHURN:?}");
    assert!(done > 400, "too little churn: {done} operations");
    mounted.umount();
    fsck_clean(&img);
}
