//! `sufs bench scale`: sufs at terabyte and million-file scale, beside ext4's own tools. Each
//! measured step runs as a child process (this program again), so that the peak resident memory
//! the kernel reports for it (`wait4`'s rusage) belongs to that step alone:
//! - an empty sparse image of `size` bytes: `sufs mkfs`, a mount and unmount, `sufs fsck -f`,
//!   against `mkfs.ext4`, a loop mount of it (root only) and `e2fsck -fn`;
//! - `files` empty files created through the library (in-process `Fs` on the image file), in a
//!   tree of directories of 1000 and, separately, in one directory; each looked up, listed and
//!   removed (`rm -rf`), with soft updates' peak count of dependency structures;
//! - `sufs fsck -f` of the image holding the tree against `e2fsck -fn` of an ext4 image that
//!   `mkfs.ext4 -d` filled with the same tree.
//!
//! The library steps (`step`) print one JSON line with their own timings, which the parent reads.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::bench::{run_err, BenchError};
use sufs_fs::clock::{Clock, RealClock};
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Fs, FsError, FsResult, MountOptions, Ordering};

/// Files per directory of the tree layout.
pub const TREE_FANOUT: usize = 1000;

/// Lookups timed at each size a directory passes on its way up (`lookup_probes`).
const PROBES: usize = 10_000;

/// Operations between two samples of soft updates' dependency count (the mount itself counts
/// only as often as the room left under its bound needs, which in a short run is never).
const SAMPLE_EVERY: usize = 4096;

/// Where the files of a library step go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Layout {
    /// `/tree/dNNNN/fNNNN`: directories of `TREE_FANOUT` files.
    Tree,
    /// `/flat/fN`: every file in one directory.
    Flat,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Tree => "tree",
            Layout::Flat => "flat",
        }
    }
}

/// One library step, run in a child process (`sufs bench scale-step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Step {
    /// Creates the files, then unmounts (everything written).
    Create,
    /// Looks every file up by its path, then lists every directory.
    Stat,
    /// Removes the whole layout (`rm -rf`), then unmounts.
    Remove,
}

/// What a library step measured (its own timings; the parent adds its resident memory).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepReport {
    /// Seconds of the step's main phase (the creates, the lookups, the removes).
    pub secs: f64,
    /// Seconds of the listing (stat step) or of the unmount after the phase.
    pub secs2: f64,
    /// Entries seen by the listing (stat step).
    pub listed: u64,
    /// Soft updates' largest count of dependency structures during the step.
    pub peak_deps: usize,
    /// Mean microseconds of a lookup in one directory at each size it passed (flat create).
    pub lookup_probes: Vec<(u64, f64)>,
}

/// The path of file `i` in `layout`: its directory's name (under the layout's top) and its own.
fn file_name(layout: Layout, i: usize) -> (Option<String>, String) {
    match layout {
        Layout::Tree => (Some(format!("d{:04}", i / TREE_FANOUT)), format!("f{:04}", i % TREE_FANOUT)),
        Layout::Flat => (None, format!("f{i}")),
    }
}

fn mount(image: &Path, cache_blocks: usize, softdep_limit: Option<usize>) -> FsResult<(Fs, Arc<dyn BlockDevice>)> {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open_image(image, true)?.0);
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let mut fs =
        Fs::mount(dev.clone(), MountOptions { ordering: Ordering::Softdep, cache_blocks, readonly: false }, clock)?;
    if let Some(n) = softdep_limit {
        fs.set_softdep_limit(n);
    }
    Ok((fs, dev))
}

/// Runs one library step on `image` (made by `sufs mkfs`) and returns what it measured.
pub fn step(
    image: &Path,
    step: Step,
    layout: Layout,
    files: usize,
    cache_blocks: usize,
    softdep_limit: Option<usize>,
) -> FsResult<StepReport> {
    let (mut fs, _dev) = mount(image, cache_blocks, softdep_limit)?;
    let top_name = layout.name().as_bytes();
    let mut r = StepReport::default();
    let t = Instant::now();
    match step {
        Step::Create => {
            let (top, _) = fs.mkdir(ROOT_INO, top_name, 0o755, 0, 0)?;
            create_all(&mut fs, top, layout, files, &mut r)?;
        }
        Step::Stat => {
            let (top, _) = fs.lookup(ROOT_INO, top_name)?;
            for i in 0..files {
                let (sub, name) = file_name(layout, i);
                let dir = match sub {
                    Some(s) => fs.lookup(top, s.as_bytes())?.0,
                    None => top,
                };
                fs.lookup(dir, name.as_bytes())?;
            }
            r.secs = t.elapsed().as_secs_f64();
            let t = Instant::now();
            r.listed = list_tree(&mut fs, top)?;
            r.secs2 = t.elapsed().as_secs_f64();
            return finish(fs, r, false);
        }
        Step::Remove => {
            let (top, _) = fs.lookup(ROOT_INO, top_name)?;
            remove_tree(&mut fs, top, &mut 0)?;
            fs.rmdir(ROOT_INO, top_name)?;
        }
    }
    r.secs = t.elapsed().as_secs_f64();
    // The last sample: what the phase left for the unmount to write.
    fs.drop_idle_records();
    finish(fs, r, true)
}

