//! The paper's three tasks (§5), modelled: the "filesystem torture test" (Andrew benchmark runs,
//! copies and removes of /etc with random pauses, and finds from /, as three streams at once),
//! building and installing a system (many compiles: read sources, write objects, link, install),
//! and a mail server (sendmail's queue files created, fsync'ed and removed, mailboxes appended
//! and fsync'ed). Plus the create and remove microbenchmark behind the paper's "factors of 2
//! and 20". Every tree is synthetic and drawn from the seed, so a run does not depend on the
//! host's files.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::world::{Outcome, World, SEC};
use crate::papers::PResult;
use sufs_fs::format::ROOT_INO;

/// How big each task is.
#[derive(Clone, Debug, Serialize)]
pub struct Scale {
    /// The torture test's streams: Andrew runs, copy-and-remove cycles of /etc, finds (the paper:
    /// 1000, 1000, 500).
    pub andrew_runs: usize,
    pub etc_cycles: usize,
    pub finds: usize,
    /// The system build: programs (each a directory of sources linked into one binary) and
    /// sources per program.
    pub programs: usize,
    pub sources_per_program: usize,
    /// The mail server: simulated hours and messages a second.
    pub mail_hours: f64,
    pub mail_rate: f64,
    /// The microbenchmark: files created, then removed.
    pub micro_files: usize,
}

impl Scale {
    pub fn full() -> Scale {
        Scale {
            andrew_runs: 100,
            etc_cycles: 100,
            finds: 50,
            programs: 60,
            sources_per_program: 25,
            mail_hours: 4.0,
            mail_rate: 1.5,
            micro_files: 10_000,
        }
    }

    pub fn quick() -> Scale {
        Scale {
            andrew_runs: 6,
            etc_cycles: 6,
            finds: 3,
            programs: 8,
            sources_per_program: 10,
            mail_hours: 0.25,
            mail_rate: 1.5,
            micro_files: 1_000,
        }
    }
}

/// CPU of a compile: a fixed start plus a rate over the source. Chosen so that an Andrew run
/// on async takes about 71 s, what the paper's torture test gives (19 h 43 min over its 1000
/// Andrew runs, the longest of its three streams).
pub const COMPILE_NS: u64 = 600_000_000;
pub const COMPILE_NS_PER_KIB: u64 = 280_000_000;
/// CPU of sendmail's own work on one message (parsing, routing, logging).
const SENDMAIL_NS: u64 = 5_000_000;

fn compile_ns(bytes: u64) -> u64 {
    COMPILE_NS + bytes * COMPILE_NS_PER_KIB / 1024
}

/// A synthetic directory tree: directories (parents first; index 0 is the top) and files.
pub struct Tree {
    pub dirs: Vec<(Option<usize>, String)>,
    /// Directory index, name, size.
    pub files: Vec<(usize, String, u64)>,
}

impl Tree {
    /// The Andrew benchmark's source tree: 5 directories, 70 files, about 200 KB (Howard et al.),
    /// here 20 headers, 35 C files and 15 others.
    pub fn andrew(rng: &mut SmallRng) -> Tree {
        let dirs = vec![
            (None, "top".to_string()),
            (Some(0), "include".to_string()),
            (Some(0), "lib".to_string()),
            (Some(0), "src".to_string()),
            (Some(0), "doc".to_string()),
        ];
        let mut files = Vec::new();
        for i in 0..20 {
            files.push((1, format!("h{i}.h"), rng.gen_range(512..4096)));
        }
        for i in 0..35 {
            files.push((2 + i % 2, format!("f{i}.c"), rng.gen_range(1024..8192)));
        }
        for i in 0..15 {
            files.push((4, format!("d{i}.txt"), rng.gen_range(256..4096)));
        }
        Tree { dirs, files }
    }

    /// A 1999 /etc: 150 small files in the top and three subdirectories.
    pub fn etc(rng: &mut SmallRng) -> Tree {
        let dirs = vec![
            (None, "etc".to_string()),
            (Some(0), "rc.d".to_string()),
            (Some(0), "mail".to_string()),
            (Some(0), "namedb".to_string()),
        ];
        let files = (0..150).map(|i| (i % 4, format!("e{i}"), rng.gen_range(64..6144))).collect();
        Tree { dirs, files }
    }

