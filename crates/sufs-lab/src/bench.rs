//! Experiments that reproduce the papers' measurements. `update_policy` is Mogul 1994 §4.1: a
//! read-load generator reading random blocks of a file larger than the buffer cache as fast as
//! it can, against a write-load generator that dirties half the cache every 30 s without
//! touching a block twice a minute, under PU and AIPU, each with delayed and with async full-block
//! writes. `kernel_build` is the §4.2-like workload behind Table 4-3: many files written,
//! rewritten and deleted, counting blocks written per policy.
//!
//! Everything runs on `ModelDevice` in simulated time, so a ten-minute trial takes seconds and the
//! same seed gives the same numbers.

use std::path::Path;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use serde::Serialize;

use sufs_fs::clock::{Clock, SimClock};
use sufs_fs::dev::{BlockDevice, DiskModel, MemDevice, ModelDevice};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{mkfs, Fs, FsResult, MkfsOptions, MountOptions, Ordering};
use sufs_fs::policy::{Sweeper, SyncerOptions, UpdatePolicy};

const NS_PER_MS: f64 = 1e6;
const SEC: u64 = 1_000_000_000;

#[derive(Debug, Clone)]
pub struct UpdateBenchOptions {
    pub trials: u32,
    pub seconds: u64,
    pub disk: DiskModel,
    pub block_size: u32,
    /// Buffer cache size in blocks (Mogul's faster system: 1228 blocks of 8 KiB).
    pub cache_blocks: usize,
    /// CPU time of one read request, so that cache hits still take time.
    pub read_cpu_us: u64,
    /// Blocks of the file the reader reads at random; 0 for four times the cache.
    pub read_blocks: u64,
    /// The writer's file in a directory of its own, which the allocator places in another
    /// cylinder group, away from the reader's file (as two unrelated files usually are).
    pub writer_apart: bool,
    pub seed: u64,
}

impl Default for UpdateBenchOptions {
    fn default() -> Self {
        UpdateBenchOptions {
            trials: 6,
            seconds: 600,
            disk: DiskModel::rz58(),
            block_size: 8192,
            cache_blocks: 1228,
            read_cpu_us: 500,
            read_blocks: 0,
            writer_apart: false,
            seed: 1,
        }
    }
}

/// One configuration of §4.1: a policy, and whether full data blocks are written at once.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UpdateConfig {
    pub policy: UpdatePolicy,
    pub async_full_blocks: bool,
}

impl UpdateConfig {
    pub fn label(&self) -> String {
        format!(
            "{} {}",
            self.policy.to_string().to_uppercase(),
            if self.async_full_blocks { "async" } else { "delayed" }
        )
    }
}

/// Read response times and write bursts of one configuration over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct UpdateResult {
    pub config: UpdateConfig,
    pub label: String,
    pub reads: u64,
    pub mean_ms: f64,
    pub std_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Mean and standard deviation of each trial.
    pub trial_means_ms: Vec<f64>,
    pub trial_stds_ms: Vec<f64>,
    /// Read response times in log2 buckets of ms: bucket 0 is < 1 ms, bucket i is [2^(i-1), 2^i).
    pub histogram: Vec<u64>,
    /// Writes queued by each sweep, over all trials.
    pub bursts: Vec<usize>,
    pub blocks_written: u64,
}

fn bucket(ms: f64) -> usize {
    if ms < 1.0 {
        0
    } else {
        (ms.log2().floor() as usize + 1).min(20)
    }
}

struct Trial {
    read_ns: Vec<u64>,
    bursts: Vec<usize>,
    blocks_written: u64,
}

/// A fresh sufs on a simulated 1.38 GB disk of the `disk` model with a `cache_blocks` buffer
/// cache, on a simulated clock; metadata ordered by `ordering` (the experiments use `Sync`, as
/// FFS orders its metadata).
pub(crate) fn new_fs(
    disk: &DiskModel,
    bs: u32,
    cache_blocks: usize,
    ordering: Ordering,
    seed: u64,
) -> FsResult<(Fs, Arc<SimClock>, Arc<ModelDevice<MemDevice>>)> {
    let clock = Arc::new(SimClock::new());
    let nblocks = 1_380_000_000 / bs as u64;
    let dev = Arc::new(ModelDevice::new(MemDevice::new(bs as usize, nblocks), disk.clone(), clock.clone(), seed));
    let d: Arc<dyn BlockDevice> = dev.clone();
    mkfs(d.clone(), &MkfsOptions { block_size: bs, ..Default::default() }, clock.wall())?;
    let c: Arc<dyn Clock> = clock.clone();
    let fs = Fs::mount(d, MountOptions { ordering, cache_blocks, readonly: false }, c)?;
    Ok((fs, clock, dev))
}

