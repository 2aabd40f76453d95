//! sufs, the file system as a library: a user-space FFS with soft updates (McKusick & Ganger
//! 1999), the update policies of Mogul 1994 as decisions on any clock (`policy`), and the Block
//! Register (Depoutovitch & Warkentin). Everything here runs in-process on an image file or in
//! memory; nothing here knows of FUSE, the mount or the benchmarks (docs/DESIGN.md, "Crates").

pub(crate) mod alloc;
pub use fs::br;
pub use fs::mountopt;
pub use fs::snapshot;
pub(crate) mod cache;
pub mod clock;
pub mod dev;
pub(crate) mod dirhash;
// The files sufs makes: 0600, never through another user's link.
pub mod files;
pub(crate) mod fixed_hash;
pub mod format;
pub mod fs;
pub mod fsck;
pub(crate) mod outgoing;
pub mod policy;
// Progress bars of mkfs, fsck and growfs on a terminal.
pub mod progress;
pub(crate) mod softdep;
pub mod volume;