/// Unmounts (timed into `secs2` if `timed`) and takes soft updates' peak count.
fn finish(mut fs: Fs, mut r: StepReport, timed: bool) -> FsResult<StepReport> {
    let t = Instant::now();
    fs.unmount()?;
    if timed {
        r.secs2 = t.elapsed().as_secs_f64();
    }
    r.peak_deps = fs.softdep_stats().map_or(0, |s| s.max_deps);
    Ok(r)
}

/// Creates `files` empty files under `top`; in one directory, times lookups at each power of ten.
fn create_all(fs: &mut Fs, top: u32, layout: Layout, files: usize, r: &mut StepReport) -> FsResult<()> {
    let mut dir = top;
    let mut probe_at = PROBES as u64;
    for i in 0..files {
        let (sub, name) = file_name(layout, i);
        if let (Some(s), 0) = (sub, i % TREE_FANOUT) {
            dir = fs.mkdir(top, s.as_bytes(), 0o755, 0, 0)?.0;
        }
        fs.create(dir, name.as_bytes(), 0o644, 0, 0)?;
        sample(fs, i);
        if layout == Layout::Flat && (i + 1) as u64 == probe_at {
            r.lookup_probes.push((probe_at, probe_lookups(fs, top, i + 1)?));
            probe_at *= 10;
        }
    }
    Ok(())
}

/// Mean microseconds of `PROBES` lookups of names spread over the first `n` of `/flat`, the
/// second time round: the first pass brings their inodes' blocks into the cache, so the time
/// is the directory's (the dirhash and the entry's block), not a read of a cold inode block.
fn probe_lookups(fs: &mut Fs, dir: u32, n: usize) -> FsResult<f64> {
    let stride = (n / PROBES).max(1);
    let names: Vec<String> = (0..PROBES).map(|k| format!("f{}", (k * stride + k % stride) % n)).collect();
    for name in &names {
        fs.lookup(dir, name.as_bytes())?;
    }
    let t = Instant::now();
    for name in &names {
        fs.lookup(dir, name.as_bytes())?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / PROBES as f64)
}

/// Every entry under `top`, listed as `ls -R` would (readdir in batches); the count.
fn list_tree(fs: &mut Fs, top: u32) -> FsResult<u64> {
    let mut stack = vec![top];
    let mut n = 0;
    while let Some(dir) = stack.pop() {
        let mut cookie = 0;
        loop {
            let batch = fs.readdir(dir, cookie, 1024)?;
            let Some(last) = batch.last() else { break };
            cookie = last.next;
            for e in batch.iter().filter(|e| e.name != b"." && e.name != b"..") {
                n += 1;
                if e.dtype == sufs_fs::format::DT_DIR {
                    stack.push(e.ino);
                }
            }
        }
    }
    Ok(n)
}

/// Samples soft updates' dependency count (into its peak) every `SAMPLE_EVERY` operations.
fn sample(fs: &mut Fs, op: usize) {
    if op % SAMPLE_EVERY == SAMPLE_EVERY - 1 {
        fs.drop_idle_records();
    }
}

/// Removes everything under `top` as `rm -rf` does: list a directory, unlink its files, recurse
/// into its directories, remove them.
fn remove_tree(fs: &mut Fs, top: u32, ops: &mut usize) -> FsResult<()> {
    loop {
        let batch = fs.readdir(top, 0, 1024)?;
        let entries: Vec<_> = batch.into_iter().filter(|e| e.name != b"." && e.name != b"..").collect();
        if entries.is_empty() {
            return Ok(());
        }
        for e in entries {
            if e.dtype == sufs_fs::format::DT_DIR {
                remove_tree(fs, e.ino, ops)?;
                fs.rmdir(top, &e.name)?;
            } else {
                fs.unlink(top, &e.name)?;
            }
            sample(fs, *ops);
            *ops += 1;
        }
    }
}

