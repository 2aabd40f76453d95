//! What FUSE itself costs, in `sufs bench peers`: the FUSE requests each phase took, read from
//! the control channel of sufs's mount and of the floor's (`sufs bench floor-serve`) as each
//! phase starts; and two tables, each peer's time over the floor's on the same transport, and
//! the requests per operation of each phase, by opcode.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::{floor_peer, quantile, sufs_peer, PeersReport, Phase, Run};

/// Requests served by opcode, as a mount's statistics name them (`fuse_messages`).
pub(super) type Counts = BTreeMap<String, u64>;

/// The forgets' extra counts (inodes and lookups given back): not messages.
fn is_message(opcode: &str) -> bool {
    !opcode.starts_with("forget_")
}

/// The requests a mount has served so far, from its control channel's `stats` request (None if
/// it does not answer: counted then by workload only, from the unmount's statistics).
pub(super) fn sample(ctl: &Path) -> Option<Counts> {
    let mut c = UnixStream::connect(ctl).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    c.write_all(b"{\"op\":\"stats\"}\n").ok()?;
    let mut line = String::new();
    BufReader::new(c).read_line(&mut line).ok()?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    let counts = v["ok"]["stats"]["fuse_messages"].as_object()?;
    Some(counts.iter().filter_map(|(k, n)| Some((k.clone(), n.as_u64()?))).collect())
}

/// Gives each timed phase (not a latency, not one run alongside another) the requests served
/// during it, from `samples`, taken as each phase started and once after the last. A workload
/// whose phases and samples do not pair up that way (or a mount that did not answer) gets none.
pub(super) fn per_phase(phases: &mut [Phase], samples: &[Option<Counts>]) {
    let mut timed: Vec<&mut Phase> = phases.iter_mut().filter(|p| !p.latency && !p.alongside).collect();
    let taken: Vec<&Counts> = samples.iter().flatten().collect();
    if taken.len() != samples.len() || taken.len() != timed.len() + 1 {
        return;
    }
    for (ph, pair) in timed.iter_mut().zip(taken.windows(2)) {
        let (before, after) = (pair[0], pair[1]);
        let delta: Counts = after
            .iter()
            .map(|(k, n)| (k.clone(), n.saturating_sub(before.get(k).copied().unwrap_or(0))))
            .filter(|(_, n)| *n > 0)
            .collect();
        ph.messages = Some(delta);
    }
}

impl Phase {
    /// FUSE requests per operation of the phase, if counted.
    pub fn messages_per_op(&self) -> Option<f64> {
        let m = self.messages.as_ref()?;
        let total: u64 = m.iter().filter(|(k, _)| is_message(k)).map(|(_, n)| n).sum();
        Some(total as f64 / self.ops.max(1) as f64)
    }
}

/// `a`'s total time over `b`'s. Of several rounds in common, round by round (a round's two runs
/// go one after the other, so each pair saw the machine alike): the median of the rounds'
/// ratios (of an even count the lower) and their range, "1.21x (1.10-1.35)". Else the ratio of
/// the totals (each phase's median time).
fn total_over(a: &Run, b: &Run) -> String {
    let mut ratios: Vec<f64> = a
        .round_totals
        .iter()
        .filter_map(|&(k, x)| b.round_totals.iter().find(|&&(j, _)| j == k).map(|&(_, y)| x / y.max(1e-12)))
        .collect();
    if ratios.len() < 2 {
        return format!("{:.2}x", a.total_secs() / b.total_secs().max(1e-12));
    }
    ratios.sort_by(f64::total_cmp);
    let [lo, mid, hi] = [0.0, 0.5, 1.0].map(|q| quantile(&ratios, q));
    format!("{mid:.2}x ({lo:.2}-{hi:.2})")
}

/// A phase's time per operation (phases stopped by a time limit did different numbers).
fn per_op(p: &Phase) -> f64 {
    p.secs / p.ops.max(1) as f64
}

