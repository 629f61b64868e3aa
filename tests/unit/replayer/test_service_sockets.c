/* Unit tests for socket activation (replayer/daemon/service_sockets.h): what
 * the variables say is taken, checked and matched, and the variables are
 * gone afterwards in every case, so that no child sees them. The hostile
 * descriptors themselves are tests/service/activation-check's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "service_sockets.h"

static char dir[] = "/tmp/tern-sockets-XXXXXX";

static void env_set(const char *pid, const char *fds, const char *names)
{
	char own[32];

	snprintf(own, sizeof(own), "%d", (int)getpid());
	setenv("LISTEN_PID", pid ? pid : own, 1);
	setenv("LISTEN_FDS", fds, 1);
	if (names)
		setenv("LISTEN_FDNAMES", names, 1);
	else
		unsetenv("LISTEN_FDNAMES");
}

static void env_gone(void)
{
	assert_null(getenv("LISTEN_PID"));
	assert_null(getenv("LISTEN_FDS"));
	assert_null(getenv("LISTEN_FDNAMES"));
}

/* A listening unix socket bound to DIR/@name, at descriptor @at. */
static void listener_at(int at, const char *name, char *path, size_t cap)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	snprintf(path, cap, "%s/%s", dir, name);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0);
	if (fd != at) {
		assert_int_equal(dup2(fd, at), at);
		close(fd);
	}
}

static void test_two_taken_and_claimed(void **state)
{
	struct service_sockets ss;
	char g[256], c[256], err[512];

	(void)state;
	listener_at(3, "g.sock", g, sizeof(g));
	listener_at(4, "c.sock", c, sizeof(c));
	env_set(NULL, "2", "listen:control");
	assert_int_equal(service_sockets_take(&ss, err, sizeof(err)), 0);
	env_gone();
	assert_int_equal(ss.count, 2);
	assert_string_equal(ss.s[0].path, g);
	assert_int_equal(ss.s[1].role, SERVICE_SOCKET_CONTROL);
	assert_true(fcntl(3, F_GETFD) & FD_CLOEXEC);
	/* Not there, the wrong role, then right, then twice. */
	assert_int_equal(service_sockets_claim(&ss, "/nowhere", SERVICE_SOCKET_LISTEN, err, sizeof(err)), -ENOENT);
	assert_int_equal(service_sockets_claim(&ss, c, SERVICE_SOCKET_LISTEN, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "named control"));
	assert_int_equal(service_sockets_claim(&ss, g, SERVICE_SOCKET_LISTEN, err, sizeof(err)), 3);
	assert_int_equal(service_sockets_claim(&ss, g, SERVICE_SOCKET_LISTEN, err, sizeof(err)), -EINVAL);
	assert_int_equal(service_sockets_unclaimed(&ss, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "fd 4 (named control), bound to"));
	assert_int_equal(service_sockets_claim(&ss, c, SERVICE_SOCKET_CONTROL, err, sizeof(err)), 4);
	assert_int_equal(service_sockets_unclaimed(&ss, err, sizeof(err)), 0);
	close(3);
	close(4);
}

static void test_other_pid_ignored(void **state)
{
	struct service_sockets ss;
	char g[256], err[512];

	(void)state;
	listener_at(3, "o.sock", g, sizeof(g));
	env_set("1", "1", NULL);
	assert_int_equal(service_sockets_take(&ss, err, sizeof(err)), 0);
	env_gone();
	assert_int_equal(ss.count, 0);
	/* Left alone: not close-on-exec'd, not closed. */
	assert_int_equal(fcntl(3, F_GETFD), 0);
	close(3);
}

static void test_refusals_unset_too(void **state)
{
	static const struct {
		const char *pid, *fds, *names, *said;
	} cases[] = {
		{ NULL, "1x", NULL, "LISTEN_FDS=1x" },
		{ NULL, " 1", NULL, "LISTEN_FDS= 1" },
		{ NULL, "17", NULL, "more than the 16" },
		{ NULL, "99999999999", NULL, "LISTEN_FDS=99999999999" },
		{ "-5", "1", NULL, "LISTEN_PID=-5" },
		{ NULL, "1", "a:b", "2 names for LISTEN_FDS=1" },
		{ NULL, "1", "", NULL },                 /* one empty name: fine */
		{ NULL, "0", "x", "1 names for LISTEN_FDS=0" },
		{ NULL, "1", "a\tb", "holds byte 0x09" },
	};
	char g[256], err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct service_sockets ss;
		int ret;

		listener_at(3, "r.sock", g, sizeof(g));
		env_set(cases[i].pid, cases[i].fds, cases[i].names);
		err[0] = 0;
		ret = service_sockets_take(&ss, err, sizeof(err));
		env_gone();
		if (!cases[i].said) {
			assert_int_equal(ret, 0);
			assert_int_equal(ss.count, 1);
			assert_int_equal(ss.s[0].role, SERVICE_SOCKET_ANY);
			service_sockets_release(&ss);
			assert_true(fcntl(3, F_GETFD) < 0);     /* unclaimed: closed */
			continue;
		}
		assert_int_equal(ret, -EINVAL);
		assert_int_equal(ss.count, 0);
		if (!strstr(err, cases[i].said))
			fail_msg("case %zu: said '%s', want '%s'", i, err, cases[i].said);
		close(3);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_taken_and_claimed),
		cmocka_unit_test(test_other_pid_ignored),
		cmocka_unit_test(test_refusals_unset_too),
	};
	int ret;

	/* Descriptors 3 and 4 are the tests' to place sockets at. */
	if (fcntl(3, F_GETFD) >= 0 || fcntl(4, F_GETFD) >= 0) {
		int keep = fcntl(3, F_DUPFD, 10), keep2 = fcntl(4, F_DUPFD, 10);

		(void)keep;
		(void)keep2;
		close(3);
		close(4);
	}
	if (!mkdtemp(dir))
		return 1;
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	for (const char *n = "g.sock\0c.sock\0o.sock\0r.sock\0"; *n; n += strlen(n) + 1) {
		char p[300];

		snprintf(p, sizeof(p), "%s/%s", dir, n);
		unlink(p);
	}
	rmdir(dir);
	return ret;
}
