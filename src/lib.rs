//! sufs: a user-space FFS with soft updates (McKusick & Ganger 1999), the update policies of
//! Mogul 1994, and the Block Register (Depoutovitch & Warkentin). See docs/DESIGN.md for the map.

pub mod alloc;
pub use fs::br;
pub use fs::mountopt;
pub use fs::snapshot;
pub mod cache;
pub mod clock;
pub mod dev;
pub mod dirhash;
// The files sufs makes: 0600, never through another user's link.
pub mod files;
pub mod fixed_hash;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod mount;
// Progress bars of mkfs, fsck and growfs on a terminal.
pub mod progress;
// The mount's parts keep their short paths (`sufs::fuse`, `sufs::ctl`, ...).
pub use mount::{ctl, fuse, helper, syncer};
pub mod sim;
// The crash tester and the benchmarks keep their short paths too.
pub use sim::{bench, bench_br, bench_peers, crashtest, papers};
pub mod softdep;
pub mod uring;
pub mod volume;
