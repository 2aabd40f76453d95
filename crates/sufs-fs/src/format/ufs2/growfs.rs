//! growfs for UFS2: an unmounted, clean file system grown into the rest of its (already
//! larger) device, as FreeBSD's growfs(8) grows one (sbin/growfs/growfs.c: `updjcg`, `initcg`,
//! `updcsloc`, then the superblock). The geometry of a group (`fs_fpg`, `fs_ipg`) does not
//! change: the old last group is extended up to `fs_fpg` fragments, whole new groups are added
//! after it as newfs makes them (their inode tables left to lazy initialization,
//! `cg_initediblk`), and a summary area (`fs_csaddr`, a `struct csum` per group) that needs more
//! fragments moves to the start of the data of the first new group with room for it, as
//! growfs.c moves it, its old fragments freed.
//!
//! The superblock at `fs_sblockloc` is the commit. Before it, the old superblock is written
//! marked not clean (so that `fsck -p`, which skips a clean image, checks one a crash cut
//! short), and only two kinds of write reach the disk: blocks past the old end, which the old superblock never reads (the new groups, the
//! moved summary area), and blocks the old file system reads but accepts in their new form:
//! the extended last group's header (fsck recognizes an interrupted growfs there:
//! `Finding::GrowInterrupted`, allowed, and `fsck -p` cuts the header back) and a summary area
//! grown in place (its entries are summaries, stale as after any crash). After the superblock:
//! the old summary area's fragments freed in their group (until then they are leaked, as soft
//! updates leaks), the superblock rewritten with those counts, the old groups' superblock copies
//! and the recovery record in the boot area. So every crash leaves the old file system or the
//! new one, with at most allowed findings that `fsck -p` repairs.

use std::io;

use super::newfs::{group_span, howmany, initcg, Numbers};
use super::*;

/// Why growfs did not grow the file system.
#[derive(Debug, Error)]
pub enum GrowError {
    /// The file system or the request does not allow it; nothing was written.
    #[error("{0}")]
    Refused(String),
    /// The device failed: the file system is the old or the new one (see the module's order).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// What was read does not decode.
    #[error("{0}")]
    Format(#[from] Ufs2Error),
}

/// What growing changes.
#[derive(Debug, Clone)]
pub struct Growth {
    /// The superblock before.
    pub old: Superblock,
    /// The superblock after, as written.
    pub new: Superblock,
    /// The old last group's fragments before and after, when it grows.
    pub extended: Option<(u32, u32)>,
    /// The summary area's old and new place (`fs_csaddr`), when it moves.
    pub moved_summary: Option<(i64, i64)>,
}

/// Plans growing `old` to `size` bytes on a device of `provider` bytes: the new superblock's
/// geometry (`fs_size`, `fs_ncg`, `fs_cssize`, `fs_providersize`), the size rounded down to a
/// fragment, and a last group too short to hold its metadata and one fragment of data left out
/// (as growfs.c leaves it out). Counts, `fs_dsize` and `fs_csaddr` are `grow`'s.
pub fn plan(old: &Superblock, size: u64, provider: u64) -> Result<Superblock, GrowError> {
    let refuse = |m: String| Err(GrowError::Refused(m));
    if old.fs_clean == 0 || old.fs_flags & (FS_UNCLEAN | FS_NEEDSFSCK) != 0 {
        return refuse("the file system is not clean: run `sufs fsck -y` first".into());
    }
    if old.fs_snapinum.iter().any(|&i| i != 0) {
        return refuse("the file system has snapshots: remove them before growing it".into());
    }
    if size > provider {
        return refuse(format!("{size} bytes is larger than the device's {provider}"));
    }
    let fsize = old.fs_fsize as u64;
    let frags = (size / fsize) as i64;
    if frags <= old.fs_size {
        return refuse(format!(
            "{size} bytes is not larger than the file system's {} bytes",
            old.fs_size as u64 * fsize
        ));
    }
    let mut new = old.clone();
    let fpg = old.fs_fpg as i64;
    new.fs_size = frags;
    new.fs_ncg = howmany(frags, fpg) as u32;
    if frags % fpg != 0 && frags <= new.cgdmin(new.fs_ncg - 1) {
        // No room for one fragment of data in the last group: left unused.
        new.fs_ncg -= 1;
        new.fs_size = new.fs_ncg as i64 * fpg;
    }
    if new.fs_size <= old.fs_size {
        return refuse(format!(
            "{size} bytes adds too little: a new group needs more than {} fragments (its metadata)",
            old.fs_dblkno
        ));
    }
    if new.fs_ncg as u64 * new.fs_ipg as u64 > u32::MAX as u64 {
        return refuse(format!("{} groups of {} inodes overflow an inode number", new.fs_ncg, new.fs_ipg));
    }
    new.fs_cssize = (howmany(new.fs_ncg as i64 * Csum::SIZE as i64, fsize as i64) * fsize as i64) as i32;
    new.fs_providersize = (provider / fsize) as i64;
    Ok(new)
}

/// The device growfs works on: read and written by byte offset.
pub trait GrowDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()>;
}

