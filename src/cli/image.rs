//! Commands on an image: mkfs, fsck (and the background fsck of a mounted image), dumpfs.

use std::path::Path;
use std::sync::Arc;
use sufs_fs::clock::{Clock, RealClock};
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::format::Superblock;
use sufs_fs::fs::adjust::Adjust;
use sufs_fs::{format, fsck, snapshot};
use sufs_mount::ctl::{self};

use super::*;

/// What `sufs mkfs --ufs2` was asked for, newfs's options.
#[derive(Default)]
pub(crate) struct Ufs2Geometry {
    pub(crate) block_size: Option<u32>,
    pub(crate) frag_size: Option<u32>,
    pub(crate) bytes_per_inode: Option<u32>,
    pub(crate) minfree: Option<u8>,
    pub(crate) label: Option<String>,
    /// Bytes left at the end of the device, outside the file system (`--snapshot-reserve`).
    pub(crate) snapshot_reserve: Option<u64>,
}

/// Where a `--snapshot-reserve` leaves the file system's end: the reserve taken off the device,
/// rounded down to 64 KiB (a whole number of blocks of any size newfs makes), so the volume
/// snapshot's reserved area starts on a block. None if nothing would be left.
pub(crate) fn ufs2_prefix(dev_size: u64, reserve: u64) -> Option<u64> {
    const ALIGN: u64 = 64 << 10;
    let fs = dev_size.checked_sub(reserve)? / ALIGN * ALIGN;
    (fs > 0).then_some(fs)
}

/// A FreeBSD UFS2 file system over the whole image (made sparse, or extended, to `size`), or
/// over all but its last `snapshot_reserve` bytes, as newfs(8) makes one; answers newfs's
/// layout and notes.
pub(crate) fn newfs_image(
    image: &Path,
    size: Option<u64>,
    g: Ufs2Geometry,
) -> Result<sufs_fs::format::ufs2::newfs::Newfs, Fail> {
    use std::os::unix::fs::FileExt;
    use sufs_fs::format::ufs2::newfs::{self, NewfsOptions};
    let int = |v: Option<u32>, what: &str| {
        v.map(|v| i32::try_from(v).map_err(|_| Fail(format!("{what} {v} is too large"), 1))).transpose()
    };
    let opts = NewfsOptions {
        bsize: int(g.block_size, "block size")?,
        fsize: int(g.frag_size, "fragment size")?,
        density: int(g.bytes_per_inode, "bytes per inode")?,
        minfree: g.minfree.map_or(newfs::MINFREE, i32::from),
        label: g.label,
        time: RealClock::new().wall().0,
        ..NewfsOptions::default()
    };
    let cannot = |e: &dyn std::fmt::Display| Fail(format!("cannot make a file system on {}: {e}", image.display()), 1);
    let too_little = |r: u64| Fail(format!("--snapshot-reserve {r} leaves too little for a file system"), 1);
    let prefix = |dev_size: u64| match g.snapshot_reserve {
        Some(r) => ufs2_prefix(dev_size, r).ok_or_else(|| too_little(r)),
        None => Ok(dev_size),
    };
    if let Some(size) = size {
        // Refused before the image is touched.
        newfs::geometry(prefix(size)?, &opts).map_err(|e| cannot(&e))?;
        FileDevice::create(image, size)?;
    } else if !image.exists() {
        return Err(Fail(format!("{} does not exist: give --size to create it", image.display()), 1));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .map_err(|e| Fail(format!("cannot open {}: {e}", image.display()), 1))?;
    let dev_size = sufs_fs::dev::device_size(&file)?;
    let fs_size = prefix(dev_size)?;
    let made = newfs::newfs(fs_size, &opts, |off, b| file.write_all_at(b, off)).map_err(|e| cannot(&e))?;
    if fs_size < dev_size {
        // No old volume snapshot's store header may be found in the reserved area.
        let clear = (dev_size - fs_size).min(64 << 10) as usize;
        file.write_all_at(&vec![0u8; clear], fs_size).map_err(|e| cannot(&e))?;
    }
    file.sync_all().map_err(|e| cannot(&e))?;
    Ok(made)
}

/// `sufs mkfs --ufs2`: a FreeBSD UFS2 file system over the whole image (made sparse, or
/// extended, to `size`), as newfs(8) makes one, and newfs's report of it.
pub(crate) fn cmd_mkfs_ufs2(image: &Path, size: Option<u64>, g: Ufs2Geometry) -> Result<(), Fail> {
    let made = newfs_image(image, size, g)?;
    for n in &made.notes {
        println!("{n}");
    }
    let sb = &made.sb;
    let mb = |frags: i64| frags as f64 * sb.fs_fsize as f64 / (1024.0 * 1024.0);
    println!(
        "{}: {:.1}MB ({} sectors) block size {}, fragment size {}",
        image.display(),
        mb(sb.fs_size),
        sb.fsbtodb(sb.fs_size),
        sb.fs_bsize,
        sb.fs_fsize
    );
    println!(
        "\tusing {} cylinder groups of {:.2}MB, {} blks, {} inodes.",
        sb.fs_ncg,
        mb(sb.fs_fpg as i64),
        sb.fs_fpg / sb.fs_frag,
        sb.fs_ipg
    );
    if sb.fs_flags & sufs_fs::format::ufs2::FS_DOSOFTDEP != 0 {
        println!("\twith soft updates");
    }
    println!("super-block backups (for fsck_ffs -b #) at:");
    let copies: Vec<String> = (0..sb.fs_ncg).map(|c| sb.fsbtodb(sb.cgsblock(c)).to_string()).collect();
    for line in copies.chunks(8) {
        println!(" {}", line.join(", "));
    }
    Ok(())
}

/// Opens an image by its superblock (UFS2's, where FreeBSD looks), addressed in fragments, with
/// its superblock; an image of sufs's retired format is refused with a message.
pub(crate) fn open_image_any(image: &Path, writable: bool) -> Result<(FileDevice, Superblock), Fail> {
    FileDevice::open_image(image, writable).map_err(|e| match e {
        sufs_fs::dev::DevError::NotAFileSystem(m) => Fail(m, 8),
        e => Fail(e.to_string(), 1),
    })
}

/// The snapshot a background fsck checks, deleted when this goes out of scope whatever happened
/// (a failed check, an error on the way), and by `delete` on the ordinary path.
struct FsckSnapshot<'a> {
    name: String,
    call: &'a dyn Fn(ctl::Request) -> Result<ctl::Reply, Fail>,
    deleted: bool,
}

