/*
 * Linux compatibility glue for FreeBSD fsck_ffs checking a regular image file.
 * Everything here is either unused with -n on an image (background fsck,
 * sysctl, nmount, SU+J journal replay) or a trivial libc replacement.
 */
#define _GNU_SOURCE
#include <sys/types.h>
#include <sys/uio.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct statfs;
struct uufsd;
struct fs;

int getosreldate(void) { return (1500000); }
const char *getprogname(void) { return (program_invocation_short_name); }
void setproctitle(const char *fmt, ...) { (void)fmt; }

int sysctl(const int *n, unsigned int l, void *o, size_t *ol, const void *v, size_t vl)
{ (void)n; (void)l; (void)o; (void)ol; (void)v; (void)vl; errno = ENOSYS; return (-1); }
int sysctlbyname(const char *n, void *o, size_t *ol, const void *v, size_t vl)
{ (void)n; (void)o; (void)ol; (void)v; (void)vl; errno = ENOSYS; return (-1); }
int sysctlnametomib(const char *n, int *m, size_t *s)
{ (void)n; (void)m; (void)s; errno = ENOSYS; return (-1); }
int nmount(struct iovec *i, unsigned int n, int f)
{ (void)i; (void)n; (void)f; errno = ENOSYS; return (-1); }

/* sbin/mount/getmntopts.c: an image file is never a mounted FreeBSD fs here */
struct statfs *getmntpoint(const char *name) { (void)name; return (NULL); }
int chkdoreload(struct statfs *mntp, void (*prtmsg)(const char *, ...))
{ (void)mntp; (void)prtmsg; return (0); }
void build_iovec(struct iovec **iov, int *iovlen, const char *name, void *val, size_t len)
{ (void)iov; (void)iovlen; (void)name; (void)val; (void)len; }

/* lib/libufs/type.c: the uufsd interface is not used by fsck_ffs */
int ufs_disk_write(struct uufsd *disk) { (void)disk; errno = EROFS; return (-1); }

/* sbin/fsck_ffs/suj.c omitted: SU+J journal replay is never run with -f/-n */
#include <stdlib.h>
int suj_check(const char *filesys)
{
	(void)filesys;
	printf("** suj_check: journal replay not built in this Linux port\n");
	return (-1);
}
int64_t suj_checkblkavail(int64_t blkno, long frags)
{ (void)blkno; (void)frags; return (0); }

/* CRC32C (Castagnoli), reflected, poly 0x82F63B78: same contract as
 * FreeBSD calculate_crc32c(crc, buf, len) (no pre/post inversion inside). */
uint32_t
calculate_crc32c(uint32_t crc, const void *buf, size_t len)
{
	static uint32_t table[256];
	static int init;
	const unsigned char *p = buf;
	size_t i;

	if (!init) {
		for (uint32_t n = 0; n < 256; n++) {
			uint32_t c = n;
			for (int k = 0; k < 8; k++)
				c = (c & 1) ? (c >> 1) ^ 0x82F63B78U : c >> 1;
			table[n] = c;
		}
		init = 1;
	}
	for (i = 0; i < len; i++)
		crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return (crc);
}