    /// Creates the tree under `parent`, reading each file's contents from `from` (its inode)
    /// when given; returns the inodes of its directories and files.
    pub fn copy_in(&self, w: &mut World, parent: u32, top: &str, from: Option<&Copy>) -> PResult<Copy> {
        let mut dirs = Vec::with_capacity(self.dirs.len());
        for (i, (p, name)) in self.dirs.iter().enumerate() {
            let (at, name) = match p {
                None => (parent, top),
                Some(p) => (dirs[*p], name.as_str()),
            };
            assert!(i == 0 || p.is_some(), "only the top has no parent");
            dirs.push(w.mkdir(at, name)?);
        }
        let mut files = Vec::with_capacity(self.files.len());
        for (k, (d, name, size)) in self.files.iter().enumerate() {
            let data = match from {
                Some(src) => w.read_file(src.files[k], *size)?,
                None => vec![(k % 251) as u8; *size as usize],
            };
            files.push(w.create_file(dirs[*d], name, &data)?);
        }
        Ok(Copy { dirs, files })
    }
}

/// A tree's inodes once created.
pub struct Copy {
    pub dirs: Vec<u32>,
    pub files: Vec<u32>,
}

/// One step of a torture-test stream.
#[derive(Clone, Copy, Debug)]
enum Step {
    Andrew(usize),
    CopyEtc(usize),
    RemoveEtc(usize),
    Find,
    Pause(u64),
}

/// The three streams: Andrew runs back to back; copy, pause 0-60 s, remove, pause 0-60 s; find,
/// pause 100 s.
fn torture_streams(s: &Scale, rng: &mut SmallRng) -> Vec<Vec<Step>> {
    let andrew = (0..s.andrew_runs).map(Step::Andrew).collect();
    let mut etc = Vec::new();
    for i in 0..s.etc_cycles {
        etc.push(Step::CopyEtc(i));
        etc.push(Step::Pause(rng.gen_range(0..=60) * SEC));
        etc.push(Step::RemoveEtc(i));
        etc.push(Step::Pause(rng.gen_range(0..=60) * SEC));
    }
    let mut find = Vec::new();
    for _ in 0..s.finds {
        find.push(Step::Find);
        find.push(Step::Pause(100 * SEC));
    }
    vec![andrew, etc, find]
}

/// The torture test's file system: the Andrew sources and /etc to copy from, and where the
/// copies go.
struct TortureFs {
    andrew: Tree,
    andrew_src: Copy,
    etc: Tree,
    etc_src: Copy,
    runs: u32,
    tmp: u32,
}

/// The "filesystem torture test": the three streams at once on one CPU. The stream whose next
/// step is ready first runs it; a pause makes its stream ready again that much later.
pub fn torture(w: &mut World, s: &Scale, seed: u64) -> PResult<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let andrew = Tree::andrew(&mut rng);
    let etc = Tree::etc(&mut rng);
    let andrew_src = andrew.copy_in(w, ROOT_INO, "andrew-src", None)?;
    let etc_src = etc.copy_in(w, ROOT_INO, "etc", None)?;
    let runs = w.mkdir(ROOT_INO, "andrew")?;
    let tmp = w.mkdir(ROOT_INO, "tmp")?;
    let t = TortureFs { andrew, andrew_src, etc, etc_src, runs, tmp };
    let mut streams = torture_streams(s, &mut rng);
    w.start()?;
    let mut ready = vec![w.now(); streams.len()];
    let mut next = vec![0usize; streams.len()];
    while let Some(i) = (0..streams.len()).filter(|&i| next[i] < streams[i].len()).min_by_key(|&i| (ready[i], i)) {
        w.idle_until(ready[i])?;
        let step = streams[i][next[i]];
        next[i] += 1;
        match step {
            Step::Pause(ns) if w.simulated() => {
                ready[i] = w.now().max(ready[i]) + ns;
                continue;
            }
            Step::Pause(_) => {}
            Step::Andrew(k) => andrew_run(w, &t, k)?,
            Step::CopyEtc(k) => {
                t.etc.copy_in(w, t.tmp, &format!("etc{k}"), Some(&t.etc_src))?;
            }
            Step::RemoveEtc(k) => w.remove_tree(t.tmp, &format!("etc{k}"))?,
            Step::Find => find(w, ROOT_INO)?,
        }
        ready[i] = w.now();
    }
    streams.clear();
    w.counts.push(("andrew runs".into(), s.andrew_runs as f64));
    Ok(())
}

