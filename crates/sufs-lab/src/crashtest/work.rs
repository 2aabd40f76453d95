//! `Work`: a workload's view of the file system. Operations by path, each labelled with the log
//! position where it began; each closes the promises it breaks (a name it changes, data it
//! rewrites) and makes the ones it keeps (a rename, an fsync, a Block Register call).

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::Rng;

use sufs_fs::clock::SimClock;
use sufs_fs::dev::{MemDevice, RecordingDevice, WriteKind};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::falloc::FallocMode;
use sufs_fs::fs::flight::Flight;
use sufs_fs::fs::{Fs, FsResult, Ordering, RenameFlags, SetAttr};
use sufs_fs::policy::Sweeper;

use super::promise::{self, join, resolve, split, under, Promise, PromiseKind};

/// A workload's view of the file system: operations by path, each labelled with the log position
/// where it began, and the promises they make.
pub struct Work<'a> {
    pub(super) fs: &'a mut Fs,
    pub(super) rng: &'a mut SmallRng,
    pub(super) clock: &'a SimClock,
    /// None during setup, which is not recorded.
    pub(super) rec: Option<&'a RecordingDevice<MemDevice>>,
    pub(super) ops: Vec<(usize, String)>,
    pub(super) promises: Vec<Promise>,
    pub(super) count: u64,
    pub(super) sweeper: Option<Sweeper>,
    /// The plain sweep's last batch, left in flight across the next operation (as the mount's
    /// syncer writes outside the lock while requests go on), landed at the next `begin`.
    pub(super) flight: Option<Arc<Flight>>,
}

