//! growfs: grows an unmounted, clean file system to the end of its (already larger) device, as
//! FreeBSD's growfs does. The last group is extended up to `blocks_per_group` and whole new
//! groups are added after it, initialised as mkfs initialises its groups; the geometry per group
//! (`blocks_per_group`, `inodes_per_group`) does not change.
//!
//! The order makes every crash state a consistent file system, the old or the new one:
//! 1. the primary superblock, old geometry, marked unclean (a crash from here on leaves an
//!    image `sufs mount` refuses until `sufs fsck -y`, which finds nothing to fix but step 3);
//! 2. the new groups, past the old end (nothing reads them yet): header and a superblock copy
//!    with the new geometry (in a version 2 image their inode tables are left to the allocator,
//!    as mkfs leaves them; a version 1 image's are written zeroed);
//! 3. the extended last group's header (its new blocks free): against the old superblock this is
//!    the one mixed state, which fsck reports as `Allowed` (an interrupted growfs) and repairs;
//! 4. the primary superblock with the new geometry and counts and the flags it had: the commit;
//! 5. the old groups' superblock copies with the new geometry (only their geometry is used).

use thiserror::Error;

use crate::alloc::init_cg_block;
use crate::dev::{BlockDevice, DevError, WriteKind, WriteReq};
use crate::format::*;

