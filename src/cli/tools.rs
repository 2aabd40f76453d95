//! FreeBSD's tunefs and growfs for an unmounted, clean image: `sufs tunefs` changes the
//! superblock's settings, `sufs growfs` grows the image and the file system.

use std::path::Path;
use std::sync::Arc;
use sufs_fs::dev::{BlockDevice, FileDevice, WriteKind};
use sufs_fs::format::{self, Superblock};
use sufs_fs::fs::Ordering;

use super::*;

/// What `sufs tunefs` changes and prints.
pub(crate) struct Tune {
    /// The new minfree reserve, in percent.
    pub(crate) minfree: Option<u8>,
    /// The new volume label ("" clears it).
    pub(crate) label: Option<String>,
    /// The new default ordering of a mount.
    pub(crate) ordering: Option<Ordering>,
    /// UFS2's `FS_ACLS` on or off (FreeBSD's tunefs -a).
    pub(crate) posix_acls: Option<bool>,
    /// Print the settings.
    pub(crate) print: bool,
}

/// The ordering a mount of `sb` uses when none is given.
pub(crate) fn default_ordering(sb: &Superblock) -> Ordering {
    match sb.default_ordering {
        format::ORDER_SYNC => Ordering::Sync,
        format::ORDER_ASYNC => Ordering::Async,
        _ => Ordering::Softdep,
    }
}

fn ordering_name(o: Ordering) -> &'static str {
    match o {
        Ordering::Softdep => "softdep",
        Ordering::Sync => "sync",
        Ordering::Async => "async",
    }
}

/// Refuses an image that was not unmounted cleanly or that a mount found damaged.
pub(crate) fn refuse_unclean(image: &Path, sb: &Superblock) -> Result<(), Fail> {
    if sb.flags & format::SB_NEEDS_FSCK != 0 {
        return Err(Fail(format!("{} is marked as needing fsck: run `sufs fsck -y` first", image.display()), 1));
    }
    if sb.flags & format::SB_CLEAN == 0 {
        return Err(Fail(format!("{} was not unmounted cleanly: run `sufs fsck -y` first", image.display()), 1));
    }
    Ok(())
}

pub(crate) fn cmd_tunefs(image: &Path, t: &Tune) -> Result<u8, Fail> {
    let changes = t.minfree.is_some() || t.label.is_some() || t.ordering.is_some() || t.posix_acls.is_some();
    if !changes && !t.print {
        return Err(Fail("nothing to do: give --minfree, --label, --ordering, --posix-acls or -p".into(), 1));
    }
    let _lock = inspect::refuse_mounted(image, changes)?;
    let (dev, sb): (FileDevice, Superblock) = open_image_any(image, changes)?;
    tunefs_ufs2(image, &dev, sb, t)
}

fn print_tune(sb: &Superblock) {
    let unset = if sb.minfree.is_none() { " (the default)" } else { "" };
    println!("minfree   {}%{unset} ({} fragments for root)", sb.minfree_percent(), sb.reserved_blocks());
    println!("label     {}", if sb.label.is_empty() { "(none)".into() } else { String::from_utf8_lossy(&sb.label) });
    let unset = if sb.default_ordering == format::ORDER_DEFAULT { " (the default)" } else { "" };
    println!("ordering  {}{unset}", ordering_name(default_ordering(sb)));
}