impl<'a> Work<'a> {
    /// A view for a workload: `rec` None for the setup (nothing recorded, no promises made),
    /// `sweeper` None for the plain sweep every 20 operations.
    pub(super) fn new(
        fs: &'a mut Fs,
        rng: &'a mut SmallRng,
        clock: &'a SimClock,
        rec: Option<&'a RecordingDevice<MemDevice>>,
        promises: Vec<Promise>,
        sweeper: Option<Sweeper>,
    ) -> Work<'a> {
        Work { fs, rng, clock, rec, ops: Vec::new(), promises, count: 0, sweeper, flight: None }
    }

    pub(super) fn pos(&self) -> usize {
        self.rec.map_or(0, |r| r.log_len())
    }

    /// Starts an operation: time moves 50 ms, and every 20 operations the syncer's sweep writes
    /// the buffers dirty for a second, as a mounted file system's would.
    pub(super) fn begin(&mut self, what: String) -> FsResult<usize> {
        self.count += 1;
        self.clock.advance(50_000_000);
        if let Some(sw) = self.sweeper.as_mut() {
            if sw.next_due() <= self.fs.now_ns() {
                self.ops.push((self.rec.map_or(0, |r| r.log_len()), "syncer sweep".into()));
                sw.tick(self.fs)?;
            }
        } else {
            if let Some(flight) = self.flight.take() {
                self.ops.push((self.pos(), "syncer batch lands".into()));
                flight.issue();
                self.fs.land_flight()?;
                self.fs.run_tasks()?;
            }
            if self.count.is_multiple_of(20) {
                self.ops.push((self.pos(), "syncer sweep".into()));
                self.sweep()?;
            }
        }
        self.fs.drop_idle_records();
        let pos = self.pos();
        self.ops.push((pos, what));
        Ok(pos)
    }

    /// The mount syncer's sweep of buffers dirty for a second: under sync ordering in order,
    /// under the lock; else as flights, the last left in flight across the next operation.
    fn sweep(&mut self) -> FsResult<()> {
        if self.fs.ordering() == Ordering::Sync {
            self.fs.flush_older_than(1_000_000_000)?;
            return Ok(());
        }
        let plan = self.fs.plan_delayed(self.fs.dirty_blocks(Some(1_000_000_000)), 1024);
        let last = plan.len().saturating_sub(1);
        for (i, chunk) in plan.iter().enumerate() {
            let Some(flight) = self.fs.start_flight(chunk, WriteKind::Async)? else { continue };
            if i == last {
                self.flight = Some(flight);
            } else {
                flight.issue();
                self.fs.land_flight()?;
            }
        }
        self.fs.run_tasks()
    }

    pub(super) fn close(&mut self, pos: usize, pred: impl Fn(&Promise) -> bool) {
        promise::close(&mut self.promises, pos, pred)
    }

    /// The name `path` (and everything under it) is about to change.
    pub(super) fn touch_name(&mut self, pos: usize, path: &str) {
        self.close(pos, |p| p.paths.iter().any(|q| under(q, path)));
    }

    /// The contents of `ino` are about to change.
    pub(super) fn touch_data(&mut self, pos: usize, ino: u32) {
        self.close(pos, |p| p.contents.is_some() && p.kind != PromiseKind::Flags && p.ino == ino);
    }

    pub(super) fn resolve(&mut self, path: &str) -> FsResult<u32> {
        resolve(self.fs, path)
    }

    pub(super) fn size(&mut self, path: &str) -> FsResult<u64> {
        let ino = self.resolve(path)?;
        Ok(self.fs.getattr(ino)?.size)
    }

    pub(super) fn parent(&mut self, path: &str) -> FsResult<(u32, String)> {
        let (dir, name) = split(path);
        Ok((self.resolve(dir)?, name.to_string()))
    }

    pub(super) fn data(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill(&mut v[..]);
        v
    }

    /// A name of `prefix` and `i`, padded to a random length so that directories grow unevenly.
    pub(super) fn name(&mut self, prefix: &str, i: usize) -> String {
        let pad = self.rng.gen_range(0..48);
        format!("{prefix}{i}{}", "-".repeat(pad))
    }

    /// Every entry under `dir` (path, is a directory), parents before children. Each directory
    /// is entered once: a loop of names (which rename refuses to make) ends the walk there
    /// instead of running forever.
    pub(super) fn walk(&mut self, dir: &str) -> FsResult<Vec<(String, bool, u32)>> {
        let mut out = Vec::new();
        let mut entered = std::collections::HashSet::new();
        let mut stack = vec![dir.to_string()];
        while let Some(d) = stack.pop() {
            let ino = self.resolve(&d)?;
            for e in self.fs.readdir(ino, 0, usize::MAX)? {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let p = join(&d, &String::from_utf8_lossy(&e.name));
                let is_dir = self.fs.getattr(e.ino)?.is_dir();
                if is_dir && entered.insert(e.ino) {
                    stack.push(p.clone());
                }
                out.push((p, is_dir, e.ino));
            }
        }
        Ok(out)
    }

    pub(super) fn mkdir(&mut self, path: &str) -> FsResult<u32> {
        let pos = self.begin(format!("mkdir {path}"))?;
        self.touch_name(pos, path);
        let (d, n) = self.parent(path)?;
        Ok(self.fs.mkdir(d, n.as_bytes(), 0o755, 0, 0)?.0)
    }

    pub(super) fn create(&mut self, path: &str, len: usize) -> FsResult<u32> {
        let pos = self.begin(format!("create {path} ({len} bytes)"))?;
        self.touch_name(pos, path);
        let (d, n) = self.parent(path)?;
        let ino = self.fs.create(d, n.as_bytes(), 0o644, 0, 0)?.0;
        if len > 0 {
            let data = self.data(len);
            self.fs.write(ino, 0, &data)?;
        }
        Ok(ino)
    }

    /// Files `{prefix}{i}` for i in 0..n, of `len(i)` bytes each; their paths.
    pub(super) fn create_files(
        &mut self,
        prefix: &str,
        n: usize,
        len: impl Fn(usize) -> usize,
    ) -> FsResult<Vec<String>> {
        (0..n).map(|i| self.create(&format!("{prefix}{i}"), len(i)).map(|_| format!("{prefix}{i}"))).collect()
    }

    pub(super) fn write(&mut self, path: &str, off: u64, len: usize) -> FsResult<()> {
        let pos = self.begin(format!("write {path} at {off} ({len} bytes)"))?;
        let ino = self.resolve(path)?;
        self.touch_data(pos, ino);
        let data = self.data(len);
        self.fs.write(ino, off, &data)?;
        Ok(())
    }

    pub(super) fn truncate(&mut self, path: &str, size: u64) -> FsResult<()> {
        let pos = self.begin(format!("truncate {path} to {size}"))?;
        let ino = self.resolve(path)?;
        self.touch_data(pos, ino);
        self.fs.setattr(ino, &SetAttr { size: Some(size), ..Default::default() })?;
        Ok(())
    }

    /// The inode at `path` is about to be removed: it need no longer be reachable.
    pub(super) fn touch_inode(&mut self, pos: usize, path: &str) {
        if let Ok(ino) = self.resolve(path) {
            self.close(pos, |p| p.kind == PromiseKind::Kept && p.ino == ino);
        }
    }

    pub(super) fn unlink(&mut self, path: &str) -> FsResult<()> {
        let pos = self.begin(format!("unlink {path}"))?;
        self.touch_name(pos, path);
        self.touch_inode(pos, path);
        let (d, n) = self.parent(path)?;
        self.fs.unlink(d, n.as_bytes())
    }

    pub(super) fn rmdir(&mut self, path: &str) -> FsResult<()> {
        let pos = self.begin(format!("rmdir {path}"))?;
        self.touch_name(pos, path);
        self.touch_inode(pos, path);
        let (d, n) = self.parent(path)?;
        self.fs.rmdir(d, n.as_bytes())
    }

    /// The kernel's hold on the inode at `path` (a FUSE lookup count, an open handle): a mount
    /// removes inodes the kernel still knows, which stay allocated, nameless, until it forgets
    /// them (`forget`). Not an operation: it writes nothing.
    pub(super) fn hold(&mut self, path: &str) -> FsResult<u32> {
        let ino = self.resolve(path)?;
        self.fs.hold(ino, 1);
        Ok(ino)
    }

    /// The kernel forgets inode `ino` (held by `hold`): removed, it is freed now.
    pub(super) fn forget(&mut self, ino: u32) -> FsResult<()> {
        self.begin(format!("forget inode {ino}"))?;
        self.fs.unhold(ino, 1)
    }

    pub(super) fn link(&mut self, existing: &str, new: &str) -> FsResult<()> {
        let pos = self.begin(format!("link {existing} {new}"))?;
        self.touch_name(pos, new);
        let ino = self.resolve(existing)?;
        let (d, n) = self.parent(new)?;
        self.fs.link(ino, d, n.as_bytes())?;
        Ok(())
    }

    /// open(2) with O_TMPFILE in `dir`: a file with no name, `len` bytes written, held open
    /// (`forget` closes it, which frees it if it still has no name).
    pub(super) fn tmpfile(&mut self, dir: &str, len: usize) -> FsResult<u32> {
        self.begin(format!("tmpfile in {dir} ({len} bytes)"))?;
        let d = self.resolve(dir)?;
        let ino = self.fs.tmpfile(d, 0o600, 0, 0, true)?.0;
        if len > 0 {
            let data = self.data(len);
            self.fs.write(ino, 0, &data)?;
        }
        Ok(ino)
    }

    /// fsync of an open file by its inode (one with no name): nothing to promise, no name
    /// reaching it.
    pub(super) fn fsync_ino(&mut self, ino: u32) -> FsResult<()> {
        self.begin(format!("fsync inode {ino}"))?;
        self.fs.fsync(ino)
    }

    /// linkat of the open file `ino` (a nameless one, from `tmpfile`) to `new`.
    pub(super) fn link_ino(&mut self, ino: u32, new: &str) -> FsResult<()> {
        let pos = self.begin(format!("link inode {ino} {new}"))?;
        self.touch_name(pos, new);
        let (d, n) = self.parent(new)?;
        self.fs.link(ino, d, n.as_bytes())?;
        Ok(())
    }

    pub(super) fn rename(&mut self, from: &str, to: &str) -> FsResult<()> {
        self.rename_as(from, to, false)
    }

    /// A rename that leaves a whiteout (a character device) at `from` (RENAME_WHITEOUT): the
    /// renamed inode keeps its old or its new name, as in any rename.
    pub(super) fn rename_whiteout(&mut self, from: &str, to: &str) -> FsResult<()> {
        self.rename_as(from, to, true)
    }

    pub(super) fn rename_as(&mut self, from: &str, to: &str, whiteout: bool) -> FsResult<()> {
        let what = if whiteout { "rename (whiteout)" } else { "rename" };
        let pos = self.begin(format!("{what} {from} {to}"))?;
        let ino = self.resolve(from)?;
        // A chain of renames (a to b, b to c): until the last is on disk, the file may still be
        // named by an earlier name of the chain (an old name stays until its new one is on disk).
        let mut chain = Vec::new();
        let mut cur = from.to_string();
        for p in self.promises.iter().rev().filter(|p| p.kind == PromiseKind::Rename && p.ino == ino) {
            if p.paths[1] == cur {
                cur = p.paths[0].clone();
                chain.push(cur.clone());
            }
        }
        self.touch_name(pos, from);
        self.touch_name(pos, to);
        if self.resolve(to).is_ok_and(|t| t != ino) {
            self.touch_inode(pos, to);
        }
        let (d, n) = self.parent(from)?;
        let (nd, nn) = self.parent(to)?;
        if whiteout {
            self.fs.rename_whiteout(d, n.as_bytes(), nd, nn.as_bytes(), false, (0, 0))?;
        } else {
            self.fs.rename(d, n.as_bytes(), nd, nn.as_bytes(), RenameFlags::default())?;
        }
        if self.rec.is_some() && from != to {
            self.promises.push(Promise {
                kind: PromiseKind::Rename,
                paths: {
                    let mut paths = vec![from.to_string(), to.to_string()];
                    for q in chain {
                        if !paths.contains(&q) {
                            paths.push(q);
                        }
                    }
                    paths
                },
                ino,
                contents: None,
                runs: None,
                from: pos,
                until: None,
            });
        }
        Ok(())
    }

    pub(super) fn fsync(&mut self, path: &str) -> FsResult<()> {
        self.begin(format!("fsync {path}"))?;
        let ino = self.resolve(path)?;
        if self.count.is_multiple_of(2) {
            // As on a mount, where other requests run while fsync's batches are written: a
            // file made and written in the root between each batch's preparation and its write.
            let n = self.count;
            let mut k = 0;
            self.fs.fsync_interleaved(ino, &mut |fs| {
                if k == 2 {
                    return Ok(()); // (two a fsync: the image is small)
                }
                let name = format!("side-{n}-{k}");
                k += 1;
                let (f, _) = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)?;
                fs.write(f, 0, name.as_bytes()).map(|_| ())
            })?;
        } else {
            self.fs.fsync(ino)?;
        }
        let size = self.fs.getattr(ino)?.size;
        let contents = self.fs.read(ino, 0, size as usize)?;
        if self.rec.is_some() {
            let from = self.pos();
            self.promises.push(Promise {
                kind: PromiseKind::Fsync,
                paths: vec![path.to_string()],
                ino,
                contents: Some(contents),
                runs: None,
                from,
                until: None,
            });
        }
        Ok(())
    }

    /// fallocate on `path`: its contents change unless it only preallocates past the size.
    pub(super) fn fallocate(&mut self, path: &str, off: u64, len: u64, mode: FallocMode) -> FsResult<()> {
        let pos = self.begin(format!("fallocate {path} {mode:?} at {off} ({len} bytes)"))?;
        let ino = self.resolve(path)?;
        self.touch_data(pos, ino);
        self.fs.fallocate(ino, off, len, mode)?;
        Ok(())
    }

    /// Sets the user flags of `path` (Linux's `FS_IOC_SETFLAGS` bits) as root.
    pub(super) fn set_flags(&mut self, path: &str, linux: u32) -> FsResult<()> {
        let pos = self.begin(format!("set flags {linux:#x} on {path}"))?;
        let ino = self.resolve(path)?;
        self.close(pos, |p| p.kind == PromiseKind::Flags && p.ino == ino);
        self.fs.set_flags(ino, linux, 0)?;
        Ok(())
    }

    /// `fsync`, and the promise that the file keeps the flags it has now.
    pub(super) fn fsync_flags(&mut self, path: &str) -> FsResult<()> {
        self.fsync(path)?;
        let ino = self.resolve(path)?;
        let flags = self.fs.getattr(ino)?.flags & sufs_fs::fs::flags::USER_FLAGS;
        if self.rec.is_some() {
            let from = self.pos();
            self.promises.push(Promise {
                kind: PromiseKind::Flags,
                paths: vec![path.to_string()],
                ino,
                contents: Some(flags.to_le_bytes().to_vec()),
                runs: None,
                from,
                until: None,
            });
        }
        Ok(())
    }

    /// A Block Register call on reservation `name`; once it returns, the reservation (if it
    /// still exists) keeps its name and exactly the blocks brquery answers.
    pub(super) fn br(&mut self, what: String, name: &str, call: impl FnOnce(&mut Fs) -> FsResult<()>) -> FsResult<()> {
        let pos = self.begin(what)?;
        let path = format!("/.br/{name}");
        self.touch_name(pos, &path);
        call(self.fs)?;
        let Ok(ino) = self.resolve(&path) else { return Ok(()) };
        let runs = self.fs.brquery(name.as_bytes(), 0, u64::MAX)?;
        if self.rec.is_some() {
            let from = self.pos();
            let paths = vec![path];
            self.promises.push(Promise {
                kind: PromiseKind::Reservation,
                paths,
                ino,
                contents: None,
                runs: Some(runs),
                from,
                until: None,
            });
        }
        Ok(())
    }
}