/// One Andrew benchmark run: MakeDir and Copy (the tree copied from the sources), ScanDir (every
/// directory listed, every file stat'ed), ReadAll (every file read), Make (each C file read with
/// four headers and compiled to an object, the objects linked); then the copy is removed.
fn andrew_run(w: &mut World, t: &TortureFs, k: usize) -> PResult<()> {
    let name = format!("run{k}");
    let c = t.andrew.copy_in(w, t.runs, &name, Some(&t.andrew_src))?;
    for &d in &c.dirs {
        for (_, ino) in w.readdir(d)? {
            w.stat(ino)?;
        }
    }
    for (i, &f) in c.files.iter().enumerate() {
        w.read_file(f, t.andrew.files[i].2)?;
    }
    let headers: Vec<usize> = (0..t.andrew.files.len()).filter(|&i| t.andrew.files[i].1.ends_with(".h")).collect();
    let mut objects = Vec::new();
    for (i, (d, fname, size)) in t.andrew.files.iter().enumerate() {
        if !fname.ends_with(".c") {
            continue;
        }
        w.read_file(c.files[i], *size)?;
        for h in headers.iter().cycle().skip(i).take(4) {
            w.read_file(c.files[*h], t.andrew.files[*h].2)?;
        }
        w.cpu(compile_ns(*size))?;
        let obj = fname.replace(".c", ".o");
        let osize = size * 7 / 10;
        let ino = w.create_file(c.dirs[*d], &obj, &vec![1u8; osize as usize])?;
        objects.push((ino, osize));
    }
    let mut total = 0;
    for &(ino, size) in &objects {
        w.read_file(ino, size)?;
        total += size;
    }
    w.cpu(COMPILE_NS)?;
    w.create_file(c.dirs[0], "a.out", &vec![2u8; total as usize])?;
    w.remove_tree(t.runs, &name)
}

/// `find /`: every directory listed and every entry stat'ed.
fn find(w: &mut World, dir: u32) -> PResult<()> {
    for (_, ino) in w.readdir(dir)? {
        let (_, is_dir) = w.stat(ino)?;
        if is_dir {
            find(w, ino)?;
        }
    }
    Ok(())
}

/// The system's sources: a shared include directory and one directory per program.
struct Sources {
    include: Vec<(u32, u64)>,
    programs: Vec<Vec<(u32, String, u64)>>,
}

fn make_sources(w: &mut World, s: &Scale, rng: &mut SmallRng) -> PResult<Sources> {
    let usr = w.mkdir(ROOT_INO, "usr")?;
    let src = w.mkdir(usr, "src")?;
    let inc = w.mkdir(src, "include")?;
    let mut include = Vec::new();
    for i in 0..60 {
        let size = rng.gen_range(1024..8192);
        include.push((w.create_file(inc, &format!("h{i}.h"), &vec![3u8; size as usize])?, size));
    }
    let mut programs = Vec::new();
    for p in 0..s.programs {
        let d = w.mkdir(src, &format!("prog{p}"))?;
        let mut files = Vec::new();
        for i in 0..s.sources_per_program {
            let size = rng.gen_range(1024..16384);
            let name = format!("s{i}.c");
            files.push((w.create_file(d, &name, &vec![4u8; size as usize])?, name, size));
        }
        programs.push(files);
    }
    Ok(Sources { include, programs })
}

