#!/bin/sh
# Builds FreeBSD's own fsck_ffs on Linux from a FreeBSD source tree, to check images sufs wrote
# with the checker FreeBSD boots with (docs/ufs2.md, "FreeBSD's fsck_ffs").
#
#   scripts/fsck-ffs-linux/build.sh FREEBSD_SRC [OUT_DIR]     # then: OUT_DIR/fsck_ffs -n -f IMAGE
#
# FREEBSD_SRC is a checkout of FreeBSD's sources (sbin/fsck_ffs, lib/libufs and sys/ufs are
# read from it; nothing of it is copied here). compat/ is this project's glue: the BSD macros
# and headers glibc lacks, and stubs for what a check of an image file never reaches (sysctl,
# nmount, the SU+J journal replay of suj.c, which -n and -f never run), plus a CRC32C of its own
# for the check hashes. One change is made to FreeBSD's code, in a copy of setup.c: an image
# file is checked without asking "IS NOT A DISK DEVICE, CONTINUE?" (with -n the answer is no).
# Needs a C compiler and libbsd-dev (sys/queue.h). fsck_ffs -n exits 0 even when it answered
# "no": read its output.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 FREEBSD_SRC [OUT_DIR]" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${2:-$PWD/fsck_ffs-linux}
for f in sbin/fsck_ffs/setup.c lib/libufs/libufs.h sys/ufs/ffs/fs.h sys/ufs/ufs/dinode.h; do
	[ -f "$SRC/$f" ] || { echo "$0: $SRC/$f is missing: not a FreeBSD source tree" >&2; exit 1; }
done
mkdir -p "$OUT/obj" "$OUT/inc/ufs/ufs" "$OUT/src"
cp -R "$HERE/compat/." "$OUT/inc/"
ln -sfn "$SRC/sys/ufs/ffs" "$OUT/inc/ufs/ffs"
ln -sf "$SRC/sys/ufs/ufs/dinode.h" "$SRC/sys/ufs/ufs/dir.h" "$OUT/inc/ufs/ufs/"
# fsck_ffs's sources in a copy, setup.c's disk-device question skipped for an image file.
cp "$SRC"/sbin/fsck_ffs/*.c "$SRC"/sbin/fsck_ffs/*.h "$OUT/src/"
[ -f "$SRC/sbin/fsck/fsutil.h" ] && cp "$SRC/sbin/fsck/fsutil.h" "$OUT/src/"
[ -f "$OUT/src/fsutil.c" ] || cp "$SRC/sbin/fsck/fsutil.c" "$OUT/src/"
awk '/IS NOT A DISK DEVICE/ && !done { print "#ifndef FSCK_LINUX_IMAGE"; print; getline; print; getline; print; print "#endif"; done = 1; next } { print }' \
	"$SRC/sbin/fsck_ffs/setup.c" > "$OUT/src/setup.c"
grep -q FSCK_LINUX_IMAGE "$OUT/src/setup.c" || { echo "$0: setup.c's disk-device question not found" >&2; exit 1; }
CC=${CC:-cc}
CFLAGS="-O1 -g -std=gnu11 -D_GNU_SOURCE -DFSCK_LINUX_IMAGE -w -fno-strict-aliasing"
INC="-I$OUT/inc -I$OUT/src -I$SRC/lib/libufs"
OBJS=""
for f in dir ea fsutil inode main pass1 pass1b pass2 pass3 pass4 pass5 setup utilities gjournal globs; do
	$CC $CFLAGS $INC -c "$OUT/src/$f.c" -o "$OUT/obj/$f.o"
	OBJS="$OBJS $OUT/obj/$f.o"
done
for f in block cgroup sblock; do
	$CC $CFLAGS -D_LIBUFS -include sys/param.h -include ufs/ffs/fs.h $INC -c "$SRC/lib/libufs/$f.c" -o "$OUT/obj/$f.o"
	OBJS="$OBJS $OUT/obj/$f.o"
done
for f in ffs_subr ffs_tables; do
	$CC $CFLAGS $INC -c "$SRC/sys/ufs/ffs/$f.c" -o "$OUT/obj/$f.o"
	OBJS="$OBJS $OUT/obj/$f.o"
done
$CC $CFLAGS $INC -c "$HERE/compat/compat.c" -o "$OUT/obj/compat.o"
$CC -o "$OUT/fsck_ffs" $OBJS "$OUT/obj/compat.o"
echo "built $OUT/fsck_ffs (run: $OUT/fsck_ffs -n -f IMAGE)"
