//! Counts of the FUSE messages a mount served, by opcode. The FUSE adapter counts each request
//! as its handler starts (one relaxed atomic add, no lock); the counts are kept with the file
//! system so that its statistics (`Fs::stats`, `sufs mount --stats`) and the control channel's
//! `Stats` request carry them, while mounted and at unmount.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// `Op` (one variant per FUSE request sufs serves or refuses) and `NAMES`, its names in the
/// statistics, from one list.
macro_rules! opcodes {
    ($($op:ident => $name:literal,)*) => {
        /// A FUSE request kind, as counted.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Op { $($op,)* }

        /// The name of each `Op` in the statistics (the kernel's opcode, lower case).
        const NAMES: &[&str] = &[$($name,)*];
    };
}

opcodes! {
    Lookup => "lookup",
    Getattr => "getattr",
    Setattr => "setattr",
    Readlink => "readlink",
    Symlink => "symlink",
    Mknod => "mknod",
    Mkdir => "mkdir",
    Unlink => "unlink",
    Rmdir => "rmdir",
    Rename => "rename",
    Link => "link",
    Open => "open",
    Read => "read",
    Write => "write",
    Statfs => "statfs",
    Release => "release",
    Fsync => "fsync",
    Setxattr => "setxattr",
    Getxattr => "getxattr",
    Listxattr => "listxattr",
    Removexattr => "removexattr",
    Flush => "flush",
    Opendir => "opendir",
    Readdir => "readdir",
    Releasedir => "releasedir",
    Fsyncdir => "fsyncdir",
    Access => "access",
    Create => "create",
    Ioctl => "ioctl",
    Fallocate => "fallocate",
    Readdirplus => "readdirplus",
    Lseek => "lseek",
    CopyFileRange => "copy_file_range",
    Statx => "statx",
    Tmpfile => "tmpfile",
}

/// The counters of one mount.
#[derive(Debug)]
pub struct Messages {
    /// Requests served, indexed by `Op as usize`.
    counts: [AtomicU64; NAMES.len()],
    /// Inodes forgotten: FORGET's one, and each node of a BATCH_FORGET.
    forget_nodes: AtomicU64,
    /// The lookups they gave back (the sum of their `nlookup`).
    forget_nlookup: AtomicU64,
    /// FORGET and BATCH_FORGET messages: forgets with a request id other than the last one's
    /// (the nodes of a batch share its id; a forget from another thread between two nodes of
    /// a batch would count the batch twice, so this may overcount, rarely).
    forget_messages: AtomicU64,
    /// The request id of the last forget.
    last_forget: AtomicU64,
}

impl Default for Messages {
    fn default() -> Messages {
        Messages {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            forget_nodes: AtomicU64::new(0),
            forget_nlookup: AtomicU64::new(0),
            forget_messages: AtomicU64::new(0),
            last_forget: AtomicU64::new(0),
        }
    }
}

impl Messages {
    /// One more request of kind `op`.
    pub fn count(&self, op: Op) {
        self.counts[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A forget of one inode giving back `nlookup` lookups, in the message with id `unique`.
    pub fn forgot(&self, unique: u64, nlookup: u64) {
        self.forget_nodes.fetch_add(1, Ordering::Relaxed);
        self.forget_nlookup.fetch_add(nlookup, Ordering::Relaxed);
        if self.last_forget.swap(unique, Ordering::Relaxed) != unique {
            self.forget_messages.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every count by name (zeros too, so that the set of names does not vary), with
    /// the forgets' three: `forget` (messages), `forget_nodes` and `forget_nlookup`.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let mut m: BTreeMap<&'static str, u64> =
            NAMES.iter().zip(&self.counts).map(|(n, c)| (*n, c.load(Ordering::Relaxed))).collect();
        m.insert("forget", self.forget_messages.load(Ordering::Relaxed));
        m.insert("forget_nodes", self.forget_nodes.load(Ordering::Relaxed));
        m.insert("forget_nlookup", self.forget_nlookup.load(Ordering::Relaxed));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_name() {
        let m = Messages::default();
        m.count(Op::Create);
        m.count(Op::Create);
        m.count(Op::CopyFileRange);
        for (unique, nlookup) in [(10, 1), (10, 2), (10, 2), (12, 2)] {
            m.forgot(unique, nlookup);
        }
        let s = m.snapshot();
        assert_eq!(s["create"], 2);
        assert_eq!(s["copy_file_range"], 1);
        assert_eq!(s["lookup"], 0);
        assert_eq!(s["forget"], 2, "a batch of three and a single forget");
        assert_eq!(s["forget_nodes"], 4);
        assert_eq!(s["forget_nlookup"], 7);
        assert_eq!(NAMES.len(), Op::Tmpfile as usize + 1, "one name per op");
    }
}
