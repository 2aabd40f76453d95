#!/bin/sh
# Times mkfs and fsck of an empty 1 TiB sparse image for each sufs binary given, then
# mkfs.ext4 and e2fsck on the same size (docs/performance.md, "mkfs and fsck of a 1 TiB image").
# Usage: scripts/mkfs-fsck-1t.sh DIR SUFS...   (DIR holds the scratch image)
dir=$1; shift
img=$dir/mkfs-fsck-1t.img
t() { label=$1; shift; /usr/bin/time -f "$label: %e s wall, %U+%S s cpu, peak RSS %M KB" "$@" >/dev/null 2>"$img.err"; tail -n 1 "$img.err"; }
for sufs in "$@"; do
  rm -f "$img"
  t "$sufs mkfs" "$sufs" mkfs "$img" --size 1T
  t "$sufs fsck" "$sufs" fsck "$img"
done
rm -f "$img"; truncate -s 1T "$img"
t "mkfs.ext4 -q -F" mkfs.ext4 -q -F "$img"
t "e2fsck -fn" e2fsck -fn "$img"
rm -f "$img" "$img.err"
