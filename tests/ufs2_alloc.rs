//! The UFS2 cylinder-group allocator (`sufs_fs::format::ufs2::CgAlloc`) on groups newfs-like
//! tools made: makefs(8) images of six geometries (1, 2, 4 and 8 fragments a block, cluster
//! summaries of 2 to 16, a short last group) and the image FreeBSD made (check hashes).
//!
//! A property test drives random allocations, extensions and frees of blocks, fragments and
//! inodes against a model of what was handed out, and checks after every step that the group's
//! summaries are what its maps give, that only the fragments or inode of the step changed, and
//! FreeBSD's choices (the smallest free run that fits, the preferred block or inode, extension
//! in place exactly when the next fragments are free). A scenario writes changed groups back
//! with the superblock's totals and the summary area, and `sufs fsck -n` finds exactly the
//! leaks of what was allocated and not referenced: the maps and summaries the allocator keeps
//! are what fsck recomputes.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use proptest::prelude::*;

mod common;

use common::sufs;
use common::ufs2::{have_makefs, image, makefs_with};
use sufs_fs::format::ufs2::*;

/// An image and its superblock, found where FreeBSD looks (`loc`, in bytes).
struct Image {
    name: String,
    bytes: Vec<u8>,
    loc: u64,
    sb: Superblock,
}

impl Image {
    fn new(name: &str, bytes: Vec<u8>) -> Image {
        let (loc, sb) = Superblock::search(|off, buf| bytes.read_exact_at(buf, off)).expect("a UFS2 superblock");
        Image { name: name.into(), bytes, loc, sb }
    }

    fn cg(&self, c: u32) -> Cg {
        let off = self.sb.fsb_offset(self.sb.cgtod(c)) as usize;
        Cg::decode(&self.bytes[off..off + self.sb.fs_cgsize as usize], &self.sb, c, true).expect("group decodes")
    }
}

/// A makefs image of a small tree with `opts`, `size` long.
fn makefs_image(opts: &str, size: &str) -> Image {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("small"), b"a few bytes\n").unwrap();
    std::fs::write(src.join("sub/larger"), vec![7u8; 10_000]).unwrap();
    let out = dir.path().join("img");
    makefs_with(&src, &out, opts, size);
    Image::new(opts, std::fs::read(&out).unwrap())
}

/// Groups of 128 to 1,024 fragments, so that a test fills them.
const GEOMETRIES: [(&str, &str); 6] = [
    ("bsize=4096,fsize=512,maxbpcg=256,density=8192", "8m"),
    // A short last group: 108 of 256 fragments.
    ("bsize=4096,fsize=1024,maxbpcg=256,density=8192", "8300k"),
    ("bsize=8192,fsize=4096,maxbpcg=128,density=8192", "8m"),
    ("bsize=4096,fsize=4096,maxbpcg=128,density=8192", "8m"),
    ("bsize=16384,fsize=2048,maxbpcg=256,density=8192", "8m"),
    ("bsize=32768,fsize=4096,maxbpcg=256,density=8192", "8m"),
];

/// The FreeBSD image, and the makefs images when makefs is installed.
fn images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let mut v = vec![Image::new("FreeBSD", image().to_vec())];
        if have_makefs() {
            v.extend(GEOMETRIES.iter().map(|(opts, size)| makefs_image(opts, size)));
        } else {
            eprintln!("SKIPPED the makefs geometries: makefs(8) is not installed (apt-get install makefs)");
        }
        v
    })
}

/// The group's bytes without its rotors and `cg_initediblk`: what freeing everything that was
/// allocated must give back.
fn maps_and_counts(sb: &Superblock, g: &Cg) -> Vec<u8> {
    let mut g = g.clone();
    (g.hdr.cg_rotor, g.hdr.cg_frotor, g.hdr.cg_irotor, g.hdr.cg_initediblk) = (0, 0, 0, 0);
    g.encode(sb)
}

