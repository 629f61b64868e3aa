#define LOG_PREFIX "supervisor: "
#include "restore_check.h"
#include "log.h"
#include "oom.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int restore_check_devices_probe(const struct worker_config *wc)
{
	int pipefd[2], count = -EIO, status;
	ssize_t n;
	pid_t pid;

	if (pipe(pipefd))
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return -errno;
	}
	if (pid == 0) {
		struct backend *be = NULL;
		int c = -ENODEV;

		close(pipefd[0]);
		if (!backend_open(wc->backend, &wc->backend_cfg, &be) &&
		    (be->cuInit(0) != CUDA_SUCCESS || be->cuDeviceGetCount(&c) != CUDA_SUCCESS))
			c = -ENODEV;
		if (write(pipefd[1], &c, sizeof(c)) != sizeof(c))
			_exit(1);
		backend_close(be);
		_exit(0);
	}
	close(pipefd[1]);
	do
		n = read(pipefd[0], &count, sizeof(count));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(count))
		count = -EIO;
	close(pipefd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return count;
}

void restore_check_target(const struct worker_config *wc, int backend_devices, struct checkpoint_target *t)
{
	const struct exec_config *e = &wc->exec_cfg;

	*t = (struct checkpoint_target){
		.arena_base = e->arena_base,
		.arena_size = e->arena_size,
		.devices = e->device_count ? e->device_count :
			   (backend_devices < EXEC_DEVICES_MAX ? (unsigned)backend_devices : EXEC_DEVICES_MAX),
		.quota = e->quota,
	};
}

int restore_check_device(const struct worker_config *wc, int device, int backend_devices, char *err,
			 size_t errlen)
{
	const struct exec_config *e = &wc->exec_cfg;
	bool listed = !e->device_count;

	if (backend_devices < 0)
		return 0;       /* not probed: the worker finds out */
	if (device < 0 || device >= backend_devices) {
		snprintf(err, errlen, "no device %d: the %s backend has %d (0-%d)", device, wc->backend,
			 backend_devices, backend_devices - 1);
		return -ENODEV;
	}
	/* A session's devices may be a list (--devices; exec.c, devices_pick). */
	for (unsigned i = 0; i < e->device_count; i++)
		listed |= e->devices[i] == device;
	if (!listed) {
		snprintf(err, errlen, "device %d is not among the devices this ternd gives sessions (--devices)",
			 device);
		return -ENODEV;
	}
	return 0;
}

int restore_check_start(const char *store_dir, const char *name, const struct checkpoint_target *t,
			void (*close_fds)(void *), void *opaque, pid_t *pid)
{
	int pipefd[2];

	if (pipe2(pipefd, O_CLOEXEC))
		return -errno;
	*pid = fork();
	if (*pid < 0) {
		int err = -errno;

		close(pipefd[0]);
		close(pipefd[1]);
		return err;
	}
	if (*pid == 0) {
		char text[RESTORE_CHECK_TEXT_MAX] = "ok";
		size_t len;

		close(pipefd[0]);
		close_fds(opaque);
		oom_score_adj_set(OOM_ADJ_NOTHING_HELD);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		if (checkpoint_restore_check(store_dir, name, t, text, sizeof(text)) && !strcmp(text, "ok"))
			snprintf(text, sizeof(text), "the restore check of '%s' failed", name);
		len = strlen(text);
		_exit(write(pipefd[1], text, len) == (ssize_t)len ? 0 : 1);
	}
	close(pipefd[1]);
	return pipefd[0];
}

int restore_check_answer(int fd, char *err, size_t errlen)
{
	char text[RESTORE_CHECK_TEXT_MAX + 1];
	ssize_t n;

	do
		n = read(fd, text, sizeof(text) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0) {
		snprintf(err, errlen, "the restore check ended without an answer (killed?); nothing was changed");
		return -1;
	}
	text[n] = 0;
	if (!strcmp(text, "ok"))
		return 0;
	snprintf(err, errlen, "%s", text);
	return -1;
}
