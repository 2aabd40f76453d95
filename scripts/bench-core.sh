#!/usr/bin/env bash
# The core benchmark, through the FUSE mount: create 10,000 empty files, write and
# read back a 1 GiB file, remove the tree; for sufs sync and async and for kernel ext4 on a loop
# device of the same size. Prints elapsed seconds and device writes for each.
# Usage: scripts/bench-core.sh [SIZE_MB_OF_BIG_FILE]   (run as root, from the repository)
set -euo pipefail
BIG_MB=${1:-1024}
SUFS=${SUFS:-$(pwd)/target/release/sufs}
W=$(mktemp -d /var/tmp/sufs-bench.XXXX)
trap 'umount "$W/mnt" 2>/dev/null || true; [ -n "${LOOP:-}" ] && losetup -d "$LOOP" 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/mnt"

t() { local s=$(date +%s.%N); "$@"; echo "$(date +%s.%N) - $s" | bc; }
workload() {
  local m=$1
  local c w r d
  c=$(t bash -c "mkdir $m/t; cd $m/t; for i in \$(seq 1 10000); do : > f\$i; done")
  w=$(t bash -c "dd if=/dev/zero of=$m/big bs=1M count=$BIG_MB conv=fsync status=none")
  sync; echo 3 > /proc/sys/vm/drop_caches
  r=$(t bash -c "cat $m/big > /dev/null")
  d=$(t bash -c "rm -rf $m/t $m/big")
  echo "$c $w $r $d"
}

printf "%-12s %10s %10s %10s %10s %12s\n" fs create10k write read remove dev_writes
for ord in softdep sync async; do
  rm -f "$W/img"
  "$SUFS" mkfs "$W/img" --size 2G >/dev/null
  "$SUFS" mount "$W/img" "$W/mnt" --ordering $ord --stats "$W/stats.json" >/dev/null
  res=$(workload "$W/mnt")
  "$SUFS" umount "$W/mnt"
  writes=$(python3 -c "import json;d=json.load(open('$W/stats.json'))['device'];print(d['sync_writes']+d['async_writes'], '(%d sync)'%d['sync_writes'])")
  printf "%-12s %10s %10s %10s %10s %12s\n" "sufs-$ord" $res "$writes"
done
rm -f "$W/img"; truncate -s 2G "$W/img"
mkfs.ext4 -q "$W/img"
LOOP=$(losetup -f --show "$W/img")
mount "$LOOP" "$W/mnt"
before=$(awk '{print $5, $7}' /sys/block/$(basename $LOOP)/stat)
res=$(workload "$W/mnt")
umount "$W/mnt"
after=$(awk '{print $5, $7}' /sys/block/$(basename $LOOP)/stat)
set -- $before $after
printf "%-12s %10s %10s %10s %10s %12s\n" "ext4-kernel" $res "$(( $3 - $1 )) requests, $(( ($4 - $2) / 8 )) 4K blocks"
