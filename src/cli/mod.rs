//! The `sufs` command's implementation: the arguments (`args`), and the commands by kind.

use clap::Parser;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use sufs_fs::policy::SyncerOptions;
use sufs_lab::crashtest::CrashOptions;
use sufs_mount::helper;
use sufs_mount::options::MountOpts;

mod args;
mod bench;
mod control;
mod image;
mod inspect;
mod mount;
mod tools;

pub(crate) use args::*;
pub(crate) use bench::*;
pub(crate) use control::*;
pub(crate) use image::*;
pub(crate) use inspect::*;
pub(crate) use mount::*;
pub(crate) use tools::*;

/// An error for the user: a message and an exit code.
pub(crate) struct Fail(pub(crate) String, pub(crate) u8);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Fail {
        Fail(e.to_string(), 1)
    }
}

pub(crate) fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn,fuser=error")).init();
    let args: Vec<String> = std::env::args().collect();
    let name = args.first().and_then(|a| Path::new(a).file_name()).map(|n| n.to_string_lossy().into_owned());
    if name.as_deref() == Some(helper::HELPER_NAME) {
        return helper_main(&args[1..]);
    }
    sufs_fs::progress::enable_on_terminal();
    let cli = Cli::parse();
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        quiet_broken_pipe();
    }
    finish(run(cli, &args[1..]))
}

/// A command whose reader went away (`sufs dumpfs IMG | head`) ends as Unix tools do, by
/// SIGPIPE, instead of panicking in `println!`. Not the mount: its daemon writes to the control
/// channel's clients, and one that hangs up must cost only its own connection (EPIPE).
fn quiet_broken_pipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; it runs before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The exit of a command: its code, or its message and code.
fn finish(r: Result<u8, Fail>) -> ExitCode {
    match r {
        Ok(code) => ExitCode::from(code),
        Err(Fail(msg, code)) => {
            eprintln!("sufs: {msg}");
            ExitCode::from(code)
        }
    }
}