/// The group's header against its maps, as fsck's pass 5 compares them, and the superblock's
/// totals moved by what the header moved.
fn check_summaries(sb: &Superblock, g: &Cg, start: (Csum, CsumTotal)) -> Result<(), TestCaseError> {
    let m = g.map_counts();
    let cs = g.hdr.cg_cs;
    prop_assert_eq!((cs.cs_nbfree as u32, cs.cs_nffree as u32, cs.cs_nifree as u32), (m.nbfree, m.nffree, m.nifree));
    prop_assert_eq!(g.hdr.cg_frsum, m.frsum);
    if sb.fs_contigsumsize > 0 {
        prop_assert_eq!(&g.clustersum()[1..], &m.clustersum[1..]);
        for b in 0..g.hdr.cg_ndblk / sb.fs_frag as u32 {
            prop_assert_eq!(g.cluster_free(b), Some(g.block_free(b)), "cluster bit of block {}", b);
        }
    }
    let (cs0, t0) = start;
    let t = sb.fs_cstotal;
    prop_assert_eq!(t.cs_nbfree - t0.cs_nbfree, (cs.cs_nbfree - cs0.cs_nbfree) as i64);
    prop_assert_eq!(t.cs_nffree - t0.cs_nffree, (cs.cs_nffree - cs0.cs_nffree) as i64);
    prop_assert_eq!(t.cs_nifree - t0.cs_nifree, (cs.cs_nifree - cs0.cs_nifree) as i64);
    prop_assert_eq!(t.cs_ndir - t0.cs_ndir, (cs.cs_ndir - cs0.cs_ndir) as i64);
    Ok(())
}

/// One step of the property test. Indexes pick among what the model holds (modulo its size);
/// preferences are any fragment of the file system (modulo its size) or inode number.
#[derive(Debug, Clone)]
enum Op {
    Block(Option<u32>),
    Frags(u32, Option<u32>),
    Extend(usize, u32),
    Free(usize),
    /// Frees the last fragment of a held run.
    FreeTail(usize),
    /// Frees a fragment that is free: refused.
    FreeFree(u32),
    Inode(Option<u32>, bool),
    FreeInode(usize),
    FreeFreeInode(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let pref = proptest::option::of(any::<u32>());
    prop_oneof![
        3 => pref.clone().prop_map(Op::Block),
        5 => (1u32..8, pref.clone()).prop_map(|(n, p)| Op::Frags(n, p)),
        3 => (any::<usize>(), 1u32..8).prop_map(|(i, n)| Op::Extend(i, n)),
        4 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::FreeTail),
        1 => any::<u32>().prop_map(Op::FreeFree),
        2 => (pref, any::<bool>()).prop_map(|(p, d)| Op::Inode(p, d)),
        1 => any::<usize>().prop_map(Op::FreeInode),
        1 => any::<u32>().prop_map(Op::FreeFreeInode),
    ]
}

/// The group's fragments (group-relative) whose free bit differs between `a` and `b`.
fn changed_frags(a: &Cg, b: &Cg) -> Vec<u32> {
    (0..a.hdr.cg_ndblk).filter(|&f| a.frag_free(f) != b.frag_free(f)).collect()
}

fn changed_inodes(a: &Cg, b: &Cg, ipg: u32) -> Vec<u32> {
    (0..ipg).filter(|&i| a.inode_used(i) != b.inode_used(i)).collect()
}

/// The length of the free run starting at group fragment `f` in `g`, if one starts there.
fn free_run_at(g: &Cg, f: u32, frag: u32) -> Option<u32> {
    let block = f / frag * frag;
    let end = (block + frag).min(g.hdr.cg_ndblk);
    if f > block && g.frag_free(f - 1) {
        return None;
    }
    Some((f..end).take_while(|&i| g.frag_free(i)).count() as u32)
}