impl FsckSnapshot<'_> {
    fn delete(mut self) -> Result<(), Fail> {
        self.deleted = true;
        (self.call)(ctl::Request::SnapshotDelete { name: self.name.clone() }).map(|_| ())
    }
}

impl Drop for FsckSnapshot<'_> {
    fn drop(&mut self) {
        if !self.deleted {
            if let Err(e) = (self.call)(ctl::Request::SnapshotDelete { name: self.name.clone() }) {
                eprintln!("sufs: background fsck: cannot delete its snapshot {}: {}", self.name, e.0);
            }
        }
    }
}

/// What background fsck's check of a snapshot found, in the checker's words.
struct BgReport {
    /// Each finding: its class and what it says.
    found: Vec<(fsck::Class, String)>,
    files: u64,
    dirs: u64,
    /// The space in use, in the format's unit ("N blocks used", "N fragments used").
    used: String,
    /// Findings the adjust does not act on (left for a full fsck, or needing nothing sent).
    other: usize,
}

/// `fsck --background`: a snapshot checked while writers go on, its lost resources handed to the
/// live file system. Exit 0 nothing found, 1 adjusted, 4 violations found (nothing adjusted).
/// `mounted`: the mount's own file system, when the mount process checks itself (it reads the
/// snapshot in memory: through its own mount it would hold the mount busy, and wait on itself).
/// The snapshot is deleted on every path; a file system without room for it is not checked.
pub(crate) fn cmd_fsck_background(on: &Path, mounted: Option<sufs_fs::fs::SharedFs>) -> Result<u8, Fail> {
    use ctl::Request;
    let t = std::time::Instant::now();
    let name = format!("fsck.{}", std::process::id());
    // In the mount's own process the requests go to the file system itself: its control channel
    // may not be there yet, or no longer (a mount that is being unmounted).
    let call = |req: Request| match &mounted {
        Some(fs) => ctl::execute(&mut sufs_fs::fs::lock(fs), req).map_err(|e| Fail(e.to_string(), 1)),
        None => control(on, req),
    };
    // The mount refuses a snapshot it has no room for before it makes anything.
    call(Request::SnapshotCreate { name: name.clone() })
        .map_err(|e| Fail(format!("{}: background fsck not started: snapshot: {}", on.display(), e.0), e.1))?;
    let snap = FsckSnapshot { name: name.clone(), call: &call, deleted: false };
    let taken = t.elapsed();
    let (report, adjust) = {
        // `_lock`: an unmounted image's, held while its snapshot is read.
        let (frozen, _lock): (Arc<dyn BlockDevice>, _) = match &mounted {
            Some(fs) => (
                Arc::new(
                    snapshot::FrozenDevice::new(fs.clone(), name.as_bytes())
                        .map_err(|e| Fail(format!("snapshot {name}: {e}"), 1))?,
                ),
                None,
            ),
            None => frozen_device(on, &name)?,
        };
        let adjust_err = |e: sufs_fs::fs::FsError| Fail(format!("snapshot {name}: {e}"), 8);
        let len = frozen.num_blocks() * frozen.addr_unit() as u64;
        let r = fsck::ufs2::check(frozen.as_ref(), len, &Default::default())
            .map_err(|e| Fail(format!("snapshot {name}: UFS2: {e}"), 8))?;
        let (adjust, other) = Adjust::from_ufs2_findings(&r.findings, frozen.as_ref()).map_err(adjust_err)?;
        let found = r.findings.iter().map(|f| (f.class(), f.to_string())).collect();
        let (files, dirs, used, other) = (r.files, r.dirs, format!("{} fragments used", r.used_frags), other.len());
        (BgReport { found, files, dirs, used, other }, adjust)
    };
    let checked = t.elapsed();
    snap.delete()?;
    for (class, what) in &report.found {
        println!("{class:?}: {what}");
    }
    // What a crash cannot leave is not repaired on a live file system: a full fsck, unmounted.
    let violations = report.found.iter().filter(|(class, _)| *class == fsck::Class::Violation).count();
    if violations > 0 {
        println!("{}: {violations} violations: run a full fsck on the unmounted image", on.display());
        return Ok(4);
    }
    let done = if adjust.is_empty() {
        None
    } else {
        // In pieces, each well under the control channel's longest line.
        let mut done = sufs_fs::fs::adjust::AdjustDone::default();
        for req in ctl::adjust_requests(adjust) {
            let d = call(req)?.into_adjusted().map_err(super::control::answer)?;
            done.blocks_freed += d.blocks_freed;
            done.frags_freed += d.frags_freed;
            done.inodes_freed += d.inodes_freed;
            done.links_lowered += d.links_lowered;
            done.counts_fixed += d.counts_fixed;
            done.refused += d.refused;
            let room = sufs_fs::fs::adjust::MAX_REFUSALS_LISTED.saturating_sub(done.refusals.len());
            done.refusals.extend(d.refusals.into_iter().take(room));
        }
        Some(done)
    };
    for why in done.iter().flat_map(|d| &d.refusals) {
        println!("refused: {why}");
    }
    println!(
        "{}: background fsck: snapshot {:.3} s, check {:.3} s, total {:.3} s; {} files, {} directories, {}; {} findings ({} left for a full fsck); adjusted: {}",
        on.display(),
        taken.as_secs_f64(),
        (checked - taken).as_secs_f64(),
        t.elapsed().as_secs_f64(),
        report.files,
        report.dirs,
        report.used,
        report.found.len(),
        report.other,
        match &done {
            None => "nothing".to_string(),
            Some(d) => format!(
                "{} fragments freed ({} whole blocks), {} inodes freed, {} link counts lowered, {} block counts set, {} refused",
                d.frags_freed, d.blocks_freed, d.inodes_freed, d.links_lowered, d.counts_fixed, d.refused
            ),
        }
    );
    Ok(if done.is_none() { 0 } else { 1 })
}

