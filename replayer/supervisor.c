#define LOG_PREFIX "supervisor: "
#include "supervisor.h"
#include "control.h"
#include "log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct supervisor {
	struct supervisor_config *cfg;
	int listen_fd[SUPERVISOR_LISTEN_MAX];
	int control_fd;
	int signal_fd;
	struct session_slot *slots;
	unsigned long sessions_started;
};

static struct session_slot *slot_claim(struct supervisor *sv)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++) {
		uint32_t expect = SESSION_FREE;

		if (atomic_compare_exchange_strong(&sv->slots[i].state, &expect, SESSION_STARTING)) {
			struct session_slot *s = &sv->slots[i];

			memset(s->id, 0, sizeof(s->id));
			memset(s->peer, 0, sizeof(s->peer));
			atomic_store(&s->pid, 0);
			atomic_store(&s->device, -1);
			atomic_store(&s->memory, 0);
			atomic_store(&s->calls, 0);
			atomic_store(&s->started, (uint64_t)time(NULL));
			return s;
		}
	}
	return NULL;
}

static void session_start(struct supervisor *sv, int listen_idx)
{
	const struct transport_url *url = &sv->cfg->listen[listen_idx];
	struct worker_config wcfg = sv->cfg->worker;
	struct session_slot *slot;
	int fd = transport_accept(sv->listen_fd[listen_idx]);
	pid_t pid;

	if (fd < 0) {
		pr_warn("accept failed: %s", strerror(-fd));
		return;
	}
	slot = slot_claim(sv);
	if (!slot) {
		pr_warn("%d sessions already: connection refused", SESSION_SLOTS);
		close(fd);
		return;
	}
	wcfg.require_token = transport_url_needs_token(url);
	wcfg.token = sv->cfg->token[0] ? sv->cfg->token : NULL;
	transport_url_format(url, slot->peer, sizeof(slot->peer));
	pid = fork();
	if (pid < 0) {
		pr_err("fork failed: %s", strerror(errno));
		atomic_store(&slot->state, SESSION_FREE);
		close(fd);
		return;
	}
	if (pid == 0) {
		int status;

		/* The worker keeps only its connection. */
		for (unsigned i = 0; i < sv->cfg->listen_count; i++)
			close(sv->listen_fd[i]);
		close(sv->control_fd);
		close(sv->signal_fd);
		sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGPIPE, SIG_IGN);
		status = worker_run(&wcfg, fd, slot);
		_exit(status);
	}
	atomic_store(&slot->pid, pid);
	sv->sessions_started++;
	close(fd);
}

static struct session_slot *slot_by_pid(struct supervisor *sv, pid_t pid)
{
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) == pid)
			return &sv->slots[i];
	return NULL;
}

static void workers_reap(struct supervisor *sv)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct session_slot *s = slot_by_pid(sv, pid);
		const char *id = s && s->id[0] ? s->id : "(no hello)";

		if (WIFSIGNALED(status))
			pr_warn("session %s: worker %d killed by signal %d", id, pid, WTERMSIG(status));
		else if (WEXITSTATUS(status))
			pr_info("session %s: worker %d exited with %d", id, pid, WEXITSTATUS(status));
		else
			pr_info("session %s: worker %d done", id, pid);
		if (s)
			atomic_store(&s->state, SESSION_FREE);
	}
}

/* The control reply for "status": one JSON object. */
static size_t status_json(struct supervisor *sv, char *buf, size_t cap)
{
	size_t n = 0;
	bool first = true;

	n += (size_t)snprintf(buf + n, cap - n, "{\"pid\":%d,\"backend\":\"%s\",\"sessions_started\":%lu,\"sessions\":[",
			      (int)getpid(), sv->cfg->worker.backend, sv->sessions_started);
	for (unsigned i = 0; i < SESSION_SLOTS && n < cap; i++) {
		struct session_slot *s = &sv->slots[i];
		uint32_t state = atomic_load(&s->state);

		if (state == SESSION_FREE || !atomic_load(&s->pid))
			continue;
		n += (size_t)snprintf(buf + n, cap - n,
			"%s{\"id\":\"%s\",\"pid\":%d,\"state\":\"%s\",\"device\":%d,\"memory\":%llu,"
			"\"calls\":%llu,\"started\":%llu,\"listener\":\"%s\"}",
			first ? "" : ",", s->id, atomic_load(&s->pid),
			state == SESSION_ACTIVE ? "active" : "starting", atomic_load(&s->device),
			(unsigned long long)atomic_load(&s->memory), (unsigned long long)atomic_load(&s->calls),
			(unsigned long long)atomic_load(&s->started), s->peer);
		first = false;
	}
	if (n < cap)
		n += (size_t)snprintf(buf + n, cap - n, "]}\n");
	return n < cap ? n : cap - 1;
}

