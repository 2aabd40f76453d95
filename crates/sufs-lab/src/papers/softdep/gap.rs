//! Where soft updates' time over async goes in-process. `sufs bench orderings` measured softdep
//! at 1.16x async's time over the paper's phases (create and remove many files; an Andrew-like
//! copy, stat, read and compile of a source tree) on durable image files, against the paper's
//! "within 5%". Here the same phases run on a durable image file and on a device in memory (no
//! device cost at all), each ordering in a thread of its own (named `gap-<ordering>-<img|mem>`,
//! so that `perf report --sort comm,sym` separates them), timing every phase in wall-clock and in the
//! thread's CPU, and every kind of call.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::world::{thread_cpu_s, Machine, World};
use crate::papers::{PResult, PapersError};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::Ordering;

/// How much of the Andrew-like workload runs.
#[derive(Clone, Debug, Serialize)]
pub struct GapWork {
    pub files: usize,
    pub tree: PathBuf,
    pub tree_files: usize,
    pub rounds: usize,
}

/// One phase: wall-clock and thread CPU seconds.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub name: String,
    pub wall_s: f64,
    pub cpu_s: f64,
}

/// One ordering on one device: the phases (medians over the rounds) and the calls' times.
#[derive(Clone, Debug, Serialize)]
pub struct GapRun {
    pub ordering: String,
    pub device: String,
    pub phases: Vec<Phase>,
    /// Per kind of call: seconds and count, from the median round by total time.
    pub calls: Vec<(String, f64, u64)>,
    /// Blocks written during the phases (before the unmount).
    pub phase_writes: u64,
    /// Soft updates' dependency structures at most, as its memory bound's count saw them.
    pub max_deps: usize,
}

impl GapRun {
    pub fn wall(&self) -> f64 {
        self.phases.iter().map(|p| p.wall_s).sum()
    }
    pub fn cpu(&self) -> f64 {
        self.phases.iter().map(|p| p.cpu_s).sum()
    }
    pub fn call(&self, name: &str) -> (f64, u64) {
        self.calls.iter().find(|c| c.0 == name).map(|c| (c.1, c.2)).unwrap_or((0.0, 0))
    }
}

/// The source tree's files, read into memory before anything is timed.
struct Source {
    dirs: Vec<PathBuf>,
    files: Vec<(PathBuf, Vec<u8>)>,
}

/// The files of `tree`, or where it has none (a machine without headers), as many synthetic
/// ones of 1-8 KiB in directories of 50.
fn load(tree: &Path, limit: usize) -> Source {
    let mut s = Source { dirs: Vec::new(), files: Vec::new() };
    walk(tree, Path::new(""), limit, &mut s);
    if s.files.is_empty() {
        for i in 0..limit {
            let dir = PathBuf::from(format!("d{}", i / 50));
            if i % 50 == 0 {
                s.dirs.push(dir.clone());
            }
            s.files.push((dir.join(format!("f{i}.h")), vec![b'x'; 1024 + (i * 7919) % 7168]));
        }
    }
    s
}

fn walk(root: &Path, rel: &Path, limit: usize, s: &mut Source) {
    let mut entries: Vec<_> = std::fs::read_dir(root.join(rel)).map(|rd| rd.flatten().collect()).unwrap_or_default();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if s.files.len() >= limit {
            return;
        }
        if e.file_name().len() > sufs_fs::format::MAXNAMLEN {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        let r = rel.join(e.file_name());
        if ft.is_dir() {
            s.dirs.push(r.clone());
            walk(root, &r, limit, s);
        } else if ft.is_file() {
            if let Ok(data) = std::fs::read(e.path()) {
                s.files.push((r, data));
            }
        }
    }
}

/// Times `f` as one phase.
fn phase(phases: &mut Vec<Phase>, name: &str, w: &mut World, f: impl FnOnce(&mut World) -> PResult<()>) -> PResult<()> {
    let (t, c) = (std::time::Instant::now(), thread_cpu_s());
    f(w)?;
    phases.push(Phase { name: name.into(), wall_s: t.elapsed().as_secs_f64(), cpu_s: thread_cpu_s() - c });
    Ok(())
}