/// What `sufs fsck` may do to the image: fsck_ffs's `-n`, `-p` and `-y`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsckMode {
    Check,
    Preen,
    Repair,
}

/// `sufs fsck`'s options: the mode, `-f` (preen an image marked clean too) and `-b` (the
/// sector of a superblock copy).
pub(crate) struct FsckArgs {
    pub(crate) mode: FsckMode,
    pub(crate) force: bool,
    pub(crate) superblock: Option<u64>,
}

/// `sufs fsck IMAGE`: refuses a mounted image, then checks (and repairs) it as fsck_ffs does.
pub(crate) fn cmd_fsck(image: &Path, opts: &FsckArgs) -> Result<u8, Fail> {
    let f = std::fs::File::open(image).map_err(|e| Fail(format!("{}: {e}", image.display()), 8))?;
    if f.try_lock_shared().is_err() {
        return Err(Fail(format!("{} is mounted; unmount it first", image.display()), 8));
    }
    let mut magic = [0u8; 8];
    if std::os::unix::fs::FileExt::read_exact_at(&f, &mut magic, 0).is_ok()
        && u64::from_le_bytes(magic) == format::RETIRED_MAGIC
    {
        return Err(Fail(format!("{}: {}", image.display(), format::FormatError::Retired), 8));
    }
    // fsck_ffs -p skips a file system marked clean (and not marked for a check). A superblock
    // the mount would refuse is the checker's to report.
    if opts.mode == FsckMode::Preen && !opts.force && opts.superblock.is_none() {
        if let Ok((_, sb)) = open_image_any(image, false) {
            if sb.flags & format::SB_CLEAN != 0 && sb.flags & format::SB_NEEDS_FSCK == 0 {
                println!("{}: clean, not checked (-f to check)", image.display());
                return Ok(0);
            }
        }
    }
    cmd_fsck_ufs2(image, &f, opts)
}

