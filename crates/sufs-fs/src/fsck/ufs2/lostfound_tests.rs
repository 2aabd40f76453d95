//! Repair's reconnections past lost+found's first fragment: lost+found grows as fsck_ffs's
//! `expanddir` grows it (its fragment moved to a whole block, then a block at a time through
//! the direct blocks and the single indirect block), and a file is cleared, and said so, only
//! when no whole block is free.

use std::sync::Arc;

use super::*;
use crate::clock::SimClock;
use crate::dev::{read_bytes, write_bytes, BlockDevice, MemDevice, WriteKind};
use crate::format::ufs2::newfs::mem_image_of;
use crate::format::ROOT_INO;
use crate::fs::{Fs, MountOptions, Ordering};

fn dev_len(dev: &MemDevice) -> u64 {
    dev.num_blocks() * dev.addr_unit() as u64
}

fn superblock(dev: &MemDevice) -> Superblock {
    Superblock::search(|off, buf| read_bytes(dev, off, buf)).unwrap().1
}

/// File `ino`'s `len` bytes, naming it.
fn content(ino: u32, len: usize) -> Vec<u8> {
    format!("file {ino:>7}\n").into_bytes().into_iter().cycle().take(len).collect()
}

/// A newfs image of `size` bytes of `bsize`/`fsize` with unreferenced files written into it
/// inode by inode (no name, as a crash that lost their directories' blocks leaves them), from
/// the last group down: `n` files of `len` bytes in one fragment each, or with `whole` as many
/// files as there are free blocks, a block each (the image then has no whole block free).
/// Each group's maps say what it holds. Returns the image and the files' inodes, sorted.
fn orphans((size, bsize, fsize): (u64, usize, usize), n: usize, whole: bool) -> (Arc<MemDevice>, Vec<u32>) {
    let dev = mem_image_of(size, bsize, fsize);
    let sb = superblock(&dev);
    let (frag, ipg) = (sb.fs_frag as u32, sb.fs_ipg);
    let (len, step) = if whole { (bsize, frag) } else { (fsize / 2 + 10, 1) };
    let mut lost = Vec::new();
    for c in (0..sb.fs_ncg).rev() {
        let at = sb.fsb_offset(sb.cgtod(c));
        let mut buf = vec![0u8; sb.fs_cgsize as usize];
        read_bytes(&*dev, at, &mut buf).unwrap();
        let mut g = Cg::decode(&buf, &sb, c, true).unwrap();
        // Every inode of the group initialized (the device reads zeros where newfs wrote none).
        g.hdr.cg_initediblk = ipg;
        let base = sb.cgbase(c);
        // The free map marks metadata in use: what it shows free is data space.
        let free = |g: &Cg, f: u32| (f..f + step).all(|k| k < g.hdr.cg_ndblk && g.frag_free(k));
        let mut frags = (0..g.hdr.cg_ndblk).step_by(step as usize);
        let mut inodes = (0..ipg).filter(|&i| c * ipg + i > ROOT_INO + 1);
        while whole || lost.len() < n {
            let Some(f) = frags.by_ref().find(|&f| free(&g, f)) else { break };
            let Some(i) = inodes.by_ref().find(|&i| !g.inode_used(i)) else { break };
            let ino = c * ipg + i;
            let mut d = Dinode::zeroed();
            d.di_mode = IFREG | 0o644;
            d.di_nlink = 1;
            d.di_size = len as u64;
            d.di_blocks = sb.fragroundup(len as u64) / DEV_BSIZE as u64;
            d.di_blksize = bsize as u32;
            d.di_gen = ino;
            d.di_db[0] = base + f as i64;
            write_bytes(&*dev, sb.ino_offset(ino), &d.encode_for(&sb), WriteKind::Sync).unwrap();
            write_bytes(&*dev, sb.fsb_offset(d.di_db[0]), &content(ino, len), WriteKind::Sync).unwrap();
            g.set_inode_used(i, true);
            g.hdr.cg_cs.cs_nifree -= 1;
            g.set_frags_free(f, step, false);
            lost.push(ino);
        }
        g.recount();
        write_bytes(&*dev, at, &g.encode(&sb), WriteKind::Sync).unwrap();
    }
    assert!(whole || lost.len() == n, "room for {} files", lost.len());
    lost.sort_unstable();
    (dev, lost)
}

