/* The VM requests to ternd (libvirt-hooks/vm_request.h): the exact lines
 * each op sends, what is refused before sending, and every wrong,
 * truncated or hostile reply refused with a reason; then one round trip
 * through a control socket served by a child. */
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

static void encoded(const struct vm_request *req, const char *want)
{
	char *line;

	assert_int_equal(vm_request_encode(req, &line), 0);
	assert_string_equal(line, want);
	free(line);
}

static void test_encode(void **state)
{
	encoded(&(struct vm_request){ .op = VM_OP_ATTACH, .uuid = UUID, .name = "vm \"1\"" },
		"{\"op\":\"vm-attach\",\"uuid\":\"" UUID "\",\"name\":\"vm \\\"1\\\"\"}");
	encoded(&(struct vm_request){ .op = VM_OP_DETACH, .uuid = UUID, .name = "ignored", .generation = "ff" },
		"{\"op\":\"vm-detach\",\"uuid\":\"" UUID "\"}");
	encoded(&(struct vm_request){ .op = VM_OP_SAVE, .uuid = UUID, .generation = "00ff" },
		"{\"op\":\"vm-save\",\"uuid\":\"" UUID "\",\"generation\":\"00ff\"}");
	encoded(&(struct vm_request){ .op = VM_OP_RESTORE, .uuid = UUID, .generation = "00ff" },
		"{\"op\":\"vm-restore\",\"uuid\":\"" UUID "\",\"generation\":\"00ff\",\"check\":false}");
	encoded(&(struct vm_request){ .op = VM_OP_RESTORE, .uuid = UUID, .generation = "1", .check = true },
		"{\"op\":\"vm-restore\",\"uuid\":\"" UUID "\",\"generation\":\"1\",\"check\":true}");
	encoded(&(struct vm_request){ .op = VM_OP_DROP, .uuid = UUID },
		"{\"op\":\"vm-drop\",\"uuid\":\"" UUID "\"}");
}

static void test_encode_refused(void **state)
{
	const struct vm_request bad[] = {
		{ .op = 0, .uuid = UUID },
		{ .op = VM_OP_DROP + 1, .uuid = UUID },
		{ .op = (enum vm_op)-1, .uuid = UUID },
		{ .op = VM_OP_DROP },
		{ .op = VM_OP_DROP, .uuid = "6F1C1C51-3D3C-4B57-9E0E-0123456789AB" },
		{ .op = VM_OP_ATTACH, .uuid = UUID },
		{ .op = VM_OP_ATTACH, .uuid = UUID, .name = "a/b" },
		{ .op = VM_OP_ATTACH, .uuid = UUID, .name = "" },
		{ .op = VM_OP_SAVE, .uuid = UUID },
		{ .op = VM_OP_SAVE, .uuid = UUID, .generation = "0g" },
		{ .op = VM_OP_RESTORE, .uuid = UUID, .generation = "" },
	};
	char *line;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(vm_request_encode(&bad[i], &line), -EINVAL);
}

static int decode(const char *text, struct vm_reply *reply, char *err)
{
	err[0] = 0;
	return vm_reply_decode(text, strlen(text), reply, err, 256);
}

static void test_decode(void **state)
{
	struct vm_reply reply;
	char err[256];

	assert_int_equal(decode("{\"ok\":true}\n", &reply, err), 0);
	assert_true(reply.ok);
	assert_string_equal(reply.path, "");
	assert_int_equal(decode("{\"ok\":true,\"path\":\"/run/tern/vm/" UUID ".sock\",\"snapshots\":[]}\n",
				&reply, err), 0);
	assert_string_equal(reply.path, "/run/tern/vm/" UUID ".sock");
	assert_int_equal(decode("{\"progress\":\"copy\",\"done\":1}\n{\"progress\":\"copy\"}\n"
				"{\"ok\":false,\"error\":\"snapshot vm-x-1 is corrupt\"}\n", &reply, err), 0);
	assert_false(reply.ok);
	assert_string_equal(reply.error, "snapshot vm-x-1 is corrupt");
}

