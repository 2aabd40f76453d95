//! Damaged UFS2 images: a deterministic mutator (tests/common/mutate.rs) changes one thing in a
//! copy of an image built by a fixed workload, and fsck must cope with every mutant: check, preen
//! and repair finish (an operational error is an answer, a panic is not); repair either refuses
//! (findings it does not repair, as fsck_ffs asks before each) and leaves the image
//! byte-identical, or converges (a check after it finds nothing); preen either refuses and leaves
//! the image byte-identical, or keeps every file whose inode, directory entry and blocks the
//! mutation did not touch, as it was. Repair (-y) refuses only for the kinds `NOT_REPAIRED`
//! names, and keeps every such file too (a directory's files maybe in lost+found).
//! SUFS_MUTANTS=N runs N mutants (default 300), SUFS_MUTANT_SEED picks the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod common;

use common::mutate::{mutants, now_metadata, read_layout, shared_blocks, workload_image, Mutant};
use sufs_fs::dev::MemDevice;
use sufs_fs::format::{ROOT_INO, S_IFDIR, S_IFMT};
use sufs_fs::fsck::{self, Class, Report};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn show(r: &Report) -> String {
    r.findings.iter().map(|f| format!("  {:?}: {f}", f.class())).collect::<Vec<_>>().join("\n")
}

/// The variant name of a finding.
fn kind(f: &fsck::Finding) -> String {
    let d = format!("{f:?}");
    d.split([' ', '{']).next().unwrap_or("").to_string()
}

/// The kinds of finding for which repair (-y) may refuse, each with its reason.
const NOT_REPAIRED: &[(&str, &str)] = &[
    // Repair rebuilds a group that does not decode from the superblock, but not most of them:
    // then the superblock is the likelier culprit, and a copy (-b) the way.
    ("BadCg", "most groups bad: the superblock is suspect"),
];

