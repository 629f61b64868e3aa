/* A snapshot's drain thread against a worker that keeps dispatching (issue
 * 12, item 8: "a data race"). The handle table is the worker thread's alone
 * (handle_table.h), and the worker goes on adding and removing handles (the
 * table grows and frees its old slots) while the drain runs: the drain must
 * not read it. This program carries its own copy of the handle table whose
 * readers are renamed real_* (meson.build), and puts in front of them
 * readers that count the calls made from any thread but the worker's, so
 * that a read the race could turn into a use after free is seen every time,
 * not only when the timing goes wrong.
 *
 * Rounds: snapshot begins, the "worker" (this thread) creates and destroys
 * events while the drain copies, the snapshot ends and must be complete.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "checkpoint.h"
#include "control_msg.h"
#include "exec.h"
#include "wire_dispatch.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- the handle table's readers, watched ---- */

struct handle_entry *real_handle_table_get(struct handle_table *ht, uint64_t handle, enum handle_kind kind);
struct handle_entry *real_handle_table_find_real(struct handle_table *ht, enum handle_kind kind,
						 const void *real);
int real_handle_table_foreach(struct handle_table *ht, int (*fn)(struct handle_entry *e, void *arg), void *arg);

static pthread_t worker;
static atomic_uint foreign;     /* table calls from another thread */

static void watch(void)
{
	if (!pthread_equal(pthread_self(), worker))
		atomic_fetch_add(&foreign, 1);
}

struct handle_entry *handle_table_get(struct handle_table *ht, uint64_t handle, enum handle_kind kind)
{
	watch();
	return real_handle_table_get(ht, handle, kind);
}

struct handle_entry *handle_table_find_real(struct handle_table *ht, enum handle_kind kind, const void *real)
{
	watch();
	return real_handle_table_find_real(ht, kind, real);
}

int handle_table_foreach(struct handle_table *ht, int (*fn)(struct handle_entry *e, void *arg), void *arg)
{
	watch();
	return real_handle_table_foreach(ht, fn, arg);
}

#define ROUNDS 8
#define EVENTS 600      /* a table of 256 slots grows past 192 */

static void test_drain_while_dispatching(void **state)
{
	struct backend_config bcfg = { .sim_memory = 1ull << 30 };
	struct exec_config cfg = { .device = 0, .arena_base = 0x3b0000000000ull, .arena_size = 8ull << 30 };
	char dir[] = "/tmp/tern-drain-race-XXXXXX", jdir[300], sdir[300], cmd[400];
	struct wire_mem_alloc_req a = { .bytes = 8 << 20 };
	struct wire_mem_alloc_rep ar;
	struct backend *be;
	struct exec ex;
	unsigned made = 0, done = 0;

	(void)state;
	worker = pthread_self();
	assert_non_null(mkdtemp(dir));
	snprintf(jdir, sizeof(jdir), "%s/journal", dir);
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	assert_int_equal(backend_open("sim", &bcfg, &be), 0);
	assert_int_equal(exec_open(&ex, be, &cfg, NULL), 0);
	assert_int_equal(exec_journal_open(&ex, jdir, "race"), 0);
	assert_int_equal(exec_mem_alloc(&ex, &a, &ar), CUDA_SUCCESS);
	assert_int_equal(be->cuMemsetD32(ar.address, 0x5eed, a.bytes / 4), CUDA_SUCCESS);

	for (unsigned r = 0; r < ROUNDS; r++) {
		struct checkpoint_request req = { .store_dir = sdir, .session = "race", .seq = r + 1 };
		static uint64_t events[EVENTS];
		struct control_reply result;
		struct checkpoint_job *job;
		struct checkpoint ck;
		char name[32], err[256];
		struct pollfd pfd;

		snprintf(name, sizeof(name), "race%u", r);
		req.name = name;
		checkpoint_init(&ck, &ex, NULL);
		assert_int_equal(checkpoint_begin(&ck, &req, &job, err, sizeof(err)), 0);
		/* The guest runs again: its calls add and remove handles. */
		for (unsigned i = 0; i < EVENTS; i++) {
			struct wire_event_create_req ec = { .flags = 2 };
			struct wire_event_create_rep er;

			assert_int_equal(exec_event_create(&ex, &ec, &er), CUDA_SUCCESS);
			events[i] = er.event;
			made++;
		}
		for (unsigned i = 0; i < EVENTS; i++) {
			struct wire_event_destroy_req ed = { .event = events[i] };
			struct wire_event_destroy_rep edr;

			assert_int_equal(exec_event_destroy(&ex, &ed, &edr), CUDA_SUCCESS);
		}
		pfd = (struct pollfd){ .fd = checkpoint_job_fd(job), .events = POLLIN };
		assert_int_equal(poll(&pfd, 1, 30000), 1);
		assert_int_equal(checkpoint_end(job, &result), 0);
		assert_int_equal(result.kind, CONTROL_REPLY_SNAPSHOT);
		done++;
		checkpoint_close(&ck);
	}
	printf("drain: %u snapshots complete while the worker made and destroyed %u events; "
	       "%u reads of the handle table from another thread\n", done, made, atomic_load(&foreign));
	assert_int_equal(atomic_load(&foreign), 0);
	exec_close(&ex);
	backend_close(be);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drain_while_dispatching),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
