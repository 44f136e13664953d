/*
 * membarrier.c - process-wide memory barriers (see os.h): the expensive
 * half of an asymmetric fence, whose cheap half is a compiler barrier.
 * Malloc-free: the allocator's scavenger calls it.
 */
#include "os/os.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

bool mote__os_membarrier_register(void)
{
    /* Private expedited: an IPI to the CPUs running this process's threads
     * (µs), not the global kind, which waits for an RCU grace period (ms). */
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool mote__os_membarrier(void)
{
    return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}