/// Building and installing the system: the old object tree removed ("make cleandir"); each
/// source read with six headers, compiled through a temporary assembler file in /tmp into an
/// object; each program's objects linked; each binary installed as install(1) does (written
/// under a temporary name, renamed over the old one).
pub fn build(w: &mut World, s: &Scale, seed: u64) -> PResult<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let src = make_sources(w, s, &mut rng)?;
    let tmp = w.mkdir(ROOT_INO, "tmp")?;
    let bin = w.mkdir(ROOT_INO, "bin")?;
    let usr = w.lookup(ROOT_INO, "usr")?;
    // The previous build's objects and installed binaries.
    let old = w.mkdir(usr, "obj")?;
    for (p, files) in src.programs.iter().enumerate() {
        let d = w.mkdir(old, &format!("prog{p}"))?;
        for (_, name, size) in files {
            w.create_file(d, &name.replace(".c", ".o"), &vec![5u8; (*size / 2) as usize])?;
        }
        w.create_file(bin, &format!("prog{p}"), &vec![6u8; 64 << 10])?;
    }
    w.start()?;
    w.remove_tree(usr, "obj")?;
    let obj = w.mkdir(usr, "obj")?;
    let mut compiles = 0u64;
    for (p, files) in src.programs.iter().enumerate() {
        let d = w.mkdir(obj, &format!("prog{p}"))?;
        let mut objects = Vec::new();
        for (k, (ino, name, size)) in files.iter().enumerate() {
            w.read_file(*ino, *size)?;
            for j in 0..6 {
                let (h, hs) = src.include[(p * 7 + k * 3 + j * 11) % src.include.len()];
                w.read_file(h, hs)?;
            }
            w.cpu(compile_ns(*size))?;
            let asm = format!("cc{p}_{k}.s");
            let a = w.create_file(tmp, &asm, &vec![7u8; (*size * 2) as usize])?;
            w.read_file(a, *size * 2)?;
            w.cpu(compile_ns(*size) / 10)?;
            let osize = *size * 7 / 10;
            objects.push((w.create_file(d, &name.replace(".c", ".o"), &vec![8u8; osize as usize])?, osize));
            w.unlink(tmp, &asm)?;
            compiles += 1;
        }
        let mut total = 0;
        for &(o, size) in &objects {
            w.read_file(o, size)?;
            total += size;
        }
        w.cpu(COMPILE_NS)?;
        let binary = vec![9u8; total as usize];
        w.create_file(d, &format!("prog{p}"), &binary)?;
        // install -c: a temporary name in the target directory, then a rename over the old one.
        let t = format!("INS@prog{p}");
        w.create_file(bin, &t, &binary)?;
        w.rename(bin, &t, bin, &format!("prog{p}"))?;
    }
    w.counts.push(("compiles".into(), compiles as f64));
    Ok(())
}

/// The mail spool and the mailboxes.
struct Spool {
    mqueue: u32,
    mailboxes: Vec<(u32, u64)>,
}

fn make_spool(w: &mut World, users: usize) -> PResult<Spool> {
    let var = w.mkdir(ROOT_INO, "var")?;
    let spool = w.mkdir(var, "spool")?;
    let mqueue = w.mkdir(spool, "mqueue")?;
    let mail = w.mkdir(var, "mail")?;
    let mut mailboxes = Vec::new();
    for u in 0..users {
        let size = 16 << 10;
        mailboxes.push((w.create_file(mail, &format!("user{u}"), &vec![10u8; size])?, size as u64));
    }
    Ok(Spool { mqueue, mailboxes })
}

/// A message's size: mostly a few KiB, now and then much larger.
fn message_size(rng: &mut SmallRng) -> u64 {
    if rng.gen_ratio(1, 20) {
        rng.gen_range(16 << 10..128 << 10)
    } else {
        rng.gen_range(512..6 << 10)
    }
}

