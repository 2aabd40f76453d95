//! Property test: random sequences of namespace and data operations, run against the file system
//! and against a simple in-memory model of a file tree, compared after every step, after
//! remounts, and checked by fsck at the end.

mod common;

use common::tree::{self, ops, Model, Node, R};
use common::*;
use proptest::prelude::*;
use sufs_fs::fs::{Fs, Ordering};

const POOL: [&str; 10] = ["d0", "d1", "d0/d2", "f0", "f1", "d0/f2", "d1/f3", "d0/d2/f4", "d1/d5", "d0/d2/d6"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Mkdir(usize),
    Write(usize, u32, u16, u8),
    Truncate(usize, u32),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize),
    Link(usize, usize),
    Remount,
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..POOL.len();
    prop_oneof![
        3 => p.clone().prop_map(Op::Create),
        3 => p.clone().prop_map(Op::Mkdir),
        4 => (p.clone(), 0u32..200_000, 1u16..12_000, any::<u8>()).prop_map(|(a, o, l, s)| Op::Write(a, o, l, s)),
        1 => (p.clone(), 0u32..200_000).prop_map(|(a, s)| Op::Truncate(a, s)),
        2 => p.clone().prop_map(Op::Unlink),
        2 => p.clone().prop_map(Op::Rmdir),
        3 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => Just(Op::Remount),
    ]
}

/// The model's side of an operation.
fn apply(m: &mut Model, op: &Op) -> R<()> {
    match *op {
        Op::Create(a) => m.add(POOL[a], Node::File(Vec::new())),
        Op::Mkdir(a) => m.add(POOL[a], Node::Dir),
        Op::Write(a, off, len, seed) => m.write(POOL[a], off as usize, &pattern(seed as u64, len as usize)),
        Op::Truncate(a, size) => m.truncate(POOL[a], size as usize),
        Op::Unlink(a) => m.unlink(POOL[a]),
        Op::Rmdir(a) => m.rmdir(POOL[a]),
        Op::Rename(a, b) => m.rename(POOL[a], POOL[b]),
        Op::Link(a, b) => m.link(POOL[a], POOL[b]),
        Op::Remount => Ok(()),
    }
}

/// The file system's side of an operation.
fn fs_apply(fs: &mut Fs, op: &Op) -> R<()> {
    match *op {
        Op::Create(a) => ops::create(fs, POOL[a]),
        Op::Mkdir(a) => ops::mkdir(fs, POOL[a]),
        Op::Write(a, off, len, seed) => ops::write(fs, POOL[a], off as u64, len as usize, seed as u64),
        Op::Truncate(a, size) => ops::truncate(fs, POOL[a], size as u64),
        Op::Unlink(a) => ops::unlink(fs, POOL[a]),
        Op::Rmdir(a) => ops::rmdir(fs, POOL[a]),
        Op::Rename(a, b) => ops::rename(fs, POOL[a], POOL[b]),
        Op::Link(a, b) => ops::link(fs, POOL[a], POOL[b]),
        Op::Remount => Ok(()),
    }
}

fn compare(fs: &mut Fs, m: &Model) {
    tree::compare(fs, m, "")
}

fn run(ordering: Ordering, ops: &[Op]) {
    let dev = new_image(4096);
    let mut fs = mount(&dev, ordering, 64);
    let mut m = Model::default();
    for op in ops {
        if let Op::Remount = op {
            fs.unmount().unwrap();
            fs = mount(&dev, ordering, 64);
        }
        let want = apply(&mut m, op);
        let got = fs_apply(&mut fs, op);
        assert_eq!(got, want, "{op:?}");
        compare(&mut fs, &m);
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
    let mut fs = mount(&dev, ordering, 64);
    compare(&mut fs, &m);
    fs.unmount().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn sync_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Ordering::Sync, &ops);
    }

    #[test]
    fn softdep_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Ordering::Softdep, &ops);
    }

    #[test]
    fn async_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Ordering::Async, &ops);
    }
}

/// A fixed sequence in which every operation succeeds, so the comparison is known to be
/// exercised (and a model that accepted nothing could not pass).
#[test]
fn a_known_sequence_succeeds_step_by_step() {
    let ops = [
        Op::Mkdir(0),
        Op::Mkdir(2),
        Op::Create(7),
        Op::Write(7, 70_000, 5000, 1),
        Op::Link(7, 3),
        Op::Remount,
        Op::Rename(0, 1),
        Op::Truncate(3, 1000),
        Op::Unlink(3),
        Op::Create(6),
        Op::Rename(6, 8),
    ];
    for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, 64);
        let mut m = Model::default();
        for op in &ops {
            if let Op::Remount = op {
                fs.unmount().unwrap();
                fs = mount(&dev, ordering, 64);
            }
            assert_eq!(apply(&mut m, op), Ok(()), "model {op:?}");
            assert_eq!(fs_apply(&mut fs, op), Ok(()), "fs {op:?}");
            compare(&mut fs, &m);
        }
        assert_eq!(m.paths.len(), 4, "{:?}", m.paths.keys().collect::<Vec<_>>());
        fs.unmount().unwrap();
    }
}
