/* The ivshmem BAR (common/ivshmem_bar.h) and shm_chan's rings in one of its
 * slots: the layout's arithmetic at its edges, the header parser on every
 * truncation and on hostile fields (offsets out of range, overlapping slots,
 * sizes that overflow, unknown states), the host's claim of slots of a real
 * /dev/shm file (one per open file description, all taken, a scribbled
 * header rewritten, no symbolic link or fifo), and a session's rings in its
 * slot with the doorbell on a socket: echoed messages larger than the ring,
 * then the guest changing the region under the host. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ivshmem_bar.h"
#include "le.h"
#include "shm_chan.h"
#include "shm_echo.h"

#define MiB (1ull << 20)
#define SLOT (1 * MiB)
#define BAR (4096 + 3 * SLOT + 512 * 1024)      /* three slots and some left over */

static void test_layout_plan(void **state)
{
	struct ivshmem_layout l;
	uint32_t i;

	(void)state;
	assert_int_equal(ivshmem_layout_plan(BAR, SLOT, &l), 0);
	assert_int_equal(l.slot_count, 3);
	assert_int_equal(ivshmem_slot_offset(&l, 2), 4096 + 2 * SLOT);
	/* Not one slot, a slot not of whole pages, too small, a BAR too large. */
	assert_int_equal(ivshmem_layout_plan(4096 + SLOT - 1, SLOT, &l), -EINVAL);
	assert_int_equal(ivshmem_layout_plan(BAR, SLOT + 1, &l), -EINVAL);
	assert_int_equal(ivshmem_layout_plan(BAR, IVSHMEM_SLOT_BYTES_MIN - 4096, &l), -EINVAL);
	assert_int_equal(ivshmem_layout_plan(IVSHMEM_BAR_BYTES_MAX + 4096, SLOT, &l), -EINVAL);
	assert_int_equal(ivshmem_layout_plan(UINT64_MAX, UINT64_MAX & ~4095ull, &l), -EINVAL);
	/* The table's size caps the count. */
	assert_int_equal(ivshmem_layout_plan(4096 + 1000 * IVSHMEM_SLOT_BYTES_MIN, IVSHMEM_SLOT_BYTES_MIN, &l), 0);
	assert_int_equal(l.slot_count, IVSHMEM_SLOTS_MAX);

	assert_int_equal(ivshmem_layout_plan(BAR, SLOT, &l), 0);
	assert_true(ivshmem_range_in_slot(&l, 4096, SLOT, &i));
	assert_int_equal(i, 0);
	assert_true(ivshmem_range_in_slot(&l, 4096 + 2 * SLOT + 10, SLOT - 10, &i));
	assert_int_equal(i, 2);
	assert_false(ivshmem_range_in_slot(&l, 0, 1, NULL));                   /* the header */
	assert_false(ivshmem_range_in_slot(&l, 4096 + SLOT - 1, 2, NULL));     /* across two slots */
	assert_false(ivshmem_range_in_slot(&l, 4096 + 3 * SLOT, 1, NULL));     /* the leftover */
	assert_false(ivshmem_range_in_slot(&l, 4096 + 10, UINT64_MAX, NULL));  /* overflow */
	assert_false(ivshmem_range_in_slot(&l, UINT64_MAX - 1, 1, NULL));

	/* Rings: a power of two in shm_chan's range that fits the slot. */
	assert_true(ivshmem_ring_bytes_fit(&l, SHM_RING_MIN));
	assert_false(ivshmem_ring_bytes_fit(&l, SLOT / 2));
	assert_false(ivshmem_ring_bytes_fit(&l, SHM_RING_MIN + 4096));
	assert_false(ivshmem_ring_bytes_fit(&l, 0));
	assert_int_equal(ivshmem_ring_bytes_pick(&l), 128 * 1024);      /* at most half the slot */
	assert_true(ivshmem_ring_bytes_fit(&l, ivshmem_ring_bytes_pick(&l)));
}

static void header_make(uint8_t *buf, struct ivshmem_layout *l)
{
	assert_int_equal(ivshmem_layout_plan(BAR, SLOT, l), 0);
	ivshmem_header_encode(l, buf);
	ivshmem_slot_entry_encode(l, 1, IVSHMEM_SLOT_CLAIMED, SHM_RING_MIN,
				  buf + IVSHMEM_HEADER_FIXED + IVSHMEM_SLOT_ENTRY);
}

