/* Checks made before a restore stops anything (docs/checkpoint.md,
 * "Restores that fail safely").
 *
 * The supervisor never loads a backend (the CUDA driver must be initialised
 * after fork) and must not stall on a large snapshot, so both checks run in
 * children: the device probe once at start, and one restore check per
 * `ckpt restore` or `ckpt resume`, whose answer the supervisor polls for.
 * Supervisor thread only.
 */
#ifndef TERN_RESTORE_CHECK_H
#define TERN_RESTORE_CHECK_H

#include <sys/types.h>

#include "checkpoint.h"
#include "worker.h"

/* The answer of a check, at most this long (one pipe write, so atomic). */
#define RESTORE_CHECK_TEXT_MAX 480

/* How many devices the backend of @wc has, counted in a child that opens
 * it and exits; -errno when the child could not tell. Blocks until the
 * child is done (at start, before any worker exists). */
int restore_check_devices_probe(const struct worker_config *wc);

/* The checkpoint_target a worker of @wc would be, on a backend of
 * @backend_devices devices. */
void restore_check_target(const struct worker_config *wc, int backend_devices, struct checkpoint_target *t);

/* Whether a worker of @wc can open backend device @device (of
 * @backend_devices; negative: unknown, not checked). 0 or -ENODEV with @err. */
int restore_check_device(const struct worker_config *wc, int device, int backend_devices, char *err,
			 size_t errlen);

/* Start checkpoint_restore_check of snapshot @name of @store_dir for @t in a
 * child. @close_fds(@opaque) runs first in the child, to drop the
 * supervisor's descriptors. Returns the read end of a pipe that becomes
 * readable when the answer is there (give it to restore_check_answer) and
 * sets *@pid, or -errno. */
int restore_check_start(const char *store_dir, const char *name, const struct checkpoint_target *t,
			void (*close_fds)(void *), void *opaque, pid_t *pid);

/* Read the answer on @fd and close it: 0 when the restore may go ahead,
 * else -1 with @err (NUL-terminated) saying why. The child is reaped with
 * the workers (waitpid(-1)). */
int restore_check_answer(int fd, char *err, size_t errlen);

#endif
