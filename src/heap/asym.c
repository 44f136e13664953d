/*
 * asym.c - the heavy half of asym.h's try-lock: the process's membarrier
 * registration and the fence the scavenger pays for both sides.
 * mote__heap_asym_light goes from false to true once (a fork child may
 * set it back while it is the only thread); readers are owners choosing
 * their light fence, and either choice is safe once it is true.
 */
#include "heap/asym.h"

#include "os/os.h"

bool mote__heap_asym_light;

void mote__heap_asym_init(void)
{
    /* Registered before the flag says so: an owner that reads true knows
     * every heavy fence from now on is a membarrier. */
    STORE(&mote__heap_asym_light, mote__os_membarrier_register(), SEQ_CST);
}

void mote__heap_asym_heavy_fence(void)
{
#ifndef HEAP_ASYM_STRICT /* (there the flags are seq_cst accesses) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
    /* Fails only when not registered, and then every owner's light fence
     * is a full one: the fence above is the heavy fence's whole job. */
    (void)mote__os_membarrier();
}