/// Runs `ops` on group `c` of `img` against the model, then frees what is held and expects the
/// group back as it was.
fn run(img: &Image, c: u32, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut sb = img.sb.clone();
    let mut g = img.cg(c);
    let (frag, ipg, ndblk) = (sb.fs_frag as u32, sb.fs_ipg, g.hdr.cg_ndblk);
    let (base, first_ino) = (sb.cgbase(c), c * ipg);
    let orig = maps_and_counts(&sb, &g);
    let start = (g.hdr.cg_cs, sb.fs_cstotal);
    let mut held: Vec<(i64, u32)> = Vec::new();
    let mut inodes: Vec<(u32, bool)> = Vec::new();
    let size = sb.fs_size;
    let pref_of = |p: &Option<u32>| p.map(|p| p as i64 % size);
    for op in ops {
        let before = g.clone();
        let total = sb.fs_cstotal;
        let frsum = before.hdr.cg_frsum;
        let cs = before.hdr.cg_cs;
        let mut a = CgAlloc::new(&mut sb, &mut g).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // What the step should have changed: fragments, inodes (group-relative).
        let (mut want_frags, mut want_inodes): (Vec<u32>, Vec<u32>) = (vec![], vec![]);
        let mut refused = false;
        match op {
            Op::Block(p) => match a.alloc_block(pref_of(p)) {
                Ok(fsb) => {
                    let f = (fsb - base) as u32;
                    prop_assert!(fsb >= base && f.is_multiple_of(frag) && f + frag <= ndblk, "block {}", fsb);
                    if let Some(p) = pref_of(p).filter(|&p| img.sb.dtog(p) == c as i64) {
                        let pb = (p - base) as u32 / frag * frag;
                        if pb + frag <= ndblk && (pb..pb + frag).all(|i| before.frag_free(i)) {
                            prop_assert_eq!(f, pb, "the preferred block was free");
                        }
                    }
                    want_frags = (f..f + frag).collect();
                    held.push((fsb, frag));
                }
                Err(e) => {
                    prop_assert_eq!(e, CgAllocError::NoSpace { cg: c, what: "block" });
                    prop_assert_eq!(cs.cs_nbfree, 0);
                    refused = true;
                }
            },
            Op::Frags(n, p) => {
                let n = if frag > 1 { 1 + (n - 1) % (frag - 1) } else { *n };
                match a.alloc_frags(n, pref_of(p)) {
                    Ok(fsb) => {
                        let f = (fsb - base) as u32;
                        prop_assert!(n < frag && fsb >= base && f % frag + n <= frag && f + n <= ndblk);
                        // The smallest free run of at least n the summary promised, else a
                        // whole free block.
                        let fits = (n..frag).find(|&s| frsum[s as usize] > 0).unwrap_or(frag);
                        prop_assert_eq!(free_run_at(&before, f, frag), Some(fits), "run at {}", f);
                        want_frags = (f..f + n).collect();
                        held.push((fsb, n));
                    }
                    Err(CgAllocError::BadAddress { .. }) if frag == 1 => refused = true,
                    Err(e) => {
                        prop_assert_eq!(e, CgAllocError::NoSpace { cg: c, what: "fragments" });
                        prop_assert!(cs.cs_nbfree == 0 && frsum[n as usize..].iter().all(|&r| r == 0));
                        refused = true;
                    }
                }
            }
            Op::Extend(i, add) if !held.is_empty() => {
                let k = i % held.len();
                let (fsb, old) = held[k];
                let (f, new) = ((fsb - base) as u32, old + add);
                let got = a.extend_frags(fsb, old, new);
                if new > frag {
                    prop_assert!(matches!(got, Err(CgAllocError::BadAddress { .. })), "{:?}", got);
                    refused = true;
                } else {
                    let room = f % frag + new <= frag && f + new <= ndblk;
                    let can = room && (f + old..f + new).all(|i| before.frag_free(i));
                    prop_assert_eq!(got, Ok(can), "extend {}+{} to {}", fsb, old, new);
                    if can {
                        want_frags = (f + old..f + new).collect();
                        held[k].1 = new;
                    } else {
                        refused = true;
                    }
                }
            }
            Op::Free(i) if !held.is_empty() => {
                let (fsb, n) = held.swap_remove(i % held.len());
                prop_assert_eq!(a.free(fsb, n), Ok(()));
                let f = (fsb - base) as u32;
                want_frags = (f..f + n).collect();
            }
            Op::FreeTail(i) if !held.is_empty() => {
                let k = i % held.len();
                let (fsb, n) = held[k];
                prop_assert_eq!(a.free(fsb + n as i64 - 1, 1), Ok(()));
                want_frags = vec![(fsb - base) as u32 + n - 1];
                if n == 1 {
                    held.swap_remove(k);
                } else {
                    held[k].1 = n - 1;
                }
            }
            Op::FreeFree(x) => {
                let f = x % ndblk;
                if before.frag_free(f) {
                    prop_assert_eq!(a.free(base + f as i64, 1), Err(CgAllocError::DoubleFree { fsb: base + f as i64 }));
                }
                refused = true;
            }
            Op::Inode(p, dir) => match a.alloc_inode(*p, *dir) {
                Ok(got) => {
                    let i = got.ino.wrapping_sub(first_ino);
                    prop_assert!(i < ipg && !before.inode_used(i), "inode {}", got.ino);
                    if let Some(p) = p.map(|p| p % ipg).filter(|&p| !before.inode_used(p)) {
                        prop_assert_eq!(i, p, "the preferred inode was free");
                    }
                    // Initialized ahead a block of inodes at a time, until a block past the
                    // inode is (or the group is all initialized).
                    let (was, inopb) = (before.hdr.cg_initediblk, img.sb.fs_inopb);
                    let inited =
                        if i + inopb <= was { was } else { (was + (i + inopb - was).div_ceil(inopb) * inopb).min(ipg) };
                    prop_assert_eq!(a.cg().hdr.cg_initediblk, inited);
                    prop_assert!(i < inited);
                    prop_assert_eq!(got.initialize, first_ino + was..first_ino + inited);
                    want_inodes = vec![i];
                    inodes.push((got.ino, *dir));
                }
                Err(e) => {
                    prop_assert_eq!(e, CgAllocError::NoSpace { cg: c, what: "inode" });
                    prop_assert_eq!(cs.cs_nifree, 0);
                    refused = true;
                }
            },
            Op::FreeInode(i) if !inodes.is_empty() => {
                let (ino, dir) = inodes.swap_remove(i % inodes.len());
                prop_assert_eq!(a.free_inode(ino, dir), Ok(()));
                want_inodes = vec![ino - first_ino];
            }
            Op::FreeFreeInode(x) => {
                let ino = first_ino + x % ipg;
                if !before.inode_used(ino - first_ino) {
                    prop_assert_eq!(a.free_inode(ino, false), Err(CgAllocError::InodeDoubleFree { ino }));
                }
                refused = true;
            }
            _ => refused = true,
        }

        if refused {
            prop_assert!(g.encode(&sb) == before.encode(&sb), "{:?} was refused but changed the group", op);
            prop_assert_eq!(sb.fs_cstotal, total);
        }
        prop_assert_eq!(changed_frags(&before, &g), want_frags, "{:?}", op);
        prop_assert_eq!(changed_inodes(&before, &g, ipg), want_inodes, "{:?}", op);
        check_summaries(&sb, &g, start)?;
    }
    let mut a = CgAlloc::new(&mut sb, &mut g).map_err(|e| TestCaseError::fail(e.to_string()))?;
    for (fsb, n) in held {
        prop_assert_eq!(a.free(fsb, n), Ok(()));
    }
    for (ino, dir) in inodes {
        prop_assert_eq!(a.free_inode(ino, dir), Ok(()));
    }

    prop_assert!(maps_and_counts(&sb, &g) == orig, "{}: everything freed, the group is not as it was", img.name);
    prop_assert_eq!(sb.fs_cstotal, start.1);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Random allocations and frees on group 0, 1 or the last of each image keep the group's
    /// summaries exact and hand out nothing twice.
    #[test]
    fn random_allocations_and_frees_keep_the_group_exact(
        which in any::<usize>(),
        group in 0u32..3,
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let imgs = images();
        let img = &imgs[which % imgs.len()];
        let c = [0, 1, img.sb.fs_ncg - 1][group as usize];
        run(img, c, &ops)?;
    }
}

