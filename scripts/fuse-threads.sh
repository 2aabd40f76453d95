#!/usr/bin/env bash
# FUSE request threads against round-trip cost: for each thread count given, a fresh 2 GiB
# image mounted with `--threads N`, 10,000 creates in one directory, then fio's random 4 KiB
# reads (psync) of a 256 MiB file for 4 s. Run it with idle CPUs halting and polling to see
# both sides (on a VM with cpuidle-haltpoll: /sys/module/haltpoll/parameters/guest_halt_poll_ns).
# Usage: scripts/fuse-threads.sh SUFS_BINARY THREADS...   (root, fio installed)
set -euo pipefail
S=${1:?sufs binary}; shift
W=$(mktemp -d /var/tmp/sufs-threads.XXXX)
mkdir "$W/m"
trap 'umount -l "$W/m" 2>/dev/null || true; rm -rf "$W"' EXIT
for n in "$@"; do
  "$S" mkfs "$W/img" --size 2G >/dev/null
  "$S" mount --threads "$n" "$W/img" "$W/m" >/dev/null
  s=$(date +%s.%N)
  (mkdir "$W/m/t"; cd "$W/m/t"; for i in $(seq 1 10000); do : > "f$i"; done)
  c=$(echo "$(date +%s.%N) - $s" | bc)
  fio --name=w --bs=1M --rw=write --size=256M --filename="$W/m/f" --end_fsync=1 --output-format=terse >/dev/null
  r=$(fio --name=r --bs=4k --ioengine=psync --rw=randread --size=256M --filename="$W/m/f" --runtime=4 \
        --output-format=json | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))')
  printf "threads=%s  10,000 creates %.2f s  random 4 KiB reads %s/s\n" "$n" "$c" "$r"
  "$S" umount "$W/m"
  rm -f "$W/img"
done
