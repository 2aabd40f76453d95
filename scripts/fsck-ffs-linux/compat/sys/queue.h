/* Linux compatibility glue: use libbsd's FreeBSD-style queue.h */
#include <bsd/sys/queue.h>