#[test]
fn mutants_are_checked_preened_and_repaired() {
    let base = workload_image();
    let image = base.blocks();
    let layout = read_layout(&*base).expect("the workload's image reads");
    assert!(layout.nodes.len() > 250, "{} nodes", layout.nodes.len());
    let n = env("SUFS_MUTANTS", 300) as usize;
    let seed = env("SUFS_MUTANT_SEED", 0x5eed_f5c4);
    eprintln!("damaged_image: {n} mutants, seed {seed:#x} (SUFS_MUTANTS, SUFS_MUTANT_SEED)");
    let list = mutants(&*base, &layout, seed, n);
    assert_eq!(list.len(), n);
    let mut outcomes: BTreeMap<&str, u32> = BTreeMap::new();
    let mut kinds: BTreeMap<(String, Class), u32> = BTreeMap::new();
    let fork = || Arc::new(MemDevice::from_blocks(4096, image.clone()));
    let show_one = std::env::var("SUFS_MUTANT_SHOW").ok().and_then(|v| v.parse::<usize>().ok());
    let keep_going = std::env::var_os("SUFS_MUTANT_KEEP_GOING").is_some();
    let mut failed = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let mut one = || {
            let ctx = format!("mutant {i} (seed {seed:#x}): {}", m.desc);
            let dev = fork();
            m.apply(&*dev);
            let damaged = dev.blocks();
            let checked = fsck::check(&*dev);
            match &checked {
                Err(_) => *outcomes.entry("check: operational error").or_default() += 1,
                Ok(r) if r.is_clean() => *outcomes.entry("check: clean").or_default() += 1,
                Ok(r) if r.violations() == 0 => *outcomes.entry("check: allowed only").or_default() += 1,
                Ok(_) => *outcomes.entry("check: violations").or_default() += 1,
            }
            if let Ok(r) = &checked {
                for f in &r.findings {
                    *kinds.entry((kind(f), f.class())).or_default() += 1;
                }
            }
            assert!(dev.blocks() == damaged, "{ctx}: check wrote");

            // Repair converges, or refuses untouched.
            let rdev = Arc::new(MemDevice::from_blocks(4096, damaged.clone()));
            let repaired = fsck::repair(&*rdev);
            if show_one == Some(i) {
                eprintln!("{ctx}:\n{:#?}", repaired.as_ref().map(|r| (&r.before.findings, &r.refused, &r.done)));
            }
            match repaired {
                Ok(r) if r.refused.is_some() => {
                    *outcomes.entry("repair: refused").or_default() += 1;
                    assert!(rdev.blocks() == damaged, "{ctx}: a refused repair wrote");
                    let named = r.before.findings.iter().any(|f| NOT_REPAIRED.iter().any(|k| k.0 == kind(f)));
                    assert!(named, "{ctx}: repair refused: {}\n{}", r.refused.unwrap_or_default(), show(&r.before));
                }
                Ok(r) => {
                    *outcomes.entry("repair: repaired").or_default() += 1;
                    // fsck_ffs clears every owner of a block claimed twice when it cannot tell
                    // which pointer the damage made, and a file holding what the superblock now
                    // says is metadata: such a file may go.
                    let dup = r.before.findings.iter().any(|f| kind(f) == "DupBlock");
                    let mut lost_with = if dup { shared_blocks(&*dev).unwrap_or_default() } else { BTreeSet::new() };
                    lost_with.extend(now_metadata(&*dev, &layout));
                    keeps_untouched(&format!("{ctx}: repair"), m, &layout, &rdev, &lost_with, false);
                    let after = r.after.unwrap_or_default();
                    assert!(after.is_clean(), "{ctx}: repair left\n{}", show(&after));
                    let c = fsck::check(&*rdev).unwrap_or_else(|e| panic!("{ctx}: check after repair: {e}"));
                    assert!(
                        c.is_clean(),
                        "{ctx}: found by\n{}\nnot clean after repair:\n{}",
                        show(checked.as_ref().unwrap()),
                        show(&c)
                    );
                }
                Err(e) => assert!(checked.is_err(), "{ctx}: check runs but repair fails: {e}"),
            }

            // Preen refuses untouched, or keeps every file the mutation did not touch.
            let pdev = Arc::new(MemDevice::from_blocks(4096, damaged.clone()));
            match fsck::preen(&*pdev) {
                Ok(r) if r.refused.is_some() => {
                    *outcomes.entry("preen: refused").or_default() += 1;
                    assert!(pdev.blocks() == damaged, "{ctx}: a refused preen wrote");
                }
                Ok(r) => {
                    *outcomes
                        .entry(if r.done.is_empty() { "preen: nothing to do" } else { "preen: repaired" })
                        .or_default() += 1;
                    let after = r.after.unwrap_or_default();
                    assert!(after.violations() == 0, "{ctx}: preen left\n{}", show(&after));
                    // Preen clears an unreferenced directory and the files named only in it (a
                    // soft-updates crash leaves one whose name never reached the disk), so a
                    // tree below a node the mutation touched may go.
                    keeps_untouched(&format!("{ctx}: preen"), m, &layout, &pdev, &BTreeSet::new(), true);
                }
                Err(_) => {
                    *outcomes.entry("preen: operational error").or_default() += 1;
                    assert!(pdev.blocks() == damaged, "{ctx}: preen failed after writing");
                }
            }
        };
        // SUFS_MUTANT_KEEP_GOING: every mutant runs, the failures are counted at the end.
        if keep_going {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut one)).is_err() {
                failed.push(i);
            }
        } else {
            one();
        }
    }
    assert!(failed.is_empty(), "{} mutants failed: {failed:?}", failed.len());
    eprintln!("damaged_image: {n} mutants:");
    for (what, count) in &outcomes {
        eprintln!("  {what}: {count}");
    }
    eprintln!("damaged_image: findings by kind:");
    for ((k, class), count) in &kinds {
        eprintln!("  {k} ({class:?}): {count}");
    }
    // The mutator reaches both classes, and fsck says something of most mutants.
    assert!(kinds.keys().any(|k| k.1 == Class::Violation) && kinds.keys().any(|k| k.1 == Class::Allowed));
    assert!(outcomes.get("check: clean").copied().unwrap_or(0) < n as u32 / 2, "{outcomes:?}");
}