/// A step's error as the child reports it.
pub fn step_error(e: FsError) -> BenchError {
    run_err("library step", e)
}

/// The command that runs a library step in a child: `exe bench scale-step ...`.
pub fn step_command(exe: &Path, image: &Path, s: Step, layout: Layout, files: usize) -> Command {
    let mut c = Command::new(exe);
    c.args(["bench", "scale-step"])
        .arg(image)
        .args(["--step", step_arg(s), "--layout", layout.name(), "--files", &files.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn step_arg(s: Step) -> &'static str {
    match s {
        Step::Create => "create",
        Step::Stat => "stat",
        Step::Remove => "remove",
    }
}

// ---------------------------------------------------------------- the whole benchmark

/// What `sufs bench scale` runs.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// This program (the steps run as children of it).
    pub exe: PathBuf,
    /// Where the images and the ext4 copy of the tree go.
    pub dir: PathBuf,
    /// Size of the empty sparse image.
    pub size: u64,
    /// Files created, checked and removed.
    pub files: usize,
}

/// One child process's cost: wall and CPU seconds, and its peak resident memory.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Cost {
    pub secs: f64,
    pub cpu_secs: f64,
    pub rss_kb: u64,
}

/// One row of the table: sufs and ext4 side by side (either may be missing).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub step: String,
    pub sufs: Option<Cost>,
    /// What ext4's column ran.
    pub ext4_tool: String,
    pub ext4: Option<Cost>,
    /// The target the issue sets for this row, and whether this run met it.
    pub target: String,
    pub met: Option<bool>,
    pub note: String,
}

/// Everything `sufs bench scale` measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScaleReport {
    pub size: u64,
    pub files: usize,
    pub rows: Vec<Row>,
    /// Mean microseconds of a warm lookup in one directory at each size it passed.
    pub lookup_probes: Vec<(u64, f64)>,
    /// Soft updates' peak dependency count during each library step, by step.
    pub peak_deps: Vec<(String, usize)>,
    /// What did not run, and why.
    pub skipped: Vec<(String, String)>,
}

/// A finished child process: its output and what it cost.
struct Ran {
    cost: Cost,
    stdout: String,
}

/// Runs `c` to its end; its cost from `wait4` (the rusage of that child alone). A failure
/// (an exit code outside `ok`) is an error carrying its stderr.
fn measured(what: &str, mut c: Command, ok: &[i32]) -> Result<Ran, BenchError> {
    use std::io::Read;
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = c.spawn().map_err(|e| run_err(what, e))?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let mut stdout = String::new();
    if let Some(o) = out.as_mut() {
        o.read_to_string(&mut stdout).map_err(|e| run_err(what, e))?;
    }
    let reaped = crate::bench::reap(&child);
    let secs = t.elapsed().as_secs_f64();
    let stderr = errs.join().unwrap_or_default();
    let r = reaped.map_err(|e| run_err(what, e))?;
    if !ok.contains(&r.code) {
        return Err(BenchError::Run(format!("{what}: exit {}: {}", r.code, stderr.trim())));
    }
    let cost = Cost { secs, cpu_secs: r.cpu_secs, rss_kb: r.rss_kb };
    Ok(Ran { cost, stdout })
}

fn exe_cmd(exe: &Path, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new(exe);
    c.args(args);
    c
}

/// A fresh sparse file of `size` bytes at `path`.
fn sparse(path: &Path, size: u64) -> Result<(), BenchError> {
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).map_err(|e| run_err("image", e))?;
    f.set_len(size).map_err(|e| run_err("image", e))
}

/// Why ext4's tools cannot run here, if they cannot.
fn ext4_missing() -> Option<String> {
    use super::bench_peers::which;
    ["mkfs.ext4", "e2fsck"].iter().find(|t| !which(t)).map(|t| format!("{t} is not installed (e2fsprogs)"))
}

/// The size of the image that holds `files` files: one inode per 16 KiB, as mkfs gives by
/// default, and at least 4 GiB.
pub fn files_image_size(files: usize) -> u64 {
    (files as u64 * 16384).max(4 << 30).next_multiple_of(1 << 20)
}