/// Why growfs did not grow the file system.
#[derive(Debug, Error)]
pub enum GrowError {
    /// The file system or the request does not allow it (nothing was written).
    #[error("{0}")]
    Refused(String),
    /// The device failed (the file system is the old or the new one, see the module's order).
    #[error("I/O error: {0}")]
    Io(#[from] DevError),
    /// What was read does not decode.
    #[error("{0}")]
    Format(#[from] FormatError),
}

pub type GrowResult<T> = Result<T, GrowError>;

/// What growing changes.
#[derive(Debug, Clone)]
pub struct Growth {
    /// The superblock before.
    pub old: Superblock,
    /// The superblock after (the counts filled in by `grow`).
    pub new: Superblock,
    /// The old last group's blocks before and after, when it grows.
    pub extended: Option<(u32, u32)>,
}

/// Plans growing `old` to `blocks` blocks: the new geometry, the largest that fits in
/// `blocks` whose last group can hold its inode table (a tail too short for one is left out).
pub fn plan(old: &Superblock, blocks: u64) -> GrowResult<Growth> {
    let refuse = |s: String| Err(GrowError::Refused(s));
    if blocks <= old.num_blocks {
        return refuse(format!("{blocks} blocks is not larger than the file system's {}", old.num_blocks));
    }
    let bpg = old.blocks_per_group as u64;
    let meta = 2 + old.inode_table_blocks() as u64;
    let mut n = blocks;
    if n - (n - 1) / bpg * bpg <= meta {
        n = (n - 1) / bpg * bpg; // the tail cannot hold a group: leave it out
    }
    if n <= old.num_blocks {
        return refuse(format!(
            "{blocks} blocks adds too little: a new group needs more than {meta} blocks (its metadata)"
        ));
    }
    let mut new = old.clone();
    new.num_blocks = n;
    new.ngroups = n.div_ceil(bpg) as u32;
    if let Err(e) = new.check_geometry() {
        return refuse(format!("the grown geometry is refused: {e}"));
    }
    let last = old.ngroups - 1;
    let (before, after) = (old.cg_blocks(last), new.cg_blocks(last));
    Ok(Growth { old: old.clone(), new, extended: (after > before).then_some((before, after)) })
}

/// Reads and checks the primary superblock: clean, not marked for fsck, no snapshots.
pub fn check_growable(dev: &dyn BlockDevice) -> GrowResult<Superblock> {
    let mut buf = vec![0u8; dev.block_size()];
    dev.read_block(0, &mut buf)?;
    let sb = Superblock::decode(&buf)?;
    let refuse = |s: &str| Err(GrowError::Refused(s.into()));
    if sb.flags & SB_NEEDS_FSCK != 0 {
        return refuse("the file system is marked as needing fsck: run `sufs fsck -y` first");
    }
    if sb.flags & SB_CLEAN == 0 {
        return refuse("the file system was not unmounted cleanly: run `sufs fsck -y` first");
    }
    if sb.snapshots.iter().any(|&s| s != 0) {
        return refuse("the file system has snapshots (their size is the file system's): delete them first");
    }
    Ok(sb)
}

/// Grows the file system on `dev` to the device's end. `zeroed`: the blocks past the old end
/// read as zeros (a file just extended), so a version 1 image's new inode tables need no
/// writing (a version 2 image's are never written).
pub fn grow(dev: &dyn BlockDevice, zeroed: bool) -> GrowResult<Growth> {
    let old = check_growable(dev)?;
    let mut g = plan(&old, dev.num_blocks())?;
    write_sb(dev, 0, &Superblock { flags: 0, ..old.clone() })?;
    let (mut free_b, mut free_i) = (old.free_blocks, old.free_inodes);
    let bar = crate::progress::Bar::new("growfs", (g.new.ngroups - old.ngroups) as u64).with_message("new groups");
    for cg in old.ngroups..g.new.ngroups {
        let (b, i) = init_group(dev, &g.new, cg, zeroed || g.new.lazy_inodes())?;
        (free_b, free_i) = (free_b + b, free_i + i);
        bar.inc(1);
    }
    drop(bar);
    if let Some((before, after)) = g.extended {
        extend_last(dev, &g.new, old.ngroups - 1, before, after)?;
        free_b += (after - before) as u64;
    }
    g.new.free_blocks = free_b;
    g.new.free_inodes = free_i;
    assert!(free_b <= g.new.data_blocks() && free_i <= g.new.total_inodes(), "the counts fit the new size");
    write_sb(dev, 0, &g.new)?;
    for cg in 1..old.ngroups {
        write_sb(dev, g.new.cg_start(cg), &g.new)?;
    }
    Ok(g)
}

/// Writes `sb` at block `bno` (the rest of the block zero, as mkfs leaves it).
fn write_sb(dev: &dyn BlockDevice, bno: u64, sb: &Superblock) -> GrowResult<()> {
    let mut buf = vec![0u8; dev.block_size()];
    sb.encode(&mut buf);
    dev.write_batch(&[WriteReq { bno, data: &buf }], WriteKind::Sync)?;
    Ok(())
}

/// Initialises new group `cg` as mkfs does (`skip_table`: its inode table is not written);
/// returns its free blocks and inodes.
fn init_group(dev: &dyn BlockDevice, sb: &Superblock, cg: u32, skip_table: bool) -> GrowResult<(u64, u64)> {
    assert!(cg > 0, "group 0 is never new");
    let mut buf = vec![0u8; dev.block_size()];
    init_cg_block(sb, cg, &mut buf);
    let h = CgHeader::decode(&buf, cg)?;
    if !skip_table {
        let zero = vec![0u8; dev.block_size()];
        let itable = sb.cg_itable_block(cg);
        let reqs: Vec<WriteReq> =
            (0..sb.inode_table_blocks() as u64).map(|i| WriteReq { bno: itable + i, data: &zero }).collect();
        for chunk in reqs.chunks(256) {
            dev.write_batch(chunk, WriteKind::Sync)?;
        }
    }
    let mut copy = vec![0u8; dev.block_size()];
    sb.encode(&mut copy);
    let reqs = [WriteReq { bno: sb.cg_start(cg), data: &copy }, WriteReq { bno: sb.cg_header_block(cg), data: &buf }];
    dev.write_batch(&reqs, WriteKind::Sync)?;
    Ok((h.free_blocks as u64, h.free_inodes as u64))
}

/// Extends group `cg`'s header from `before` to `after` blocks, the new ones free.
fn extend_last(dev: &dyn BlockDevice, sb: &Superblock, cg: u32, before: u32, after: u32) -> GrowResult<()> {
    let mut buf = vec![0u8; dev.block_size()];
    dev.read_block(sb.cg_header_block(cg), &mut buf)?;
    let mut h = CgHeader::decode(&buf, cg)?;
    if h.nblocks != before || h.ninodes != sb.inodes_per_group {
        return Err(GrowError::Refused(format!("group {cg}'s header disagrees with the superblock: run `sufs fsck`")));
    }
    // Bits past a group's end are zero and mean nothing (SPEC-sufs-format.md): made zero, the new blocks free.
    let map = &mut buf[CgHeader::block_map_offset(sb.inodes_per_group)..];
    (before..after).for_each(|i| bit_set(map, i as usize, false));
    h.nblocks = after;
    h.free_blocks += after - before;
    h.encode(&mut buf);
    CgHeader::seal(&mut buf);
    dev.write_batch(&[WriteReq { bno: sb.cg_header_block(cg), data: &buf }], WriteKind::Sync)?;
    Ok(())
}

/// An interrupted growfs's header: group `cg` is the last and its header `h` (its block `buf`)
/// says more blocks than `sb` gives it, at most a whole group, all of them free. Returns the
/// extra blocks.
pub fn grown_tail(sb: &Superblock, cg: u32, h: &CgHeader, buf: &[u8]) -> Option<u32> {
    let have = sb.cg_blocks(cg);
    // Bounded first: the bitmap holds `blocks_per_group` bits (the geometry's check).
    if cg + 1 != sb.ngroups || h.ninodes != sb.inodes_per_group || h.nblocks <= have || h.nblocks > sb.blocks_per_group
    {
        return None;
    }
    let extra = h.nblocks - have;
    let map = &buf[CgHeader::block_map_offset(sb.inodes_per_group)..];
    let free = (have..h.nblocks).all(|i| !bit_get(map, i as usize));
    (free && h.free_blocks >= extra).then_some(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_extend_the_last_group_and_leave_out_a_short_tail() {
        // A 2-group image as mkfs makes it: whole groups of half its size are added.
        let two = Superblock::geometry(4096, 16384, None).unwrap();
        assert_eq!((two.ngroups, two.blocks_per_group), (2, 8192));
        let g = plan(&two, 20000).unwrap();
        assert_eq!((g.new.ngroups, g.extended, g.new.num_blocks), (3, None, 20000));
        let g = plan(&Superblock::geometry(4096, 15000, None).unwrap(), 20000).unwrap();
        assert_eq!((g.new.ngroups, g.extended), (3, Some((7448, 7552))));
        // One group, as mkfs made a small image before it made two.
        let old = Superblock::geometry_groups(4096, 16384, None, 1).unwrap();
        assert_eq!(old.ngroups, 1);
        let g = plan(&old, 20000).unwrap();
        assert_eq!((g.new.ngroups, g.extended), (1, Some((16384, 20000))));
        let bpg = old.blocks_per_group as u64;
        // One block past a whole group is too few for a group: left out.
        let g = plan(&old, bpg + 1).unwrap();
        assert_eq!((g.new.num_blocks, g.new.ngroups), (bpg, 1));
        let g = plan(&old, 3 * bpg + 1000).unwrap();
        assert_eq!((g.new.ngroups, g.new.num_blocks), (4, 3 * bpg + 1000));
        assert!(matches!(plan(&old, 16384), Err(GrowError::Refused(_))));
        assert!(matches!(plan(&old, 100), Err(GrowError::Refused(_))));
    }
}