fn run_trial(cfg: UpdateConfig, o: &UpdateBenchOptions, seed: u64) -> FsResult<Trial> {
    let (mut fs, clock, dev) = new_fs(&o.disk, o.block_size, o.cache_blocks, Ordering::Sync, seed)?;
    fs.set_async_full_blocks(cfg.async_full_blocks);
    let bs = o.block_size as u64;
    let read_blocks = if o.read_blocks > 0 { o.read_blocks } else { o.cache_blocks as u64 * 4 };
    let half = (o.cache_blocks / 2) as u64;
    let block = vec![0x5au8; bs as usize];
    // Setup, not measured: the file to read (four times the cache) and the file to write.
    let (rino, _) = fs.create(ROOT_INO, b"read", 0o644, 0, 0)?;
    let wdir = if o.writer_apart { fs.mkdir(ROOT_INO, b"writer", 0o755, 0, 0)?.0 } else { ROOT_INO };
    let (wino, _) = fs.create(wdir, b"write", 0o644, 0, 0)?;
    let chunk = vec![0x11u8; 64 * bs as usize];
    for i in (0..read_blocks).step_by(64) {
        fs.write(rino, i * bs, &chunk)?;
    }
    for i in (0..2 * half).step_by(64) {
        fs.write(wino, i * bs, &chunk[..(64.min(2 * half - i) * bs) as usize])?;
    }
    fs.flush_all()?;
    clock.set(dev.idle_at() + SEC);
    let writes0 = fs.stats().device.writes();
    let start = clock.now_ns();
    let end = start + o.seconds * SEC;
    let mut sweeper = Sweeper::new(SyncerOptions::for_policy(cfg.policy), &mut fs);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ 0x5eed);
    let spacing = 30 * SEC / half.max(1);
    let mut next_write = start;
    let mut written = 0u64;
    let mut read_ns = Vec::new();
    loop {
        let now = clock.now_ns();
        if now >= end {
            break;
        }
        // The writer: half the cache every 30 s, alternating halves of its file, so no block is
        // touched twice a minute.
        while next_write <= now {
            let period = written / half;
            let blk = (period % 2) * half + written % half;
            fs.write(wino, blk * bs, &block)?;
            written += 1;
            next_write += spacing;
        }
        if sweeper.next_due() <= now {
            sweeper.tick(&mut fs)?;
        }
        // The reader, as fast as it can.
        clock.advance(o.read_cpu_us * 1000);
        let lbn = rng.gen_range(0..read_blocks);
        let t0 = clock.now_ns();
        fs.read(rino, lbn * bs, bs as usize)?;
        read_ns.push(clock.now_ns() - t0);
    }
    Ok(Trial { read_ns, bursts: sweeper.bursts, blocks_written: fs.stats().device.writes() - writes0 })
}

fn mean_std(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, v.sqrt())
}

/// Runs every configuration; `progress` is called after each trial.
pub fn update_policy(o: &UpdateBenchOptions, mut progress: impl FnMut(&str, u32)) -> FsResult<Vec<UpdateResult>> {
    let mut out = Vec::new();
    for policy in [UpdatePolicy::Pu, UpdatePolicy::Aipu] {
        for async_full_blocks in [false, true] {
            let config = UpdateConfig { policy, async_full_blocks };
            let mut all = Vec::new();
            let mut trial_means = Vec::new();
            let mut trial_stds = Vec::new();
            let mut bursts = Vec::new();
            let mut blocks_written = 0;
            for t in 0..o.trials {
                let tr = run_trial(config, o, o.seed + t as u64)?;
                let ms: Vec<f64> = tr.read_ns.iter().map(|&n| n as f64 / NS_PER_MS).collect();
                let (m, s) = mean_std(&ms);
                trial_means.push(m);
                trial_stds.push(s);
                all.extend(ms);
                bursts.extend(tr.bursts);
                blocks_written += tr.blocks_written;
                progress(&config.label(), t + 1);
            }
            let (mean_ms, std_ms) = mean_std(&all);
            let mut sorted = all.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let p99_ms = sorted.get(sorted.len() * 99 / 100).copied().unwrap_or(0.0);
            let max_ms = sorted.last().copied().unwrap_or(0.0);
            let mut histogram = vec![0u64; 21];
            for &x in &all {
                histogram[bucket(x)] += 1;
            }
            out.push(UpdateResult {
                config,
                label: config.label(),
                reads: all.len() as u64,
                mean_ms,
                std_ms,
                p99_ms,
                max_ms,
                trial_means_ms: trial_means,
                trial_stds_ms: trial_stds,
                histogram,
                bursts,
                blocks_written,
            });
        }
    }
    Ok(out)
}