/// The densities (`sufs mkfs -i`, bytes per inode) the files image is made with: newfs's
/// smallest useful one, and its default.
const MIN_DENSITY: u64 = 4096;
const MAX_DENSITY: u64 = 16384;

/// Inodes for `files` files in the tree layout, with room to spare.
fn files_inodes(files: usize) -> u64 {
    (files + files / TREE_FANOUT) as u64 * 11 / 10 + 1024
}

/// Runs the benchmark; `progress` hears each step as it starts.
pub fn run(o: &ScaleOptions, progress: &mut dyn FnMut(&str)) -> Result<ScaleReport, BenchError> {
    std::fs::create_dir_all(&o.dir).map_err(|e| run_err("--dir", e))?;
    let mut r = ScaleReport { size: o.size, files: o.files, ..Default::default() };
    let ext4 = ext4_missing();
    if let Some(why) = &ext4 {
        r.skipped.push(("ext4".into(), why.clone()));
    }
    empty_image(o, ext4.is_none(), &mut r, progress)?;
    library(o, Layout::Tree, ext4.is_none(), &mut r, progress)?;
    library(o, Layout::Flat, false, &mut r, progress)?;
    Ok(r)
}

/// mkfs, mount and unmount, fsck of an empty sparse image of `o.size`, beside ext4's.
fn empty_image(
    o: &ScaleOptions,
    ext4: bool,
    r: &mut ScaleReport,
    progress: &mut dyn FnMut(&str),
) -> Result<(), BenchError> {
    let size = human(o.size);
    let img = o.dir.join("scale-empty.img");
    let img4 = o.dir.join("scale-empty.ext4");
    let mnt = o.dir.join("scale-mnt");
    std::fs::create_dir_all(&mnt).map_err(|e| run_err("mount point", e))?;
    let _ = std::fs::remove_file(&img);
    progress(&format!("mkfs {size}"));
    let size_arg = o.size.to_string();
    let args = ["mkfs".as_ref(), img.as_ref(), "--size".as_ref(), size_arg.as_ref()];
    let mkfs = measured("sufs mkfs", exe_cmd(&o.exe, &args), &[0])?;
    let mkfs4 = if ext4 {
        sparse(&img4, o.size)?;
        let mut c = Command::new("mkfs.ext4");
        c.args(["-F", "-q"]).arg(&img4);
        Some(measured("mkfs.ext4", c, &[0])?.cost)
    } else {
        None
    };
    let mut row = Row {
        step: format!("mkfs, empty {size}"),
        sufs: Some(mkfs.cost),
        ext4_tool: "mkfs.ext4".into(),
        ext4: mkfs4,
        target: "sufs under 1 s".into(),
        met: Some(mkfs.cost.secs < 1.0),
        note: String::new(),
    };
    r.rows.push(std::mem::take(&mut row));

    progress(&format!("mount {size}"));
    let sufs_mount = if Path::new("/dev/fuse").exists() {
        let t = Instant::now();
        measured("sufs mount", exe_cmd(&o.exe, &["mount".as_ref(), img.as_ref(), mnt.as_ref()]), &[0])?;
        measured("sufs umount", exe_cmd(&o.exe, &["umount".as_ref(), mnt.as_ref()]), &[0])?;
        Some(Cost { secs: t.elapsed().as_secs_f64(), ..Default::default() })
    } else {
        r.skipped.push(("sufs mount".into(), "/dev/fuse is missing".into()));
        None
    };
    let ext4_mount = if ext4 && super::bench_peers::is_root() {
        let t = Instant::now();
        let mut c = Command::new("mount");
        c.args(["-t", "ext4", "-o", "loop"]).arg(&img4).arg(&mnt);
        measured("mount ext4", c, &[0])?;
        let mut c = Command::new("umount");
        c.arg(&mnt);
        measured("umount ext4", c, &[0])?;
        Some(Cost { secs: t.elapsed().as_secs_f64(), ..Default::default() })
    } else {
        if ext4 {
            r.skipped.push(("ext4 mount".into(), "needs root for a loop mount".into()));
        }
        None
    };
    r.rows.push(Row {
        step: format!("mount + unmount, empty {size}"),
        sufs: sufs_mount,
        ext4_tool: "mount -o loop, umount".into(),
        ext4: ext4_mount,
        note: "wall time only (the server runs on after `sufs mount` returns)".into(),
        ..Default::default()
    });

    progress(&format!("fsck {size}"));
    let fsck = measured("sufs fsck", exe_cmd(&o.exe, &["fsck".as_ref(), "-f".as_ref(), img.as_ref()]), &[0])?;
    let fsck4 = e2fsck(ext4, &img4)?;
    r.rows.push(versus(format!("fsck, empty {size}"), fsck.cost, fsck4, "e2fsck -fn", "sufs at or under e2fsck", 1.0));
    let _ = std::fs::remove_file(&img);
    let _ = std::fs::remove_file(o.dir.join("scale-empty.img.log"));
    let _ = std::fs::remove_file(&img4);
    let _ = std::fs::remove_dir(&mnt);
    Ok(())
}

