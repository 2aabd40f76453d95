//! The floor: a FUSE file system kept in memory that answers each request with the least work
//! that is still correct (a map of nodes, each with its attributes and its names or bytes), so
//! that `sufs bench peers` can say how much of a sufs mount's time is FUSE itself. It is served
//! as sufs is (the same fuser, the same transports through `fuse_uring::run`, the same mount
//! options from `fuse::config`, the same INIT from `fuse::ask_at_init`, the same time-to-live
//! for names and attributes, negative entries and opens), so that the kernel sends it the same
//! requests; it counts them by opcode as sufs does (`fs::messages`), and answers the control
//! channel's `stats` request with them (`StatsServer`).
//!
//! What it keeps: a node lives while a name links it or the kernel holds a lookup of it (each
//! entry answered is one, FORGET gives them back), as in sufs, so that an unlinked open file
//! can still be read and written. Nothing is ever written anywhere: an unmount loses it all.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use fuse_uring::Negotiated;
use sufs_fs::fs::messages::{Messages, Op};

use crate::ctl::{self, Reply, Request as CtlRequest};
use crate::fuse::{ask_at_init, FuseOptions, OPEN_FLAGS, TTL};

/// The floor's name in the mount table (`sufs umount` then waits for no image).
pub const SOURCE: &str = "sufs:floor";

/// FUSE's root.
const ROOT: u64 = 1;

/// The first directory offset of a name; 1 and 2 are "." and "..".
const FIRST_SLOT: u64 = 3;

/// The block size the floor reports (`st_blksize`, statfs).
const BLOCK: u32 = 4096;

/// What a node holds besides its attributes.
#[derive(Debug)]
enum Body {
    File(Vec<u8>),
    /// Names by slot (a name's readdir offset is its slot + 1: slots only grow, so a listing
    /// goes on right while names are removed behind it, as `rm -r` does), the slot of each
    /// name, the next slot, and the parent.
    Dir {
        slots: BTreeMap<u64, (Vec<u8>, u64)>,
        names: HashMap<Vec<u8>, u64>,
        next: u64,
        parent: u64,
    },
    Symlink(Vec<u8>),
    /// A device node, FIFO or socket: nothing but attributes.
    Special,
}

/// One file, directory or other node.
#[derive(Debug)]
struct Node {
    attr: FileAttr,
    body: Body,
    /// The kernel's lookups not yet given back (FORGET).
    lookups: u64,
}

/// The whole file system, behind one lock.
#[derive(Debug)]
struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

/// A new node's attributes: `mode` with its type, owned by `req`'s caller.
fn new_attr(ino: u64, kind: FileType, perm: u16, req: &Request, rdev: u32) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev,
        blksize: BLOCK,
        flags: 0,
    }
}

fn kind_of(mode: u32) -> Result<FileType, Errno> {
    Ok(match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => FileType::RegularFile,
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => return Err(Errno::EINVAL),
    })
}

fn empty_dir(parent: u64) -> Body {
    Body::Dir { slots: BTreeMap::new(), names: HashMap::new(), next: FIRST_SLOT, parent }
}

impl Tree {
    /// A tree of the root alone, owned by whoever serves it.
    fn new() -> Tree {
        // SAFETY: geteuid and getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let now = SystemTime::now();
        let attr = FileAttr {
            ino: INodeNo(ROOT),
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid,
            gid,
            rdev: 0,
            blksize: BLOCK,
            flags: 0,
        };
        let root = Node { attr, body: empty_dir(ROOT), lookups: 0 };
        Tree { nodes: HashMap::from([(ROOT, root)]), next_ino: ROOT + 1 }
    }

    fn node(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(Errno::ESTALE)
    }

