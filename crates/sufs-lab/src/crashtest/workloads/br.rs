//! The Block Register workload: reservations made, grown, punched, shortened and freed among
//! files competing for the same blocks.

use rand::Rng;

use sufs_fs::fs::FsResult;

use super::super::work::Work;
use super::{pick, Workload};

/// Block Register reservations made, grown (some near a hint), punched, shortened and freed, among
/// files created, grown and removed that compete for the same blocks.
#[derive(Default)]
pub(super) struct BrWork {
    live: Vec<String>,
    files: Vec<String>,
    n: usize,
}

impl BrWork {
    fn some_block(w: &mut Work, name: &str) -> FsResult<Option<u64>> {
        let runs = w.fs.brquery(name.as_bytes(), 0, u64::MAX)?;
        let frag = w.fs.sb.frag();
        let blocks: Vec<u64> = runs.iter().flat_map(|r| r.blocks(frag)).collect();
        Ok(pick(w.rng, &blocks))
    }
}

impl Workload for BrWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/b")?;
        w.create("/b/f0", 30000)?;
        w.br("brreserve r0 40".into(), "r0", |fs| fs.brreserve(b"r0", 40, None).map(|_| ()))?;
        self.live.push("r0".into());
        self.files.push("/b/f0".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let hint = if w.rng.gen_bool(0.3) { Some(w.rng.gen_range(0..w.fs.sb.num_blocks)) } else { None };
        match w.rng.gen_range(0..12) {
            0..=1 => {
                let name = format!("r{n}");
                let k = w.rng.gen_range(1..40);
                w.br(format!("brreserve {name} {k} {hint:?}"), &name, |fs| {
                    fs.brreserve(name.as_bytes(), k, hint).map(|_| ())
                })?;
                self.live.push(name);
            }
            2..=4 => {
                let Some(name) = pick(w.rng, &self.live) else { return Ok(true) };
                let k = w.rng.gen_range(1..30);
                w.br(format!("brexpand {name} {k} {hint:?}"), &name, |fs| {
                    fs.brexpand(name.as_bytes(), k, hint).map(|_| ())
                })?;
            }
            5..=6 => {
                let Some(name) = pick(w.rng, &self.live) else { return Ok(true) };
                if let Some(b) = Self::some_block(w, &name)? {
                    w.br(format!("brtruncate {name} {b}"), &name, |fs| fs.brtruncate(name.as_bytes(), b).map(|_| ()))?;
                }
            }
            7 => {
                let Some(name) = pick(w.rng, &self.live) else { return Ok(true) };
                w.br(format!("brfree {name}"), &name, |fs| fs.brfree(name.as_bytes()).map(|_| ()))?;
                self.live.retain(|x| *x != name);
            }
            8..=9 => {
                let p = format!("/b/f{n}");
                let len = w.rng.gen_range(0..60000);
                w.create(&p, len)?;
                self.files.push(p);
            }
            10 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    let off = w.rng.gen_range(0..70000);
                    w.write(&p, off, 8000)?;
                }
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.files) {
                    w.unlink(&p)?;
                    self.files.retain(|x| *x != p);
                }
            }
        }
        Ok(true)
    }
}