/// The mail server: messages arrive at random (Poisson, `mail_rate` a second) for `mail_hours`.
/// Each is delivered as sendmail 8 and mail.local do: the data file `df` written and fsync'ed,
/// the control file written as `tf`, fsync'ed and renamed to `qf`; the message appended to the
/// recipient's mailbox, fsync'ed; `qf` and `df` removed. Now and then a user reads and empties a
/// mailbox (POP). Counts the messages and the mean time a delivery takes.
pub fn mail(w: &mut World, s: &Scale, seed: u64) -> PResult<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let spool = make_spool(w, 200)?;
    let mut boxes = spool.mailboxes.clone();
    w.start()?;
    let end = w.now() + (s.mail_hours * 3600.0 * 1e9) as u64;
    let mut arrival = w.now();
    let (mut n, mut busy) = (0u64, 0u64);
    loop {
        let gap = -(1.0 - rng.gen::<f64>()).ln() / s.mail_rate;
        arrival += (gap * 1e9) as u64;
        if arrival >= end || (!w.simulated() && n >= (s.mail_hours * 3600.0 * s.mail_rate) as u64) {
            break;
        }
        w.idle_until(arrival)?;
        let t0 = w.now();
        deliver(w, spool.mqueue, &mut boxes, n, &mut rng)?;
        busy += w.now() - t0;
        n += 1;
        if rng.gen_ratio(1, 40) {
            let u = rng.gen_range(0..boxes.len());
            let (ino, size) = boxes[u];
            w.read_file(ino, size)?;
            w.truncate(ino, 0)?;
            boxes[u].1 = 0;
        }
    }
    w.counts.push(("messages".into(), n as f64));
    w.counts.push(("delivery ms".into(), busy as f64 / n.max(1) as f64 / 1e6));
    Ok(())
}

fn deliver(w: &mut World, mq: u32, boxes: &mut [(u32, u64)], n: u64, rng: &mut SmallRng) -> PResult<()> {
    w.cpu(SENDMAIL_NS)?;
    let size = message_size(rng);
    let body = vec![11u8; size as usize];
    let df = w.create_file(mq, &format!("df{n}"), &body)?;
    w.fsync(df)?;
    let tf = w.create_file(mq, &format!("tf{n}"), &[12u8; 600])?;
    w.fsync(tf)?;
    w.rename(mq, &format!("tf{n}"), mq, &format!("qf{n}"))?;
    let u = rng.gen_range(0..boxes.len());
    let (mbox, at) = boxes[u];
    w.write_at(mbox, at, &body)?;
    w.fsync(mbox)?;
    boxes[u].1 = at + size;
    w.unlink(mq, &format!("qf{n}"))?;
    w.unlink(mq, &format!("df{n}"))
}

/// The microbenchmark: `n` files of 1 KiB created in one directory, then removed, each phase
/// timed until everything it did is on disk (a sync, then the disk idle): files a second.
pub fn micro(w: &mut World, n: usize) -> PResult<()> {
    let d = w.mkdir(ROOT_INO, "many")?;
    w.start()?;
    let data = [13u8; 1024];
    let t0 = w.now();
    let w0 = w.writes();
    for i in 0..n {
        w.create_file(d, &format!("f{i}"), &data)?;
    }
    w.sync()?;
    let t1 = w.disk_idle_at().max(w.now());
    w.idle_until(t1)?;
    let w1 = w.writes();
    for i in 0..n {
        w.unlink(d, &format!("f{i}"))?;
    }
    w.sync()?;
    let t2 = w.disk_idle_at().max(w.now());
    w.idle_until(t2)?;
    let w2 = w.writes();
    w.counts.push(("creates/s".into(), n as f64 / ((t1 - t0) as f64 / 1e9)));
    w.counts.push(("writes per create".into(), (w1 - w0) as f64 / n as f64));
    w.counts.push(("writes per remove".into(), (w2 - w1) as f64 / n as f64));
    w.counts.push(("removes/s".into(), n as f64 / ((t2 - t1) as f64 / 1e9)));
    Ok(())
}

/// A task's run, one ordering, on the disk model or on an image file.
pub type Task = fn(&mut World, &Scale, u64) -> PResult<()>;

pub fn run(mut w: World, task: Task, s: &Scale, seed: u64) -> PResult<Outcome> {
    task(&mut w, s, seed)?;
    w.finish()
}