/// `sufs tunefs` on a UFS2 image, as FreeBSD's tunefs changes one: `--minfree` into
/// `fs_minfree`, `--label` into `fs_volname`, `--ordering` as soft updates on or off
/// (`FS_DOSOFTDEP`, tunefs -n), `--posix-acls` as `FS_ACLS` (tunefs -a, which refuses it
/// beside `FS_NFS4ACLS`: FreeBSD mounts a file system with both flags with neither). The superblock goes to `fs_sblockloc` and to every group's
/// copy (what `tunefs -A` writes), its check hash resealed (`ffs_sbput`), and is read back.
fn tunefs_ufs2(image: &Path, dev: &FileDevice, mut sb: Superblock, t: &Tune) -> Result<u8, Fail> {
    use format::ufs2::newfs::{check_label, FS_OPTSPACE, FS_OPTTIME, MINFREE};
    use format::ufs2::{FS_ACLS, FS_NFS4ACLS};
    let changes = t.minfree.is_some() || t.label.is_some() || t.ordering.is_some() || t.posix_acls.is_some();
    let mut optim = sb.ufs2().fs_optim;
    let flags = sb.ufs2().fs_flags;
    if t.posix_acls == Some(true) && flags & FS_NFS4ACLS != 0 {
        return Err(Fail("POSIX.1e ACLs and NFSv4 ACLs are mutually exclusive: NFSv4 ACLs are on".into(), 1));
    }
    if changes {
        refuse_unclean(image, &sb)?;
        if let Some(l) = &t.label {
            check_label(l).map_err(|e| Fail(format!("label {l:?}: {e}"), 1))?;
            sb.label = l.as_bytes().to_vec();
        }
        if let Some(m) = t.minfree {
            assert!(m <= format::MAX_MINFREE, "clap holds minfree to its range");
            sb.minfree = Some(m);
            // tunefs warns that the optimization should follow minfree across MINFREE (8%);
            // sufs has no -o to follow the advice with, so it takes it (newfs's choice).
            let want = if i32::from(m) < MINFREE { FS_OPTSPACE } else { FS_OPTTIME };
            if want != optim {
                println!("optimization preference changes from {} to {}", optim_name(optim), optim_name(want));
                optim = want;
            }
        }
        if let Some(o) = t.ordering {
            if o == Ordering::Async {
                println!("UFS2 keeps only soft updates on or off: a mount given no ordering runs sync (ask for async at mount)");
            }
            sb.default_ordering = if o == Ordering::Softdep { format::ORDER_SOFTDEP } else { format::ORDER_SYNC };
            // Journaled soft updates without soft updates mean nothing: tunefs -n disable
            // clears the journal's flag too.
            if o != Ordering::Softdep && sb.disable_suj() {
                println!("soft updates journaling cleared with soft updates (remove .sujournal to reclaim its space)");
            }
        }
        sb.write_time = sufs_fs::clock::Clock::wall(&sufs_fs::clock::RealClock::new()).0;
        let mut u = sb.to_ufs2();
        u.fs_optim = optim;
        match t.posix_acls {
            Some(true) => u.fs_flags |= FS_ACLS,
            Some(false) => u.fs_flags &= !FS_ACLS,
            None => {}
        }
        write_superblock_ufs2(dev, &u)?;
        sb = Superblock::from_ufs2(u);
    }
    if t.print {
        print_tune(&sb);
        println!("optim     {}", optim_name(optim));
        let acls = sb.ufs2().fs_flags & FS_ACLS != 0;
        println!("acls      POSIX.1e ACLs {} on FreeBSD", if acls { "enforced" } else { "not enforced" });
    }
    Ok(0)
}

fn optim_name(o: i32) -> &'static str {
    if o == format::ufs2::newfs::FS_OPTSPACE {
        "space"
    } else {
        "time"
    }
}

/// Writes a UFS2 superblock at `fs_sblockloc` and at each group's copy (`cgsblock`), as
/// libufs's `sbput` with all copies: the same fields everywhere but `fs_sblockactualloc`, which
/// says where each copy is, the check hash sealed by `encode`. Reads each back, checked.
fn write_superblock_ufs2(dev: &FileDevice, u: &format::ufs2::Superblock) -> Result<(), Fail> {
    use sufs_fs::dev::{read_bytes, write_bytes};
    let mut at = vec![u.fs_sblockloc as u64];
    at.extend((0..u.fs_ncg).map(|c| u.fsb_offset(u.cgsblock(c))));
    let encoded = |off: u64| {
        let mut copy = u.clone();
        copy.fs_sblockactualloc = off as i64;
        copy.encode()
    };
    for &off in &at {
        write_bytes(dev, off, &encoded(off), WriteKind::Sync)
            .map_err(|e| Fail(format!("writing the superblock at byte {off}: {e}"), 8))?;
    }
    for &off in &at {
        let bytes = encoded(off);
        let mut back = vec![0u8; bytes.len()];
        read_bytes(dev, off, &mut back)
            .map_err(|e| Fail(format!("reading back the superblock at byte {off}: {e}"), 8))?;
        // The bytes written, and a superblock whose check hash and geometry hold.
        let ok = back == bytes && format::ufs2::Superblock::decode(&back, true).is_ok();
        if !ok {
            return Err(Fail(format!("the superblock at byte {off} reads back other than written"), 8));
        }
    }
    Ok(())
}

