//! The workloads of `sufs bench peers` that run threads at once.
//!
//! `parallel`: the same kinds of work from 1, 2 and 4 threads, each in a directory of its own:
//! empty files created, stat'ed and removed; a file written (and fsync'ed), then read back
//! after the caches were made cold; mail delivery (16 KiB, fsync, rename). The phases' rates
//! show how each file system scales with the threads.
//!
//! `coldread`: Mogul's (1994) experiment on the real mount. A writer keeps the cache dirty at
//! a steady rate while a reader reads cold files, one at a time with a short pause, each read
//! timed. Under periodic update (PU) every dirty buffer goes out every 30 s, a burst the reads
//! may queue behind; under interval periodic update (AIPU) each buffer goes when it is 30 s old,
//! the same writes spread over time. Mogul found AIPU's worst read and variance lower.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering as Atomic};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::{deliver, drop_dentries, io, quantile, timed, Cold, PeersOptions, Phase};
use crate::bench::BenchError;

/// The thread counts of `parallel`.
const WORKERS: [usize; 3] = [1, 2, 4];
/// `parallel`'s writes and reads.
const IO_SIZE: usize = 64 << 10;
/// `coldread`: the size of each cold file, and the reader's pause after each read.
const COLD_FILE: usize = 32 << 10;
const PAUSE: Duration = Duration::from_millis(10);
/// `coldread`'s writer: its writes, and the size of each file it makes.
const WRITER_CHUNK: usize = 256 << 10;
const WRITER_FILE: u64 = 16 << 20;

/// Runs `work(k)` for k in 0..n, each on a thread of its own, all at once; returns when all are
/// done, with the first error.
fn on_threads(n: usize, work: impl Fn(usize) -> std::io::Result<()> + Sync) -> Result<(), BenchError> {
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..n).map(|k| s.spawn(move || work(k))).collect();
        handles.into_iter().try_for_each(|h| h.join().expect("worker thread").map_err(io))
    })
}

/// `par_files` empty files a worker created, stat'ed, removed; `par_mb` MiB a worker written in
/// 64 KiB writes and fsync'ed, then read back cold (after a remount, and the page cache dropped
/// where allowed); `par_messages` messages a worker delivered; each for 1, 2 and 4 workers.
pub(super) fn parallel(
    root: &Path,
    o: &PeersOptions,
    phases: &mut Vec<Phase>,
    on: &mut dyn FnMut(&str),
    cold: &mut Cold,
) -> Result<(), BenchError> {
    let dir = |n: usize, k: usize| root.join(format!("x{n}-w{k}"));
    for n in WORKERS {
        for k in 0..n {
            std::fs::create_dir(dir(n, k)).map_err(io)?;
        }
    }
    let files = o.par_files;
    let file = |n: usize, k: usize, i: usize| dir(n, k).join(format!("f{i}"));
    for n in WORKERS {
        let ops = (n * files) as u64;
        let create = format!("create x{n}");
        on(&create);
        timed(phases, &create, || {
            on_threads(n, |k| (0..files).try_for_each(|i| std::fs::File::create(file(n, k, i)).map(drop)))?;
            Ok(((), ops))
        })?;
        let stat = format!("stat x{n}");
        on(&stat);
        drop_dentries();
        timed(phases, &stat, || {
            on_threads(n, |k| (0..files).try_for_each(|i| std::fs::symlink_metadata(file(n, k, i)).map(drop)))?;
            Ok(((), ops))
        })?;
        let remove = format!("remove x{n}");
        on(&remove);
        timed(phases, &remove, || {
            on_threads(n, |k| (0..files).try_for_each(|i| std::fs::remove_file(file(n, k, i))))?;
            Ok(((), ops))
        })?;
    }
    let writes = (o.par_mb << 20) as usize / IO_SIZE;
    // Each worker's file holds its own byte, checked as it is read back.
    let tag = |k: usize| b'a' + k as u8;
    for n in WORKERS {
        let mib = n as u64 * o.par_mb;
        let write = format!("write MiB x{n}");
        on(&write);
        timed(phases, &write, || {
            on_threads(n, |k| {
                let buf = vec![tag(k); IO_SIZE];
                let mut f = std::fs::File::create(dir(n, k).join("data"))?;
                (0..writes).try_for_each(|_| f.write_all(&buf))?;
                f.sync_all()
            })?;
            Ok(((), mib))
        })?;
        let read = format!("read MiB x{n}");
        on(&read);
        cold()?;
        timed(phases, &read, || {
            on_threads(n, |k| {
                let mut buf = vec![0; IO_SIZE];
                let mut f = std::fs::File::open(dir(n, k).join("data"))?;
                let mut got = 0;
                loop {
                    let r = f.read(&mut buf)?;
                    if r == 0 {
                        break;
                    }
                    if buf[..r].iter().any(|&b| b != tag(k)) {
                        return Err(std::io::Error::other(format!("worker {k}'s file has other bytes at {got}")));
                    }
                    got += r;
                }
                match got == writes * IO_SIZE {
                    true => Ok(()),
                    false => Err(std::io::Error::other(format!("worker {k} read {got} bytes of its file"))),
                }
            })?;
            Ok(((), mib))
        })?;
    }
    for n in WORKERS {
        let mail = format!("mail x{n}");
        on(&mail);
        timed(phases, &mail, || {
            on_threads(n, |k| deliver(dir(n, k).join("mail"), o.par_messages))?;
            Ok(((), (n * o.par_messages) as u64))
        })?;
    }
    Ok(())
}