static void test_header_parse(void **state)
{
	uint8_t buf[IVSHMEM_HEADER_BYTES];
	struct ivshmem_slot slots[IVSHMEM_SLOTS_MAX];
	struct ivshmem_layout l, got;
	size_t table = IVSHMEM_HEADER_FIXED + 3 * IVSHMEM_SLOT_ENTRY;

	(void)state;
	header_make(buf, &l);
	assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR, &got, slots), 0);
	assert_int_equal(got.bar_bytes, l.bar_bytes);
	assert_int_equal(got.slot_bytes, l.slot_bytes);
	assert_int_equal(got.slot_count, l.slot_count);
	assert_int_equal(slots[1].state, IVSHMEM_SLOT_CLAIMED);
	assert_int_equal(slots[1].ring_bytes, SHM_RING_MIN);
	assert_int_equal(slots[2].offset, 4096 + 2 * SLOT);
	/* Every copy shorter than the table fails. */
	for (size_t n = 0; n < table; n++)
		assert_int_equal(ivshmem_header_parse(buf, n, BAR, &got, NULL), -EINVAL);
	assert_int_equal(ivshmem_header_parse(buf, table, BAR, &got, NULL), 0);
	/* A header for another BAR's size. */
	assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR + 4096, &got, NULL), -EINVAL);
	/* Any bit of the fixed part flipped. */
	for (size_t bit = 0; bit < IVSHMEM_HEADER_FIXED * 8; bit++) {
		header_make(buf, &l);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		/* The count may drop to one that still fits. */
		if (bit / 8 == 32 && le32_get(buf + 32) >= 1 && le32_get(buf + 32) < 3)
			continue;
		assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR, &got, NULL), -EINVAL);
	}
	header_make(buf, &l);
	le32_put(buf + 32, 1);
	assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR, &got, NULL), 0);
	assert_int_equal(got.slot_count, 1);
}

/* Hostile fields with a consistent rest: each must fail. */
static void test_header_hostile(void **state)
{
	static const struct {
		size_t at;                      /* a field's offset */
		int width;
		uint64_t value;
	} cases[] = {
		{ 24, 8, 0 },                                           /* slot size 0 */
		{ 24, 8, UINT64_MAX & ~4095ull },                       /* larger than the BAR */
		{ 24, 8, (1ull << 63) },                                /* count * size overflows */
		{ 24, 8, SLOT + 4096 },                                 /* then 3 slots do not fit */
		{ 32, 4, 0 },                                           /* no slot */
		{ 32, 4, 4 },                                           /* more than fit */
		{ 32, 4, UINT32_MAX },
		{ 16, 8, UINT64_MAX },                                  /* not the BAR's size */
		/* slot 1's entry */
		{ 64 + 32, 8, 4096 + SLOT / 2 },                        /* overlaps slot 0 */
		{ 64 + 32, 8, 4096 },                                   /* is slot 0 */
		{ 64 + 32, 8, 0 },                                      /* is the header */
		{ 64 + 32, 8, BAR - 4096 },                             /* runs past the BAR */
		{ 64 + 32, 8, UINT64_MAX - 4095 },                      /* offset + size overflows */
		{ 64 + 32 + 8, 8, 2 * SLOT },                           /* a larger slot */
		{ 64 + 32 + 8, 8, UINT64_MAX },
		{ 64 + 32 + 16, 4, 7 },                                 /* unknown state */
		{ 64 + 32 + 20, 4, 1 },                                 /* reserved */
		{ 64 + 32 + 24, 8, SLOT },                              /* rings larger than the slot */
		{ 64 + 32 + 24, 8, SHM_RING_MIN + 1 },                  /* not a power of two */
		{ 64 + 32 + 24, 8, 0 },                                 /* claimed without rings */
		{ 64 + 24, 8, SHM_RING_MIN },                           /* free slot 0 with rings */
	};
	uint8_t buf[IVSHMEM_HEADER_BYTES];
	struct ivshmem_layout l, got;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		header_make(buf, &l);
		if (cases[i].width == 8)
			le64_put(buf + cases[i].at, cases[i].value);
		else
			le32_put(buf + cases[i].at, (uint32_t)cases[i].value);
		if (ivshmem_header_parse(buf, sizeof(buf), BAR, &got, NULL) != -EINVAL)
			fail_msg("case %zu (field at %zu = %#llx) was accepted", i, cases[i].at,
				 (unsigned long long)cases[i].value);
	}
}

