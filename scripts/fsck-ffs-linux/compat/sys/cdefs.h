/* Linux compatibility glue for building FreeBSD fsck_ffs: <sys/cdefs.h> */
#ifndef _FSCK_COMPAT_SYS_CDEFS_H_
#define _FSCK_COMPAT_SYS_CDEFS_H_
#include_next <sys/cdefs.h>
#ifndef __FBSDID
#define __FBSDID(s) struct __hack
#endif
#ifndef __dead2
#define __dead2 __attribute__((__noreturn__))
#endif
#ifndef __unused
#define __unused __attribute__((__unused__))
#endif
#ifndef __printflike
#define __printflike(a, b) __attribute__((__format__(__printf__, a, b)))
#endif
#ifndef __aligned
#define __aligned(x) __attribute__((__aligned__(x)))
#endif
#ifndef __offsetof
#define __offsetof(type, field) __builtin_offsetof(type, field)
#endif
#endif