static void control_serve(struct supervisor *sv)
{
	char cmd[256];
	static char reply[SESSION_SLOTS * 512 + 1024];
	int fd = transport_accept(sv->control_fd);
	size_t n;

	if (fd < 0)
		return;
	if (control_line_read(fd, cmd, sizeof(cmd), 2000) < 0) {
		close(fd);
		return;
	}
	if (!strcmp(cmd, "status"))
		n = status_json(sv, reply, sizeof(reply));
	else
		n = (size_t)snprintf(reply, sizeof(reply), "{\"error\":\"unknown command\"}\n");
	control_write_all(fd, reply, n);
	close(fd);
}

static void workers_stop(struct supervisor *sv)
{
	struct timespec start, now;

	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) > 0)
			kill(atomic_load(&sv->slots[i].pid), SIGTERM);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		bool left = false;

		workers_reap(sv);
		for (unsigned i = 0; i < SESSION_SLOTS; i++)
			left |= atomic_load(&sv->slots[i].state) != SESSION_FREE;
		if (!left)
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
		    sv->cfg->shutdown_grace_ms)
			break;
		usleep(10000);
	}
	for (unsigned i = 0; i < SESSION_SLOTS; i++)
		if (atomic_load(&sv->slots[i].state) != SESSION_FREE && atomic_load(&sv->slots[i].pid) > 0) {
			pr_warn("worker %d did not stop: killed", atomic_load(&sv->slots[i].pid));
			kill(atomic_load(&sv->slots[i].pid), SIGKILL);
		}
	while (waitpid(-1, NULL, 0) > 0)
		;
}

int supervisor_run(struct supervisor_config *cfg)
{
	struct supervisor sv = { .cfg = cfg, .control_fd = -1, .signal_fd = -1 };
	struct pollfd pfd[SUPERVISOR_LISTEN_MAX + 2];
	struct transport_url control_url = { .kind = TRANSPORT_UNIX };
	sigset_t mask;
	unsigned i;
	int status = 1;
	bool running = true;

	for (i = 0; i < SUPERVISOR_LISTEN_MAX; i++)
		sv.listen_fd[i] = -1;
	sv.slots = mmap(NULL, SESSION_SLOTS * sizeof(*sv.slots), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sv.slots == MAP_FAILED) {
		pr_err("cannot map the session table: %s", strerror(errno));
		return 1;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sv.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	for (i = 0; i < cfg->listen_count; i++) {
		char text[300];

		transport_url_format(&cfg->listen[i], text, sizeof(text));
		if (transport_url_needs_token(&cfg->listen[i]) && !cfg->token[0])
			pr_warn("%s needs a token (--token-file): every guest will be refused", text);
		sv.listen_fd[i] = transport_listen(&cfg->listen[i]);
		if (sv.listen_fd[i] < 0) {
			pr_err("cannot listen on %s: %s", text, strerror(-sv.listen_fd[i]));
			goto out;
		}
		pr_info("listening on %s", text);
	}
	snprintf(control_url.path, sizeof(control_url.path), "%s", cfg->control_path);
	sv.control_fd = transport_listen(&control_url);
	if (sv.control_fd < 0) {
		pr_err("cannot listen on the control socket %s: %s", cfg->control_path, strerror(-sv.control_fd));
		goto out;
	}
	pr_info("ternd ready: backend %s, control %s", cfg->worker.backend, cfg->control_path);
	while (running) {
		unsigned n = 0;

		for (i = 0; i < cfg->listen_count; i++)
			pfd[n++] = (struct pollfd){ .fd = sv.listen_fd[i], .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = sv.control_fd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = sv.signal_fd, .events = POLLIN };
		if (poll(pfd, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			pr_err("poll: %s", strerror(errno));
			break;
		}
		for (i = 0; i < cfg->listen_count; i++)
			if (pfd[i].revents & POLLIN)
				session_start(&sv, (int)i);
		if (pfd[cfg->listen_count].revents & POLLIN)
			control_serve(&sv);
		if (pfd[cfg->listen_count + 1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sv.signal_fd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGCHLD) {
					workers_reap(&sv);
				} else if (si.ssi_signo != SIGHUP) {
					pr_info("signal %u: shutting down", si.ssi_signo);
					running = false;
				}
			}
		}
	}
	status = 0;
out:
	for (i = 0; i < cfg->listen_count; i++) {
		if (sv.listen_fd[i] >= 0)
			close(sv.listen_fd[i]);
		if (cfg->listen[i].kind == TRANSPORT_UNIX && sv.listen_fd[i] >= 0)
			unlink(cfg->listen[i].path);
	}
	if (sv.control_fd >= 0) {
		close(sv.control_fd);
		unlink(cfg->control_path);
	}
	workers_stop(&sv);
	if (sv.signal_fd >= 0)
		close(sv.signal_fd);
	munmap(sv.slots, SESSION_SLOTS * sizeof(*sv.slots));
	pr_info("ternd stopped");
	return status;
}