/// The results as a table, with the histogram and the burst sizes.
pub fn update_policy_report(rs: &[UpdateResult]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10}",
        "config", "reads", "mean ms", "std ms", "p99 ms", "max ms", "bursts", "max burst"
    );
    for r in rs {
        let _ = writeln!(
            s,
            "{:<14} {:>8} {:>9.2} {:>9.2} {:>9.1} {:>10.1} {:>9} {:>10}",
            r.label,
            r.reads,
            r.mean_ms,
            r.std_ms,
            r.p99_ms,
            r.max_ms,
            r.bursts.len(),
            r.bursts.iter().max().copied().unwrap_or(0)
        );
    }
    let _ = writeln!(s, "\nread response time histogram (reads per log2 bucket, all trials):");
    let last = rs.iter().filter_map(|r| r.histogram.iter().rposition(|&c| c > 0)).max().unwrap_or(0);
    let _ = write!(s, "{:<14}", "bucket ms");
    for b in 0..=last {
        let _ = write!(s, " {:>7}", if b == 0 { "<1".to_string() } else { format!("<{}", 1u64 << b) });
    }
    let _ = writeln!(s);
    for r in rs {
        let _ = write!(s, "{:<14}", r.label);
        for b in 0..=last {
            let _ = write!(s, " {:>7}", r.histogram[b]);
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "\nwrites queued per sweep (burst sizes, all trials):");
    for r in rs {
        let mut hist = [0usize; 16];
        for &b in &r.bursts {
            hist[if b == 0 { 0 } else { ((b as f64).log2() as usize + 1).min(15) }] += 1;
        }
        let nz: Vec<String> = hist
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, c)| if i == 0 { format!("0:{c}") } else { format!("<{}:{c}", 1usize << i) })
            .collect();
        let _ = writeln!(s, "{:<14} {}", r.label, nz.join(" "));
    }
    s
}