/// The phases of `sufs bench orderings` up to the compile: `files` empty files created and
/// removed; the tree copied in; every file stat'ed; every file read; an object file of half the
/// size written for each.
fn andrew_like(w: &mut World, files: usize, src: &Source) -> PResult<Vec<Phase>> {
    let mut ph = Vec::new();
    let many = w.mkdir(ROOT_INO, "many")?;
    w.start()?;
    phase(&mut ph, "create", w, |w| {
        (0..files).try_for_each(|i| w.create_file(many, &format!("f{i}"), &[]).map(|_| ()))
    })?;
    phase(&mut ph, "remove", w, |w| (0..files).try_for_each(|i| w.unlink(many, &format!("f{i}"))))?;
    let mut inos = Vec::new();
    phase(&mut ph, "copy tree", w, |w| {
        let top = w.mkdir(ROOT_INO, "src")?;
        let mut dirs = std::collections::HashMap::new();
        dirs.insert(PathBuf::new(), top);
        for d in &src.dirs {
            let parent = dirs[d.parent().unwrap_or(Path::new(""))];
            let name = d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            dirs.insert(d.clone(), w.mkdir(parent, &name)?);
        }
        for (f, data) in &src.files {
            let parent = dirs[f.parent().unwrap_or(Path::new(""))];
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            inos.push((w.create_file(parent, &name, data)?, data.len() as u64));
        }
        Ok(())
    })?;
    phase(&mut ph, "stat all", w, |w| inos.iter().try_for_each(|&(i, _)| w.stat(i).map(|_| ())))?;
    phase(&mut ph, "read all", w, |w| inos.iter().try_for_each(|&(i, n)| w.read_file(i, n).map(|_| ())))?;
    phase(&mut ph, "compile", w, |w| {
        let obj = w.mkdir(ROOT_INO, "obj")?;
        for (k, &(_, n)) in inos.iter().enumerate() {
            w.create_file(obj, &format!("o{k}"), &vec![7u8; (n / 2).max(1) as usize])?;
        }
        Ok(())
    })?;
    Ok(ph)
}

/// One round of one ordering on one device: the phases in a thread named for them
/// (`gap-<ordering>-<img|mem>`, at most the 15 characters Linux keeps), the unmount outside it.
fn round(ordering: Ordering, device: &'static str, work: &GapWork, src: &Source, dir: &Path) -> PResult<GapRun> {
    // As `sufs bench orderings` mounts: sufs's default cache and block size, data delayed.
    let m = Machine { cache_blocks: 32768, block_size: 4096, full_blocks_async: false, ..Machine::paper() };
    let img = dir.join(format!("softdep-gap-{ordering}.img"));
    let mut w = match device {
        "image" => World::image(ordering, &m, &img, 1 << 30, true)?,
        _ => World::mem(ordering, &m, 1 << 30)?,
    };
    let phases = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(format!("gap-{ordering}-{}", &device[..3]))
            .spawn_scoped(s, || andrew_like(&mut w, work.files, src))
            .map_err(PapersError::Io)?
            .join()
            .map_err(|_| PapersError::Run("the gap measurement's thread panicked".into()))?
    });
    let out = phases.and_then(|phases| {
        let phase_writes = w.writes();
        let max_deps = w.fs.softdep_stats().map_or(0, |s| s.max_deps);
        let out = w.finish()?;
        let (ordering, device) = (ordering.to_string(), device.to_string());
        Ok(GapRun { ordering, device, phases, calls: out.calls, phase_writes, max_deps })
    });
    let _ = std::fs::remove_file(&img);
    out
}

/// Per phase, the median of the rounds; the calls of the round with the median total.
fn median(mut runs: Vec<GapRun>) -> GapRun {
    assert!(!runs.is_empty());
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let phases = (0..runs[0].phases.len())
        .map(|p| Phase {
            name: runs[0].phases[p].name.clone(),
            wall_s: med(runs.iter().map(|r| r.phases[p].wall_s).collect()),
            cpu_s: med(runs.iter().map(|r| r.phases[p].cpu_s).collect()),
        })
        .collect();
    runs.sort_by(|a, b| a.wall().total_cmp(&b.wall()));
    let mid = runs.swap_remove(runs.len() / 2);
    GapRun { phases, ..mid }
}

/// async and softdep on an image file and in memory, `rounds` rounds interleaved.
pub fn measure(work: &GapWork, dir: &Path, progress: &mut dyn FnMut(&str)) -> PResult<Vec<GapRun>> {
    let src = load(&work.tree, work.tree_files);
    let cases = [
        (Ordering::Async, "image"),
        (Ordering::Softdep, "image"),
        (Ordering::Async, "memory"),
        (Ordering::Softdep, "memory"),
    ];
    let mut runs: Vec<Vec<GapRun>> = cases.iter().map(|_| Vec::new()).collect();
    for r in 0..work.rounds.max(1) {
        for (i, &(o, d)) in cases.iter().enumerate() {
            runs[i].push(round(o, d, work, &src, dir)?);
        }
        progress(&format!("gap: round {} of {}", r + 1, work.rounds.max(1)));
    }
    Ok(runs.into_iter().map(median).collect())
}
