#!/usr/bin/env bash
# Before/after through the FUSE mount: two sufs binaries, each on a fresh image, alternating,
# ROUNDS times, on the same workload: 10,000 creates in one directory, `ls -l` of it twice,
# a 256 MiB file written then read twice, 4 parallel clients creating 2,500 files each, remove
# everything; then a cold `ls -l` of 10,000 files (dentries and inodes dropped) five times.
# Usage: scripts/fuse-ab.sh OLD_SUFS NEW_SUFS [ROUNDS]   (root)
set -euo pipefail
A=${1:?old sufs binary} B=${2:?new sufs binary} ROUNDS=${3:-3}
W=$(mktemp -d /var/tmp/sufs-ab.XXXX)
trap 'umount -l "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
t() { local s=$(date +%s.%N); "$@"; echo "$(date +%s.%N) - $s" | bc; }
load() {
  local m=$1 c s w r p d
  c=$(t bash -c "mkdir $m/t; cd $m/t; for i in \$(seq 1 10000); do : > f\$i; done")
  s=$(t bash -c "ls -l $m/t > /dev/null; ls -l $m/t >/dev/null")
  w=$(t bash -c "dd if=/dev/zero of=$m/big bs=1M count=256 status=none")
  r=$(t bash -c "cat $m/big > /dev/null; cat $m/big > /dev/null")
  p=$(t bash -c "for j in 1 2 3 4; do (mkdir $m/p\$j; cd $m/p\$j; for i in \$(seq 1 2500); do : > f\$i; done) & done; wait")
  d=$(t bash -c "rm -rf $m/t $m/big $m/p1 $m/p2 $m/p3 $m/p4")
  printf "create10k %.2f  ls-l-x2 %.2f  write256M %.2f  read256Mx2 %.2f  par4x2500 %.2f  remove %.2f\n" $c $s $w $r $p $d
}
fresh() { rm -f "$W/img"; "$1" mkfs "$W/img" --size 2G >/dev/null; "$1" mount "$W/img" "$W/mnt" >/dev/null; }
for round in $(seq 1 "$ROUNDS"); do
  for bin in "$A" "$B"; do
    fresh "$bin"
    echo "$(basename "$bin"): $(load "$W/mnt")"
    "$bin" umount "$W/mnt"
  done
done
for bin in "$A" "$B"; do
  fresh "$bin"
  mkdir "$W/mnt/t"; (cd "$W/mnt/t"; for i in $(seq 1 10000); do : > f$i; done)
  out=""
  for k in 1 2 3 4 5; do
    sync; echo 2 > /proc/sys/vm/drop_caches; sleep 1.1
    out="$out $(t bash -c "ls -l $W/mnt/t > /dev/null")"
  done
  echo "$(basename "$bin"): cold ls -l of 10k files (s):$out"
  "$bin" umount "$W/mnt"
done