/// Every node of the workload's tree that `m` did not touch, nor holds a block of `lost_with`,
/// is still named somewhere (maybe in lost+found, which `read_layout` follows as any
/// directory), with its type, and for files their size and bytes; with `trees`, but for a
/// node each of whose paths runs through a node the mutation touched.
fn keeps_untouched(
    ctx: &str,
    m: &Mutant,
    before: &common::mutate::Layout,
    dev: &MemDevice,
    lost_with: &BTreeSet<u64>,
    trees: bool,
) {
    let after = read_layout(dev).unwrap_or_else(|e| panic!("{ctx}: the repaired image does not read: {e}"));
    let by_path: BTreeMap<&str, &common::mutate::Node> =
        before.nodes.values().flat_map(|n| n.paths.iter().map(move |p| (p.as_str(), n))).collect();
    let below_touched = |n: &common::mutate::Node| {
        n.paths.iter().all(|p| {
            let mut ups = p.char_indices().filter(|&(i, c)| c == '/' && i > 0).map(|(i, _)| &p[..i]);
            ups.any(|up| by_path.get(up).is_some_and(|u| m.touches_node(u)))
        })
    };
    for (ino, n) in &before.nodes {
        // The root, and /.snap (newfs's), whose link counts a repair may change.
        if *ino == ROOT_INO
            || *ino == ROOT_INO + 1
            || m.touches_node(n)
            || n.blocks.iter().any(|b| lost_with.contains(b))
            || (trees && below_touched(n))
        {
            continue;
        }
        let Some(a) = after.nodes.get(ino) else {
            panic!("{ctx} lost {:?} (inode {ino}), which the mutation did not touch", n.paths);
        };
        assert_eq!(a.mode, n.mode, "{ctx}: {:?} changed type", n.paths);
        if n.mode & S_IFMT != S_IFDIR {
            assert_eq!((a.size, a.hash), (n.size, n.hash), "{ctx}: {:?} changed", n.paths);
        }
    }
}

/// Several changes at once (each mutant with the `SUFS_STACK - 1` after it, default 4): repair
/// (-y) panics on none, refuses only for the kinds `NOT_REPAIRED` names, and leaves an image
/// that checks clean. SUFS_MUTANTS and SUFS_MUTANT_SEED as above.
#[test]
fn stacked_mutants_are_repaired() {
    let base = workload_image();
    let image = base.blocks();
    let layout = read_layout(&*base).expect("the workload's image reads");
    let n = env("SUFS_MUTANTS", 300) as usize;
    let seed = env("SUFS_MUTANT_SEED", 0x5eed_f5c4);
    let stack = env("SUFS_STACK", 4) as usize;
    let list = mutants(&*base, &layout, seed, n + stack);
    let mut outcomes: BTreeMap<&str, u32> = BTreeMap::new();
    for i in 0..n {
        let ms = &list[i..i + stack];
        let ctx = format!(
            "mutants {i}..{} (seed {seed:#x}): {:?}",
            i + stack,
            ms.iter().map(|m| &m.desc).collect::<Vec<_>>()
        );
        let dev = Arc::new(MemDevice::from_blocks(4096, image.clone()));
        for m in ms {
            m.apply(&*dev);
        }
        let damaged = dev.blocks();
        match fsck::repair(&*dev) {
            Err(_) => *outcomes.entry("operational error").or_default() += 1,
            Ok(r) if r.refused.is_some() => {
                *outcomes.entry("refused").or_default() += 1;
                assert!(dev.blocks() == damaged, "{ctx}: a refused repair wrote");
                let named = r.before.findings.iter().any(|f| NOT_REPAIRED.iter().any(|k| k.0 == kind(f)));
                assert!(named, "{ctx}: repair refused: {}\n{}", r.refused.unwrap_or_default(), show(&r.before));
            }
            Ok(r) => {
                *outcomes.entry("repaired").or_default() += 1;
                let c = fsck::check(&*dev).unwrap_or_else(|e| panic!("{ctx}: check after repair: {e}"));
                assert!(c.is_clean(), "{ctx}: found by\n{}\nnot clean after repair:\n{}", show(&r.before), show(&c));
                read_layout(&*dev).unwrap_or_else(|e| panic!("{ctx}: the repaired image does not read: {e}"));
            }
        }
    }
    eprintln!("damaged_image: {n} stacks of {stack}: {outcomes:?}");
}
