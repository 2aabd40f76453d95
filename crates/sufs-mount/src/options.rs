//! The mount's options: mount(8)'s `-o` lists (given to `sufs mount -o` or through the mount
//! helper `mount.fuse.sufs`) parsed into `MountOpts`. What the file system does with the ones
//! that are its business (access times, `sync`, remount) is in `sufs_fs::fs::mountopt`; the
//! kernel's own flags (`nodev`, `nosuid`, `noexec`) are only parsed here and handed to the
//! kernel (`fuse_options`); the FUSE side (transport, writeback cache, who checks permissions,
//! threads) becomes the adapter's `FuseOptions` (`fuse_config`).

use fuse_uring::Transport;
use sufs_fs::fs::mountopt::{AtimeMode, AtimePolicy, Remount, SyncMode};
use sufs_fs::fs::Ordering;
use sufs_fs::policy::UpdatePolicy;

/// The options of one mount: `-o` lists parsed. `None` means "not said".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountOpts {
    pub ro: Option<bool>,
    pub dev: Option<bool>,
    pub suid: Option<bool>,
    pub exec: Option<bool>,
    pub sync: Option<bool>,
    pub dirsync: Option<bool>,
    pub atime: Option<AtimeMode>,
    pub nodiratime: Option<bool>,
    pub remount: bool,
    /// sufs's own: soft updates or a baseline.
    pub ordering: Option<Ordering>,
    /// sufs's own: the buffer cache in bytes.
    pub cache: Option<u64>,
    /// sufs's own: the update policy.
    pub update: Option<UpdatePolicy>,
    /// sufs's own: FUSE request threads.
    pub threads: Option<u16>,
    /// Who checks permissions: the kernel (`default_permissions`, `permissions=kernel`, the
    /// default) or sufs (`permissions=sufs`, `fs::perm`). Fixed at mount: a remount ignores it.
    pub sufs_checks: Option<bool>,
    /// sufs's own: the kernel's writeback cache (`writeback_cache`, `nowriteback_cache`): the
    /// kernel keeps written pages and hands them over in large writes at close, fsync or its
    /// own writeback, and keeps a regular file's size and times itself (docs/vfs.md).
    pub writeback_cache: Option<bool>,
    /// sufs's own, for test harnesses: make a new file system of this many bytes first, unless
    /// the image already is a sufs image of exactly this size (destroys what it held).
    pub mkfs_size: Option<u64>,
    /// sufs's own: how requests reach sufs (`transport=auto|uring|classic`, `fuse_uring::Transport`).
    pub transport: Option<Transport>,
    /// sufs's own: seconds to wait for an image still held by a daemon finishing an unmount.
    pub wait: Option<u64>,
    /// sufs's own: preen an image left unclean (`sufs fsck -p`) before mounting it, as a boot
    /// does with fsck -p before mount: what a crash leaves is repaired, anything more refused.
    pub preen: bool,
    /// `norecovery` (ext4's and xfs's name; `noload` is ext4's other one): mount the image as it
    /// is, with no repair that writes before the mount. FFS has no log to replay; the only such
    /// repair is `preen`, which this skips. Only with `ro` (`check_norecovery`), as ext4 and
    /// xfs require: a read-only mount writes nothing else.
    pub norecovery: bool,
    /// Options for mount(8) itself or ones whose effect is always on or means nothing here
    /// (`defaults`, `noauto`, `nofail`, `_netdev`, `user`, `x-*`, `comment=`, `allow_other`,
    /// `lazytime`, `iversion`, `mand`, ...): accepted.
    pub ignored: Vec<String>,
    /// With sloppy parsing (`mount -s`), options not known: left out, with a warning.
    pub unknown: Vec<String>,
}

/// A size with an optional K, M, G or T suffix (powers of 1024; `B` and `iB` may follow).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let mul: u64 = match s[i..].to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                other => return Err(format!("unknown size unit {other:?} (use K, M, G or T)")),
            };
            (&s[..i], mul)
        }
        None => (s, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("{s:?} is not a size"))?;
    n.checked_mul(mul).ok_or_else(|| format!("{s} is too large"))
}

impl MountOpts {
    /// Parses one comma-separated list (as `-o` takes it).
    pub fn parse(list: &str, sloppy: bool) -> Result<MountOpts, String> {
        let mut o = MountOpts::default();
        o.add(list, sloppy)?;
        Ok(o)
    }

