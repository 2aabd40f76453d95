//! Simulation and measurement: the crash tester (`crashtest`: workloads over a recording device,
//! every crash state judged by fsck and the workloads' promises) and the benchmarks (`bench`:
//! the update policies and the orderings on the disk model and on image files; `bench_peers`:
//! sufs against other file systems through their mounts; `bench_br`: the Block Register's
//! volume snapshots). The simulated devices they run on are in `dev`.

pub mod bench;
pub mod bench_br;
pub mod bench_peers;
pub mod bench_scale;
pub mod crashtest;
pub mod papers;