static char bar_path[64];

static int bar_setup(void **state)
{
	int fd;

	(void)state;
	snprintf(bar_path, sizeof(bar_path), "/dev/shm/tern-test-bar-%d", (int)getpid());
	fd = open(bar_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, BAR))
		return -1;
	close(fd);
	return 0;
}

static int bar_teardown(void **state)
{
	(void)state;
	unlink(bar_path);
	return 0;
}

static void header_read(uint8_t *buf)
{
	int fd = open(bar_path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, IVSHMEM_HEADER_BYTES, 0), IVSHMEM_HEADER_BYTES);
	close(fd);
}

static void test_host_claim(void **state)
{
	struct ivshmem_host h[4];
	struct ivshmem_slot slots[IVSHMEM_SLOTS_MAX];
	struct ivshmem_layout l;
	uint8_t buf[IVSHMEM_HEADER_BYTES];
	char link[80];
	int fd;

	(void)state;
	/* A scribbled header is rewritten by the first claim. */
	fd = open(bar_path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	memset(buf, 0xa5, sizeof(buf));
	assert_int_equal(pwrite(fd, buf, sizeof(buf), 0), sizeof(buf));
	close(fd);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ivshmem_host_claim(&h[i], bar_path, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), 0);
		assert_int_equal(h[i].slot, i);
		assert_int_equal(h[i].offset, 4096 + i * SLOT);
	}
	/* Every slot is held: by other open file descriptions, even ours. */
	assert_int_equal(ivshmem_host_claim(&h[3], bar_path, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), -EBUSY);
	assert_int_equal(h[3].fd, -1);
	header_read(buf);
	assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR, &l, slots), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(slots[i].state, IVSHMEM_SLOT_CLAIMED);
	/* A released slot is free in the header and taken again. */
	ivshmem_host_release(&h[1]);
	ivshmem_host_release(&h[1]);
	header_read(buf);
	assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR, &l, slots), 0);
	assert_int_equal(slots[1].state, IVSHMEM_SLOT_FREE);
	assert_int_equal(slots[0].state, IVSHMEM_SLOT_CLAIMED);
	assert_int_equal(ivshmem_host_claim(&h[1], bar_path, SLOT, 2 * SHM_RING_MIN, IVSHMEM_SLOT_ANY), 0);
	assert_int_equal(h[1].slot, 1);
	/* The slot asked for, when free; another when it is held. */
	ivshmem_host_release(&h[0]);
	ivshmem_host_release(&h[2]);
	assert_int_equal(ivshmem_host_claim(&h[0], bar_path, SLOT, SHM_RING_MIN, 2), 0);
	assert_int_equal(h[0].slot, 2);
	assert_int_equal(ivshmem_host_claim(&h[2], bar_path, SLOT, SHM_RING_MIN, 2), 0);
	assert_int_equal(h[2].slot, 0);
	/* Rings that do not fit are refused before anything is claimed. */
	assert_int_equal(ivshmem_host_claim(&h[3], bar_path, SLOT, SLOT, IVSHMEM_SLOT_ANY), -EINVAL);
	for (int i = 0; i < 3; i++)
		ivshmem_host_release(&h[i]);
	ivshmem_host_release(NULL);

	/* Not followed: a symbolic link; not a regular file: a fifo; too small. */
	snprintf(link, sizeof(link), "%s.link", bar_path);
	assert_int_equal(symlink(bar_path, link), 0);
	assert_int_equal(ivshmem_host_claim(&h[0], link, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), -ELOOP);
	unlink(link);
	assert_int_equal(mkfifo(link, 0600), 0);
	assert_int_equal(ivshmem_host_claim(&h[0], link, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), -EINVAL);
	unlink(link);
	assert_int_equal(ivshmem_host_claim(&h[0], link, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), -ENOENT);
	fd = open(link, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096 + SLOT - 4096), 0);
	close(fd);
	assert_int_equal(ivshmem_host_claim(&h[0], link, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), -EINVAL);
	unlink(link);

	assert_int_equal(ivshmem_host_path("/dev/shm", "01234567-89ab-cdef-0123-456789abcdef", link, sizeof(link)), 0);
	assert_string_equal(link, "/dev/shm/tern-01234567-89ab-cdef-0123-456789abcdef");
	assert_int_equal(ivshmem_host_path("/dev/shm", "../../etc/passwd", link, sizeof(link)), -EINVAL);
	assert_int_equal(ivshmem_host_path("/dev/shm", "01234567-89ab-cdef-0123-456789abcdef", link, 20),
			 -ENAMETOOLONG);
}

