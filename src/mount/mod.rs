//! The mounted file system's side: the FUSE adapter (`fuse`), the control channel a running
//! mount answers on (`ctl`: sync, snapshots, the Block Register, shutdown, remount), the syncer
//! that runs the update policies (`syncer`), and mount(8)'s helper (`helper`). Each holds the
//! file system through its shared handle (`fs::SharedFs`); none is imported by the file system.

pub mod ctl;
pub mod fuse;
pub mod helper;
pub mod syncer;
pub mod transport;
