//! sufs: a user-space FFS with soft updates (McKusick & Ganger 1999), the update policies of
//! Mogul 1994, and the Block Register (Depoutovitch & Warkentin). See DESIGN.md for the map.

pub mod alloc;
pub mod bench;
pub mod bench_br;
pub mod bench_peers;
pub use fs::br;
pub use fs::mountopt;
pub use fs::snapshot;
pub mod cache;
pub mod clock;
pub mod crashtest;
pub mod ctl;
pub mod dev;
pub mod dirhash;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod fuse;
pub mod helper;
pub mod softdep;
pub mod syncer;
pub mod volume;