/// `e2fsck -fn` of `img4`, if ext4's tools are here.
fn e2fsck(ext4: bool, img4: &Path) -> Result<Option<Cost>, BenchError> {
    if !ext4 {
        return Ok(None);
    }
    let mut c = Command::new("e2fsck");
    c.arg("-fn").arg(img4);
    Ok(Some(measured("e2fsck", c, &[0])?.cost))
}

/// A row comparing sufs with ext4 against a target of at most `factor` times ext4's time.
fn versus(step: String, sufs: Cost, ext4: Option<Cost>, tool: &str, target: &str, factor: f64) -> Row {
    Row {
        step,
        sufs: Some(sufs),
        ext4_tool: tool.into(),
        ext4,
        target: target.into(),
        met: ext4.map(|e| sufs.secs <= e.secs * factor),
        note: String::new(),
    }
}

/// The library steps on an image of `o.files` files in `layout`; for the tree, fsck of it
/// beside e2fsck of an ext4 image `mkfs.ext4 -d` filled with the same tree (if `ext4`).
fn library(
    o: &ScaleOptions,
    layout: Layout,
    ext4: bool,
    r: &mut ScaleReport,
    progress: &mut dyn FnMut(&str),
) -> Result<(), BenchError> {
    let n = o.files;
    let what = match layout {
        Layout::Tree => format!("{} files (directories of {TREE_FANOUT})", thousands(n)),
        Layout::Flat => format!("{} files (one directory)", thousands(n)),
    };
    let img = o.dir.join(format!("scale-{}.img", layout.name()));
    let _ = std::fs::remove_file(&img);
    let size = files_image_size(n);
    // newfs's -i: bytes of data space per inode, so that the layout's inodes fit.
    let density = (size / files_inodes(n)).clamp(MIN_DENSITY, MAX_DENSITY);
    let (size_arg, density_arg) = (size.to_string(), density.to_string());
    let args =
        ["mkfs".as_ref(), img.as_ref(), "--size".as_ref(), size_arg.as_ref(), "-i".as_ref(), density_arg.as_ref()];
    measured("sufs mkfs", exe_cmd(&o.exe, &args), &[0])?;
    let lib_step =
        |s: Step, r: &mut ScaleReport, progress: &mut dyn FnMut(&str)| -> Result<(Cost, StepReport), BenchError> {
            progress(&format!("{} {what}", step_arg(s)));
            let ran = measured(&format!("library {}", step_arg(s)), step_command(&o.exe, &img, s, layout, n), &[0])?;
            let rep: StepReport = serde_json::from_str(ran.stdout.lines().last().unwrap_or(""))
                .map_err(|e| run_err("library step's report", e))?;
            r.peak_deps.push((format!("{} {}", step_arg(s), layout.name()), rep.peak_deps));
            Ok((ran.cost, rep))
        };
    let (cost, rep) = lib_step(Step::Create, r, progress)?;
    if layout == Layout::Flat {
        r.lookup_probes = rep.lookup_probes.clone();
    }
    let populate4 = if ext4 { Some(ext4_tree(o, n, size)?) } else { None };
    r.rows.push(Row {
        step: format!("create {what}"),
        sufs: Some(Cost { secs: rep.secs, ..cost }),
        ext4_tool: if ext4 { "mkfs.ext4 -d (offline fill)".into() } else { String::new() },
        ext4: populate4.as_ref().map(|(c, _)| *c),
        target: "memory bounded".into(),
        met: None,
        note: format!("library, in-process; unmount {:.2} s; peak {} dependency structures", rep.secs2, rep.peak_deps),
    });
    if layout == Layout::Tree {
        progress(&format!("fsck {what}"));
        let fsck = measured("sufs fsck", exe_cmd(&o.exe, &["fsck".as_ref(), "-f".as_ref(), img.as_ref()]), &[0])?;
        let img4 = populate4.as_ref().map(|(_, p)| p.clone());
        let fsck4 = match &img4 {
            Some(p) => e2fsck(true, p)?,
            None => None,
        };
        r.rows.push(versus(format!("fsck, {what}"), fsck.cost, fsck4, "e2fsck -fn", "within 2x of e2fsck", 2.0));
        if let Some(p) = img4 {
            let _ = std::fs::remove_file(p);
        }
    }
    let (cost, rep) = lib_step(Step::Stat, r, progress)?;
    r.rows.push(Row {
        step: format!("look up {what}"),
        sufs: Some(Cost { secs: rep.secs, ..cost }),
        note: format!("then list them: {:.2} s, {} entries", rep.secs2, thousands(rep.listed as usize)),
        ..Default::default()
    });
    let (cost, rep) = lib_step(Step::Remove, r, progress)?;
    r.rows.push(Row {
        step: format!("remove {what} (rm -rf)"),
        sufs: Some(Cost { secs: rep.secs, ..cost }),
        target: "memory bounded".into(),
        note: format!("unmount {:.2} s; peak {} dependency structures", rep.secs2, rep.peak_deps),
        ..Default::default()
    });
    let _ = std::fs::remove_file(&img);
    Ok(())
}