/// Grows the file system on `dev` to `size` bytes of a device of `provider` bytes, at time
/// `now` (seconds since the epoch), writing in the order the module describes.
pub fn grow(dev: &mut dyn GrowDevice, size: u64, provider: u64, now: i64) -> Result<Growth, GrowError> {
    let (loc, old) = Superblock::search(|off, buf| dev.read_at(buf, off))?;
    if loc != old.fs_sblockloc as u64 {
        return Err(GrowError::Refused(format!("the superblock at {loc} says it is at {}", old.fs_sblockloc)));
    }
    let mut new = plan(&old, size, provider)?;
    let fsize = old.fs_fsize as i64;
    let read = |dev: &dyn GrowDevice, fsb: i64, len: usize| -> io::Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        dev.read_at(&mut b, old.fsb_offset(fsb))?;
        Ok(b)
    };

    // The summary area as it is, and the old last group.
    let area = read(dev, old.fs_csaddr, old.fs_cssize as usize)?;
    let mut fscs: Vec<Csum> = (0..old.fs_ncg as usize).map(|c| Csum::get(&area, c * Csum::SIZE)).collect();
    let last = old.fs_ncg - 1;
    let mut jcg = Cg::decode(&read(dev, old.cgtod(last), old.fs_cgsize as usize)?, &old, last, true)?;
    let (before, after) = (jcg.hdr.cg_ndblk, (new.fs_size - new.cgbase(last)).min(new.fs_fpg as i64) as u32);
    let extended = (after > before).then_some((before, after));
    if let Some((before, after)) = extended {
        // Its counts must be its map's, or the recount would hide a damaged group.
        let m = jcg.map_counts();
        let cs = jcg.hdr.cg_cs;
        if (m.nbfree, m.nffree) != (cs.cs_nbfree as u32, cs.cs_nffree as u32) || m.frsum != jcg.hdr.cg_frsum {
            return Err(GrowError::Refused(format!("group {last}'s counts disagree with its map: run `sufs fsck -y`")));
        }
        jcg.resize(after);
        jcg.hdr.cg_time = now;
        new.fs_dsize += (after - before) as i64;
    }
    fscs[last as usize] = jcg.hdr.cg_cs;

    // The new groups, as newfs makes them.
    let mut groups: Vec<Cg> = (old.fs_ncg..new.fs_ncg).map(|c| initcg(&new, c, now)).collect();
    for g in &groups {
        new.fs_dsize += g.hdr.cg_ndblk as i64 - (new.fs_dblkno - new.fs_sblkno) as i64;
        fscs.push(g.hdr.cg_cs);
    }

    // The summary area: in place if its fragments suffice, else moved to the data of the first
    // new group with room for it.
    let (old_csfrags, new_csfrags) = (howmany(old.fs_cssize as i64, fsize), howmany(new.fs_cssize as i64, fsize));
    let mut moved_summary = None;
    if new_csfrags > old_csfrags {
        let Some(k) = groups.iter().position(|g| g.hdr.cg_ndblk as i64 >= new.fs_dblkno as i64 + new_csfrags) else {
            return Err(GrowError::Refused(format!(
                "no new group has room for the summary area's {new_csfrags} fragments: grow by more"
            )));
        };
        let c = old.fs_ncg + k as u32;
        let g = &mut groups[k];
        g.set_frags_free(new.fs_dblkno as u32, new_csfrags as u32, false);
        g.recount();
        fscs[c as usize] = g.hdr.cg_cs;
        new.fs_csaddr = new.cgdmin(c);
        new.fs_dsize -= new_csfrags - old_csfrags;
        moved_summary = Some((old.fs_csaddr, new.fs_csaddr));
    }
    let total = |fscs: &[Csum]| {
        fscs.iter().fold(
            CsumTotal { cs_numclusters: old.fs_cstotal.cs_numclusters, ..CsumTotal::default() },
            |mut t, c| {
                t.cs_ndir += c.cs_ndir as i64;
                t.cs_nbfree += c.cs_nbfree as i64;
                t.cs_nifree += c.cs_nifree as i64;
                t.cs_nffree += c.cs_nffree as i64;
                t
            },
        )
    };
    new.fs_cstotal = CsumTotal { cs_spare: old.fs_cstotal.cs_spare, ..total(&fscs) };
    new.fs_time = now;
    new.fs_fmod = 0;
    new.fs_clean = 1;
    new.fs_ronly = 0;
    new.fs_cgrotor = 0;
    new.fs_state = 0;
    new.fs_fsmnt = [0; MAXMNTLEN];
    if old.fs_old_size as i64 == old.fs_size {
        new.fs_old_size = new.fs_size as i32;
    }
    if old.fs_old_dsize as i64 == old.fs_dsize {
        new.fs_old_dsize = new.fs_dsize as i32;
    }
    new.validate()?;
    let cssize = new.fs_cssize as usize;
    let csarea = |fscs: &[Csum]| {
        let mut b = vec![0u8; cssize];
        for (i, c) in fscs.iter().enumerate() {
            c.put(&mut b, i * Csum::SIZE);
        }
        b
    };

    // First the old superblock marked not clean, so that a growfs cut short leaves an image
    // `fsck -p` checks (it skips one marked clean) and repairs; the commit marks it clean.
    let mut unclean = old.clone();
    unclean.fs_clean = 0;
    dev.write_at(&unclean.encode(), loc)?;
    // Past the old end: the new groups (superblock copy, header, first inode blocks).
    let mut numbers = Numbers::new(false);
    for (k, g) in groups.iter().enumerate() {
        let c = old.fs_ncg + k as u32;
        dev.write_at(&group_span(&new, c, Some(g), &mut numbers), new.fsb_offset(new.cgsblock(c)))?;
    }
    // Read by the old file system in their new form: the extended last group, the summary area.
    if extended.is_some() {
        dev.write_at(&jcg.encode(&new), new.fsb_offset(new.cgtod(last)))?;
    }
    dev.write_at(&csarea(&fscs), new.fsb_offset(new.fs_csaddr))?;
    // The commit.
    dev.write_at(&new.encode(), loc)?;

    if moved_summary.is_some() {
        // The old summary area's fragments, leaked until now, freed in their group.
        let oc = old.dtog(old.fs_csaddr) as u32;
        let mut g = Cg::decode(&read(dev, new.cgtod(oc), new.fs_cgsize as usize)?, &new, oc, true)?;
        let first = old.dtogd(old.fs_csaddr) as u32;
        g.set_frags_free(first, old_csfrags as u32, true);
        g.recount();
        g.hdr.cg_time = now;
        fscs[oc as usize] = g.hdr.cg_cs;
        new.fs_cstotal = CsumTotal { cs_spare: old.fs_cstotal.cs_spare, ..total(&fscs) };
        dev.write_at(&g.encode(&new), new.fsb_offset(new.cgtod(oc)))?;
        dev.write_at(&csarea(&fscs), new.fsb_offset(new.fs_csaddr))?;
        dev.write_at(&new.encode(), loc)?;
    }
    // The old groups' superblock copies (the new groups' were written with them).
    for c in 0..old.fs_ncg {
        let mut copy = new.clone();
        copy.fs_sblockactualloc = new.fsb_offset(new.cgsblock(c)) as i64;
        dev.write_at(&copy.encode(), new.fsb_offset(new.cgsblock(c)))?;
    }
    // The recovery record newfs leaves at the end of the boot area names the group count.
    let rec_at = SBLOCK_UFS2 - 20 + 16;
    let mut rec = [0u8; 20];
    dev.read_at(&mut rec, SBLOCK_UFS2 - 20)?;
    if loc == SBLOCK_UFS2 && i32::get(&rec, 0) == FS_UFS2_MAGIC && i32::get(&rec, 12) == old.fs_fpg {
        dev.write_at(&(new.fs_ncg as i32).to_le_bytes(), rec_at)?;
    }
    new.fs_ckhash = u32::get(&new.encode(), FS_CKHASH_OFF);
    Ok(Growth { old, new, extended, moved_summary })
}