    /// The directory `ino`'s name `name`, if any.
    fn child(&mut self, dir: u64, name: &[u8]) -> Result<Option<u64>, Errno> {
        match &self.node(dir)?.body {
            Body::Dir { slots, names, .. } => Ok(names.get(name).map(|s| slots[s].1)),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// Links `ino` as `name` in `dir` (which must not have the name), stamping the directory.
    fn link_name(&mut self, dir: u64, name: &[u8], ino: u64, is_dir: bool) -> Result<(), Errno> {
        let d = self.node(dir)?;
        let Body::Dir { slots, names, next, .. } = &mut d.body else { return Err(Errno::ENOTDIR) };
        let slot = *next;
        *next += 1;
        assert!(names.insert(name.to_vec(), slot).is_none(), "name linked twice in directory {dir}");
        slots.insert(slot, (name.to_vec(), ino));
        if is_dir {
            d.attr.nlink += 1;
        }
        touch(&mut d.attr, true);
        Ok(())
    }

    /// Removes `name` from `dir` and returns the node it named, stamping the directory.
    fn unlink_name(&mut self, dir: u64, name: &[u8]) -> Result<u64, Errno> {
        let d = self.node(dir)?;
        let Body::Dir { slots, names, .. } = &mut d.body else { return Err(Errno::ENOTDIR) };
        let slot = names.remove(name).ok_or(Errno::ENOENT)?;
        let (_, ino) = slots.remove(&slot).expect("every name has its slot");
        touch(&mut d.attr, true);
        Ok(ino)
    }

    /// A new node linked as `name` in `dir`: EEXIST if the name is taken.
    fn make(&mut self, dir: u64, name: &[u8], mut attr: FileAttr, body: Body) -> Result<FileAttr, Errno> {
        if self.child(dir, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        attr.ino = INodeNo(ino);
        let is_dir = attr.kind == FileType::Directory;
        self.link_name(dir, name, ino, is_dir)?;
        // The entry answered is the kernel's first lookup of the node.
        self.nodes.insert(ino, Node { attr, body, lookups: 1 });
        Ok(attr)
    }

    /// Drops a link of `ino` (a directory's two); the node goes once nothing holds it.
    fn drop_link(&mut self, ino: u64) -> Result<(), Errno> {
        let n = self.node(ino)?;
        let is_dir = n.attr.kind == FileType::Directory;
        n.attr.nlink = if is_dir { 0 } else { n.attr.nlink - 1 };
        n.attr.ctime = SystemTime::now();
        if is_dir {
            if let Body::Dir { parent, .. } = n.body {
                self.node(parent)?.attr.nlink -= 1;
            }
        }
        self.reap(ino);
        Ok(())
    }

    /// Frees `ino` if no name links it and the kernel holds no lookup of it.
    fn reap(&mut self, ino: u64) {
        if self.nodes.get(&ino).is_some_and(|n| n.attr.nlink == 0 && n.lookups == 0) {
            assert_ne!(ino, ROOT, "the root is never freed");
            self.nodes.remove(&ino);
        }
    }

    /// Whether `ino` may take `name` in a rename over it: a directory only over an empty
    /// directory, anything else only over a non-directory.
    fn may_replace(&mut self, moved_dir: bool, victim: u64) -> Result<(), Errno> {
        match (&self.node(victim)?.body, moved_dir) {
            (Body::Dir { names, .. }, true) if names.is_empty() => Ok(()),
            (Body::Dir { .. }, true) => Err(Errno::ENOTEMPTY),
            (Body::Dir { .. }, false) => Err(Errno::EISDIR),
            (_, true) => Err(Errno::ENOTDIR),
            (_, false) => Ok(()),
        }
    }

    /// A directory moved from `from` to `to`: its ".." and the parents' link counts.
    fn reparent(&mut self, ino: u64, from: u64, to: u64) -> Result<(), Errno> {
        if from == to {
            return Ok(());
        }
        if let Body::Dir { parent, .. } = &mut self.node(ino)?.body {
            *parent = to;
            self.node(from)?.attr.nlink -= 1;
            self.node(to)?.attr.nlink += 1;
        }
        Ok(())
    }

    fn rename(&mut self, p: u64, name: &[u8], np: u64, newname: &[u8], flags: RenameFlags) -> Result<(), Errno> {
        let ino = self.child(p, name)?.ok_or(Errno::ENOENT)?;
        let victim = self.child(np, newname)?;
        let is_dir = |t: &mut Tree, i: u64| t.node(i).map(|n| n.attr.kind == FileType::Directory);
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let other = victim.ok_or(Errno::ENOENT)?;
            let (a_dir, b_dir) = (is_dir(self, ino)?, is_dir(self, other)?);
            for (dir, n, i) in [(p, name, other), (np, newname, ino)] {
                let Body::Dir { slots, names, .. } = &mut self.node(dir)?.body else { return Err(Errno::ENOTDIR) };
                let slot = names[n];
                slots.insert(slot, (n.to_vec(), i));
            }
            if a_dir {
                self.reparent(ino, p, np)?;
            }
            if b_dir {
                self.reparent(other, np, p)?;
            }
            return Ok(());
        }
        if victim == Some(ino) {
            return Ok(());
        }
        let moved_dir = is_dir(self, ino)?;
        if let Some(v) = victim {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            self.may_replace(moved_dir, v)?;
            self.unlink_name(np, newname)?;
            // A directory replaced takes its parent's link ("..") with it.
            self.drop_link(v)?;
        }
        self.unlink_name(p, name)?;
        self.link_name(np, newname, ino, false)?;
        if moved_dir {
            self.reparent(ino, p, np)?;
        }
        self.node(ino)?.attr.ctime = SystemTime::now();
        Ok(())
    }
}

/// A change of `a`'s contents: its modification and change times are now.
fn touch(a: &mut FileAttr, contents: bool) {
    let now = SystemTime::now();
    if contents {
        a.mtime = now;
    }
    a.ctime = now;
}

/// `a`'s size set to `len` bytes, and its block count with it.
fn resize(a: &mut FileAttr, data: &mut Vec<u8>, len: usize) {
    data.resize(len, 0);
    a.size = len as u64;
    a.blocks = (len as u64).div_ceil(512);
}

/// The floor's FUSE side.
pub struct Floor {
    tree: Mutex<Tree>,
    msgs: Arc<Messages>,
    negotiated: Arc<Negotiated>,
    /// Directories open without a message (as sufs's `no_opendir`).
    no_opendir: bool,
}

impl Floor {
    pub fn new(o: &FuseOptions) -> Floor {
        Floor {
            tree: Mutex::new(Tree::new()),
            msgs: Arc::new(Messages::default()),
            negotiated: Negotiated::new(o.transport),
            no_opendir: false,
        }
    }

    /// What INIT settled about the transport, for `fuse_uring::run` once the session is up.
    pub fn negotiated(&self) -> Arc<Negotiated> {
        self.negotiated.clone()
    }

    /// The requests served, by opcode.
    pub fn messages(&self) -> Arc<Messages> {
        self.msgs.clone()
    }

    /// The tree (a panic while it was held left it as it was: a change fails before it
    /// changes anything, or is made whole).
    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the tree.
    fn with<T>(&self, f: impl FnOnce(&mut Tree) -> Result<T, Errno>) -> Result<T, Errno> {
        f(&mut self.tree())
    }

    /// Answers a name: the node, or a negative entry the kernel keeps for `TTL` (as sufs's
    /// `negative_entry`).
    fn answer_entry(&self, r: Result<FileAttr, Errno>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry_with_ttls(&TTL, &TTL, &a, Generation(0)),
            Err(Errno::ENOENT) => reply.entry_with_ttls(&TTL, &TTL, &new_attr_none(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn answer_attr(r: Result<FileAttr, Errno>, reply: ReplyAttr) {
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn answer_empty(r: Result<(), Errno>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// A new node (`mode`'s type and permissions, the caller's, with `rdev`) holding `body`,
    /// linked as `at` (directory, name); its entry counted as a lookup.
    fn make(
        &self,
        req: &Request,
        at: (INodeNo, &OsStr),
        mode: u32,
        umask: u32,
        rdev: u32,
        body: Body,
    ) -> Result<FileAttr, Errno> {
        let kind = kind_of(mode)?;
        // DONT_MASK (asked for as sufs does): the umask is the server's to apply.
        let perm = (mode & !umask & 0o7777) as u16;
        let mut attr = new_attr(0, kind, perm, req, rdev);
        if let Body::Symlink(target) = &body {
            attr.size = target.len() as u64;
        }
        self.with(|t| t.make(at.0 .0, at.1.as_bytes(), attr, body))
    }
}

/// The attributes of no node (a negative entry's).
fn new_attr_none() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

impl Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Files keep their pages across opens and the kernel checks permissions, as on sufs's
        // default mount.
        self.no_opendir = ask_at_init(config, true, false, &self.negotiated);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.msgs.count(Op::Lookup);
        let r = self.with(|t| {
            let ino = match name.as_bytes() {
                b"." => parent.0,
                b".." => match &t.node(parent.0)?.body {
                    Body::Dir { parent, .. } => *parent,
                    _ => return Err(Errno::ENOTDIR),
                },
                n => t.child(parent.0, n)?.ok_or(Errno::ENOENT)?,
            };
            let node = t.node(ino)?;
            node.lookups += 1;
            Ok(node.attr)
        });
        self.answer_entry(r, reply);
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.msgs.forgot(req.unique().0, nlookup);
        let _ = self.with(|t| {
            let n = t.node(ino.0)?;
            assert!(n.lookups >= nlookup, "inode {}: the kernel gives back more lookups than it took", ino.0);
            n.lookups -= nlookup;
            t.reap(ino.0);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.msgs.count(Op::Getattr);
        Self::answer_attr(self.with(|t| Ok(t.node(ino.0)?.attr)), reply);
    }

    fn statx(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: fuser::ReplyStatx,
    ) {
        self.msgs.count(Op::Statx);
        match self.with(|t| Ok(t.node(ino.0)?.attr)) {
            Ok(a) => reply.statx(&TTL, &a, 0, 0),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.msgs.count(Op::Setattr);
        let when = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => SystemTime::now(),
        };
        let r = self.with(|t| {
            let n = t.node(ino.0)?;
            if let Some(len) = size {
                let Body::File(data) = &mut n.body else { return Err(Errno::EISDIR) };
                let len = usize::try_from(len).map_err(|_| Errno::EFBIG)?;
                resize(&mut n.attr, data, len);
                touch(&mut n.attr, true);
            }
            if let Some(m) = mode {
                n.attr.perm = (m & 0o7777) as u16;
            }
            n.attr.uid = uid.unwrap_or(n.attr.uid);
            n.attr.gid = gid.unwrap_or(n.attr.gid);
            if uid.is_some() || gid.is_some() {
                // A chown clears set-user-ID and set-group-ID (HANDLE_KILLPRIV_V2 leaves it
                // to the server, as for sufs).
                n.attr.perm &= !((libc::S_ISUID | libc::S_ISGID) as u16);
            }
            n.attr.atime = atime.map(when).unwrap_or(n.attr.atime);
            n.attr.mtime = mtime.map(when).unwrap_or(n.attr.mtime);
            n.attr.ctime = SystemTime::now();
            Ok(n.attr)
        });
        Self::answer_attr(r, reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.msgs.count(Op::Readlink);
        match self.with(|t| match &t.node(ino.0)?.body {
            Body::Symlink(target) => Ok(target.clone()),
            _ => Err(Errno::EINVAL),
        }) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.msgs.count(Op::Mknod);
        let body = if mode & libc::S_IFMT == libc::S_IFREG { Body::File(Vec::new()) } else { Body::Special };
        let r = self.make(req, (parent, name), mode, umask, rdev, body);
        self.answer_entry(r, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.msgs.count(Op::Mkdir);
        let r = self.make(req, (parent, name), (mode & 0o7777) | libc::S_IFDIR, umask, 0, empty_dir(parent.0));
        self.answer_entry(r, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.msgs.count(Op::Unlink);
        let r = self.with(|t| {
            let ino = t.child(parent.0, name.as_bytes())?.ok_or(Errno::ENOENT)?;
            if t.node(ino)?.attr.kind == FileType::Directory {
                return Err(Errno::EISDIR);
            }
            t.unlink_name(parent.0, name.as_bytes())?;
            t.drop_link(ino)
        });
        Self::answer_empty(r, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.msgs.count(Op::Rmdir);
        let r = self.with(|t| {
            let ino = t.child(parent.0, name.as_bytes())?.ok_or(Errno::ENOENT)?;
            match &t.node(ino)?.body {
                Body::Dir { names, .. } if names.is_empty() => {}
                Body::Dir { .. } => return Err(Errno::ENOTEMPTY),
                _ => return Err(Errno::ENOTDIR),
            }
            t.unlink_name(parent.0, name.as_bytes())?;
            t.drop_link(ino)
        });
        Self::answer_empty(r, reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.msgs.count(Op::Symlink);
        let target = target.as_os_str().as_bytes().to_vec();
        let r = self.make(req, (parent, link_name), libc::S_IFLNK | 0o777, 0, 0, Body::Symlink(target));
        self.answer_entry(r, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Rename);
        if !(flags - (RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE)).is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let r = self.with(|t| t.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), flags));
        Self::answer_empty(r, reply);
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.msgs.count(Op::Link);
        let r = self.with(|t| {
            if t.child(newparent.0, newname.as_bytes())?.is_some() {
                return Err(Errno::EEXIST);
            }
            t.link_name(newparent.0, newname.as_bytes(), ino.0, false)?;
            let n = t.node(ino.0)?;
            n.attr.nlink += 1;
            n.lookups += 1;
            touch(&mut n.attr, false);
            Ok(n.attr)
        });
        self.answer_entry(r, reply);
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.msgs.count(Op::Open);
        reply.opened(FileHandle(0), OPEN_FLAGS);
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
        self.msgs.count(Op::Read);
        let tree = self.tree();
        let r = match tree.nodes.get(&ino.0).map(|n| &n.body) {
            Some(Body::File(data)) => {
                let from = (offset as usize).min(data.len());
                Ok(&data[from..(from + size as usize).min(data.len())])
            }
            Some(Body::Dir { .. }) => Err(Errno::EISDIR),
            Some(_) => Err(Errno::EINVAL),
            None => Err(Errno::ESTALE),
        };
        match r {
            Ok(bytes) => reply.data(bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.msgs.count(Op::Write);
        let r = self.with(|t| {
            let n = t.node(ino.0)?;
            let Body::File(bytes) = &mut n.body else { return Err(Errno::EISDIR) };
            let at = usize::try_from(offset).map_err(|_| Errno::EFBIG)?;
            let end = at.checked_add(data.len()).ok_or(Errno::EFBIG)?;
            if end > bytes.len() {
                resize(&mut n.attr, bytes, end);
            }
            bytes[at..end].copy_from_slice(data);
            touch(&mut n.attr, true);
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                n.attr.perm &= !((libc::S_ISUID | libc::S_ISGID) as u16);
            }
            Ok(data.len() as u32)
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// As sufs: ENOSYS once, and the kernel sends no more FLUSHes.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        self.msgs.count(Op::Flush);
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Release);
        reply.ok();
    }

    /// Nothing is ever written: everything is as durable as it will be.
    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.msgs.count(Op::Fsync);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.msgs.count(Op::Opendir);
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.msgs.count(Op::Readdir);
        let t = self.tree();
        let entries = match listing(&t, ino.0, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (name, child, next) in entries {
            let kind = t.nodes.get(&child).map_or(FileType::RegularFile, |n| n.attr.kind);
            if reply.add(INodeNo(child), next, kind, OsStr::from_bytes(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        self.msgs.count(Op::Readdirplus);
        let mut t = self.tree();
        let entries = match listing(&t, ino.0, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (name, child, next) in entries {
            let Some(n) = t.nodes.get_mut(&child) else { continue };
            if reply.add(INodeNo(child), next, OsStr::from_bytes(&name), &TTL, &n.attr, Generation(0)) {
                break;
            }
            // The kernel counts a lookup for every entry but "." and "..".
            if name != b"." && name != b".." {
                n.lookups += 1;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.msgs.count(Op::Releasedir);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.msgs.count(Op::Fsyncdir);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.msgs.count(Op::Statfs);
        let files = self.with(|t| Ok(t.nodes.len() as u64)).unwrap_or(0);
        reply.statfs(1 << 30, 1 << 30, 1 << 30, files + (1 << 30), 1 << 30, BLOCK, 255, BLOCK);
    }

    /// No node has extended attributes (nor ACLs).
    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        self.msgs.count(Op::Getxattr);
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        self.msgs.count(Op::Listxattr);
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Setxattr);
        reply.error(Errno::EOPNOTSUPP);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        self.msgs.count(Op::Removexattr);
        reply.error(Errno::ENODATA);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.msgs.count(Op::Create);
        match self.make(req, (parent, name), mode, umask, 0, Body::File(Vec::new())) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), OPEN_FLAGS),
            Err(e) => reply.error(e),
        }
    }
}

/// The names of directory `dir` from readdir offset `offset` on, at most 1024: (name, node,
/// the offset after it), "." and ".." first.
fn listing(t: &Tree, dir: u64, offset: u64) -> Result<Vec<(Vec<u8>, u64, u64)>, Errno> {
    let Body::Dir { slots, parent, .. } = &t.nodes.get(&dir).ok_or(Errno::ESTALE)?.body else {
        return Err(Errno::ENOTDIR);
    };
    let mut out = Vec::new();
    if offset < 1 {
        out.push((b".".to_vec(), dir, 1));
    }
    if offset < 2 {
        out.push((b"..".to_vec(), *parent, 2));
    }
    let from = offset.max(FIRST_SLOT - 1);
    out.extend(slots.range(from..).take(1024).map(|(slot, (name, ino))| (name.clone(), *ino, slot + 1)));
    Ok(out)
}

/// The floor's answers to the control channel's `stats` request, on a socket of its own
/// (`ctl::bind_private`: mode 0600 from the start), so that a benchmark reads its counts
/// between phases as it reads sufs's: `{"ok": {"reply": "stats", "stats": {"fuse_messages":
/// {...}}}}`. Every other request is refused. One connection at a time, served in order.
pub struct StatsServer {
    path: PathBuf,
}

impl StatsServer {
    pub fn start(path: &Path, msgs: Arc<Messages>) -> std::io::Result<StatsServer> {
        let listener = ctl::bind_private(path)?;
        std::thread::Builder::new().name("floor-stats".into()).spawn(move || {
            // SAFETY: geteuid cannot fail and touches no memory.
            let owner = unsafe { libc::geteuid() };
            for conn in listener.incoming().flatten() {
                if ctl::peer_uid(&conn).is_ok_and(|u| u == 0 || u == owner) {
                    answer_stats(conn, &msgs);
                }
            }
        })?;
        Ok(StatsServer { path: path.to_path_buf() })
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The counts as the statistics carry them (`fuse_messages`).
pub fn stats_json(msgs: &Messages) -> serde_json::Value {
    serde_json::json!({ "fuse_messages": msgs.snapshot() })
}

/// Serves one connection's requests, a line each, until it closes.
fn answer_stats(conn: UnixStream, msgs: &Messages) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut lines = BufReader::new(conn.take(ctl::MAX_LINE as u64));
    let mut line = Vec::new();
    while lines.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        let text = match serde_json::from_slice::<CtlRequest>(&line) {
            Ok(CtlRequest::Stats) => {
                format!("{}\n", serde_json::json!({ "ok": Reply::Stats { stats: stats_json(msgs) } }))
            }
            Ok(_) => ctl::error_line("the floor answers only stats", libc::EOPNOTSUPP),
            Err(e) => ctl::error_line(&format!("bad request: {e}"), libc::EINVAL),
        };
        if out.write_all(text.as_bytes()).is_err() {
            return;
        }
        line.clear();
    }
}