    /// Adds another list; a later option overrides an earlier one, as mount(8)'s do.
    pub fn add(&mut self, list: &str, sloppy: bool) -> Result<(), String> {
        for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if let Err(e) = self.add_one(opt) {
                if sloppy && e.starts_with("unknown") {
                    self.unknown.push(opt.to_string());
                } else {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn add_one(&mut self, opt: &str) -> Result<(), String> {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        fn need<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
            v.filter(|v| !v.is_empty()).ok_or_else(|| format!("option {key} needs a value"))
        }
        match (key, value) {
            ("ro", None) => self.ro = Some(true),
            ("rw", None) => self.ro = Some(false),
            ("dev", None) => self.dev = Some(true),
            ("nodev", None) => self.dev = Some(false),
            ("suid", None) => self.suid = Some(true),
            ("nosuid", None) => self.suid = Some(false),
            ("exec", None) => self.exec = Some(true),
            ("noexec", None) => self.exec = Some(false),
            ("sync", None) => self.sync = Some(true),
            ("async", None) => self.sync = Some(false),
            ("dirsync", None) => self.dirsync = Some(true),
            ("noatime", None) => self.atime = Some(AtimeMode::Noatime),
            // "atime" and "norelatime" take away noatime and relatime: the kernel's default,
            // which is relatime (unless strictatime is asked for).
            ("relatime" | "atime" | "norelatime" | "nostrictatime", None) => self.atime = Some(AtimeMode::Relatime),
            ("strictatime", None) => self.atime = Some(AtimeMode::Strictatime),
            ("nodiratime", None) => self.nodiratime = Some(true),
            ("diratime", None) => self.nodiratime = Some(false),
            ("remount", None) => self.remount = true,
            ("writeback_cache", None) => self.writeback_cache = Some(true),
            ("nowriteback_cache", None) => self.writeback_cache = Some(false),
            ("preen", None) => self.preen = true,
            ("norecovery" | "noload", None) => self.norecovery = true,
            // rw, suid, dev, exec, auto, nouser, async: dev and suid are left to the default
            // (root's mounts have them, a user's do not).
            ("defaults", None) => {
                self.ro = Some(false);
                self.exec = Some(true);
                self.sync = Some(false);
                self.ignored.push(opt.to_string());
            }
            ("ordering", v) => {
                let v = need(key, v)?;
                self.ordering = Some(
                    <Ordering as clap::ValueEnum>::from_str(v, false)
                        .map_err(|_| format!("ordering={v}: use softdep, sync or async"))?,
                );
            }
            ("update", v) => {
                let v = need(key, v)?;
                self.update = Some(
                    <UpdatePolicy as clap::ValueEnum>::from_str(v, false)
                        .map_err(|_| format!("update={v}: use wt, pu or aipu"))?,
                );
            }
            ("cache", v) => self.cache = Some(parse_size(need(key, v)?).map_err(|e| format!("cache: {e}"))?),
            ("mkfs_size", v) => {
                self.mkfs_size = Some(parse_size(need(key, v)?).map_err(|e| format!("mkfs_size: {e}"))?)
            }
            // The one format `mkfs_size` makes (taken for the harnesses that name it).
            ("mkfs_format", v) => match need(key, v)? {
                "ufs2" => {}
                "sufs" => return Err("mkfs_format=sufs: sufs's earlier format is retired; UFS2 is made".into()),
                v => return Err(format!("mkfs_format={v}: only ufs2")),
            },
            ("threads", v) => {
                let v = need(key, v)?;
                match v.parse::<u16>() {
                    Ok(n @ 1..=64) => self.threads = Some(n),
                    _ => return Err(format!("threads={v}: from 1 to 64")),
                }
            }
            ("transport", v) => self.transport = Some(need(key, v)?.parse()?),
            ("permissions", Some("sufs")) => self.sufs_checks = Some(true),
            ("permissions", Some("kernel")) | ("default_permissions", None) => self.sufs_checks = Some(false),
            ("permissions", v) => return Err(format!("permissions={}: kernel or sufs", v.unwrap_or(""))),
            ("wait", v) => {
                let v = need(key, v)?;
                self.wait = Some(v.parse().map_err(|_| format!("wait={v}: seconds"))?);
            }
            ("auto" | "noauto" | "nofail" | "_netdev" | "user" | "nouser" | "users" | "owner" | "group", None)
            | ("loud" | "silent", None)
            | ("comment", Some(_)) => self.ignored.push(opt.to_string()),
            // The kernel's generic superblock options, which mean nothing more for sufs:
            // `lazytime` (sufs keeps times in its cache and writes them with the inode, as
            // lazytime asks; fsync and sync write them), `iversion` (FUSE keeps no change
            // counter), `mand` (mandatory locks are gone from Linux). Accepted, as the kernel
            // accepts them for any file system.
            ("lazytime" | "nolazytime" | "iversion" | "noiversion" | "mand" | "nomand", None) => {
                self.ignored.push(opt.to_string())
            }
            // FUSE's own, which sufs sets itself; mount(8) repeats them (from the mount table)
            // on a remount.
            ("allow_other", None)
            | ("user_id" | "group_id" | "rootmode" | "max_read" | "blksize" | "fsname" | "subtype", Some(_)) => {
                self.ignored.push(opt.to_string())
            }
            (k, _) if k.starts_with("x-") => self.ignored.push(opt.to_string()),
            _ => return Err(format!("unknown mount option {opt:?}")),
        }
        Ok(())
    }

    /// `norecovery` is for read-only mounts only (`ro`: whether the mount is read-only, from
    /// these options or the command line): a mount that may write would write on an image
    /// whose repair it skipped.
    pub fn check_norecovery(&self, ro: bool) -> Result<(), String> {
        if self.norecovery && !ro {
            return Err("norecovery: only with ro (a read-write mount of an image left unrepaired)".into());
        }
        Ok(())
    }

    /// The access-time rule these options ask for (relatime unless said).
    pub fn atime_policy(&self) -> AtimePolicy {
        AtimePolicy { mode: self.atime.unwrap_or_default(), nodiratime: self.nodiratime.unwrap_or(false) }
    }

    pub fn sync_mode(&self) -> SyncMode {
        SyncMode { sync: self.sync.unwrap_or(false), dirsync: self.dirsync.unwrap_or(false) }
    }

    /// What a remount with these options changes in the file system.
    pub fn remount_changes(&self) -> Remount {
        Remount {
            readonly: self.ro,
            atime: self.atime,
            nodiratime: self.nodiratime,
            sync: self.sync,
            dirsync: self.dirsync,
            ordering: self.ordering,
        }
    }

    /// The options of a new FUSE mount that are the kernel's: `dev` and `suid` are root's
    /// (a mount by root has them unless `nodev`/`nosuid`; a user's never does, and asking for
    /// them is refused); `noexec`, `sync`, `dirsync` and `noatime` become the mount's flags.
    pub fn fuse_options(&self, root: bool) -> Result<Vec<fuser::MountOption>, String> {
        use fuser::MountOption as M;
        let mut v = Vec::new();
        for (want, on, name) in [(self.dev, M::Dev, "dev"), (self.suid, M::Suid, "suid")] {
            match (want, root) {
                (Some(true), false) => return Err(format!("{name}: only root may mount with {name}")),
                (None | Some(true), true) => v.push(on),
                _ => {}
            }
        }
        if self.exec == Some(false) {
            v.push(M::NoExec);
        }
        if self.sync == Some(true) {
            v.push(M::Sync);
        }
        if self.dirsync == Some(true) {
            v.push(M::DirSync);
        }
        if self.atime == Some(AtimeMode::Noatime) {
            v.push(M::NoAtime);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_checks_permissions() {
        assert_eq!(MountOpts::parse("rw", false).unwrap().sufs_checks, None);
        assert_eq!(MountOpts::parse("permissions=sufs", false).unwrap().sufs_checks, Some(true));
        assert_eq!(MountOpts::parse("permissions=sufs,default_permissions", false).unwrap().sufs_checks, Some(false));
        assert_eq!(MountOpts::parse("permissions=kernel", false).unwrap().sufs_checks, Some(false));
        assert!(MountOpts::parse("permissions=nobody", false).is_err());
    }

    #[test]
    fn options_parse_and_later_ones_win() {
        let o = MountOpts::parse("rw,noatime,nodev,ordering=sync,cache=64M,strictatime", false).unwrap();
        assert_eq!(o.ro, Some(false));
        assert_eq!(o.dev, Some(false));
        assert_eq!(o.atime, Some(AtimeMode::Strictatime));
        assert_eq!(o.ordering, Some(Ordering::Sync));
        assert_eq!(o.cache, Some(64 << 20));
        let mut o = MountOpts::parse("ro,sync", false).unwrap();
        o.add("remount,rw,async,dirsync,nodiratime,x-systemd.automount,defaults,_netdev,user_id=0", false).unwrap();
        assert!(o.remount);
        assert_eq!(o.sync_mode(), SyncMode { sync: false, dirsync: true });
        assert_eq!(o.atime_policy(), AtimePolicy { mode: AtimeMode::Relatime, nodiratime: true });
        assert_eq!(o.ignored, ["x-systemd.automount", "defaults", "_netdev", "user_id=0"]);
        let generic = "lazytime,nolazytime,iversion,noiversion,mand,nomand,silent,loud,auto,noauto,nofail";
        assert_eq!(MountOpts::parse(generic, false).unwrap().ignored.join(","), generic);
        let r = o.remount_changes();
        assert_eq!((r.readonly, r.sync, r.dirsync, r.nodiratime), (Some(false), Some(false), Some(true), Some(true)));
        assert_eq!(
            MountOpts::parse("mkfs_size=100M,wait=5,threads=3,update=wt", false).unwrap().mkfs_size,
            Some(100 << 20)
        );
        assert!(MountOpts::parse("mkfs_size=1G,mkfs_format=ufs2", false).is_ok());
        assert!(MountOpts::parse("mkfs_size=1G,mkfs_format=sufs", false).unwrap_err().contains("retired"));
        assert!(MountOpts::parse("mkfs_format=ufs1", false).is_err());
        assert_eq!(MountOpts::parse("transport=uring", false).unwrap().transport, Some(Transport::Uring));
        assert_eq!(MountOpts::parse("transport=classic", false).unwrap().transport, Some(Transport::Classic));
        assert!(MountOpts::parse("transport=pigeon", false).unwrap_err().contains("auto, uring or classic"));
    }

    #[test]
    fn bad_options_are_refused_with_their_name() {
        for (opt, says) in [
            ("bogus", "unknown mount option \"bogus\""),
            ("ro=1", "unknown mount option \"ro=1\""),
            ("ordering=fast", "ordering=fast"),
            ("cache=12Q", "cache"),
            ("threads=0", "threads=0"),
            ("threads=65", "threads=65"),
            ("cache", "needs a value"),
            ("wait=soon", "wait=soon"),
        ] {
            let e = MountOpts::parse(opt, false).unwrap_err();
            assert!(e.contains(says), "{opt}: {e}");
        }
        // Sloppy: unknown ones are set aside; bad values of known ones still fail.
        let o = MountOpts::parse("bogus,ro", true).unwrap();
        assert_eq!((o.unknown.as_slice(), o.ro), (["bogus".to_string()].as_slice(), Some(true)));
        assert!(MountOpts::parse("threads=0", true).is_err());
    }

    #[test]
    fn norecovery_is_for_read_only_mounts() {
        let o = MountOpts::parse("ro,norecovery,preen", false).unwrap();
        assert!(o.norecovery && o.preen);
        assert_eq!(o.check_norecovery(true), Ok(()));
        assert!(MountOpts::parse("noload", false).unwrap().norecovery);
        let e = MountOpts::parse("rw,norecovery", false).unwrap().check_norecovery(false).unwrap_err();
        assert!(e.contains("only with ro"), "{e}");
        assert_eq!(MountOpts::parse("rw", false).unwrap().check_norecovery(false), Ok(()));
    }

    #[test]
    fn dev_and_suid_are_roots() {
        use fuser::MountOption as M;
        let none = MountOpts::default();
        assert_eq!(none.fuse_options(true).unwrap(), [M::Dev, M::Suid]);
        assert!(none.fuse_options(false).unwrap().is_empty(), "a user's mount keeps fuser's nodev,nosuid");
        let safe = MountOpts::parse("nodev,nosuid,noexec,sync,dirsync,noatime", false).unwrap();
        assert_eq!(safe.fuse_options(true).unwrap(), [M::NoExec, M::Sync, M::DirSync, M::NoAtime]);
        let e = MountOpts::parse("suid", false).unwrap().fuse_options(false).unwrap_err();
        assert!(e.contains("only root"), "{e}");
        assert!(MountOpts::parse("defaults", false).unwrap().fuse_options(false).is_ok());
    }
}