/// Repairs with `-y`; the checker then finds nothing. Returns what repair did.
fn repair_clean(dev: &Arc<MemDevice>) -> Outcome {
    let d = &**dev as &dyn BlockDevice;
    let r = check(d, dev_len(dev), &Options::default()).unwrap();
    let unref = r.findings.iter().filter(|f| matches!(f, Finding::UnrefFile { .. })).count();
    assert!(unref > 0, "no unreferenced file");
    let out = repair(d, dev_len(dev), &Options::default(), RepairMode::Yes).unwrap();
    assert!(out.refused.is_none(), "{:?}", out.refused);
    let left: Vec<String> = out.after.iter().flat_map(|a| &a.findings).map(|f| f.to_string()).take(5).collect();
    assert!(left.is_empty(), "left after repair: {left:?}");
    let again = check(d, dev_len(dev), &Options::default()).unwrap();
    let found: Vec<String> = again.findings.iter().map(|f| f.to_string()).take(5).collect();
    assert!(found.is_empty(), "a second check finds {found:?}");
    out
}

/// The inodes lost+found names `#INO`, sorted, each read through a mount and checked to hold
/// its bytes; and lost+found's size.
fn reconnected(dev: &Arc<MemDevice>) -> (Vec<u32>, u64) {
    let opts = MountOptions { ordering: Ordering::Async, cache_blocks: 1024, readonly: true };
    let mut fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
    let (lf, d) = fs.lookup(ROOT_INO, b"lost+found").unwrap();
    let mut found = Vec::new();
    for e in fs.readdir(lf, 0, 100_000).unwrap().iter().filter(|e| e.name.starts_with(b"#")) {
        assert_eq!(e.name, format!("#{}", e.ino).into_bytes());
        let size = fs.getattr(e.ino).unwrap().size as usize;
        assert_eq!(fs.read(e.ino, 0, size + 1).unwrap(), content(e.ino, size), "I={}", e.ino);
        found.push(e.ino);
    }
    fs.unmount().unwrap();
    found.sort_unstable();
    (found, d.size)
}

/// `n` unreferenced files on `bsize`/`fsize`, all reconnected by a repair that grows
/// lost+found (made by the repair) to at least `blocks` blocks.
fn all_reconnected(bsize: usize, fsize: usize, n: usize, blocks: u64) {
    let (dev, lost) = orphans((64 << 20, bsize, fsize), n, false);
    let out = repair_clean(&dev);
    assert!(!out.done.iter().any(|l| l.contains("CLEARED") || l.contains("FAILED")), "a file cleared");
    assert!(out.done.iter().any(|l| l == "NO SPACE LEFT IN /lost+found (EXPANDED)"));
    let (found, size) = reconnected(&dev);
    let missing: Vec<&u32> = lost.iter().filter(|i| found.binary_search(i).is_err()).take(5).collect();
    assert!(found == lost, "{} of {} reconnected; missing {missing:?}...", found.len(), lost.len());
    assert!(size >= blocks * bsize as u64, "lost+found of {size} bytes");
}

#[test]
fn lost_found_grows_from_a_fragment_to_blocks_on_newfs_defaults() {
    // 3,000 names of 16 bytes: past lost+found's first fragment (4 KiB), and past the whole
    // block it is moved to (2,048 names).
    all_reconnected(32768, 4096, 3000, 2);
}

#[test]
fn lost_found_grows_into_its_indirect_block_on_small_blocks() {
    // 10,000 names: past the 12 direct blocks of 4 KiB (3,072 names).
    all_reconnected(4096, 512, 10_000, UFS_NDADDR as u64 + 1);
}

#[test]
fn no_free_block_clears_what_finds_no_room_and_says_so() {
    let (dev, lost) = orphans((8 << 20, 4096, 512), 0, true);
    let r = check(&*dev as &dyn BlockDevice, dev_len(&dev), &Options::default()).unwrap();
    assert_eq!(r.nbfree, 0, "a whole block is free");
    let out = repair_clean(&dev);
    let (kept, _) = reconnected(&dev);
    let sorry = out.done.iter().filter(|l| l.ends_with("(SORRY. NO SPACE IN lost+found DIRECTORY; CLEARED)")).count();
    assert!(!kept.is_empty() && sorry > 0, "{} kept, {sorry} cleared", kept.len());
    assert_eq!(kept.len() + sorry, lost.len(), "{:?}", &out.done[..out.done.len().min(5)]);
    assert!(out.done.iter().any(|l| l == "NO SPACE LEFT IN /lost+found (EXPANSION FAILED)"));
}
