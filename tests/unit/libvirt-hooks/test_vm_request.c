/* The VM requests to ternd (libvirt-hooks/vm_request.h): the exact lines
 * each op sends, what is refused before sending, and one round trip each
 * through a control socket served by a child: a progress line then ok, a
 * refusal, and hostile replies (cut off, not for a vm op, trailing junk)
 * refused with a reason.  The decoder itself is control_msg.h's
 * (unit_control_msg, fuzz_control_reply). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "control.h"
#include "vm_request.h"

#define UUID "6f1c1c51-3d3c-4b57-9e0e-0123456789ab"

static void encoded(enum control_op op, const char *name, const char *generation, bool check, const char *want)
{
	struct control_request req;
	char *line;

	assert_int_equal(vm_request_init(&req, op, UUID, name, generation, check), 0);
	assert_int_equal(control_request_encode(&req, &line, NULL), 0);
	assert_string_equal(line, want);
	free(line);
}

static void test_encode(void **state)
{
	encoded(CONTROL_OP_VM_ATTACH, "vm \"1\"", NULL, false,
		"{\"op\":\"vm-attach\",\"uuid\":\"" UUID "\",\"name\":\"vm \\\"1\\\"\"}\n");
	encoded(CONTROL_OP_VM_DETACH, "ignored", "ff", true, "{\"op\":\"vm-detach\",\"uuid\":\"" UUID "\"}\n");
	encoded(CONTROL_OP_VM_SAVE, NULL, "00ff", false,
		"{\"op\":\"vm-save\",\"uuid\":\"" UUID "\",\"generation\":\"00ff\"}\n");
	/* check false is ternd's default, not sent */
	encoded(CONTROL_OP_VM_RESTORE, NULL, "00ff", false,
		"{\"op\":\"vm-restore\",\"uuid\":\"" UUID "\",\"generation\":\"00ff\"}\n");
	encoded(CONTROL_OP_VM_RESTORE, "x", "1", true,
		"{\"op\":\"vm-restore\",\"uuid\":\"" UUID "\",\"generation\":\"1\",\"check\":true}\n");
	encoded(CONTROL_OP_VM_DROP, NULL, NULL, false, "{\"op\":\"vm-drop\",\"uuid\":\"" UUID "\"}\n");
}

static void test_encode_refused(void **state)
{
	static const struct {
		enum control_op op;
		const char *uuid, *name, *generation;
	} bad[] = {
		{ CONTROL_OP_STATUS, UUID, "vm", "ff" },
		{ CONTROL_OP_VM_SNAPSHOT, UUID, "vm", "ff" },
		{ 0, UUID, "vm", "ff" },
		{ 999, UUID, "vm", "ff" },
		{ CONTROL_OP_VM_DROP, NULL, NULL, NULL },
		{ CONTROL_OP_VM_DROP, "not-a-uuid", NULL, NULL },
		{ CONTROL_OP_VM_DROP, UUID "0", NULL, NULL },
		{ CONTROL_OP_VM_ATTACH, UUID, NULL, NULL },
		{ CONTROL_OP_VM_ATTACH, UUID, "", NULL },
		{ CONTROL_OP_VM_ATTACH, UUID, "a/b", NULL },
		{ CONTROL_OP_VM_SAVE, UUID, "vm", NULL },
		{ CONTROL_OP_VM_SAVE, UUID, "vm", "" },
		{ CONTROL_OP_VM_SAVE, UUID, "vm", "xyz" },
		{ CONTROL_OP_VM_RESTORE, UUID, "vm", "../1" },
	};
	struct control_request req;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(vm_request_init(&req, bad[i].op, bad[i].uuid, bad[i].name, bad[i].generation, false),
				 -EINVAL);
}

static void test_timeout_parse(void **state)
{
	static const char *const bad[] = { "", "0", "-1", "86401", "1x", " 1", "99999999999999999999" };
	int ms = 0;

	assert_int_equal(vm_timeout_parse("1", &ms), 0);
	assert_int_equal(ms, 1000);
	assert_int_equal(vm_timeout_parse("86400", &ms), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(vm_timeout_parse(bad[i], &ms), -EINVAL);
}

/* A child serves one connection per answer: it checks the request line
 * and answers. */
static const char *const answers[] = {
	"{\"progress\":0.5,\"stage\":\"copy\"}\n{\"ok\":true,\"uuid\":\"" UUID "\",\"snapshots\":[]}\n",
	"{\"ok\":false,\"error\":\"no such domain\"}\n",
	"{\"ok\":",
	"{\"ok\":true,\"sessions\":[]}\n",
	"{\"ok\":true,\"uuid\":\"" UUID "\",\"snapshots\":[]} x\n",
	"",
};
#define ANSWERS (int)(sizeof(answers) / sizeof(answers[0]))

static void serve(int lfd)
{
	alarm(20);      /* the parent failed and left: do not hang the test */
	for (int i = 0; i < ANSWERS; i++) {
		char line[512];
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0 || control_line_read(fd, line, sizeof(line), 5000) < 0 ||
		    strcmp(line, "{\"op\":\"vm-save\",\"uuid\":\"" UUID "\",\"generation\":\"00ff\"}"))
			_exit(1);
		if (control_write_all(fd, answers[i], strlen(answers[i])))
			_exit(1);
		close(fd);
	}
	_exit(0);
}

static void test_send(void **state)
{
	char dir[] = "/tmp/test_vm_request.XXXXXX", path[128], err[512];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	static const char *const why[] = { "truncated", "", "", "without a final reply" };
	struct control_request req;
	struct control_reply answer;
	int lfd, status;
	pid_t pid;

	assert_int_equal(vm_request_init(&req, CONTROL_OP_VM_SAVE, UUID, NULL, "00ff", false), 0);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/control.sock", dir);
	assert_int_equal(vm_request_send(path, &req, 1000, &answer, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "ternd is not running"));

	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	strcpy(sa.sun_path, path);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		serve(lfd);
	close(lfd);
	assert_int_equal(vm_request_send(path, &req, 5000, &answer, err, sizeof(err)), 0);
	assert_int_equal(answer.kind, CONTROL_REPLY_VM);
	assert_string_equal(answer.vm.uuid, UUID);
	control_reply_release(&answer);
	assert_int_equal(vm_request_send(path, &req, 5000, &answer, err, sizeof(err)), 0);
	assert_int_equal(answer.kind, CONTROL_REPLY_ERROR);
	assert_string_equal(answer.error, "no such domain");
	control_reply_release(&answer);
	/* Hostile: each refused with a reason naming the op. */
	for (int i = 2; i < ANSWERS; i++) {
		int ret = vm_request_send(path, &req, 5000, &answer, err, sizeof(err));

		if (ret != -EBADMSG && ret != -ECONNRESET)
			fail_msg("answer %d: %d (%s)", i, ret, err);
		assert_int_equal(answer.kind, 0);
		assert_non_null(strstr(err, "vm-save"));
		if (!strstr(err, why[i - 2]))
			fail_msg("answer %d: reason '%s' does not say '%s'", i, err, why[i - 2]);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Nobody listens any more. */
	assert_int_equal(vm_request_send(path, &req, 1000, &answer, err, sizeof(err)), -ECONNREFUSED);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode),
		cmocka_unit_test(test_encode_refused),
		cmocka_unit_test(test_timeout_parse),
		cmocka_unit_test(test_send),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
