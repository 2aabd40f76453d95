/* Linux compatibility glue for building FreeBSD fsck_ffs: <sys/param.h> */
#ifndef _FSCK_COMPAT_SYS_PARAM_H_
#define _FSCK_COMPAT_SYS_PARAM_H_
#include_next <sys/param.h>
#include <sys/types.h>
#include <sys/cdefs.h>
#include <stdint.h>
#include <stddef.h>
#include <signal.h>
#include <errno.h>
#include <time.h>
#include <sys/time.h>
#include <byteswap.h>
#include <strings.h>

/* FreeBSD's daddr_t is 64-bit; glibc's is int. */
#define daddr_t int64_t

#ifndef MAXBSIZE
#define MAXBSIZE 65536
#endif
#ifndef MAXPHYS
#define MAXPHYS (1024 * 1024)	/* FreeBSD amd64 MAXPHYS */
#endif
#ifndef DEV_BSHIFT
#define DEV_BSHIFT 9
#endif
#define dbtob(db) ((off_t)(db) << DEV_BSHIFT)
#define btodb(bytes) ((daddr_t)((unsigned long long)(bytes) >> DEV_BSHIFT))
#ifndef roundup2
#define roundup2(x, y) (((x) + ((y) - 1)) & (~((__typeof(x))(y) - 1)))
#endif
#ifndef rounddown
#define rounddown(x, y) (((x) / (y)) * (y))
#endif
#ifndef rounddown2
#define rounddown2(x, y) ((x) & (~((__typeof(x))(y) - 1)))
#endif
#ifndef nitems
#define nitems(x) (sizeof((x)) / sizeof((x)[0]))
#endif
#ifndef NODEV
#define NODEV ((dev_t)-1)
#endif
#ifndef EINTEGRITY
#define EINTEGRITY 1097		/* FreeBSD-only errno, value private here */
#endif
#ifndef EDOOFUS
#define EDOOFUS 1088		/* FreeBSD-only errno, value private here */
#endif
#ifndef SIGINFO
#define SIGINFO SIGUSR1
#endif
#ifndef CLOCK_REALTIME_PRECISE
#define CLOCK_REALTIME_PRECISE CLOCK_REALTIME
#endif
#ifndef timespecadd
#define timespecadd(tsp, usp, vsp)                                      \
	do {                                                            \
		(vsp)->tv_sec = (tsp)->tv_sec + (usp)->tv_sec;          \
		(vsp)->tv_nsec = (tsp)->tv_nsec + (usp)->tv_nsec;       \
		if ((vsp)->tv_nsec >= 1000000000L) {                    \
			(vsp)->tv_sec++;                                \
			(vsp)->tv_nsec -= 1000000000L;                  \
		}                                                       \
	} while (0)
#define timespecsub(tsp, usp, vsp)                                      \
	do {                                                            \
		(vsp)->tv_sec = (tsp)->tv_sec - (usp)->tv_sec;          \
		(vsp)->tv_nsec = (tsp)->tv_nsec - (usp)->tv_nsec;       \
		if ((vsp)->tv_nsec < 0) {                               \
			(vsp)->tv_sec--;                                \
			(vsp)->tv_nsec += 1000000000L;                  \
		}                                                       \
	} while (0)
#endif
#define bswap32(x) bswap_32(x)
#define bswap64(x) bswap_64(x)
#define bswap16(x) bswap_16(x)

/* _WANT_P_OSREL values from FreeBSD <sys/param.h> */
#define P_OSREL_CK_CYLGRP 1200046
#define P_OSREL_CK_SUPERBLOCK 1200051
#define P_OSREL_CK_INODE 1200079

static inline int
fls(int mask)
{
	return (mask == 0 ? 0 : (int)(sizeof(mask) * 8) - __builtin_clz((unsigned)mask));
}

/* FreeBSD libc bits not in glibc */
int getosreldate(void);
const char *getprogname(void);
void setproctitle(const char *fmt, ...);
#endif
