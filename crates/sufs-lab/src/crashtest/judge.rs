//! Judging a crash state: fsck's findings (each with its class), then every promise whose
//! interval covers the state; a rename's promise holds only if its old name was on disk when
//! the rename began.

use std::collections::HashSet;
use std::sync::Arc;

use sufs_fs::clock::SimClock;
use sufs_fs::dev::BlockDevice;
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Fs, FsError, FsResult};
use sufs_fs::fsck::{self, Class};

use super::promise::{name_loop, reachable_inodes, resolve, Promise, PromiseKind};
use super::recorder::{CrashImage, CrashState, Recording};
use super::summary::{Summary, Verdict};
use super::workloads::{tree_digest, xattr_digest};
use super::{readonly, CrashError};

fn finding_kind(f: &impl std::fmt::Debug) -> String {
    format!("{f:?}").chars().take_while(|c| c.is_alphanumeric()).collect()
}

/// The digest of the frozen tree of snapshot `name` on a crash image.
fn frozen_digest(img: &Arc<CrashImage>, name: &str) -> FsResult<Vec<u8>> {
    let live = Fs::mount(img.clone(), readonly(), Arc::new(SimClock::new()))?;
    let frozen = sufs_fs::snapshot::FrozenDevice::new(sufs_fs::snapshot::shared(live), name.as_bytes())?;
    let mut fs = Fs::mount(Arc::new(frozen), readonly(), Arc::new(SimClock::new()))?;
    tree_digest(&mut fs)
}

impl Recording {
    /// Arms the rename promises that begin at prefix state `k`: each holds only if its old name
    /// was on disk when the rename began.
    fn arm(&self, k: usize, img: &Arc<CrashImage>, armed: &mut [bool]) {
        let mut fs = None;
        for (i, iv) in self.promises.iter().enumerate() {
            if iv.p.kind != PromiseKind::Rename || iv.from != k {
                continue;
            }
            if fs.is_none() {
                fs = Some(Fs::mount(img.clone(), readonly(), Arc::new(SimClock::new())).ok());
            }
            armed[i] = match fs.as_mut().and_then(|f| f.as_mut()) {
                Some(fs) => resolve(fs, &iv.p.paths[0]).ok() == Some(iv.p.ino),
                None => false,
            };
        }
    }

    /// The verdicts on one state: fsck's findings, then the promises.
    pub fn judge(&self, s: &CrashState, img: &Arc<CrashImage>, armed: &[bool]) -> Vec<Verdict> {
        let mut out = fsck_verdicts(img);
        if self.unmounted && s.partial.is_none() && s.batches == self.batches() {
            // Everything written, then a clean unmount: nothing is left for fsck, not even what
            // a crash may leave (a leak, a count too high).
            let left: Vec<&str> = out.iter().filter(|v| v.class == Class::Allowed).map(|v| v.text.as_str()).collect();
            if let Some(first) = left.first() {
                let text = format!("a clean unmount left {} finding(s) for fsck, the first: {first}", left.len());
                out.push(violation("UncleanUnmount", text));
            }
        }
        let mut fs = match Fs::mount(img.clone(), readonly(), Arc::new(SimClock::new())) {
            Ok(fs) => fs,
            Err(e) => {
                out.push(violation("Unmountable", format!("mount fails: {e}")));
                return out;
            }
        };
        if let Err(e) = fs.readdir(ROOT_INO, 0, usize::MAX) {
            out.push(violation("Unmountable", format!("root directory unreadable: {e}")));
        }
        if let Some(d) = name_loop(&mut fs) {
            out.push(violation("NameLoop", format!("DIRECTORY I={d} IS NAMED INSIDE ITS OWN TREE (A LOOP OF NAMES)")));
        }
        let high = s.batches + s.partial.is_some() as usize;
        let mut reachable = None;
        for (i, iv) in self.promises.iter().enumerate() {
            let p = &iv.p;
            if s.batches < iv.from || high > iv.until || (p.kind == PromiseKind::Rename && !armed[i]) {
                continue;
            }
            judge_promise(p, img, &mut fs, &mut reachable, &mut out);
        }
        out
    }