/// Cold files of 32 KiB (one for each pause of the run, so that none is read twice) made, then
/// the caches made cold (a remount: everything written and sufs's cache emptied; the page cache
/// dropped where allowed); then for `coldread_secs` a writer writes new files at
/// `coldread_rate` MiB/s, never fsync'ed, while the reader reads the cold files in a seeded
/// random order, one at a time, 10 ms apart. Phases: the reads and the writer's MiB (their
/// rates), then the reads' mean, standard deviation, median, 99th percentile and worst latency.
pub(super) fn coldread(
    root: &Path,
    o: &PeersOptions,
    phases: &mut Vec<Phase>,
    on: &mut dyn FnMut(&str),
    cold: &mut Cold,
) -> Result<(), BenchError> {
    if !(o.coldread_rate.is_finite() && o.coldread_rate > 0.0) {
        return Err(BenchError::Run(format!("coldread: the writer's rate must be positive, not {}", o.coldread_rate)));
    }
    let n = (o.coldread_secs / PAUSE.as_secs_f64()).ceil() as usize + 1;
    let path = |i: usize| root.join(format!("c{}", i / 1000)).join(format!("f{i}"));
    on("make cold files");
    timed(phases, "make cold files", || {
        let mut body = vec![b'c'; COLD_FILE];
        for i in 0..n {
            if i % 1000 == 0 {
                std::fs::create_dir(root.join(format!("c{}", i / 1000))).map_err(io)?;
            }
            body[..8].copy_from_slice(&(i as u64).to_le_bytes());
            std::fs::write(path(i), &body).map_err(io)?;
        }
        Ok(((), n as u64))
    })?;
    on("remount");
    cold()?;
    on("cold reads");
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(o.seed));
    let stop = AtomicBool::new(false);
    let (reads, written) = std::thread::scope(|s| {
        let writer = s.spawn(|| steady_writer(root, o.coldread_rate, &stop));
        let reads = read_cold(&order, &path, o.coldread_secs);
        stop.store(true, Atomic::Relaxed);
        (reads, writer.join().expect("writer thread"))
    });
    let (mut lat, secs) = reads.map_err(io)?;
    let (bytes, wsecs) = written.map_err(io)?;
    phases.push(Phase::new("cold reads", lat.len() as u64, secs));
    phases.push(Phase::alongside("writer MiB", bytes >> 20, wsecs));
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    let var = lat.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / lat.len().max(1) as f64;
    lat.sort_by(f64::total_cmp);
    phases.push(Phase::latency("read: mean", mean));
    phases.push(Phase::latency("read: std dev", var.sqrt()));
    phases.push(Phase::latency("read: median", quantile(&lat, 0.5)));
    phases.push(Phase::latency("read: p99", quantile(&lat, 0.99)));
    phases.push(Phase::latency("read: max", quantile(&lat, 1.0)));
    Ok(())
}

/// Reads the files of `order` whole, one at a time and `PAUSE` apart, until `secs` have passed;
/// checks each (its size and number) and returns each read's latency and the time taken.
fn read_cold(
    order: &[usize],
    path: &dyn Fn(usize) -> std::path::PathBuf,
    secs: f64,
) -> std::io::Result<(Vec<f64>, f64)> {
    let start = Instant::now();
    let mut lat = Vec::new();
    for &i in order {
        if start.elapsed().as_secs_f64() >= secs {
            break;
        }
        let t = Instant::now();
        let data = std::fs::read(path(i))?;
        lat.push(t.elapsed().as_secs_f64());
        if data.len() != COLD_FILE || data[..8] != (i as u64).to_le_bytes() {
            return Err(std::io::Error::other(format!("cold file {i} read back wrong ({} bytes)", data.len())));
        }
        std::thread::sleep(PAUSE);
    }
    Ok((lat, start.elapsed().as_secs_f64()))
}

/// Writes new files of 16 MiB in 256 KiB writes at `rate` MiB/s (each write due at its time
/// from the start; a late one is followed at once by those due since) until `stop`; returns the
/// bytes written and the time taken.
fn steady_writer(root: &Path, rate: f64, stop: &AtomicBool) -> std::io::Result<(u64, f64)> {
    let buf = vec![b'w'; WRITER_CHUNK];
    let every = WRITER_CHUNK as f64 / (rate * (1u64 << 20) as f64);
    let start = Instant::now();
    let (mut written, mut file) = (0u64, None);
    while !stop.load(Atomic::Relaxed) {
        if written.is_multiple_of(WRITER_FILE) {
            file = Some(std::fs::File::create(root.join(format!("w{}", written / WRITER_FILE)))?);
        }
        if let Some(f) = file.as_mut() {
            f.write_all(&buf)?;
        }
        written += WRITER_CHUNK as u64;
        let due = every * (written / WRITER_CHUNK as u64) as f64;
        while !stop.load(Atomic::Relaxed) {
            let now = start.elapsed().as_secs_f64();
            if now >= due {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64((due - now).min(0.05)));
        }
    }
    Ok((written, start.elapsed().as_secs_f64()))
}
