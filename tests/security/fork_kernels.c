/* The CPU version of fork_busy's one kernel, for the sim backend: a graph
 * kernel node needs a kernel the sim can run. It does nothing, as its PTX. */
#include "sim_kernel.h"

static void fk(const struct sim_launch *l)
{
	(void)l;
}

SIM_KERNELS_BEGIN
	SIM_KERNEL("fk", fk),
SIM_KERNELS_END