impl PeersReport {
    /// The columns of `floor_ratios`: (peer, floor peer) for every sufs peer (not under the
    /// writeback cache) on each floor peer's transport, and kernel ext4 against each floor.
    fn floor_pairs(&self) -> Vec<(&str, &str)> {
        let peers = self.peers();
        let mut pairs = Vec::new();
        for f in peers.iter().copied() {
            let Some(t) = floor_peer(f) else { continue };
            let same = |p: &&str| sufs_peer(p).is_some_and(|s| s.transport == t && !s.writeback);
            pairs.extend(peers.iter().copied().filter(same).map(|p| (p, f)));
            if peers.contains(&"ext4-kernel") {
                pairs.push(("ext4-kernel", f));
            }
        }
        pairs
    }

    /// Markdown: each peer's time per operation over the floor's on the same transport, per
    /// phase, and its total time over the floor's where both did the same work (1: FUSE's own
    /// cost is all there is; kernel ext4 below 1: FUSE costs more than ext4's whole work), and
    /// a FUSE peer's server CPU seconds over the floor's ("server CPU").
    pub fn floor_ratios(&self) -> String {
        let mut s = String::new();
        let pairs = self.floor_pairs();
        if pairs.is_empty() {
            return s;
        }
        let head: Vec<String> = pairs.iter().map(|(p, f)| format!("{} / {f}", p.trim_start_matches("sufs-"))).collect();
        let _ = writeln!(s, "| workload | phase | {} |", head.join(" | "));
        let _ = writeln!(s, "| --- | --- |{}", " ---: |".repeat(pairs.len()));
        for w in self.workloads() {
            let Some(first) = pairs.iter().find_map(|(_, f)| self.run(w, f)) else { continue };
            let phase = |p: &str, i: usize| self.run(w, p).and_then(|r| r.phases.get(i));
            for (i, ph) in first.phases.iter().enumerate().filter(|(_, p)| p.name != "unmount" && !p.latency) {
                let cells: Vec<String> = pairs
                    .iter()
                    .map(|(p, f)| match (phase(p, i), phase(f, i)) {
                        (Some(a), Some(b)) => format!("{:.2}x", per_op(a) / per_op(b).max(1e-12)),
                        _ => "-".into(),
                    })
                    .collect();
                let _ = writeln!(s, "| {w} | {} | {} |", ph.name, cells.join(" | "));
            }
            let same = |a: &Run, b: &Run| a.phases.iter().zip(&b.phases).all(|(x, y)| x.ops == y.ops);
            let cells: Vec<String> = pairs
                .iter()
                .map(|(p, f)| match (self.run(w, p), self.run(w, f)) {
                    (Some(a), Some(b)) if same(a, b) => total_over(a, b),
                    _ => "-".into(),
                })
                .collect();
            let _ = writeln!(s, "| {w} | **total** | {} |", cells.join(" | "));
            // The servers' own CPU time over the same work: sufs's work a request against the
            // least any server does, without the wait for the client and the disk.
            let cpu = |p: &str| self.run(w, p).and_then(|r| r.writes.as_ref()?.server_cpu_secs);
            let cells: Vec<String> = pairs
                .iter()
                .map(|(p, f)| match (self.run(w, p), self.run(w, f), cpu(p), cpu(f)) {
                    (Some(a), Some(b), Some(x), Some(y)) if same(a, b) => format!("{:.2}x", x / y.max(1e-12)),
                    _ => "-".into(),
                })
                .collect();
            if cells.iter().any(|c| c != "-") {
                let _ = writeln!(s, "| {w} | server CPU | {} |", cells.join(" | "));
            }
        }
        s
    }

    /// Markdown: the FUSE requests per operation of each phase, for every peer that counts them
    /// (sufs's and the floor's), each with its most frequent opcodes.
    pub fn messages_table(&self) -> String {
        let mut s = String::new();
        let peers: Vec<&str> = self
            .peers()
            .into_iter()
            .filter(|p| self.runs.iter().any(|r| r.peer == *p && r.phases.iter().any(|q| q.messages.is_some())))
            .collect();
        if peers.is_empty() {
            return s;
        }
        let _ = writeln!(s, "| workload | phase | {} |", peers.join(" | "));
        let _ = writeln!(s, "| --- | --- |{}", " --- |".repeat(peers.len()));
        for w in self.workloads() {
            let Some(first) = peers.iter().find_map(|p| self.run(w, p)) else { continue };
            for (i, ph) in first.phases.iter().enumerate() {
                let cells: Vec<String> = peers
                    .iter()
                    .map(|p| self.run(w, p).and_then(|r| r.phases.get(i)).map(per_op_cell).unwrap_or_default())
                    .collect();
                if cells.iter().any(|c| !c.is_empty()) {
                    let _ = writeln!(s, "| {w} | {} | {} |", ph.name, cells.join(" | "));
                }
            }
        }
        s
    }
}