/// Runs a command; `args` are its arguments (without argv[0]), to run a mount again as its daemon.
// Long: one arm per command, each turning its arguments into a call; split, the arms would only move.
fn run(cli: Cli, args: &[String]) -> Result<u8, Fail> {
    match cli.cmd {
        Cmd::Mkfs {
            image,
            size,
            block_size,
            snapshot_reserve,
            minfree,
            format,
            ufs2: _,
            frag_size,
            bytes_per_inode,
            label,
        } => {
            refuse_retired(format)?;
            let geometry = Ufs2Geometry { block_size, frag_size, bytes_per_inode, minfree, label, snapshot_reserve };
            cmd_mkfs_ufs2(&image, size, geometry)?;
            Ok(0)
        }
        Cmd::Mount {
            image,
            dir,
            ordering,
            foreground,
            stats,
            cache,
            size,
            ro,
            update,
            age,
            interval,
            async_full_blocks,
            softdep_limit,
            threads,
            transport,
            force,
            options,
            quiet,
            no_create,
        } => {
            let mut opts = MountOpts::default();
            for o in &options {
                opts.add(o, false).map_err(|e| Fail(e, 1))?;
            }
            let update = opts.update.unwrap_or(update);
            let mut sync = SyncerOptions::for_policy(update);
            sync.age = Duration::from_secs(age);
            if let Some(i) = interval {
                sync.interval = Duration::from_secs(i.max(1));
            }
            let m = MountArgs {
                ordering: opts.ordering.or(ordering),
                foreground,
                stats,
                cache: opts.cache.unwrap_or(cache),
                size,
                ro: opts.ro.unwrap_or(ro),
                sync,
                async_full_blocks,
                softdep_limit,
                threads: opts.threads.unwrap_or(threads).into(),
                transport: opts.transport.unwrap_or(transport),
                snapshot: false,
                force,
                opts,
                reexec: args.to_vec(),
                make_missing: !no_create,
                quiet,
            };
            cmd_mount(&image, &dir, m).map(|_| 0)
        }
        Cmd::InstallHelper { prefix } => {
            let (link, old) = helper::install(&prefix).map_err(|e| Fail(e, 1))?;
            let target = std::fs::read_link(&link)?;
            match old {
                Some(old) => println!("{} -> {} (was {old})", link.display(), target.display()),
                None => println!("{} -> {}", link.display(), target.display()),
            }
            Ok(0)
        }
        Cmd::Umount { dir } => cmd_umount(&dir).map(|_| 0),
        Cmd::Fsck { image, background: true, .. } => cmd_fsck_background(&image, None),
        Cmd::Fsck { image, yes, preen, force, superblock, .. } => {
            let mode = if yes {
                FsckMode::Repair
            } else if preen {
                FsckMode::Preen
            } else {
                FsckMode::Check
            };
            cmd_fsck(&image, &FsckArgs { mode, force, superblock })
        }
        Cmd::Dumpfs { image } => cmd_dumpfs(&image).map(|_| 0),
        Cmd::Tunefs { image, minfree, label, ordering, posix_acls, print } => {
            let posix_acls = posix_acls.map(|v| v == "enable");
            cmd_tunefs(&image, &Tune { minfree, label, ordering, posix_acls, print })
        }
        Cmd::Growfs { image, size } => cmd_growfs(&image, size),
        Cmd::Inspect { image, what } => cmd_inspect(&image, what),
        Cmd::Sync { on } => cmd_sync(on.as_deref()).map(|_| 0),
        Cmd::Shutdown { on, mode } => cmd_shutdown(&on, mode).map(|_| 0),
        Cmd::Br { on, op } => cmd_br(&on, op).map(|_| 0),
        Cmd::Snapshot { on, op } => cmd_snapshot(&on, op).map(|_| 0),
        Cmd::Volume { op: VolumeCmd::Snapshot { op } } => cmd_volume(op).map(|_| 0),
        Cmd::Bench { which: None, peers } | Cmd::Bench { which: Some(BenchCmd::Peers(peers)), .. } => {
            cmd_bench_peers(peers).map(|_| 0)
        }
        Cmd::Bench {
            which: Some(BenchCmd::Orderings { files, tree, tree_files, dir, big_mb, rounds, through }),
            ..
        } => cmd_bench_orderings(files, &tree, tree_files, &dir, big_mb, rounds, &through).map(|_| 0),
        Cmd::Bench {
            which: Some(BenchCmd::Br { size, file, ios, file_ios, tree, tree_files, copies, dir, seed, json }),
            ..
        } => {
            let o = sufs_lab::bench_br::BrBenchOptions {
                blocks: size / 4096,
                file_blocks: file / 4096,
                ios,
                file_ios,
                tree,
                tree_files,
                copies,
                dir,
                seed,
            };
            cmd_bench_br(&o, json).map(|_| 0)
        }
        Cmd::Bench { which: Some(BenchCmd::UpdatePolicy { trials, seconds, disk, seed, out, json }), .. } => {
            cmd_bench_update(trials, seconds, &disk, seed, &out, json).map(|_| 0)
        }
        Cmd::Bench { which: Some(BenchCmd::Papers { paper, quick, out, dir, seed }), .. } => {
            let o = sufs_lab::papers::PapersOptions { quick, out, dir, seed };
            cmd_bench_papers(paper.as_deref(), &o)
        }
        Cmd::Bench { which: Some(BenchCmd::Scale { size, files, dir, json }), .. } => {
            cmd_bench_scale(size, files, &dir, json).map(|_| 0)
        }
        Cmd::Bench {
            which: Some(BenchCmd::ScaleStep { image, step, layout, files, cache_blocks, softdep_limit }),
            ..
        } => {
            let r = sufs_lab::bench_scale::step(&image, step, layout, files, cache_blocks, softdep_limit)
                .map_err(|e| Fail(e.to_string(), 1))?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(0)
        }
        Cmd::Bench { which: Some(BenchCmd::FloorServe { dir, transport, threads, stats, ctl }), .. } => {
            cmd_bench_floor_serve(&dir, transport, threads as usize, stats, ctl).map(|_| 0)
        }
        Cmd::Crashtest {
            ordering,
            workload,
            seed,
            subsets,
            ops,
            cache_blocks,
            end,
            update,
            format,
            ufs2: _,
            fsize,
        } => {
            refuse_retired(format)?;
            let fsize = crash_fsize(fsize)?;
            let opts = CrashOptions { subsets, ops, cache_blocks, end, update, fsize, ..Default::default() };
            cmd_crashtest(ordering, &workload, seed, &opts)
        }
    }
}

/// `--format sufs`: the earlier format is retired, said so.
fn refuse_retired(format: DiskFormat) -> Result<(), Fail> {
    match format {
        DiskFormat::Ufs2 => Ok(()),
        DiskFormat::Sufs => {
            Err(Fail("--format sufs: sufs's own earlier format is retired; sufs makes FreeBSD's UFS2 only".into(), 2))
        }
    }
}

/// The crash tester's fragment size: `--fsize`, a power of two from 512 to the tester's
/// 4096-byte block; 512 unless given.
fn crash_fsize(fsize: Option<usize>) -> Result<usize, Fail> {
    let block = sufs_lab::crashtest::BS;
    match fsize {
        None => Ok(512),
        Some(f) if (512..=block).contains(&f) && f.is_power_of_two() => Ok(f),
        Some(f) => Err(Fail(format!("--fsize {f}: a power of two from 512 to {block}"), 2)),
    }
}

/// This command's arguments (without argv[0]), to run it again as the mount's daemon.
fn own_args() -> Vec<String> {
    std::env::args().skip(1).collect()
}

#[cfg(test)]
mod tests {
    use sufs_mount::options::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("x").is_err());
    }
}
