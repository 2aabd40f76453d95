//! Setup, fsck_ffs's `setup()` and `readsb()`: which superblock a scan works from. The primary,
//! unless it does not decode, does not fit the device, or the group headers disagree with it;
//! then the first superblock copy mkfs wrote (at the start of a group), of which only the
//! geometry is used, or the primary with the inodes per group the headers agree on, whichever
//! scans with the fewest violations (`-b N` names the copy, as fsck_ffs's `-b`). Repair rewrites
//! the primary. Also opens an image with the block size its superblock (or a copy) gives.

use std::collections::BTreeSet;
use std::path::Path;

use super::{FsckError, Result, Scan};
use crate::dev::{BlockDevice, FileDevice};
use crate::format::*;

pub(super) fn read_primary(dev: &dyn BlockDevice) -> Result<Superblock> {
    let mut b = vec![0u8; dev.block_size()];
    dev.read_block(0, &mut b)?;
    Ok(Superblock::decode(&b)?)
}

/// The block sizes a file system may have.
fn block_sizes() -> impl Iterator<Item = u32> {
    (12..=16).map(|s| 1u32 << s).filter(|b| (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(b))
}

/// Opens an image (or block device): reads the superblock with a 4096-byte probe to learn the
/// block size, then opens the device with it. If the primary superblock does not decode, the
/// block size is the one of the first superblock copy found (see `find_copy`).
pub fn open_image(path: &Path, writable: bool) -> Result<FileDevice> {
    open_image_at(path, writable, None)
}

/// `open_image`, taking the block size from the superblock copy at block `at` (fsck -b; `at`
/// counts blocks of the file system's own size, tried for every block size).
pub fn open_image_at(path: &Path, writable: bool, at: Option<u64>) -> Result<FileDevice> {
    let bs = match at {
        Some(n) => {
            let mut found = None;
            for bs in block_sizes() {
                let probe = FileDevice::open(path, bs as usize, false)?;
                if n >= probe.num_blocks() {
                    continue;
                }
                let mut buf = vec![0u8; bs as usize];
                probe.read_block(n, &mut buf)?;
                if Superblock::decode(&buf).is_ok_and(|sb| sb.block_size == bs) {
                    found = Some(bs);
                    break;
                }
            }
            found.ok_or_else(|| FsckError::Geometry(format!("no superblock copy at block {n}")))?
        }
        None => {
            let probe = FileDevice::open(path, MIN_BLOCK_SIZE as usize, false)?;
            match read_primary(&probe) {
                Ok(sb) => sb.block_size,
                Err(e) => {
                    let mut found = None;
                    for bs in block_sizes() {
                        let probe = FileDevice::open(path, bs as usize, false)?;
                        if find_copy(&probe)?.is_some() {
                            found = Some(bs);
                            break;
                        }
                    }
                    found.ok_or(e)?
                }
            }
        }
    };
    Ok(FileDevice::open(path, bs as usize, writable)?)
}

/// Does `sb` fit `dev` (block size, size)?
fn fits(sb: &Superblock, dev: &dyn BlockDevice) -> bool {
    sb.block_size as usize == dev.block_size() && sb.num_blocks <= dev.num_blocks()
}

/// How many group headers agree with the geometry of `sb` (their group's block count and the
/// inodes per group), and how many decode but disagree. Headers that do not decode count in
/// neither.
fn header_votes(dev: &dyn BlockDevice, sb: &Superblock) -> Result<(u32, u32)> {
    let (mut agree, mut disagree) = (0, 0);
    let mut buf = vec![0u8; dev.block_size()];
    for cg in 0..sb.ngroups {
        dev.read_block(sb.cg_header_block(cg), &mut buf)?;
        if let Ok(h) = CgHeader::decode(&buf, cg) {
            let grown = crate::fs::growfs::grown_tail(sb, cg, &h, &buf).is_some();
            if grown || (h.nblocks == sb.cg_blocks(cg) && h.ninodes == sb.inodes_per_group) {
                agree += 1;
            } else {
                disagree += 1;
            }
        }
    }
    Ok((agree, disagree))
}

/// The first superblock copy (mkfs writes one at the first block of every group but the
/// first) that decodes, fits the device, sits where its own geometry puts a copy, and that the
/// group headers it locates agree with. Found by probing every 64th block, since the group size
/// (a multiple of 64) is not known when the primary is lost.
fn find_copy(dev: &dyn BlockDevice) -> Result<Option<(u64, Superblock)>> {
    let mut buf = vec![0u8; dev.block_size()];
    for bno in (64..dev.num_blocks()).step_by(64) {
        dev.read_block(bno, &mut buf)?;
        let Ok(sb) = Superblock::decode(&buf) else {
            continue;
        };
        if fits(&sb, dev)
            && bno.is_multiple_of(sb.blocks_per_group as u64)
            && bno / (sb.blocks_per_group as u64) < sb.ngroups as u64
            && matches!(header_votes(dev, &sb)?, (a, 0) if a > 0)
        {
            return Ok(Some((bno, sb)));
        }
    }
    Ok(None)
}

/// The superblock a scan works from, and where it came from.
pub(super) struct SbChoice {
    pub(super) sb: Superblock,
    /// Block 0 as read, rewritten by repair.
    pub(super) raw0: Vec<u8>,
    /// The block of the copy used, if not the primary.
    pub(super) from: Option<u64>,
    /// Why the primary was not used as it is (a `BadSuperblock` finding).
    pub(super) why: Option<String>,
}

impl SbChoice {
    /// Takes the copy at `at` if given; else the primary if it decodes, fits the device and no
    /// group header disagrees with it. Otherwise the candidates are a superblock copy and the
    /// primary with the inodes per group the headers agree on; each is scanned (read only) and
    /// the one with the fewest violations wins, the primary on a tie.
    pub(super) fn choose(dev: &dyn BlockDevice, at: Option<u64>) -> Result<SbChoice> {
        let bs = dev.block_size();
        if bs < SB_SIZE {
            return Err(FsckError::Geometry(format!("device block size {bs}")));
        }
        let mut raw0 = vec![0u8; bs];
        dev.read_block(0, &mut raw0)?;
        if let Some(n) = at {
            if n >= dev.num_blocks() {
                return Err(FsckError::Geometry(format!("block {n} is past the end of the device")));
            }
            let mut b = vec![0u8; bs];
            dev.read_block(n, &mut b)?;
            let sb = Superblock::decode(&b)?;
            check_fits(&sb, dev)?;
            return Ok(SbChoice::copy(sb, raw0, n, "the copy was asked for (-b)".into()));
        }
        let primary = Superblock::decode(&raw0).map_err(FsckError::from).and_then(|sb| {
            check_fits(&sb, dev)?;
            Ok(sb)
        });
        let primary = match primary {
            Ok(sb) => sb,
            Err(e) => {
                return match find_copy(dev)? {
                    Some((n, sb)) => Ok(SbChoice::copy(sb, raw0, n, format!("primary unusable ({e})"))),
                    None => Err(e),
                };
            }
        };
        let (_, disagree) = header_votes(dev, &primary)?;
        let keep = SbChoice { sb: primary.clone(), raw0: raw0.clone(), from: None, why: None };
        if disagree == 0 {
            return Ok(keep);
        }
        let candidates = SbChoice::candidates(dev, &primary, &raw0, disagree)?;
        SbChoice::best(dev, keep, candidates)
    }

    /// What may replace a primary that `disagree` group headers disagree with: the first
    /// superblock copy, and the primary with the inodes per group every decodable header agrees
    /// on.
    fn candidates(dev: &dyn BlockDevice, primary: &Superblock, raw0: &[u8], disagree: u32) -> Result<Vec<SbChoice>> {
        let mut candidates = Vec::new();
        if let Some((n, sb)) = find_copy(dev)? {
            if sb != *primary {
                let why = format!("the group headers disagree with the primary in {disagree} groups");
                candidates.push(SbChoice::copy(sb, raw0.to_vec(), n, why));
            }
        }
        // The inodes per group that every decodable header agrees on.
        let mut ipgs = BTreeSet::new();
        let mut buf = vec![0u8; dev.block_size()];
        for cg in 0..primary.ngroups {
            dev.read_block(primary.cg_header_block(cg), &mut buf)?;
            if let Ok(h) = CgHeader::decode(&buf, cg) {
                ipgs.insert(h.ninodes);
            }
        }
        if let (1, Some(&ipg)) = (ipgs.len(), ipgs.first()) {
            let sb = Superblock { inodes_per_group: ipg, ..primary.clone() };
            if ipg != primary.inodes_per_group
                && sb.check_geometry().is_ok()
                && matches!(header_votes(dev, &sb)?, (a, 0) if a > 0)
            {
                let why = format!(
                    "inodes per group {} disagrees with the group headers ({ipg}), which are taken",
                    primary.inodes_per_group
                );
                candidates.push(SbChoice { sb, raw0: raw0.to_vec(), from: None, why: Some(why) });
            }
        }
        Ok(candidates)
    }

    /// The primary as it is (`keep`) or a candidate, scored by violations; a tie goes to the
    /// inodes per group mkfs gives this size and number of groups by default, the one piece of
    /// evidence left when there is no copy (an image made with one group, before mkfs made two:
    /// one header against the primary), then to the primary.
    fn best(dev: &dyn BlockDevice, keep: SbChoice, candidates: Vec<SbChoice>) -> Result<SbChoice> {
        let default_ipg =
            |sb: &Superblock| Superblock::default_inodes_per_group(sb.block_size, sb.num_blocks, sb.ngroups);
        let score = |c: &SbChoice| -> Result<usize> {
            let v = Scan::run_with(dev, false, c)?.report().violations();
            Ok(2 * v + usize::from(c.sb.inodes_per_group as u64 != default_ipg(&c.sb)))
        };
        let mut best_score = score(&keep)?;
        let mut best = keep;
        for c in candidates {
            let s = score(&c)?;
            if s < best_score {
                (best, best_score) = (c, s);
            }
        }
        Ok(best)
    }

    /// A superblock copy: its geometry only. A copy is written by mkfs and never again, so its
    /// counts, flags and snapshot list are stale: the counts are recomputed by the scan (and
    /// found wrong), the flags cleared, and the list emptied.
    fn copy(sb: Superblock, raw0: Vec<u8>, at: u64, why: String) -> SbChoice {
        let sb = Superblock { flags: 0, snapshots: [0; MAX_SNAPSHOTS], ..sb };
        let why = format!("{why}; geometry taken from the copy at block {at} (its counts are stale)");
        SbChoice { sb, raw0, from: Some(at), why: Some(why) }
    }
}

pub(super) fn check_fits(sb: &Superblock, dev: &dyn BlockDevice) -> Result<()> {
    if sb.block_size as usize != dev.block_size() {
        return Err(FsckError::Geometry(format!(
            "file system block size {} differs from the device's {}",
            sb.block_size,
            dev.block_size()
        )));
    }
    if sb.num_blocks > dev.num_blocks() {
        return Err(FsckError::Geometry(format!(
            "file system has {} blocks but the device only {}",
            sb.num_blocks,
            dev.num_blocks()
        )));
    }
    Ok(())
}
