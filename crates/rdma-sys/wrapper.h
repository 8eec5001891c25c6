/* The headers farflash-rdma-sys binds: rdma-core's verbs and connection
 * manager (Debian: libibverbs-dev, librdmacm-dev). */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