/// `sufs fsck` of a UFS2 image (`-b` names a sector, as fsck_ffs's does): the check, and with
/// -y or -p the repair (`fsck::ufs2::repair`), which writes nothing unless it can repair every
/// finding (with -p: every finding of the allowed class).
fn cmd_fsck_ufs2(image: &Path, f: &std::fs::File, opts: &FsckArgs) -> Result<u8, Fail> {
    let fail = |e: &dyn std::fmt::Display| Fail(format!("{}: UFS2: {e}", image.display()), 8);
    let len = f.metadata().map_err(|e| fail(&e))?.len();
    let uopts = fsck::ufs2::Options { alternate: opts.superblock };
    let mode = match opts.mode {
        FsckMode::Check => None,
        FsckMode::Repair => Some(fsck::ufs2::RepairMode::Yes),
        FsckMode::Preen => Some(fsck::ufs2::RepairMode::Preen),
    };
    let Some(mode) = mode else {
        let report = fsck::ufs2::check(f, len, &uopts).map_err(|e| fail(&e))?;
        print_ufs2_report(image, &report);
        return Ok(if report.findings.is_empty() { 0 } else { 4 });
    };
    let rw = std::fs::OpenOptions::new().read(true).write(true).open(image).map_err(|e| fail(&e))?;
    let out = fsck::ufs2::repair(&rw, len, &uopts, mode).map_err(|e| fail(&e))?;
    print_ufs2_report(image, &out.before);
    for line in &out.done {
        println!("repaired: {line}");
    }
    if let Some(why) = &out.refused {
        let run = if mode == fsck::ufs2::RepairMode::Preen { ": run sufs fsck -y" } else { "" };
        println!("{}: not repaired ({why}), nothing changed{run}", image.display());
        return Ok(if out.before.findings.is_empty() { 0 } else { 4 });
    }
    rw.sync_all().map_err(|e| fail(&e))?;
    let after = out.after.unwrap_or_default();
    if !after.findings.is_empty() {
        for f in &after.findings {
            println!("left: {:?}: {f}", f.class());
        }
        println!("{}: {} findings left unrepaired", image.display(), after.findings.len());
        return Ok(4);
    }
    Ok(if out.before.findings.is_empty() { 0 } else { 1 })
}