/// Maximal runs of consecutive numbers in a sorted set: (first, last).
fn runs_of(set: &BTreeSet<i64>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &x in set {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == x => *last = x,
            _ => out.push((x, x)),
        }
    }
    out
}

/// Allocates and frees on `groups` of `img` through the allocator, writes the groups,
/// the summary area and the superblock back, and runs `sufs fsck -n`: it must report exactly
/// the fragments and inodes held and not referenced (and, for directories allocated, the
/// group's directory count above the directories it finds), all allowed, nothing else.
fn leaks_are_all_fsck_finds(img: &Image, groups: [u32; 2]) {
    let mut sb = img.sb.clone();
    let mut bytes = img.bytes.clone();
    let frag = sb.fs_frag as u32;
    let mut want = BTreeSet::new();
    for c in groups {
        let mut g = img.cg(c);
        let ndir = g.hdr.cg_cs.cs_ndir;
        let (mut frags, mut inos) = (BTreeSet::new(), BTreeSet::new());
        let mut hold = |fsb: i64, n: u32| frags.extend(fsb..fsb + n as i64);
        let mut init = Vec::new();
        let mut a = CgAlloc::new(&mut sb, &mut g).unwrap();
        let blocks: Vec<i64> = (0..4).map(|_| a.alloc_block(None).unwrap()).collect();
        // Runs of every size, one extended in place, one freed a fragment at a time.
        let runs: Vec<(i64, u32)> = (1..frag).map(|n| (a.alloc_frags(n, None).unwrap(), n)).collect();
        for (i, &(fsb, n)) in runs.iter().enumerate() {
            match i % 3 {
                0 => {
                    let grown = if n + 1 < frag && a.extend_frags(fsb, n, n + 1).unwrap() { n + 1 } else { n };
                    hold(fsb, grown);
                }
                1 => (0..n).for_each(|k| a.free(fsb + k as i64, 1).unwrap()),
                _ => hold(fsb, n),
            }
        }
        a.free(blocks[0], frag).unwrap();
        hold(blocks[1], frag);
        hold(blocks[2], frag);
        // A block split by hand: its first fragment kept, the rest freed one by one (the block
        // does not re-form), then the first fragment extended in place over the next.
        if frag > 1 {
            (1..frag).for_each(|k| a.free(blocks[3] + k as i64, 1).unwrap());
            assert_eq!(a.extend_frags(blocks[3], 1, 2), Ok(true));
            hold(blocks[3], 2);
        } else {
            hold(blocks[3], 1);
        }
        // Inodes: a file, a directory, one freed; the last preferred just below the
        // initialized inodes, which initializes ahead where the group has more.
        let inited = a.cg().hdr.cg_initediblk;
        let f1 = a.alloc_inode(None, false).unwrap();
        let d = a.alloc_inode(None, true).unwrap();
        let f2 = a.alloc_inode(None, false).unwrap();
        let f3 = a.alloc_inode(Some(inited - 1), false).unwrap();
        a.free_inode(f2.ino, false).unwrap();
        for got in [&f1, &d, &f3] {
            inos.insert(got.ino as i64);
            init.push(got.initialize.clone());
        }

        for r in init.into_iter().filter(|r| !r.is_empty()) {
            let off = sb.ino_offset(r.start) as usize;
            bytes[off..off + r.len() * UFS2_DINODE_SIZE].fill(0);
        }
        let off = sb.fsb_offset(sb.cgtod(c)) as usize;
        bytes[off..off + sb.fs_cgsize as usize].copy_from_slice(&g.encode(&sb));
        let cs_at = sb.fsb_offset(sb.fs_csaddr) as usize + c as usize * 16;
        g.hdr.cg_cs.put(&mut bytes, cs_at);
        for (first, last) in runs_of(&frags) {
            want.insert(format!("Allowed: UNALLOCATED FRAG(S) {first}-{last} MARKED USED"));
        }
        for (first, last) in runs_of(&inos) {
            want.insert(format!("Allowed: UNALLOCATED INODE(S) {first}-{last} MARKED USED"));
        }
        let counted = g.hdr.cg_cs.cs_ndir;
        assert_eq!(counted, ndir + 1);
        want.insert(format!("Allowed: CG {c}: SUMMARY INFORMATION BAD: ndir {counted} SHOULD BE {ndir}"));
    }
    let sbb = sb.encode();
    bytes[img.loc as usize..img.loc as usize + sbb.len()].copy_from_slice(&sbb);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img");
    std::fs::write(&p, &bytes).unwrap();
    let out = sufs(&["fsck", "-n", p.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let found: BTreeSet<String> =
        text.lines().filter(|l| l.starts_with("Allowed: ") || l.starts_with("Violation: ")).map(String::from).collect();
    assert_eq!(found, want, "{}:\n{text}{}", img.name, String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains(&format!("{} findings ({} allowed, 0 violations)", want.len(), want.len())), "{text}");
}

#[test]
fn fsck_finds_only_the_leaks_of_what_was_allocated_freebsd() {
    // Groups 0 and 1 have no free block left; 3 is the short last group.
    leaks_are_all_fsck_finds(&images()[0], [2, 3]);
}

#[test]
fn fsck_finds_only_the_leaks_of_what_was_allocated_makefs() {
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return;
    }
    for opts in ["bsize=32768,fsize=4096,maxbpcg=256,density=8192", "bsize=4096,fsize=512,maxbpcg=1024,density=8192"] {
        leaks_are_all_fsck_finds(&makefs_image(opts, "8m"), [0, 1]);
    }
}
