/* Linux compatibility glue: FreeBSD sbin/mount/mntopts.h functions fsck_ffs uses */
#ifndef _FSCK_COMPAT_MNTOPTS_H_
#define _FSCK_COMPAT_MNTOPTS_H_
#include <sys/mount.h>
struct statfs *getmntpoint(const char *);
int chkdoreload(struct statfs *, void (*)(const char *, ...));
void build_iovec(struct iovec **, int *, const char *, void *, size_t);
#endif
