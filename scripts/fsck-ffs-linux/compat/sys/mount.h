/* Linux compatibility glue: the bits of FreeBSD <sys/mount.h> fsck_ffs uses */
#ifndef _FSCK_COMPAT_SYS_MOUNT_H_
#define _FSCK_COMPAT_SYS_MOUNT_H_
#include <sys/param.h>
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <stdint.h>
#define MNAMELEN 1024
struct statfs {
	uint64_t f_flags;
	char f_mntfromname[MNAMELEN];
	char f_mntonname[MNAMELEN];
};
#define MNT_RDONLY 0x0000000000000001ULL
#define MNT_ROOTFS 0x0000000000004000ULL
#define MNT_SOFTDEP 0x0000000000200000ULL
int nmount(struct iovec *, unsigned int, int);
#endif