/// Makes the tree of `n` empty files in a directory of `o.dir` and an ext4 image of `size`
/// filled with it by `mkfs.ext4 -d`: what that costs, and the image.
fn ext4_tree(o: &ScaleOptions, n: usize, size: u64) -> Result<(Cost, PathBuf), BenchError> {
    let tree = o.dir.join("scale-tree");
    let _ = std::fs::remove_dir_all(&tree);
    let top = tree.join(Layout::Tree.name());
    for i in 0..n {
        let (sub, name) = file_name(Layout::Tree, i);
        let d = top.join(sub.unwrap_or_default());
        if i % TREE_FANOUT == 0 {
            std::fs::create_dir_all(&d).map_err(|e| run_err("tree for ext4", e))?;
        }
        std::fs::File::create(d.join(name)).map_err(|e| run_err("tree for ext4", e))?;
    }
    let img4 = o.dir.join("scale-tree.ext4");
    sparse(&img4, size)?;
    let mut c = Command::new("mkfs.ext4");
    c.args(["-F", "-q", "-N", &files_inodes(n).to_string(), "-d"]).arg(&tree).arg(&img4);
    let ran = measured("mkfs.ext4 -d", c, &[0]);
    let _ = std::fs::remove_dir_all(&tree);
    Ok((ran?.cost, img4))
}

/// `n` bytes as 1T, 16G, 512M.
pub fn human(n: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

fn thousands(n: usize) -> String {
    super::bench_peers::thousands(n as u64)
}

impl ScaleReport {
    /// The Markdown table: each step with sufs's and ext4's time and peak memory, the ratio,
    /// and the target.
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| step | sufs s | sufs CPU s | sufs peak RSS | ext4 tool | ext4 s | ext4 peak RSS | sufs / ext4 | target | notes |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        let rss = |c: &Cost| if c.rss_kb == 0 { "-".to_string() } else { format!("{} MiB", c.rss_kb.div_ceil(1024)) };
        let cpu = |c: &Cost| if c.cpu_secs == 0.0 { "-".to_string() } else { format!("{:.2}", c.cpu_secs) };
        for row in &self.rows {
            let (s, sc, sr) =
                row.sufs.map_or(("-".into(), "-".into(), "-".into()), |c| (format!("{:.2}", c.secs), cpu(&c), rss(&c)));
            let (e, er) = row.ext4.map_or(("-".into(), "-".into()), |c| (format!("{:.2}", c.secs), rss(&c)));
            let ratio = match (row.sufs, row.ext4) {
                (Some(a), Some(b)) => format!("{:.2}", a.secs / b.secs.max(1e-6)),
                _ => "-".into(),
            };
            let target = match row.met {
                Some(true) => format!("{}: met", row.target),
                Some(false) => format!("{}: missed", row.target),
                None => row.target.clone(),
            };
            t += &format!(
                "| {} | {s} | {sc} | {sr} | {} | {e} | {er} | {ratio} | {target} | {} |\n",
                row.step, row.ext4_tool, row.note
            );
        }
        t
    }
}