/* A session: the host's slot and channel, the guest's mapping and channel. */
struct session {
	int sock[2];                    /* [0] guest, [1] host */
	struct ivshmem_host host;
	struct ivshmem_guest guest_bar;
	struct shm_chan host_chan, guest_chan;
};

static void session_open(struct session *s, uint64_t ring)
{
	void *area;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->sock), 0);
	assert_int_equal(ivshmem_host_claim(&s->host, bar_path, SLOT, ring, IVSHMEM_SLOT_ANY), 0);
	assert_int_equal(shm_chan_region_host(&s->host_chan, s->host.fd, s->host.offset, SLOT, ring, s->sock[1],
					      NULL), 0);
	/* The host maps its slot's rings, nothing else of the BAR. */
	assert_int_equal(s->host_chan.map_len, SHM_CHAN_BYTES(ring));
	assert_int_equal(ivshmem_guest_open(&s->guest_bar, bar_path), 0);
	assert_null(ivshmem_guest_slot(&s->guest_bar, s->host.slot, s->host.offset + 4096, SLOT, ring));
	assert_null(ivshmem_guest_slot(&s->guest_bar, s->host.slot, s->host.offset, SLOT, ring * 2));
	assert_null(ivshmem_guest_slot(&s->guest_bar, s->host.slot + 1, s->host.offset, SLOT, ring));
	area = ivshmem_guest_slot(&s->guest_bar, s->host.slot, s->host.offset, SLOT, ring);
	assert_non_null(area);
	assert_int_equal(shm_chan_region_guest(&s->guest_chan, area, ring * 2, s->sock[0]), -EINVAL);
	assert_int_equal(shm_chan_region_guest(&s->guest_chan, area, ring, s->sock[0]), 0);
	/* Wake on every message: the doorbell path, not the spin. */
	s->host_chan.spin_ns = s->guest_chan.spin_ns = 1000;
}

static void session_close(struct session *s)
{
	shm_chan_close(&s->guest_chan);
	shm_chan_close(&s->host_chan);
	ivshmem_guest_close(&s->guest_bar);
	ivshmem_host_release(&s->host);
	close(s->sock[0]);
	close(s->sock[1]);
}

static void test_rings_in_slot(void **state)
{
	static const uint32_t sizes[] = { 1, 4096, SHM_RING_MIN - 4, SHM_RING_MIN, 5 * SHM_RING_MIN + 3 };
	struct session s;
	pthread_t t;
	uint32_t zero = 0;
	struct iovec end = { &zero, sizeof(zero) };

	(void)state;
	session_open(&s, SHM_RING_MIN);
	/* The doorbell: a host about to sleep gets a byte on its stream for a
	 * message, which its wakeup drains; an awake host gets none. */
	{
		struct pollfd pfd = { .fd = s.sock[1], .events = POLLIN };
		uint32_t v = 5;
		struct iovec one = { &v, sizeof(v) };

		assert_false(shm_chan_idle_begin(&s.host_chan));
		assert_int_equal(shm_chan_send(&s.guest_chan, &one, 1), 0);
		assert_int_equal(poll(&pfd, 1, 1000), 1);
		shm_chan_idle_end(&s.host_chan);
		assert_int_equal(poll(&pfd, 1, 0), 0);
		assert_int_equal(shm_chan_recv(&s.host_chan, &v, sizeof(v)), 0);
		assert_int_equal(shm_chan_send(&s.guest_chan, &one, 1), 0);
		assert_int_equal(poll(&pfd, 1, 0), 0);
		assert_true(shm_chan_idle_begin(&s.host_chan));        /* input waits: no sleep */
		assert_int_equal(shm_chan_recv(&s.host_chan, &v, sizeof(v)), 0);
	}
	assert_int_equal(pthread_create(&t, NULL, shm_echo, &s.host_chan), 0);
	for (int round = 0; round < 40; round++) {
		uint32_t len = sizes[round % 5], back = 0;
		uint8_t *out = malloc(len), *in = malloc(len);
		struct iovec iov[2] = { { &len, sizeof(len) }, { out, len } };

		for (uint32_t j = 0; j < len; j++)
			out[j] = (uint8_t)(j * 7 + round);
		assert_int_equal(shm_chan_send(&s.guest_chan, iov, 2), 0);
		assert_int_equal(shm_chan_recv(&s.guest_chan, &back, sizeof(back)), 0);
		assert_int_equal(back, len);
		assert_int_equal(shm_chan_recv(&s.guest_chan, in, len), 0);
		assert_memory_equal(in, out, len);
		/* Now and then the host sleeps: the wakeup is a byte on the socket. */
		if (round % 8 == 0)
			usleep(2000);
		free(in);
		free(out);
	}
	assert_int_equal(shm_chan_send(&s.guest_chan, &end, 1), 0);
	pthread_join(t, NULL);
	session_close(&s);
}

