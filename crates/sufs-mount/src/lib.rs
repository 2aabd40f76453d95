//! sufs mounted: the FUSE adapter (`fuse`), the mount's options (`options`: mount(8)'s `-o`,
//! and the adapter's `FuseOptions`), the control channel a running mount answers on (`ctl`:
//! sync, snapshots, the Block Register, shutdown, remount), the syncer thread that runs the
//! update policy (`syncer`), and mount(8)'s helper (`helper`); and the floor (`floor`), a file system in memory served
//! the same way, which `sufs bench peers` measures FUSE itself with. Each holds the file system
//! through its shared handle (`sufs_fs::fs::SharedFs`); the file system imports none of them,
//! and requests reach the adapter through `fuse_uring`'s transports.

pub mod ctl;
pub mod floor;
pub mod fuse;
pub mod helper;
pub mod options;
pub mod syncer;
