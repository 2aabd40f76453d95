/* Linux compatibility glue: FreeBSD sysctl(3) (only used for background fsck) */
#ifndef _FSCK_COMPAT_SYS_SYSCTL_H_
#define _FSCK_COMPAT_SYS_SYSCTL_H_
#include <stddef.h>
int sysctl(const int *, unsigned int, void *, size_t *, const void *, size_t);
int sysctlbyname(const char *, void *, size_t *, const void *, size_t);
int sysctlnametomib(const char *, int *, size_t *);
#endif
