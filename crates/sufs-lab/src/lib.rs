//! sufs's lab: simulation and measurement over the file system library (`sufs_fs`). The crash
//! tester (`crashtest`: workloads over a recording device, every crash state judged by fsck and
//! the workloads' promises), the benchmarks (`bench`: the update policies and the orderings on
//! the disk model and on image files; `bench_peers`: sufs against other file systems through
//! their mounts; `bench_br`: the Block Register's volume snapshots; `bench_scale`: sufs at
//! scale beside ext4's tools) and the papers' runs (`papers`). The simulated devices they run
//! on are in `sufs_fs::dev`. Nothing in the file system or the mount imports the lab.

pub mod bench;
pub mod bench_br;
pub mod bench_peers;
pub mod bench_scale;
pub mod crashtest;
pub mod papers;