    /// Judges every crash state.
    pub fn check(&self, random_subsets: usize) -> Result<Summary, CrashError> {
        let mut sum = Summary {
            workload: self.workload.clone(),
            ordering: self.ordering.to_string(),
            seed: self.seed,
            unmounted: self.unmounted,
            ops: self.ops.len(),
            writes: self.writes(),
            batches: self.batches(),
            shared: self.shared_barriers(),
            ..Default::default()
        };
        for iv in &self.promises {
            let k = match iv.p.kind {
                PromiseKind::Stable => "stable names",
                PromiseKind::Kept => "kept inodes",
                PromiseKind::Rename => "renames",
                PromiseKind::Fsync => "fsyncs",
                PromiseKind::Reservation => "reservations",
                PromiseKind::Snapshot => "snapshots",
                PromiseKind::Xattrs => "attributes",
                PromiseKind::Flags => "inode flags",
            };
            *sum.promises.entry(k).or_default() += 1;
        }
        let mut armed = vec![false; self.promises.len()];
        sum.states = self.for_each_state(random_subsets, |s, img| {
            if s.partial.is_none() {
                self.arm(s.batches, &img, &mut armed);
            }
            let verdicts = self.judge(s, &img, &armed);
            sum.add(self, s, &verdicts);
            Ok(())
        })?;
        Ok(sum)
    }
}

/// fsck's findings on a crash image (the UFS2 checker's), each with its class.
fn fsck_verdicts(img: &Arc<CrashImage>) -> Vec<Verdict> {
    let dev: &dyn BlockDevice = &**img;
    let len = dev.num_blocks() * dev.addr_unit() as u64;
    let r = fsck::ufs2::check(dev, len, &fsck::ufs2::Options::default());
    verdicts(r.map(|r| r.findings), |f| f.class())
}

/// Each finding as a verdict of its class; a check that could not run is a violation.
fn verdicts<F: std::fmt::Debug + std::fmt::Display, E: std::fmt::Display>(
    r: Result<Vec<F>, E>,
    class: impl Fn(&F) -> Class,
) -> Vec<Verdict> {
    match r {
        Ok(findings) => {
            findings.iter().map(|f| Verdict { class: class(f), kind: finding_kind(f), text: f.to_string() }).collect()
        }
        Err(e) => vec![Verdict { class: Class::Violation, kind: "FsckFailed".into(), text: e.to_string() }],
    }
}

fn violation(kind: &str, text: String) -> Verdict {
    Verdict { class: Class::Violation, kind: kind.into(), text }
}

/// The verdicts on one promise in force on the state mounted as `fs`: the inode reachable (kept
/// inodes; `reachable` is computed once per state), else one of its names naming it, and then
/// what it keeps: a reservation's blocks, a snapshot's tree, an fsync'ed file's contents.
fn judge_promise(
    p: &Promise,
    img: &Arc<CrashImage>,
    fs: &mut Fs,
    reachable: &mut Option<HashSet<u32>>,
    out: &mut Vec<Verdict>,
) {
    if p.kind == PromiseKind::Kept {
        let reachable = reachable.get_or_insert_with(|| reachable_inodes(fs));
        if !reachable.contains(&p.ino) {
            out.push(violation(
                "InodeLost",
                format!("inode {} (before the workload {}), never removed, is reachable by no name", p.ino, p.paths[0]),
            ));
        }
        return;
    }
    if let Some(v) = name_lost(p, fs) {
        out.push(v);
        return;
    }
    if let Some(want) = &p.runs {
        let name = p.paths[0].trim_start_matches("/.br/");
        match fs.brquery(name.as_bytes(), 0, u64::MAX) {
            Ok(got) if got == *want => {}
            got => out.push(violation(
                "ReservationWrong",
                format!("reservation {name} (inode {}): brquery answers {got:?}, expected {want:?}", p.ino),
            )),
        }
    }
    if p.kind == PromiseKind::Snapshot {
        let want = p.contents.as_deref().unwrap_or_default();
        let name = p.paths[0].trim_start_matches("/.snap/");
        match frozen_digest(img, name) {
            Ok(got) if got == want => {}
            Ok(_) => out.push(violation(
                "SnapshotWrong",
                format!("snapshot {name} (inode {}) no longer shows the file system of its moment", p.ino),
            )),
            Err(e) => out.push(violation("SnapshotWrong", format!("snapshot {name} unreadable: {e}"))),
        }
        return;
    }
    if p.kind == PromiseKind::Xattrs {
        let want = p.contents.as_deref().unwrap_or_default();
        match xattr_digest(fs, p.ino) {
            Ok(got) if got == want => {}
            got => out.push(violation(
                "XattrsWrong",
                format!("fsync'ed attributes of {} (inode {}): {:?}", p.paths[0], p.ino, got.map(|g| g.len())),
            )),
        }
        return;
    }
    if p.kind == PromiseKind::Flags {
        let want = p.contents.as_deref().unwrap_or_default();
        match fs.getattr(p.ino) {
            Ok(d) if (d.flags & sufs_fs::fs::flags::USER_FLAGS).to_le_bytes()[..] == *want => {}
            got => out.push(violation(
                "FlagsWrong",
                format!("{} (inode {}): flags {:?}, expected {want:?}", p.paths[0], p.ino, got.map(|d| d.flags)),
            )),
        }
        return;
    }
    if let Some(want) = &p.contents {
        out.extend(contents_wrong(p, want, fs));
    }
}

