//! The benchmarks and the crash tester from the command line.

use std::path::{Path, PathBuf};
use sufs_fs::fs::Ordering;
use sufs_lab::crashtest::{self, CrashOptions};

use super::*;

pub(crate) fn cmd_bench_br(o: &sufs_lab::bench_br::BrBenchOptions, json: Option<PathBuf>) -> Result<(), Fail> {
    let r = sufs_lab::bench_br::run(o)?;
    println!("| device | test | reserved store | br store | br vs reserved |");
    println!("| --- | --- | --- | --- | --- |");
    for row in &r.rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.0}% |",
            row.device, row.test, row.reserved, row.br, row.br_vs_reserved
        );
    }
    println!();
    println!("| store | blocks used | space set aside |");
    println!("| --- | --- | --- |");
    for (what, used, size) in &r.space {
        println!("| {what} | {used} ({} MiB) | {size} ({} MiB) |", (used * 4096) >> 20, (size * 4096) >> 20);
    }
    println!();
    println!("Where the time went on the simulated disk:");
    println!();
    println!("| run | store | s | in refills (s) | refills | preserved | exceptions | reads | writes | positionings | mean seek (blocks) | write batches |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for p in &r.profiles {
        println!(
            "| {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
            p.run,
            p.store,
            p.seconds,
            p.refill_seconds,
            p.refills,
            p.preserved,
            p.exceptions,
            p.reads,
            p.writes,
            p.positionings,
            p.mean_seek_blocks,
            p.batches
        );
    }
    if let Some(p) = json {
        sufs_fs::files::write_private(&p, serde_json::to_string_pretty(&r)?.as_bytes())
            .map_err(|e| Fail(format!("{}: {e}", p.display()), 1))?;
    }
    Ok(())
}

