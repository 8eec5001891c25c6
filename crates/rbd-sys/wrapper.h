/* The C APIs farflash uses: librados (cluster connection, pool I/O context)
 * and librbd (images, asynchronous I/O, notifications). */
#include <rados/librados.h>
#include <rbd/librbd.h>
