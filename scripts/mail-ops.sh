#!/bin/bash
# Mail delivery, timed per operation: D deliverers (processes), each N messages of 16 KiB into its
# own mailbox (create, write, fsync, close, rename), on a sufs mount, on the floor peer, or
# straight on an image file (the device's bound: the writes and flushes of two ordered stages a
# message, no file system).
#
#   scripts/mail-ops.sh sufs  [D] [N]   # a new 2 GiB image in $WORK; extra mount options in $MOUNT_OPTS
#   scripts/mail-ops.sh floor [D] [N]   # `sufs bench floor-serve`, the same transport
#   scripts/mail-ops.sh ext4 [D] [N]    # kernel ext4 on a loop device (as the bench's ext4 peer)
#   scripts/mail-ops.sh device [D] [N]  # per message: 16 KiB + 4 KiB, fdatasync; 4 KiB + 4 KiB, fdatasync
#
# As root. SUFS (default ./target/release/sufs), WORK (default a new temporary directory).
set -euo pipefail
mode=${1:?sufs, floor, ext4 or device}; D=${2:-4}; N=${3:-600}
SUFS=${SUFS:-./target/release/sufs}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK/m"
deliver() {
python3 - "$1" "$D" "$N" <<'PY'
import os, sys, time, multiprocessing as mp
root, D, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = ["create", "write", "fsync", "close", "rename"]
def deliver(k, q):
    d, body, acc = f"{root}/box{k}", b"m" * 16384, [0.0] * 5
    for i in range(N):
        t = [time.perf_counter()]
        fd = os.open(f"{d}/tmp.{i}", os.O_CREAT | os.O_WRONLY, 0o600); t.append(time.perf_counter())
        os.write(fd, body); t.append(time.perf_counter())
        os.fsync(fd); t.append(time.perf_counter())
        os.close(fd); t.append(time.perf_counter())
        os.rename(f"{d}/tmp.{i}", f"{d}/msg.{i}"); t.append(time.perf_counter())
        for j in range(5):
            acc[j] += t[j + 1] - t[j]
    q.put(acc)
for k in range(D):
    os.makedirs(f"{root}/box{k}", exist_ok=True)
os.sync()
q = mp.Queue()
start = time.time()
ps = [mp.Process(target=deliver, args=(k, q)) for k in range(D)]
[p.start() for p in ps]
tot = [0.0] * 5
for _ in ps:
    tot = [a + b for a, b in zip(tot, q.get())]
[p.join() for p in ps]
dt = time.time() - start
per = ", ".join(f"{n} {1e6 * x / (D * N):.0f}" for n, x in zip(names, tot))
print(f"{D} x {N}: {D * N / dt:.0f} messages/s; per message (us): {per}")
PY
}
case $mode in
sufs)
    "$SUFS" mkfs "$WORK/img" --size 2G >/dev/null
    # shellcheck disable=SC2086
    "$SUFS" mount "$WORK/img" "$WORK/m" ${MOUNT_OPTS:-} --stats "$WORK/st.json" >/dev/null
    deliver "$WORK/m"
    "$SUFS" umount "$WORK/m"
    rm -f "$WORK/img"
    echo "statistics: $WORK/st.json" ;;
ext4)
    truncate -s 2G "$WORK/img"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$WORK/img"
    mount -o loop "$WORK/img" "$WORK/m"
    deliver "$WORK/m"
    umount "$WORK/m"
    rm -f "$WORK/img" ;;
floor)
    "$SUFS" bench floor-serve "$WORK/m" >/dev/null 2>&1 &
    for _ in $(seq 50); do mountpoint -q "$WORK/m" && break; sleep 0.1; done
    deliver "$WORK/m"
    umount "$WORK/m"; wait ;;
device)
python3 - "$WORK/img" "$D" "$N" <<'PY'
import os, sys, time, threading
path, D, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
os.ftruncate(fd, 2 << 30)
data, blk = b"m" * 16384, b"i" * 4096
def run(k):
    base = k * (256 << 20)
    for i in range(N):
        os.pwrite(fd, data, base + i * 32768)
        os.pwrite(fd, blk, base + (200 << 20) + (i // 128) * 4096)
        os.fdatasync(fd)
        os.pwrite(fd, blk, base + (200 << 20) + (i // 128) * 4096)
        os.pwrite(fd, blk, base + (210 << 20) + (i // 64) * 4096)
        os.fdatasync(fd)
start = time.time()
ts = [threading.Thread(target=run, args=(k,)) for k in range(D)]
[t.start() for t in ts]; [t.join() for t in ts]
dt = time.time() - start
print(f"{D} x {N}: {D * N / dt:.0f} messages/s ({2 * D * N / dt:.0f} flushes/s) on the image file alone")
PY
    rm -f "$WORK/img" ;;
*) echo "sufs, floor, ext4 or device" >&2; exit 2 ;;
esac