/// `sufs growfs`: extends the image file to `size` (sparse) and grows the file system into it.
pub(crate) fn cmd_growfs(image: &Path, size: u64) -> Result<u8, Fail> {
    let meta = std::fs::metadata(image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        return Err(Fail(
            format!("{} is a block device, which sufs cannot grow: growfs grows image files", image.display()),
            1,
        ));
    }
    if !meta.is_file() {
        return Err(Fail(format!("{} is not an image file", image.display()), 1));
    }
    let _lock = inspect::refuse_mounted(image, true)?;
    let (dev, _) = open_image_any(image, false)?;
    // Blocks past a UFS2 file system are FreeBSD's growfs's to grow into (the provider's size),
    // unless they hold a volume snapshot's store.
    refuse_volume_snapshot(image, Arc::new(dev))?;
    cmd_growfs_ufs2(image, size, meta.len())
}

/// `sufs growfs` of a UFS2 image (`format::ufs2::growfs`): the file extended to `size` (never
/// cut), the file system grown to it, and the file set back to `old_len` if growfs refused
/// before writing anything.
fn cmd_growfs_ufs2(image: &Path, size: u64, old_len: u64) -> Result<u8, Fail> {
    use sufs_fs::format::ufs2::growfs::{self, GrowError};
    let fail = |e: &dyn std::fmt::Display, code| Fail(format!("{}: {e}", image.display()), code);
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(image).map_err(|e| fail(&e, 1))?;
    let provider = size.max(old_len);
    if size > old_len {
        file.set_len(size).map_err(|e| fail(&format!("extending: {e}"), 8))?;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    match growfs::grow(&mut file, size, provider, now) {
        Ok(g) => {
            file.sync_all().map_err(|e| fail(&e, 8))?;
            let mib = |sb: &sufs_fs::format::ufs2::Superblock| (sb.fs_size as u64 * sb.fs_fsize as u64) >> 20;
            println!(
                "{}: grew from {} fragments ({} MiB, {} groups) to {} fragments ({} MiB, {} groups); {} blocks and {} fragments free{}",
                image.display(),
                g.old.fs_size,
                mib(&g.old),
                g.old.fs_ncg,
                g.new.fs_size,
                mib(&g.new),
                g.new.fs_ncg,
                g.new.fs_cstotal.cs_nbfree,
                g.new.fs_cstotal.cs_nffree,
                match g.moved_summary {
                    Some((from, to)) => format!("; summary area moved from fragment {from} to {to}"),
                    None => String::new(),
                }
            );
            Ok(0)
        }
        Err(GrowError::Refused(m)) => {
            // Nothing was written: the file goes back to its size.
            file.set_len(old_len).map_err(|e| fail(&format!("{m}; shrinking back: {e}"), 8))?;
            Err(fail(&m, 1))
        }
        Err(e) => Err(fail(&format!("growfs failed: {e} (run `sufs fsck -y`)"), 8)),
    }
}

/// Refuses an image with a volume snapshot: growing would change the volume under it.
fn refuse_volume_snapshot(image: &Path, dev: Arc<dyn BlockDevice>) -> Result<(), Fail> {
    let found = sufs_fs::volume::VolumeDevice::open(dev, sufs_fs::volume::PoolOptions::default())
        .map_err(|e| Fail(format!("{}: looking for a volume snapshot: {e}", image.display()), 8))?;
    if found.is_some() {
        return Err(Fail(
            format!("{} has a volume snapshot: delete it first (sufs volume snapshot delete)", image.display()),
            1,
        ));
    }
    Ok(())
}
