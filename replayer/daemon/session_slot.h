/* What the supervisor knows of each session: one slot per worker, in a shared
 * anonymous mapping made before the workers are forked. The worker writes its
 * counters; the supervisor reads them for `ternd status` and frees the slot
 * when it reaps the worker. Fields are written by one side only, so relaxed
 * atomics are enough.
 */
#ifndef TERN_SESSION_SLOT_H
#define TERN_SESSION_SLOT_H

#include <stdatomic.h>
#include <stdint.h>

#define SESSION_SLOTS 256
#define SESSION_ID_MAX 256     /* 255 bytes, as the control messages and the shim hold */

enum session_state {
	SESSION_FREE = 0,
	SESSION_STARTING = 1,   /* forked, hello not yet accepted */
	SESSION_ACTIVE = 2,
};

struct session_slot {
	_Atomic uint32_t state;
	_Atomic int32_t pid;
	_Atomic int32_t guest_pid;  /* what its hello said; 0 before (ckpt dump finds sessions by it) */
	char id[SESSION_ID_MAX];
	char peer[64];
	_Atomic int32_t device;
	_Atomic uint64_t memory;    /* device bytes mapped */
	_Atomic uint64_t calls;
	_Atomic uint64_t round_trips;   /* calls answered; the rest were deferred */
	_Atomic uint64_t started;   /* CLOCK_REALTIME seconds */
};

#endif
