/* Linux compatibility glue: struct stat has no st_flags on Linux */
#include_next <sys/stat.h>
#ifndef st_flags
#define st_flags st_mode	/* only tested for SF_SNAPSHOT with -B */
#endif
#ifndef SF_SNAPSHOT
#define SF_SNAPSHOT 0x00200000	/* FreeBSD <sys/stat.h> value */
#endif