/// The findings of a UFS2 check and the counts fsck_ffs prints at the end.
fn print_ufs2_report(image: &Path, report: &fsck::ufs2::Report) {
    println!("** {}: UFS2 file system, superblock at byte {}", image.display(), report.sblock_at);
    for f in &report.findings {
        println!("{:?}: {f}", f.class());
    }
    let frag_pct = if report.used_frags + report.free_frags > 0 {
        report.nffree as f64 * 100.0 / (report.used_frags + report.free_frags) as f64
    } else {
        0.0
    };
    println!(
        "{}: {} files, {} directories, {} used, {} free ({} frags, {} blocks, {frag_pct:.1}% fragmentation); {} findings ({} allowed, {} violations)",
        image.display(),
        report.files,
        report.dirs,
        report.used_frags,
        report.free_frags,
        report.nffree,
        report.nbfree,
        report.findings.len(),
        report.allowed(),
        report.violations(),
    );
    if report.reservations > 0 {
        println!(
            "{}: {} Block Register reservations in /.br own {} blocks",
            image.display(),
            report.reservations,
            report.reserved_blocks
        );
    }
}

pub(crate) fn cmd_dumpfs(image: &Path) -> Result<(), Fail> {
    let (_dev, sb) = open_image_any(image, false)?;
    dumpfs_ufs2(&sb, sb.ufs2());
    Ok(())
}

/// `dumpfs` of a UFS2 image: the superblock as FreeBSD's dumpfs(8) heads it.
fn dumpfs_ufs2(sb: &Superblock, u: &format::ufs2::Superblock) {
    use format::ufs2::*;
    let cs = u.fs_cstotal;
    println!("magic     {:#x} (UFS2)", u.fs_magic);
    println!("bsize     {}  fsize {}  frag {}", u.fs_bsize, u.fs_fsize, u.fs_frag);
    println!(
        "size      {} fragments ({} MiB), dsize {}",
        u.fs_size,
        (u.fs_size as u64 * u.fs_fsize as u64) >> 20,
        u.fs_dsize
    );
    println!("groups    {} of {} fragments, {} inodes each", u.fs_ncg, u.fs_fpg, u.fs_ipg);
    println!(
        "free      {} blocks, {} fragments, {} inodes; {} directories",
        cs.cs_nbfree, cs.cs_nffree, cs.cs_nifree, cs.cs_ndir
    );
    let optim = if u.fs_optim == newfs::FS_OPTSPACE { "space" } else { "time" };
    println!("minfree   {}%  optim {optim}", u.fs_minfree);
    println!("label     {}", if sb.label.is_empty() { "(none)".into() } else { String::from_utf8_lossy(&sb.label) });
    println!(
        "ordering  {} for a mount given none (soft updates {})",
        format!("{:?}", super::default_ordering(sb)).to_lowercase(),
        if u.fs_flags & FS_DOSOFTDEP != 0 { "on" } else { "off" }
    );
    println!("clean     {}", if u.fs_clean != 0 { "yes" } else { "no" });
    println!("flags     {}", ufs2_flag_names(u.fs_flags));
}

/// The names of the `fs_flags` bits set, as dumpfs(8) names them ("none" for none).
pub(crate) fn ufs2_flag_names(fs_flags: i32) -> String {
    use format::ufs2::*;
    let named = [
        (FS_UNCLEAN, "unclean"),
        (FS_DOSOFTDEP, "soft-updates"),
        (FS_NEEDSFSCK, "needs-fsck"),
        (FS_SUJ, "soft-updates+journal"),
        (FS_ACLS, "acls"),
        (FS_MULTILABEL, "multilabel"),
        (FS_GJOURNAL, "gjournal"),
        (FS_NFS4ACLS, "nfsv4acls"),
        (FS_METACKHASH, "check-hashes"),
        (FS_TRIM, "trim"),
    ];
    let flags: Vec<&str> = named.iter().filter(|(f, _)| fs_flags & f != 0).map(|(_, n)| *n).collect();
    if flags.is_empty() {
        "none".into()
    } else {
        flags.join(" ")
    }
}
