/* For the shm_chan tests: the worker side of a channel echoes each
 * length-prefixed message back until one of length 0. A thread function. */
#ifndef TERN_TEST_SHM_ECHO_H
#define TERN_TEST_SHM_ECHO_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "shm_chan.h"

static void *shm_echo(void *arg)
{
	struct shm_chan *c = arg;
	uint32_t len;
	uint8_t *buf;

	while (shm_chan_recv(c, &len, sizeof(len)) == 0 && len) {
		struct iovec iov[2] = { { &len, sizeof(len) }, { NULL, len } };

		buf = malloc(len);
		if (!buf || shm_chan_recv(c, buf, len))
			break;
		iov[1].iov_base = buf;
		shm_chan_send(c, iov, 2);
		free(buf);
	}
	return NULL;
}

#endif
