#include <endian.h>
#include <byteswap.h>