/// `sufs bench papers`: each paper's page written; exit 1 when a claim does not hold.
pub(crate) fn cmd_bench_papers(paper: Option<&str>, o: &sufs_lab::papers::PapersOptions) -> Result<u8, Fail> {
    use sufs_lab::papers::{self, Paper};
    let which: Vec<Paper> = match paper {
        Some(name) => vec![Paper::from_name(name).ok_or_else(|| Fail::from(format!("no paper named {name}")))?],
        None => Paper::ALL.to_vec(),
    };
    let mut failed = 0;
    for p in which {
        let page = papers::run(p, o, &mut |s: &str| eprintln!("{}: {s}", p.name()))?;
        let md = papers::write_page(&page, &o.out)?;
        println!("{}: {} rows, {} claims, written to {}", p.name(), page.rows.len(), page.claims.len(), md.display());
        for c in page.failed() {
            println!("{}: claim does not hold: {} (measured: {})", p.name(), c.text, c.measured);
            failed += 1;
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

pub(crate) fn cmd_bench_peers(a: PeersArgs) -> Result<(), Fail> {
    use sufs_lab::bench_peers::{run, PeersOptions};
    let o = PeersOptions {
        exe: std::env::current_exe()?,
        dir: a.dir,
        image_size: a.image_size,
        peers: a.peers,
        workloads: a.workloads,
        files: a.files,
        trees: a.trees,
        tree_files: a.tree_files,
        andrew_tree: a.andrew_tree,
        andrew_files: a.andrew_files,
        postmark_files: a.postmark_files,
        postmark_tx: a.postmark_tx,
        seed: a.seed,
        fio_size: a.fio_size,
        fio_runtime: a.fio_runtime,
        mail_messages: a.mail_messages,
        stall_mb: a.stall_mb,
        stall_secs: a.stall_secs,
        sufs_cache: a.sufs_cache,
        par_files: a.parallel_files,
        par_mb: a.parallel_mb,
        par_messages: a.parallel_messages,
        coldread_secs: a.coldread_secs,
        coldread_rate: a.coldread_rate,
        rounds: a.rounds as usize,
        written_images: a.written_images,
        ..Default::default()
    }
    .scaled(a.scale);
    println!(
        "sufs bench peers: {} empty files; trees {} (at most {} files); Andrew-like over {} (at most {} files); \
         PostMark {} files, {} transactions, seed {}; fio on {} MiB, {} s a job; {} MiB images{} in {}",
        o.files,
        o.trees.iter().map(|t| t.display().to_string()).collect::<Vec<_>>().join(" and "),
        o.tree_files,
        o.andrew_tree.display(),
        o.andrew_files,
        o.postmark_files,
        o.postmark_tx,
        o.seed,
        o.fio_size >> 20,
        o.fio_runtime,
        o.image_size >> 20,
        if o.written_images { " (written whole)" } else { "" },
        o.dir.display()
    );
    let has = |w: &str| o.workloads.iter().any(|x| x == w);
    if has("parallel") {
        println!(
            "parallel: 1, 2 and 4 threads, each {} empty files, {} MiB written and read back, {} messages",
            o.par_files, o.par_mb, o.par_messages
        );
    }
    if has("read") {
        println!(
            "read: the copy's trees ({} files) put on each file system (fuse-ufs: by makefs), listed, stat'ed and read cold",
            o.tree_files
        );
    }
    if has("coldread") {
        println!(
            "coldread: {:.0} s of cold reads of 32 KiB files, 10 ms apart, behind a writer at {} MiB/s",
            o.coldread_secs, o.coldread_rate
        );
    }
    if o.rounds > 1 {
        println!("{} rounds, the peers' order rotated each round: each phase's median time", o.rounds);
    }
    if let Some(c) = o.sufs_cache {
        println!("sufs mounts: --cache {} MiB", c >> 20);
    }
    if (has("parallel") || has("coldread") || has("read")) && !sufs_lab::bench_peers::drops_page_cache() {
        println!(
            "not root: the page cache is not dropped before cold reads (they follow a remount, but may find \
             the image file's pages in the kernel's cache)"
        );
    }
    let multi = indicatif::MultiProgress::new();
    let style = indicatif::ProgressStyle::with_template("{prefix:>9} {bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    let bars: Vec<(String, indicatif::ProgressBar)> = o
        .workloads
        .iter()
        .map(|w| {
            let b = multi.add(indicatif::ProgressBar::new((o.peers.len() * o.rounds.max(1)) as u64));
            b.set_style(style.clone());
            b.set_prefix(w.clone());
            (w.clone(), b)
        })
        .collect();
    let bar = |w: &str| bars.iter().find(|(n, _)| n == w).map(|(_, b)| b);
    let r = run(&o, &mut |w, peer, phase| {
        if let Some(b) = bar(w) {
            match phase {
                Some(ph) => b.set_message(format!("{peer}: {ph}")),
                None => b.inc(1),
            }
        }
    })?;
    for (_, b) in &bars {
        b.finish_with_message("done");
    }
    for (what, why) in &r.skipped {
        println!("skipped {what}: {why}");
    }
    println!("\n{}", r.table());
    let ratios = r.ratios();
    if let (false, Some(me)) = (ratios.is_empty(), r.reference()) {
        println!("{me}'s time over the others' (below 1: {me} is faster):\n\n{ratios}");
    }
    let floor = r.floor_ratios();
    if !floor.is_empty() {
        println!("Time over the floor's (a file system in memory on the same FUSE transport; 1: FUSE is all the cost):\n\n{floor}");
    }
    let msgs = r.messages_table();
    if !msgs.is_empty() {
        println!("FUSE requests per operation (the most frequent opcodes per operation):\n\n{msgs}");
    }
    let plots = r.plots(&a.out).map_err(|e| Fail(format!("plots: {e}"), 1))?;
    for p in &plots {
        println!("plot: {}", p.display());
    }
    if let Some(j) = a.json {
        sufs_fs::files::write_private(&j, serde_json::to_string_pretty(&r)?.as_bytes())
            .map_err(|e| Fail(format!("{}: {e}", j.display()), 1))?;
        println!("json: {}", j.display());
    }
    Ok(())
}

/// `sufs bench floor-serve DIR`: the floor (`sufs_mount::floor`) mounted on `dir` in the
/// foreground until it is unmounted (or SIGINT, SIGTERM, SIGHUP), served as `sufs mount`
/// serves sufs: the same session settings and transport.
pub(crate) fn cmd_bench_floor_serve(
    dir: &Path,
    transport: fuse_uring::Transport,
    threads: usize,
    stats: Option<PathBuf>,
    ctl: Option<PathBuf>,
) -> Result<(), Fail> {
    use sufs_mount::floor::{stats_json, Floor, StatsServer};
    use sufs_mount::fuse::{config, FuseOptions};
    let o = FuseOptions { transport, threads, ..Default::default() };
    let abs_dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let floor = Floor::new(&o);
    let (negotiated, msgs) = (floor.negotiated(), floor.messages());
    // Answering before the mount shows: `sufs bench peers` asks for the counts as soon as it
    // sees the mount (asked before, under load, the first phase found no socket and every
    // phase of the run went uncounted).
    let _server = ctl
        .map(|p| StatsServer::start(&p, msgs.clone()).map_err(|e| Fail(format!("{}: {e}", p.display()), 1)))
        .transpose()?;
    let mut session = fuser::Session::new(floor, dir, &config(sufs_mount::floor::SOURCE.into(), false, &o))
        .map_err(|e| Fail(format!("cannot mount the floor on {}: {e}", dir.display()), 32))?;
    // io_uring asked for and not offered: the session's end unmounts it again.
    if let Some(why) = fuse_uring::refusal(transport, &negotiated) {
        return Err(Fail(format!("cannot mount the floor with --transport uring: {why}"), 32));
    }
    let handle = unmount_on_signals(session.unmount_callable(), &abs_dir)?;
    let run = fuse_uring::run(session, transport, &negotiated, threads, &mut |m| eprintln!("floor: {m}"))
        .map_err(|e| Fail(format!("FUSE session ended with an error: {e}"), 1));
    handle.close();
    if let Some(p) = stats {
        sufs_fs::files::write_private(&p, serde_json::to_string_pretty(&stats_json(&msgs))?.as_bytes())
            .map_err(|e| Fail(format!("{}: {e}", p.display()), 1))?;
    }
    run
}

pub(crate) fn cmd_bench_orderings(
    files: usize,
    tree: &Path,
    tree_files: usize,
    dir: &Path,
    big_mb: usize,
    rounds: usize,
    through: &str,
) -> Result<(), Fail> {
    println!(
        "soft updates §5 comparison: {files} files created and removed; Andrew-like phases over {} (at most \
         {tree_files} files); a {big_mb} MiB file written and fsync'ed; median of {rounds} interleaved rounds",
        tree.display()
    );
    let work = sufs_lab::bench::OrderingWork { files, tree, tree_files, big_mb };
    if through != "fuse" {
        let rs = sufs_lab::bench::ordering_compare(dir, &work, rounds)?;
        print_orderings("in-process, durable image files", &rs);
    }
    if through != "lib" {
        if !Path::new("/dev/fuse").exists() {
            return Err(Fail("/dev/fuse is missing: the FUSE comparison cannot run (use --through lib)".into(), 1));
        }
        let exe = std::env::current_exe()?;
        let rs = sufs_lab::bench::ordering_compare_fuse(&exe, dir, &work, rounds)?;
        print_orderings("through the FUSE mount", &rs);
    }
    Ok(())
}

/// One table of `sufs bench orderings`, with the paper's ratios: time over the paper's phases
/// (create, remove and the Andrew-like ones) and over all of them, creates, removes and writes
/// against sync.
pub(crate) fn print_orderings(title: &str, rs: &[sufs_lab::bench::OrderingResult]) {
    println!("\n{title}:");
    print!("{:<9}", "ordering");
    for (name, _) in &rs[0].phases {
        print!(" {:>10}", name);
    }
    println!(" {:>10} {:>12} {:>12}", "total s", "sync writes", "async writes");
    let total = |r: &sufs_lab::bench::OrderingResult| r.phases.iter().map(|p| p.1).sum::<f64>();
    // The paper's phases: everything before the large file.
    let paper = |r: &sufs_lab::bench::OrderingResult| r.phases.iter().take(6).map(|p| p.1).sum::<f64>();
    for r in rs {
        print!("{:<9}", r.ordering);
        for (_, t) in &r.phases {
            print!(" {:>10.3}", t);
        }
        println!(" {:>10.3} {:>12} {:>12}", total(r), r.sync_writes, r.async_writes);
    }
    let by = |name: &str| rs.iter().find(|r| r.ordering == name);
    if let (Some(s), Some(a), Some(d)) = (by("sync"), by("async"), by("softdep")) {
        let phase = |r: &sufs_lab::bench::OrderingResult, i: usize| r.phases[i].1.max(1e-9);
        println!(
            "softdep vs async: {:.2}x the time over the paper's phases (create to compile), {:.2}x over all; \
             vs sync: creates {:.1}x faster, removes {:.1}x faster, {:.0}% fewer writes",
            paper(d) / paper(a).max(1e-9),
            total(d) / total(a).max(1e-9),
            phase(s, 0) / phase(d, 0),
            phase(s, 1) / phase(d, 1),
            100.0 * (1.0 - (d.sync_writes + d.async_writes) as f64 / (s.sync_writes + s.async_writes).max(1) as f64)
        );
    }
}

pub(crate) fn cmd_bench_update(
    trials: u32,
    seconds: u64,
    disk: &str,
    seed: u64,
    out: &Path,
    json: Option<PathBuf>,
) -> Result<(), Fail> {
    use sufs_lab::bench;
    let disk = sufs_fs::dev::DiskModel::by_name(disk)
        .ok_or_else(|| Fail(format!("unknown disk model {disk:?} (rz58, modern)"), 2))?;
    let o = bench::UpdateBenchOptions { trials, seconds, disk: disk.clone(), seed, ..Default::default() };
    let bar = indicatif::ProgressBar::new(4 * trials as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} trials  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let results = bench::update_policy(&o, |label, t| {
        bar.set_message(format!("{label} trial {t}"));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    println!(
        "Mogul 1994 §4.1 on the {} model: {} trials of {} simulated s each, cache {} blocks of {} bytes, seed {}\n",
        disk.name, trials, seconds, o.cache_blocks, o.block_size, seed
    );
    print!("{}", bench::update_policy_report(&results));
    let pu = &results[0];
    let aipu = &results[2];
    println!(
        "\nAIPU vs PU (delayed writes): max read response {:.1}x lower, std {:.1}x lower, mean {:.2}x",
        pu.max_ms / aipu.max_ms.max(1e-9),
        pu.std_ms / aipu.std_ms.max(1e-9),
        aipu.mean_ms / pu.mean_ms.max(1e-9)
    );
    let build = bench::kernel_build(&disk, 300, seed)?;
    println!("\nkernel-build-like workload (Table 4-3), 300 units:");
    println!("{:<6} {:>15} {:>12}", "policy", "blocks written", "redirties");
    for b in &build {
        println!("{:<6} {:>15} {:>12}", b.policy.to_string(), b.blocks_written, b.redirties);
    }
    bench::update_policy_plots(&results, out).map_err(|e| Fail(format!("plots: {e}"), 1))?;
    println!("\nplots: {}/update-policy-histogram.svg, {}/update-policy-bursts.svg", out.display(), out.display());
    if let Some(j) = json {
        let v = serde_json::json!({ "update_policy": results, "kernel_build": build });
        sufs_fs::files::write_private(&j, serde_json::to_string_pretty(&v)?.as_bytes())
            .map_err(|e| Fail(format!("{}: {e}", j.display()), 1))?;
    }
    Ok(())
}

pub(crate) fn cmd_crashtest(ordering: Ordering, workload: &str, seed: u64, opts: &CrashOptions) -> Result<u8, Fail> {
    let mut names: Vec<&str> = if workload == "all" { crashtest::WORKLOADS.to_vec() } else { vec![workload] };
    if workload == "all" {
        let out = crashtest::left_out(opts);
        for (name, why) in &out {
            println!("crashtest: {name} left out on UFS2: {why}");
        }
        names.retain(|n| !out.iter().any(|(x, _)| x == n));
    }
    let (mut states, mut violations) = (0, 0);
    for name in &names {
        let s = crashtest::run(ordering, name, seed, opts).map_err(|e| Fail(e.to_string(), 2))?;
        println!("{s}\n");
        states += s.states;
        violations += s.violations;
    }
    let format = format!("UFS2 {}/{}", crashtest::BS, opts.fsize);
    let what =
        format!("{} workload(s), ordering {ordering}, seed {seed}, {format}: {states} crash states", names.len());
    if violations == 0 {
        println!("crashtest: {what}, no violations");
        Ok(0)
    } else {
        println!("crashtest: {what}, VIOLATIONS: {violations}");
        Ok(1)
    }
}

pub(crate) fn cmd_bench_scale(size: u64, files: usize, dir: &Path, json: Option<PathBuf>) -> Result<(), Fail> {
    use sufs_lab::bench_scale::{files_image_size, human, run, ScaleOptions};
    let o = ScaleOptions { exe: std::env::current_exe()?, dir: dir.to_path_buf(), size, files };
    println!(
        "sufs bench scale: an empty {} image; {files} files through the library on a {} image, in a tree and in \
         one directory; images in {}",
        human(size),
        human(files_image_size(files)),
        dir.display()
    );
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let r = run(&o, &mut |what| bar.set_message(what.to_string())).map_err(|e| Fail(e.to_string(), 1))?;
    bar.finish_and_clear();
    for (what, why) in &r.skipped {
        println!("skipped {what}: {why}");
    }
    println!("\n{}", r.table());
    if !r.lookup_probes.is_empty() {
        let probes: Vec<String> = r.lookup_probes.iter().map(|(n, us)| format!("{n} entries: {us:.2} µs")).collect();
        println!("warm lookup in one directory (dirhash): {}", probes.join(", "));
    }
    if let Some(j) = json {
        sufs_fs::files::write_private(&j, serde_json::to_string_pretty(&r)?.as_bytes())
            .map_err(|e| Fail(format!("{}: {e}", j.display()), 1))?;
        println!("json: {}", j.display());
    }
    Ok(())
}
