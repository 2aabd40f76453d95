/* Linux compatibility glue: FreeBSD disk ioctls; on an image file ioctl fails */
#include <sys/ioctl.h>
#define DIOCGSECTORSIZE 0x7fff0001UL
#define DIOCGDELETE 0x7fff0002UL