/// A violation if none of the promise's paths names its inode.
fn name_lost(p: &Promise, fs: &mut Fs) -> Option<Verdict> {
    let found: Vec<FsResult<u32>> = p.paths.iter().map(|q| resolve(fs, q)).collect();
    if found.iter().any(|r| matches!(r, Ok(i) if *i == p.ino)) {
        return None;
    }
    let (kind, what) = match p.kind {
        PromiseKind::Stable => ("StableNameLost", "a name made before the workload and not yet removed"),
        PromiseKind::Kept => unreachable!("judged by reachability"),
        PromiseKind::Rename => ("RenameLostBoth", "a renamed inode, durable before the rename"),
        PromiseKind::Fsync => ("FsyncNameLost", "an fsync'ed file"),
        PromiseKind::Reservation => ("ReservationLost", "a reservation"),
        PromiseKind::Snapshot => ("SnapshotLost", "a snapshot"),
        PromiseKind::Xattrs => ("XattrNameLost", "a file whose attributes were fsync'ed"),
        PromiseKind::Flags => ("FlagsNameLost", "a file whose flags were fsync'ed"),
    };
    let got: Vec<String> = p
        .paths
        .iter()
        .zip(&found)
        .map(|(q, r)| match r {
            Ok(i) => format!("{q} names inode {i}"),
            Err(e) => format!("{q}: {e}"),
        })
        .collect();
    let kind = if found.iter().any(|r| matches!(r, Err(e) if !matches!(e, FsError::NotFound))) {
        "NameUnreadable"
    } else {
        kind
    };
    Some(violation(kind, format!("{what}, inode {}, is not named: {}", p.ino, got.join("; "))))
}

/// A violation if an fsync'ed file no longer holds `want`.
fn contents_wrong(p: &Promise, want: &[u8], fs: &mut Fs) -> Option<Verdict> {
    let got = fs.getattr(p.ino).and_then(|d| fs.read(p.ino, 0, d.size as usize));
    match got {
        Ok(g) if g == want => None,
        Ok(g) => {
            let first = g.iter().zip(want).position(|(a, b)| a != b).unwrap_or(g.len().min(want.len()));
            Some(violation(
                "FsyncDataWrong",
                format!(
                    "fsync'ed file {} (inode {}): {} bytes, expected {}; first difference at byte {first}",
                    p.paths[0],
                    p.ino,
                    g.len(),
                    want.len()
                ),
            ))
        }
        Err(e) => {
            Some(violation("FsyncDataWrong", format!("fsync'ed file {} (inode {}) unreadable: {e}", p.paths[0], p.ino)))
        }
    }
}