/// "4.00: getattr 1.00, lookup 1.00, create 1.00, release 1.00": requests per operation, then
/// the four most frequent opcodes, per operation (empty where not counted).
fn per_op_cell(p: &Phase) -> String {
    let (Some(m), Some(total)) = (p.messages.as_ref(), p.messages_per_op()) else { return String::new() };
    let ops = p.ops.max(1) as f64;
    let mut by: Vec<(&String, &u64)> = m.iter().filter(|(k, _)| is_message(k)).collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let top: Vec<String> = by.iter().take(4).map(|(k, n)| format!("{k} {:.2}", **n as f64 / ops)).collect();
    format!("{total:.2}: {}", top.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_peers::PeersOptions;

    fn counts(v: &[(&str, u64)]) -> Counts {
        v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn the_floors_total_is_the_rounds_median_ratio_and_range() {
        let run = |peer: &str, totals: &[(usize, f64)]| Run {
            workload: "files".into(),
            peer: peer.into(),
            phases: vec![Phase::new("create", 10, totals.iter().map(|t| t.1).fold(0.0, f64::max))],
            writes: None,
            mount_options: Vec::new(),
            round_totals: totals.to_vec(),
            round: 0,
        };
        // Round 1 of the floor failed: rounds 0, 2 and 3 are paired, 1.5x, 1.2x and 1.3x.
        let me = run("sufs-softdep-uring", &[(0, 3.0), (1, 9.0), (2, 2.4), (3, 2.6)]);
        let floor = run("floor-uring", &[(0, 2.0), (2, 2.0), (3, 2.0)]);
        assert_eq!(total_over(&me, &floor), "1.30x (1.20-1.50)");
        // Of two, the lower; of one round in common or none, the totals' ratio (9.0 over 2.0).
        assert_eq!(total_over(&me, &run("floor-uring", &[(0, 2.0), (2, 2.0)])), "1.20x (1.20-1.50)");
        assert_eq!(total_over(&me, &run("floor-uring", &[(2, 2.0)])), "4.50x");
        assert_eq!(total_over(&me, &run("floor-uring", &[(7, 2.0)])), "4.50x");
        let report = PeersReport { options: PeersOptions::default(), runs: vec![me, floor], skipped: Vec::new() };
        let table = report.floor_ratios();
        assert!(table.contains("| files | **total** | 1.30x (1.20-1.50) |"), "{table}");
    }

    #[test]
    fn phases_take_the_requests_between_their_samples() {
        let mut phases =
            vec![Phase::new("create", 10, 1.0), Phase::latency("create: worst", 0.1), Phase::new("remove", 10, 1.0)];
        let samples = vec![
            Some(counts(&[("lookup", 5)])),
            Some(counts(&[("lookup", 15), ("create", 10)])),
            Some(counts(&[("lookup", 15), ("create", 10), ("unlink", 10), ("forget", 10), ("forget_nodes", 10)])),
        ];
        per_phase(&mut phases, &samples);
        assert_eq!(phases[0].messages, Some(counts(&[("lookup", 10), ("create", 10)])));
        assert_eq!(phases[0].messages_per_op(), Some(2.0));
        assert_eq!(phases[1].messages, None, "a latency is no phase of its own");
        assert_eq!(phases[2].messages_per_op(), Some(2.0), "forget_nodes is no message");
        assert_eq!(per_op_cell(&phases[0]), "2.00: create 1.00, lookup 1.00");
        // One sample short, or one not answered: nothing is guessed.
        let mut again = vec![Phase::new("create", 10, 1.0), Phase::new("remove", 10, 1.0)];
        per_phase(&mut again, &samples[..2]);
        assert!(again.iter().all(|p| p.messages.is_none()));
        per_phase(&mut again, &[samples[0].clone(), None, samples[2].clone()]);
        assert!(again.iter().all(|p| p.messages.is_none()));
    }
}
