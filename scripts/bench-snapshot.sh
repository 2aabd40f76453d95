#!/bin/sh
# Snapshot measurements (soft updates §6): the cost of taking a snapshot of a populated file
# system, sequential and random overwrites with 0, 1 and 5 snapshots, and a background fsck's time
# and its effect on a concurrent writer. Everything through a FUSE mount of an image in $DIR.
# Usage: scripts/bench-snapshot.sh [FILES] [DATA_MB] [OVERWRITE_MB]
set -eu
FILES=${1:-10000}
DATA_MB=${2:-1024}
OW_MB=${3:-256}
SUFS=${SUFS:-target/release/sufs}
DIR=${DIR:-/var/tmp/sufs-bench-snap}
umount -l "$DIR/mnt" 2>/dev/null || true
rm -rf "$DIR"; mkdir -p "$DIR/mnt"
IMG=$DIR/img; MNT=$DIR/mnt
SIZE=$(( (DATA_MB + OW_MB) * 2 + 512 ))M
$SUFS mkfs "$IMG" --size "$SIZE" >/dev/null
$SUFS mount "$IMG" "$MNT" >/dev/null
now() { date +%s.%N; }
el() { echo "$2 - $1" | bc; }
# Populate: FILES small files in 100 directories, and the data in 64 MiB files.
python3 - "$MNT" "$FILES" "$DATA_MB" <<'PY'
import os, sys
mnt, files, data = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(100):
    os.makedirs(f"{mnt}/t/{d}", exist_ok=True)
for i in range(files):
    with open(f"{mnt}/t/{i % 100}/f{i}", "wb") as f:
        f.write(os.urandom(1024))
chunk = os.urandom(1 << 20)
for j in range(data // 64):
    with open(f"{mnt}/data{j}", "wb") as f:
        for _ in range(64):
            f.write(chunk)
PY
sync
t0=$(now); $SUFS snapshot --on "$MNT" create big >/dev/null; t1=$(now)
echo "snapshot create: $FILES files + $DATA_MB MiB on a $SIZE fs: $(el $t0 $t1) s"
$SUFS snapshot --on "$MNT" delete big >/dev/null
dd if=/dev/urandom of="$MNT/ow" bs=1M count="$OW_MB" status=none; sync
for k in 0 1 5; do
  i=0; while [ $i -lt $k ]; do $SUFS snapshot --on "$MNT" create "s$i" >/dev/null; i=$((i+1)); done
  t0=$(now); dd if=/dev/zero of="$MNT/ow" bs=1M count="$OW_MB" conv=notrunc,fsync status=none; t1=$(now)
  seq_s=$(el $t0 $t1)
  i=0; while [ $i -lt $k ]; do $SUFS snapshot --on "$MNT" delete "s$i" >/dev/null; i=$((i+1)); done
  i=0; while [ $i -lt $k ]; do $SUFS snapshot --on "$MNT" create "s$i" >/dev/null; i=$((i+1)); done
  t0=$(now)
  python3 - "$MNT/ow" "$OW_MB" <<'PY'
import os, random, sys
p, mb = sys.argv[1], int(sys.argv[2])
random.seed(1); blk = os.urandom(4096)
fd = os.open(p, os.O_WRONLY)
for _ in range(4000):
    os.pwrite(fd, blk, random.randrange(mb * 256) * 4096)
os.fsync(fd); os.close(fd)
PY
  t1=$(now); rnd_s=$(el $t0 $t1)
  i=0; while [ $i -lt $k ]; do $SUFS snapshot --on "$MNT" delete "s$i" >/dev/null; i=$((i+1)); done
  echo "overwrite with $k snapshots: sequential $OW_MB MiB + fsync $seq_s s; 4000 random 4 KiB + fsync $rnd_s s"
done
# Background fsck with a writer: MiB the writer writes in 10 s, alone and during fsck.
writer() { python3 - "$MNT/wfile" "$1" <<'PY'
import os, sys, time
p, secs = sys.argv[1], float(sys.argv[2]); buf = os.urandom(1 << 20); n = 0
end = time.time() + secs
with open(p, "wb") as f:
    while time.time() < end:
        f.write(buf); n += 1
        if n % 64 == 0:
            f.seek(0)
print(n)
PY
}
alone=$(writer 10)
writer 10 > "$DIR/w.out" & WP=$!
t0=$(now); $SUFS fsck --background "$MNT" > "$DIR/fsck.out" || true; t1=$(now)
wait $WP; during=$(cat "$DIR/w.out")
echo "background fsck: $(el $t0 $t1) s ($(tail -1 "$DIR/fsck.out" | sed 's/.*background fsck: //' | cut -d';' -f1)); writer: $alone MiB in 10 s alone, $during MiB in 10 s with fsck running"
$SUFS umount "$MNT"
$SUFS fsck "$IMG" | tail -1