/// A file, grown in place.
impl GrowDevice for std::fs::File {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, off)
    }
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, off)
    }
}

/// An image in memory (tests, and the crash test's replay).
impl GrowDevice for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        ReadAt::read_exact_at(self.as_slice(), buf, off)
    }
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        let o = usize::try_from(off).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let dst = self.get_mut(o..o + buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        dst.copy_from_slice(buf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::newfs::{newfs, NewfsOptions};
    use super::*;

    fn image(size: u64, o: &NewfsOptions) -> Vec<u8> {
        let mut img = vec![0u8; size as usize];
        newfs(size, o, |off, b| {
            img[off as usize..off as usize + b.len()].copy_from_slice(b);
            Ok(())
        })
        .unwrap();
        img
    }

    #[test]
    fn a_short_last_group_resized_to_a_whole_one_and_back_is_what_it_was() {
        let o = NewfsOptions { time: 1, regression: true, ..NewfsOptions::default() };
        let img = image(4 << 20, &o);
        let (_, sb) = Superblock::search(|off, b| ReadAt::read_exact_at(img.as_slice(), b, off)).unwrap();
        let last = sb.fs_ncg - 1;
        let at = sb.fsb_offset(sb.cgtod(last)) as usize;
        let g = Cg::decode(&img[at..], &sb, last, true).unwrap();
        let ndblk = g.hdr.cg_ndblk;
        assert!(ndblk < sb.fs_fpg as u32, "the fixture geometry's last group is short");
        let mut grown = g.clone();
        grown.resize(sb.fs_fpg as u32);
        let (m, cs) = (grown.map_counts(), grown.hdr.cg_cs);
        assert_eq!((m.nbfree, m.nffree), (cs.cs_nbfree as u32, cs.cs_nffree as u32));
        assert_eq!(m.clustersum[1..], grown.clustersum()[1..]);
        let added = sb.fs_fpg as u32 - ndblk;
        assert_eq!(
            cs.cs_nbfree as u32 * 8 + cs.cs_nffree as u32,
            g.hdr.cg_cs.cs_nbfree as u32 * 8 + g.hdr.cg_cs.cs_nffree as u32 + added
        );
        grown.resize(ndblk);
        assert_eq!(grown.encode(&sb), g.encode(&sb), "cut back, the group is newfs's again");
    }

    #[test]
    fn plans_leave_out_a_last_group_without_data() {
        let o = NewfsOptions { time: 1, regression: true, ..NewfsOptions::default() };
        let img = image(4 << 20, &o);
        let (_, sb) = Superblock::search(|off, b| ReadAt::read_exact_at(img.as_slice(), b, off)).unwrap();
        let (fpg, fsize) = (sb.fs_fpg as u64, sb.fs_fsize as u64);
        // A whole group more: one more group.
        let whole = (sb.fs_ncg as u64 + 1) * fpg * fsize;
        let p = plan(&sb, whole, whole).unwrap();
        assert_eq!((p.fs_ncg, p.fs_size as u64), (sb.fs_ncg + 1, whole / fsize));
        // A group's metadata and no data past a whole group: left out.
        let short = whole + sb.fs_dblkno as u64 * fsize;
        assert_eq!(plan(&sb, short, short).unwrap().fs_size as u64, whole / fsize);
        assert!(matches!(plan(&sb, 4 << 20, 4 << 20), Err(GrowError::Refused(_))));
        assert!(matches!(plan(&sb, 8 << 20, 4 << 20), Err(GrowError::Refused(_))));
    }
}
