//! A file system that knows nothing of sufs, served by `fuse_uring::run`: a read-only root with
//! one file, mounted on each transport this machine offers, read through the kernel, unmounted.
//! What a fuser file system adds to use the crate is all here: `Negotiated::negotiate` in its
//! `init`, and `run` instead of `Session::run`. Needs root and /dev/fuse (skipped otherwise);
//! the io_uring half needs `enable_uring` on (skipped otherwise, and `uring` then refused).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuse_uring::{Negotiated, Transport};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, KernelConfig, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, Request,
};

const ROOT: u64 = 1;
const FILE: u64 = 2;
const NAME: &str = "hello";

/// The file's bytes: larger than one ring payload (1 MiB), so that reading it takes several
/// requests, each a different pattern of bytes.
fn contents() -> Vec<u8> {
    (0..3 * (1 << 20) + 12345).map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8).collect()
}

/// The whole file system: a root directory and one read-only file.
struct Hello {
    data: Vec<u8>,
    negotiated: Arc<Negotiated>,
}

impl Hello {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            _ => (FileType::RegularFile, 0o444, self.data.len() as u64, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

const TTL: Duration = Duration::from_secs(1);

impl Filesystem for Hello {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.negotiated.negotiate(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == NAME {
            reply.entry(&TTL, &self.attr(FILE), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            ROOT | FILE => reply.attr(&TTL, &self.attr(ino.0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino.0 != FILE {
            return reply.error(Errno::ENOENT);
        }
        let start = (offset as usize).min(self.data.len());
        let end = (start + size as usize).min(self.data.len());
        reply.data(&self.data[start..end]);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOENT);
        }
        let entries =
            [(ROOT, FileType::Directory, "."), (ROOT, FileType::Directory, ".."), (FILE, FileType::RegularFile, NAME)];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

/// Mounts `Hello` on a new directory served on `transport`, runs `check` on the mount point,
/// unmounts; returns what `run` returned and what it said.
fn serve(transport: Transport, check: impl FnOnce(&Path)) -> (std::io::Result<()>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let negotiated = Negotiated::new(transport);
    let fs = Hello { data: contents(), negotiated: negotiated.clone() };
    let mut config = fuser::Config::default();
    config.mount_options = vec![fuser::MountOption::FSName("hello".into()), fuser::MountOption::RO];
    config.n_threads = Some(1);
    let mut session = fuser::Session::new(fs, dir.path(), &config).unwrap();
    let mut unmounter = session.unmount_callable();
    let said = Arc::new(Mutex::new(Vec::new()));
    let log = said.clone();
    let server = std::thread::spawn(move || {
        fuse_uring::run(session, transport, &negotiated, 2, &mut |m| log.lock().unwrap().push(m.to_string()))
    });
    // The session answers INIT before `run` decides; a request now waits until it serves.
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(dir.path())));
    let _ = unmounter.unmount();
    let ran = server.join().unwrap();
    if let Err(e) = ok {
        std::panic::resume_unwind(e);
    }
    let said = said.lock().unwrap().clone();
    (ran, said)
}

fn reads_back(mnt: &Path) {
    let names: Vec<String> =
        std::fs::read_dir(mnt).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, [NAME]);
    assert!(std::fs::read(mnt.join(NAME)).unwrap() == contents(), "the file read back differs");
    assert_eq!(std::fs::metadata(mnt.join("nothing")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn a_fuser_file_system_is_served_on_the_classic_transport() {
    if !can_mount() {
        return;
    }
    let (ran, said) = serve(Transport::Classic, reads_back);
    ran.unwrap();
    assert_eq!(said, ["transport: classic /dev/fuse"]);
}

#[test]
fn a_fuser_file_system_is_served_on_io_uring_where_the_kernel_offers_it() {
    if !can_mount() {
        return;
    }
    if fuse_uring::uring_enabled() != Some(true) {
        eprintln!(
            "SKIPPED: FUSE over io_uring is off ({}): uring refused, auto falls back",
            fuse_uring::URING_PARAMETER
        );
        let (ran, _) = serve(Transport::Uring, |_| ());
        assert_eq!(ran.unwrap_err().kind(), std::io::ErrorKind::Unsupported);
        let (ran, said) = serve(Transport::Auto, reads_back);
        ran.unwrap();
        assert!(said.len() == 1 && said[0].starts_with("transport: classic /dev/fuse ("), "{said:?}");
        return;
    }
    let (ran, said) = serve(Transport::Uring, reads_back);
    ran.unwrap();
    assert!(said.len() == 1 && said[0].starts_with("transport: io_uring"), "{said:?}");
}