/* The guest rewrites its slot under the host: the host's channel reports a
 * broken ring, never reads outside its mapping, and keeps its own sizes. */
static void test_region_changed(void **state)
{
	struct session s;
	uint8_t *slot, byte;
	uint32_t v = 0x11223344;
	struct iovec iov = { &v, sizeof(v) };

	(void)state;
	session_open(&s, SHM_RING_MIN);
	slot = s.guest_bar.base + s.host.offset;
	/* The ring size in the shared header grows: the host keeps its own. */
	le64_put(slot + 8, SHM_RING_MAX);
	assert_int_equal(shm_chan_send(&s.guest_chan, &iov, 1), 0);
	v = 0;
	assert_int_equal(shm_chan_recv(&s.host_chan, &v, sizeof(v)), 0);
	assert_int_equal(v, 0x11223344);
	/* Every counter and flag of the slot's header page, past the magic and
	 * size: the host's receive and send both find a ring out of range. */
	memset(slot + 16, 0x7f, 4096 - 16);
	assert_int_equal(shm_chan_recv(&s.host_chan, &byte, 1), -EPROTO);
	assert_int_equal(shm_chan_send(&s.host_chan, &iov, 1), -EPROTO);
	/* The header page of the BAR, scribbled: the slot's host side does not
	 * read it; the next claim writes it again. */
	memset(s.guest_bar.base, 0xff, IVSHMEM_HEADER_BYTES);
	{
		struct ivshmem_host h2;
		struct ivshmem_layout l;
		uint8_t buf[IVSHMEM_HEADER_BYTES];

		assert_int_equal(ivshmem_host_claim(&h2, bar_path, SLOT, SHM_RING_MIN, IVSHMEM_SLOT_ANY), 0);
		assert_int_not_equal(h2.slot, s.host.slot);
		header_read(buf);
		assert_int_equal(ivshmem_header_parse(buf, sizeof(buf), BAR, &l, NULL), 0);
		ivshmem_host_release(&h2);
	}
	session_close(&s);
}

/* The guest goes away: a host waiting for a request learns it from the
 * stream's hang-up, not by waiting forever. */
static void test_guest_gone(void **state)
{
	struct session s;
	uint8_t byte;

	(void)state;
	session_open(&s, SHM_RING_MIN);
	shutdown(s.sock[0], SHUT_RDWR);
	assert_int_equal(shm_chan_recv(&s.host_chan, &byte, 1), -EPIPE);
	session_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_plan),
		cmocka_unit_test(test_header_parse),
		cmocka_unit_test(test_header_hostile),
		cmocka_unit_test_setup_teardown(test_host_claim, bar_setup, bar_teardown),
		cmocka_unit_test_setup_teardown(test_rings_in_slot, bar_setup, bar_teardown),
		cmocka_unit_test_setup_teardown(test_region_changed, bar_setup, bar_teardown),
		cmocka_unit_test_setup_teardown(test_guest_gone, bar_setup, bar_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
