//! Setup, fsck_ffs's `setup()` and `readsb()`: the superblock the check works from. The
//! standard search (`SBLOCKSEARCH`, a superblock where its `fs_sblockloc` says it is), or with
//! `-b` the copy at a given sector (a group's `cgsblock`). A check-hash mismatch is a finding,
//! not the end: the superblock is read without it, as fsck_ffs does. The file system must fit
//! its device, so that every block number `Fs::check_blkno` accepts can be read.

use super::{Finding, Options};
use crate::format::ufs2::*;

/// Where the superblock was read, the superblock, and what setup found.
pub(super) fn read_superblock<D: ReadAt + ?Sized>(
    dev: &D,
    dev_len: u64,
    opts: &Options,
) -> Result<(u64, Superblock, Vec<Finding>), Ufs2Error> {
    let mut findings = Vec::new();
    let read = |off: u64, buf: &mut [u8]| dev.read_exact_at(buf, off);
    let (at, sb) = match opts.alternate {
        Some(sector) => {
            let at = sector
                .checked_mul(DEV_BSIZE as u64)
                .filter(|&a| a.saturating_add(SBLOCKSIZE as u64) <= dev_len)
                .ok_or_else(|| Ufs2Error::Geometry(format!("sector {sector} is past the device")))?;
            let mut buf = vec![0u8; SBLOCKSIZE];
            read(at, &mut buf)?;
            let sb = decode_noting_hash(&buf, &mut findings)?;
            if let Err(e) = Superblock::search(read) {
                findings.push(Finding::BadPrimary { what: e.to_string() });
            }
            (at, sb)
        }
        None => match Superblock::search(read) {
            Ok(found) => found,
            Err(Ufs2Error::CheckHash { .. }) => {
                // Where the search stopped: the first standard location holding a UFS2
                // superblock that says it is there.
                let mut buf = vec![0u8; SBLOCKSIZE];
                let mut found = None;
                for loc in SBLOCKSEARCH {
                    if read(loc, &mut buf).is_ok()
                        && i32::get(&buf, 1372) == FS_UFS2_MAGIC
                        && i64::get(&buf, 1000) == loc as i64
                    {
                        found = Some((loc, decode_noting_hash(&buf, &mut findings)?));
                        break;
                    }
                }
                found.ok_or(Ufs2Error::NoSuperblock)?
            }
            Err(e) => return Err(e),
        },
    };
    let bytes = sb.fsb_offset(sb.fs_size);
    if bytes > dev_len {
        return Err(Ufs2Error::Geometry(format!(
            "the file system ({bytes} bytes, fs_size {}) is larger than its device ({dev_len} bytes)",
            sb.fs_size
        )));
    }
    Ok((at, sb, findings))
}

/// Decodes a superblock, a check-hash mismatch noted as a finding.
fn decode_noting_hash(buf: &[u8], findings: &mut Vec<Finding>) -> Result<Superblock, Ufs2Error> {
    match Superblock::decode(buf, true) {
        Err(Ufs2Error::CheckHash { stored, computed, .. }) => {
            findings.push(Finding::SuperblockCheckHash { stored, computed });
            Superblock::decode(buf, false)
        }
        r => r,
    }
}

/// Whether `dev` holds a UFS superblock (UFS2, or UFS1 to be refused by name) at a standard
/// location, or at `alternate` (a sector): the CLI's choice between sufs's checker and this one.
pub fn probe<D: ReadAt + ?Sized>(dev: &D, alternate: Option<u64>) -> bool {
    let alt = alternate.and_then(|s| s.checked_mul(DEV_BSIZE as u64));
    let mut magic = [0u8; 4];
    SBLOCKSEARCH.iter().copied().chain(alt).any(|loc| {
        loc.checked_add(1372).is_some_and(|at| dev.read_exact_at(&mut magic, at).is_ok())
            && [i32::from_le_bytes(magic), i32::from_be_bytes(magic)]
                .iter()
                .any(|m| matches!(*m, FS_UFS2_MAGIC | FS_UFS1_MAGIC))
    })
}