/// One SVG line chart with a log-scale y axis, one series per configuration.
fn line_plot(
    path: &Path,
    title: &str,
    x: (&str, f64),
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    use plotters::prelude::*;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let colors = [RED, BLUE, GREEN, MAGENTA];
    let ymax = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x.1, (0.5f64..ymax * 2.0).log_scale())
        .map_err(|x| e(&x))?;
    chart.configure_mesh().x_desc(x.0).y_desc(y_desc).draw().map_err(|x| e(&x))?;
    for (i, (label, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
    }
    chart.configure_series_labels().background_style(WHITE).border_style(BLACK).draw().map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// The read response times of `rs` as an SVG line per configuration: reads per log2 bucket
/// (Mogul's Figures 4-3 and 4-4).
pub(crate) fn histogram_plot(path: &Path, title: &str, rs: &[UpdateResult]) -> Result<(), String> {
    let hist: Vec<(String, Vec<(f64, f64)>)> = rs
        .iter()
        .map(|r| {
            let pts = r.histogram.iter().enumerate().filter(|(_, &n)| n > 0).map(|(b, &n)| (b as f64, n as f64));
            (r.label.clone(), pts.collect())
        })
        .collect();
    line_plot(path, title, ("response time bucket: 0 = <1 ms, k = [2^(k-1), 2^k) ms", 21.0), "reads", &hist)
}

/// Writes the histogram (Mogul's Figures 4-3/4-4) and the burst sizes (Figure 4-7) as SVG.
pub fn update_policy_plots(rs: &[UpdateResult], dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    histogram_plot(&dir.join("update-policy-histogram.svg"), "Read response time (reads per log2 bucket)", rs)?;
    let bursts: Vec<(String, Vec<(f64, f64)>)> = rs
        .iter()
        .map(|r| {
            let mut b: Vec<usize> = r.bursts.iter().copied().filter(|&x| x > 0).collect();
            b.sort_unstable();
            let n = b.len().max(1) as f64;
            (r.label.clone(), b.iter().enumerate().map(|(k, &x)| (k as f64 / n, x as f64)).collect())
        })
        .collect();
    line_plot(
        &dir.join("update-policy-bursts.svg"),
        "Writes queued per sweep (sorted, all trials)",
        ("fraction of sweeps", 1.0),
        "writes in the burst",
        &bursts,
    )
}

/// Table 4-3: blocks written and dirty-block re-modifications of a kernel-build-like workload.
#[derive(Debug, Clone, Serialize)]
pub struct BuildResult {
    pub policy: UpdatePolicy,
    pub blocks_written: u64,
    pub redirties: u64,
}

/// Compiles `units` files, one every 2 simulated seconds: each writes an object file, appends to
/// a log, writes a temporary file that is deleted 5 s later, and every 20 units the "kernel" is
/// relinked (rewritten whole). Everything left dirty is written at the end.
pub fn kernel_build(disk: &DiskModel, units: u32, seed: u64) -> FsResult<Vec<BuildResult>> {
    let mut out = Vec::new();
    for policy in [UpdatePolicy::Wt, UpdatePolicy::Pu, UpdatePolicy::Aipu] {
        let (mut fs, clock, _dev) = new_fs(disk, 8192, 1228, Ordering::Sync, seed)?;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let (src, _) = fs.mkdir(ROOT_INO, b"obj", 0o755, 0, 0)?;
        let (log, _) = fs.create(ROOT_INO, b"build.log", 0o644, 0, 0)?;
        fs.flush_all()?;
        let w0 = fs.stats().device.writes();
        let r0 = fs.stats().cache.redirties;
        let mut sweeper = Sweeper::new(SyncerOptions::for_policy(policy), &mut fs);
        let mut temps: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut log_off = 0u64;
        let start = clock.now_ns();
        for u in 0..units {
            let t = start + u as u64 * 2 * SEC;
            // Deletions and sweeps due before this unit.
            while let Some((due, _)) = temps.first() {
                if *due > t {
                    break;
                }
                let (due, name) = temps.remove(0);
                clock.set(clock.now_ns().max(due));
                if sweeper.next_due() <= clock.now_ns() {
                    sweeper.tick(&mut fs)?;
                }
                fs.unlink(src, &name)?;
            }
            while sweeper.next_due() <= t {
                clock.set(clock.now_ns().max(sweeper.next_due()));
                sweeper.tick(&mut fs)?;
            }
            clock.set(clock.now_ns().max(t));
            let size = rng.gen_range(1..6) * 8192 + rng.gen_range(0..8192);
            let (o, _) = fs.create(src, format!("unit{u}.o").as_bytes(), 0o644, 0, 0)?;
            fs.write(o, 0, &vec![u as u8; size])?;
            let tmp = format!("unit{u}.tmp").into_bytes();
            let (tf, _) = fs.create(src, &tmp, 0o644, 0, 0)?;
            fs.write(tf, 0, &vec![1u8; 8 * 8192])?;
            temps.push((t + 5 * SEC, tmp));
            let line = format!("compiled unit {u}\n");
            fs.write(log, log_off, line.as_bytes())?;
            log_off += line.len() as u64;
            if u % 20 == 19 {
                let (k, _) = match fs.lookup(ROOT_INO, b"kernel") {
                    Ok(x) => x,
                    Err(_) => fs.create(ROOT_INO, b"kernel", 0o755, 0, 0)?,
                };
                fs.write(k, 0, &vec![u as u8; 64 * 8192])?;
            }
        }
        for (_, name) in std::mem::take(&mut temps) {
            fs.unlink(src, &name)?;
        }
        fs.flush_all()?;
        out.push(BuildResult {
            policy,
            blocks_written: fs.stats().device.writes() - w0,
            redirties: fs.stats().cache.redirties - r0,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_policy_is_deterministic_and_aipu_spreads_writes() {
        let o = UpdateBenchOptions { trials: 1, seconds: 90, cache_blocks: 256, ..Default::default() };
        let a = update_policy(&o, |_, _| {}).unwrap();
        let b = update_policy(&o, |_, _| {}).unwrap();
        assert_eq!(a.len(), 4);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.mean_ms, y.mean_ms);
            assert_eq!(x.bursts, y.bursts);
            assert!(x.reads > 1000);
        }
        let pu = &a[0];
        let aipu = &a[2];
        assert!(pu.bursts.iter().max() > aipu.bursts.iter().max(), "PU writes in larger bursts");
    }

    #[test]
    fn kernel_build_counts_writes_per_policy() {
        let r = kernel_build(&DiskModel::rz58(), 60, 3).unwrap();
        assert_eq!(r.len(), 3);
        let wt = r[0].blocks_written;
        let aipu = r[2].blocks_written;
        assert!(wt > aipu, "write-through writes more than aipu ({wt} vs {aipu})");
    }
}

/// One ordering's run of the soft updates paper's comparison (§5), in-process on an image file
/// whose writes are durable (`fdatasync` after each batch), as a mount's are.
#[derive(Debug, Clone, Serialize)]
pub struct OrderingResult {
    pub ordering: String,
    /// Seconds per phase: create, remove, then the Andrew-like phases.
    pub phases: Vec<(String, f64)>,
    pub sync_writes: u64,
    pub async_writes: u64,
}

/// The entries of directory `src` by name (none if it cannot be read).
fn sorted_entries(src: &Path) -> Vec<std::fs::DirEntry> {
    let mut entries: Vec<_> = std::fs::read_dir(src).map(|rd| rd.flatten().collect()).unwrap_or_default();
    entries.sort_by_key(|e| e.file_name());
    entries
}

fn copy_in(fs: &mut Fs, src: &Path, dir: u32, files: &mut Vec<(u32, u64)>, limit: usize) -> FsResult<()> {
    for e in sorted_entries(src) {
        if files.len() >= limit {
            return Ok(());
        }
        let name = e.file_name();
        let name = name.as_encoded_bytes();
        if name.len() > sufs_fs::format::MAXNAMLEN {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            let (d, _) = fs.mkdir(dir, name, 0o755, 0, 0)?;
            copy_in(fs, &e.path(), d, files, limit)?;
        } else if ft.is_file() {
            let Ok(data) = std::fs::read(e.path()) else { continue };
            let (f, _) = fs.create(dir, name, 0o644, 0, 0)?;
            fs.write(f, 0, &data)?;
            files.push((f, data.len() as u64));
        }
    }
    Ok(())
}

/// Create `n` files and remove them, then an Andrew-like set of phases over a copy of `tree`
/// (at most `tree_files` files): copy it in, stat every file, read every file, and write a new
/// "object" file for each; then write a `big_mb` MiB file and fsync it. Each ordering runs on a
/// fresh image in `workdir`, `rounds` times, the orderings interleaved (sync, async, softdep,
/// sync, ...) so that the machine's slow spells fall on all of them; each phase's time is the
/// median of its rounds.
pub fn ordering_compare(workdir: &Path, work: &OrderingWork, rounds: usize) -> FsResult<Vec<OrderingResult>> {
    interleaved(rounds, |ordering| ordering_run(ordering, workdir, work))
}

/// What `sufs bench orderings` does: `files` files created and removed, at most `tree_files`
/// files of `tree` in the Andrew-like phases, then a `big_mb` MiB file written and fsync'ed.
pub struct OrderingWork<'a> {
    pub files: usize,
    pub tree: &'a Path,
    pub tree_files: usize,
    pub big_mb: usize,
}

/// Runs every ordering `rounds` times, interleaved; the medians.
fn interleaved<E>(
    rounds: usize,
    mut run: impl FnMut(Ordering) -> Result<OrderingResult, E>,
) -> Result<Vec<OrderingResult>, E> {
    let orderings = [Ordering::Sync, Ordering::Async, Ordering::Softdep];
    let mut runs: Vec<Vec<OrderingResult>> = orderings.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds.max(1) {
        for (i, &ordering) in orderings.iter().enumerate() {
            runs[i].push(run(ordering)?);
        }
    }
    Ok(runs.into_iter().map(median_run).collect())
}

/// Per phase, the median time of the runs (and the median write counts).
fn median_run(runs: Vec<OrderingResult>) -> OrderingResult {
    fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        v[v.len() / 2]
    }
    let phases = (0..runs[0].phases.len())
        .map(|p| (runs[0].phases[p].0.clone(), median(runs.iter().map(|r| r.phases[p].1).collect())))
        .collect();
    OrderingResult {
        ordering: runs[0].ordering.clone(),
        phases,
        sync_writes: median(runs.iter().map(|r| r.sync_writes).collect()),
        async_writes: median(runs.iter().map(|r| r.async_writes).collect()),
    }
}