static void test_decode_refused(void **state)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "", "without a final reply" },
		{ "{\"progress\":\"copy\"}\n", "without a final reply" },
		{ "{\"ok\":true}", "cut off" },
		{ "{\"ok\":tr", "cut off" },
		{ "{\"ok\":true}\n{\"ok\":true}\n", "goes on" },
		{ "{\"ok\":true}\n\n", "goes on" },
		{ "{\"ok\":1}\n", "no \"ok\"" },
		{ "{\"ok\":\"true\"}\n", "no \"ok\"" },
		{ "{}\n", "no \"ok\"" },
		{ "[true]\n", "not one JSON object" },
		{ "\"ok\"\n", "not one JSON object" },
		{ "{\"ok\":true} x\n", "not one JSON object" },
		{ "{\"ok\":true}{\"ok\":false}\n", "not one JSON object" },
		{ "garbage\n", "not one JSON object" },
		{ "\n", "not one JSON object" },
		{ "{\"ok\":false}\n", "without saying why" },
		{ "{\"ok\":false,\"error\":\"\"}\n", "without saying why" },
		{ "{\"ok\":false,\"error\":7}\n", "\"error\" that is not a string" },
		{ "{\"ok\":true,\"path\":[]}\n", "\"path\" that is not a string" },
	};
	struct vm_reply reply;
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(decode(bad[i].text, &reply, err), -EBADMSG);
		if (!strstr(err, bad[i].why))
			fail_msg("'%s': reason '%s' does not say '%s'", bad[i].text, err, bad[i].why);
	}
	assert_int_equal(vm_reply_decode("{\"ok\":true}\n\0", 13, &reply, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "NUL"));
}

/* A long error is kept, cut to the buffer. */
static void test_decode_long_error(void **state)
{
	size_t n = 3 * VM_REQUEST_ERROR_MAX;
	char *text = malloc(n + 64), err[256];
	struct vm_reply reply;

	assert_non_null(text);
	strcpy(text, "{\"ok\":false,\"error\":\"");
	memset(text + strlen(text), 'e', n);
	strcpy(text + 21 + n, "\"}\n");
	assert_int_equal(decode(text, &reply, err), 0);
	assert_int_equal(strlen(reply.error), VM_REQUEST_ERROR_MAX - 1);
	free(text);
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

/* A child serves one connection: it checks the request line and answers
 * @answer. */
static void test_send(void **state)
{
	char dir[] = "/tmp/test_vm_request.XXXXXX", path[128], err[512];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct vm_request req = { .op = VM_OP_SAVE, .uuid = UUID, .generation = "00ff" };
	struct vm_reply reply;
	int lfd, status;
	pid_t pid;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/control.sock", dir);
	assert_int_equal(vm_request_send(path, &req, 1000, &reply, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "ternd is not running"));

	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	strcpy(sa.sun_path, path);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static const char *const answers[] = {
			"{\"progress\":\"copy\"}\n{\"ok\":true}\n",
			"{\"ok\":false,\"error\":\"no such domain\"}\n",
			"{\"ok\":",
		};
		for (int i = 0; i < 3; i++) {
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
	close(lfd);
	assert_int_equal(vm_request_send(path, &req, 5000, &reply, err, sizeof(err)), 0);
	assert_true(reply.ok);
	assert_int_equal(vm_request_send(path, &req, 5000, &reply, err, sizeof(err)), 0);
	assert_false(reply.ok);
	assert_string_equal(reply.error, "no such domain");
	assert_int_equal(vm_request_send(path, &req, 5000, &reply, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "cut off"));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Nobody listens any more. */
	assert_int_equal(vm_request_send(path, &req, 1000, &reply, err, sizeof(err)), -ECONNREFUSED);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode),
		cmocka_unit_test(test_encode_refused),
		cmocka_unit_test(test_decode),
		cmocka_unit_test(test_decode_refused),
		cmocka_unit_test(test_decode_long_error),
		cmocka_unit_test(test_timeout_parse),
		cmocka_unit_test(test_send),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