fn ordering_run(ordering: Ordering, workdir: &Path, work: &OrderingWork) -> FsResult<OrderingResult> {
    use std::time::Instant;
    let &OrderingWork { files: n, tree, tree_files, big_mb } = work;
    let img = workdir.join(format!("bench-{ordering}.img"));
    let _ = std::fs::remove_file(&img);
    sufs_fs::dev::FileDevice::create(&img, 1 << 30)?;
    let dev: Arc<dyn BlockDevice> = Arc::new(sufs_fs::dev::FileDevice::open(&img, 4096, true)?);
    mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, sufs_fs::clock::RealClock::new().wall())?;
    let clock: Arc<dyn Clock> = Arc::new(sufs_fs::clock::RealClock::new());
    let mut fs = Fs::mount(dev.clone(), MountOptions { ordering, cache_blocks: 32768, readonly: false }, clock)?;
    let st0 = dev.stats();
    let mut phases = Vec::new();
    let (d, _) = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0)?;
    let t = Instant::now();
    for i in 0..n {
        fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0)?;
    }
    phases.push(("create".to_string(), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    for i in 0..n {
        fs.unlink(d, format!("f{i}").as_bytes())?;
    }
    phases.push(("remove".to_string(), t.elapsed().as_secs_f64()));
    let (top, _) = fs.mkdir(ROOT_INO, b"src", 0o755, 0, 0)?;
    let mut files = Vec::new();
    let t = Instant::now();
    copy_in(&mut fs, tree, top, &mut files, tree_files)?;
    phases.push(("copy tree".to_string(), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    for &(f, _) in &files {
        fs.getattr(f)?;
    }
    phases.push(("stat all".to_string(), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    for &(f, size) in &files {
        fs.read(f, 0, size as usize)?;
    }
    phases.push(("read all".to_string(), t.elapsed().as_secs_f64()));
    let (obj, _) = fs.mkdir(ROOT_INO, b"obj", 0o755, 0, 0)?;
    let t = Instant::now();
    for (i, &(_, size)) in files.iter().enumerate() {
        let (o, _) = fs.create(obj, format!("o{i}").as_bytes(), 0o644, 0, 0)?;
        fs.write(o, 0, &vec![7u8; (size / 2).max(1) as usize])?;
    }
    phases.push(("compile".to_string(), t.elapsed().as_secs_f64()));
    // A large file written and fsync'ed (the data path through the indirect blocks).
    let (big, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0)?;
    let chunk = vec![3u8; 1 << 20];
    let t = Instant::now();
    for i in 0..big_mb as u64 {
        fs.write(big, i << 20, &chunk)?;
    }
    fs.fsync(big)?;
    phases.push((format!("write {big_mb}M"), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    fs.unmount()?;
    phases.push(("unmount".to_string(), t.elapsed().as_secs_f64()));
    let st = dev.stats();
    drop(fs);
    let _ = std::fs::remove_file(&img);
    Ok(OrderingResult {
        ordering: ordering.to_string(),
        phases,
        sync_writes: st.sync_writes - st0.sync_writes,
        async_writes: st.async_writes - st0.async_writes,
    })
}

/// What can stop a benchmark: the file system, or a step around it (a mount, a file).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Fs(#[from] sufs_fs::fs::FsError),
    #[error("{0}")]
    Run(String),
}

pub(crate) fn run_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Run(format!("{what}: {e}"))
}

/// The soft updates paper's comparison through the FUSE mount: the phases of `ordering_compare`
/// done with ordinary file calls on a mount of `exe` (this program's `sufs mount -f`), each
/// ordering on a fresh image of 1 GiB in `workdir`, `rounds` interleaved rounds, medians.
/// Device writes come from the mount's `--stats` (everything from mount to unmount).
pub fn ordering_compare_fuse(
    exe: &Path,
    workdir: &Path,
    work: &OrderingWork,
    rounds: usize,
) -> Result<Vec<OrderingResult>, BenchError> {
    interleaved(rounds, |ordering| fuse_run(exe, ordering, workdir, work))
}

pub(crate) fn is_mounted(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let dir = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*dir))
}

/// A FUSE server child (`sufs mount -f`, or another file system's) whose mount is at `dir`;
/// unmounted (lazily, if need be) when dropped.
pub(crate) struct FuseMount {
    /// The command that unmounts it, given the mount point as its last argument.
    umount: Vec<std::ffi::OsString>,
    pub(crate) dir: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl FuseMount {
    pub(crate) fn start(
        exe: &Path,
        image: &Path,
        dir: &Path,
        ordering: Ordering,
        stats: &Path,
    ) -> Result<FuseMount, BenchError> {
        let umount = vec![exe.as_os_str().to_owned(), "umount".into()];
        FuseMount::spawn(dir, umount, |dir| {
            let mut c = std::process::Command::new(exe);
            c.arg("mount").arg(image).arg(dir).args(["-f", "--ordering", &ordering.to_string(), "--stats"]).arg(stats);
            c
        })
    }

    /// Runs the server that `command` builds for the (canonical) mount point, in the foreground,
    /// and waits until the mount appears.
    pub(crate) fn spawn(
        dir: &Path,
        umount: Vec<std::ffi::OsString>,
        command: impl FnOnce(&Path) -> std::process::Command,
    ) -> Result<FuseMount, BenchError> {
        use std::process::Stdio;
        std::fs::create_dir_all(dir).map_err(|e| run_err("mount point", e))?;
        let dir = dir.canonicalize().map_err(|e| run_err("mount point", e))?;
        let mut cmd = command(&dir);
        let what = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd.stdout(Stdio::null()).spawn().map_err(|e| run_err(&what, e))?;
        let mut m = FuseMount { umount, dir, child: Some(child) };
        let start = std::time::Instant::now();
        while !is_mounted(&m.dir) {
            let child = m.child.as_mut().expect("running");
            if let Ok(Some(st)) = child.try_wait() {
                m.child = None;
                return Err(BenchError::Run(format!("{what} exited early: {st}")));
            }
            if start.elapsed() > std::time::Duration::from_secs(30) {
                return Err(BenchError::Run(format!("the mount of {what} did not appear within 30 s")));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(m)
    }

    /// Unmounts and waits for the server to exit (after it has written everything); returns
    /// the CPU seconds the server used, mount to exit.
    pub(crate) fn unmount(mut self) -> Result<f64, BenchError> {
        let what = self.umount.join(std::ffi::OsStr::new(" ")).to_string_lossy().into_owned();
        let out = std::process::Command::new(&self.umount[0])
            .args(&self.umount[1..])
            .arg(&self.dir)
            .output()
            .map_err(|e| run_err(&what, e))?;
        if !out.status.success() {
            return Err(BenchError::Run(format!("{what}: {}", String::from_utf8_lossy(&out.stderr))));
        }
        let r = reap(self.child.as_ref().expect("running")).map_err(|e| run_err("FUSE server", e))?;
        // Reaped: nothing left for the drop to stop.
        self.child = None;
        if r.code != 0 {
            return Err(BenchError::Run(format!("the FUSE server exited with code {}", r.code)));
        }
        Ok(r.cpu_secs)
    }
}

/// What a finished child process cost, from `wait4` (the rusage of that child alone, every
/// thread of it).
pub(crate) struct Reaped {
    /// Its exit code; -1 if a signal ended it.
    pub(crate) code: i32,
    /// User and system CPU seconds.
    pub(crate) cpu_secs: f64,
    /// Peak resident set, KiB.
    pub(crate) rss_kb: u64,
}

/// Waits for `child` to end and says what it cost.
pub(crate) fn reap(child: &std::process::Child) -> std::io::Result<Reaped> {
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value, and wait4 writes only into the two places
    // given; the pid is this process's own unwaited child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
        if pid >= 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    Ok(Reaped { code, cpu_secs: secs(ru.ru_utime) + secs(ru.ru_stime), rss_kb: ru.ru_maxrss as u64 })
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Copies at most `limit` files of `src` into `dst` with ordinary file calls.
pub(crate) fn copy_tree(
    src: &Path,
    dst: &Path,
    files: &mut Vec<(std::path::PathBuf, usize)>,
    limit: usize,
) -> std::io::Result<()> {
    for e in sorted_entries(src) {
        if files.len() >= limit {
            return Ok(());
        }
        if e.file_name().len() > sufs_fs::format::MAXNAMLEN {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        let to = dst.join(e.file_name());
        if ft.is_dir() {
            std::fs::create_dir(&to)?;
            copy_tree(&e.path(), &to, files, limit)?;
        } else if ft.is_file() {
            let Ok(data) = std::fs::read(e.path()) else { continue };
            std::fs::write(&to, &data)?;
            files.push((to, data.len()));
        }
    }
    Ok(())
}

/// A new sparse image file of `size` bytes with a fresh sufs on it.
pub(crate) fn fresh_image(img: &Path, size: u64) -> FsResult<()> {
    let _ = std::fs::remove_file(img);
    sufs_fs::dev::FileDevice::create(img, size)?;
    let dev = sufs_fs::dev::FileDevice::open(img, 4096, true)?;
    mkfs(Arc::new(dev), &MkfsOptions { ..Default::default() }, sufs_fs::clock::RealClock::new().wall())?;
    Ok(())
}

/// The Andrew-like phases with ordinary file calls under `root`: copy at most `limit` files of
/// `tree` in ("copy tree"), stat every file ("stat all"), read every file ("read all"), and write
/// an "object" file of half the size for each ("compile"). Appends each phase's seconds to
/// `phases`, and tells `on` each phase's name before it starts; returns the number of files.
pub(crate) fn andrew_phases(
    root: &Path,
    tree: &Path,
    limit: usize,
    phases: &mut Vec<(String, f64)>,
    on: &mut dyn FnMut(&str),
) -> std::io::Result<usize> {
    use std::time::Instant;
    let src = root.join("src");
    std::fs::create_dir(&src)?;
    let mut files = Vec::new();
    on("copy tree");
    let t = Instant::now();
    copy_tree(tree, &src, &mut files, limit)?;
    phases.push(("copy tree".to_string(), t.elapsed().as_secs_f64()));
    on("stat all");
    let t = Instant::now();
    for (f, _) in &files {
        std::fs::metadata(f)?;
    }
    phases.push(("stat all".to_string(), t.elapsed().as_secs_f64()));
    on("read all");
    let t = Instant::now();
    for (f, _) in &files {
        std::fs::read(f)?;
    }
    phases.push(("read all".to_string(), t.elapsed().as_secs_f64()));
    let obj = root.join("obj");
    std::fs::create_dir(&obj)?;
    on("compile");
    let t = Instant::now();
    for (i, (_, size)) in files.iter().enumerate() {
        std::fs::write(obj.join(format!("o{i}")), vec![7u8; (size / 2).max(1)])?;
    }
    phases.push(("compile".to_string(), t.elapsed().as_secs_f64()));
    Ok(files.len())
}

fn fuse_run(exe: &Path, ordering: Ordering, workdir: &Path, work: &OrderingWork) -> Result<OrderingResult, BenchError> {
    use std::io::Write;
    use std::time::Instant;
    let &OrderingWork { files: n, tree, tree_files, big_mb } = work;
    let img = workdir.join(format!("bench-fuse-{ordering}.img"));
    let mnt = workdir.join(format!("bench-fuse-{ordering}.mnt"));
    let stats = workdir.join(format!("bench-fuse-{ordering}.json"));
    fresh_image(&img, 1 << 30)?;
    let m = FuseMount::start(exe, &img, &mnt, ordering, &stats)?;
    let io = |e: std::io::Error| run_err("file call on the mount", e);
    let mut phases = Vec::new();
    let many = m.dir.join("many");
    std::fs::create_dir(&many).map_err(io)?;
    let t = Instant::now();
    for i in 0..n {
        std::fs::File::create(many.join(format!("f{i}"))).map_err(io)?;
    }
    phases.push(("create".to_string(), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    for i in 0..n {
        std::fs::remove_file(many.join(format!("f{i}"))).map_err(io)?;
    }
    phases.push(("remove".to_string(), t.elapsed().as_secs_f64()));
    andrew_phases(&m.dir, tree, tree_files, &mut phases, &mut |_| {}).map_err(io)?;
    let t = Instant::now();
    let mut big = std::fs::File::create(m.dir.join("big")).map_err(io)?;
    let chunk = vec![3u8; 1 << 20];
    for _ in 0..big_mb {
        big.write_all(&chunk).map_err(io)?;
    }
    big.sync_all().map_err(io)?;
    drop(big);
    phases.push((format!("write {big_mb}M"), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    m.unmount()?;
    phases.push(("unmount".to_string(), t.elapsed().as_secs_f64()));
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stats).map_err(|e| run_err("mount statistics", e))?)
            .map_err(|e| run_err("mount statistics", e))?;
    let count = |k: &str| st["device"][k].as_u64().unwrap_or(0);
    let r = OrderingResult {
        ordering: ordering.to_string(),
        phases,
        sync_writes: count("sync_writes"),
        async_writes: count("async_writes"),
    };
    for p in [&img, &stats] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir(&mnt);
    Ok(r)
}
