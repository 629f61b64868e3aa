/* The journal on a real LMDB environment in a temporary directory. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <lmdb.h>

#include "tracker.h"

struct fixture {
	char dir[256];     /* the temp dir, holding everything below */
	char journal[300]; /* the live journal's directory */
	struct tracker *t;
};

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	return remove(path);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *tmp = getenv("TMPDIR");

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/tracker-test-XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->journal, sizeof(f->journal), "%s/journal", f->dir);
	if (tracker_open(f->journal, 0, &f->t))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	tracker_close(f->t);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static void path_in(const struct fixture *f, const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", f->dir, name);
}

static void test_object_round_trip(void **state)
{
	struct fixture *f = *state;
	struct tracker_object o = {.kind = 3, .flags = 5, .parent = 1, .args = "args!", .args_len = 5};
	struct tracker_object got;
	static uint8_t big[TRACKER_OBJECT_ARGS_MAX + 1];

	assert_int_equal(tracker_object_put(f->t, 0x10, &o), 0);
	assert_int_equal(tracker_object_get(f->t, 0x10, &got), 0);
	assert_int_equal(got.kind, 3);
	assert_int_equal(got.flags, 5);
	assert_true(got.parent == 1);
	assert_int_equal(got.args_len, 5);
	assert_memory_equal(got.args, "args!", 5);

	/* replace */
	o.args = NULL;
	o.args_len = 0;
	o.kind = 4;
	assert_int_equal(tracker_object_put(f->t, 0x10, &o), 0);
	assert_int_equal(tracker_object_get(f->t, 0x10, &got), 0);
	assert_int_equal(got.kind, 4);
	assert_int_equal(got.args_len, 0);

	/* freed objects are gone */
	assert_int_equal(tracker_object_del(f->t, 0x10), 0);
	assert_int_equal(tracker_object_get(f->t, 0x10, &got), -ENOENT);
	assert_int_equal(tracker_object_del(f->t, 0x10), -ENOENT);

	/* bounds */
	assert_int_equal(tracker_object_put(f->t, 0, &o), -EINVAL);
	o.args = big;
	o.args_len = sizeof(big);
	assert_int_equal(tracker_object_put(f->t, 0x11, &o), -EINVAL);
	o.args_len = sizeof(big) - 1;
	assert_int_equal(tracker_object_put(f->t, 0x11, &o), 0);
	assert_int_equal(tracker_object_get(f->t, 0x11, &got), 0);
	assert_int_equal(got.args_len, TRACKER_OBJECT_ARGS_MAX);
}

static void test_region_and_meta_round_trip(void **state)
{
	struct fixture *f = *state;
	struct tracker_region r = {.size = 1 << 20, .owner = 7, .flags = 2, .kind = 1}, rg;
	const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	const void *p;
	size_t n;
	uint64_t v, seq;

	assert_int_equal(tracker_region_put(f->t, 0x7f0000000000ull, &r), 0);
	assert_int_equal(tracker_region_get(f->t, 0x7f0000000000ull, &rg), 0);
	assert_true(rg.size == r.size && rg.owner == 7 && rg.flags == 2 && rg.kind == 1);
	assert_int_equal(tracker_region_get(f->t, 0x7f0000000001ull, &rg), -ENOENT);
	assert_int_equal(tracker_region_del(f->t, 0x7f0000000000ull), 0);
	assert_int_equal(tracker_region_get(f->t, 0x7f0000000000ull, &rg), -ENOENT);
	r.size = 0;
	assert_int_equal(tracker_region_put(f->t, 0x1000, &r), -EINVAL);

	assert_int_equal(tracker_meta_u64_set(f->t, TRACKER_META_DEVICE_INDEX, 3), 0);
	assert_int_equal(tracker_meta_u64_get(f->t, TRACKER_META_DEVICE_INDEX, &v), 0);
	assert_true(v == 3);
	assert_int_equal(tracker_meta_bytes_set(f->t, TRACKER_META_DEVICE_UUID, uuid, 16), 0);
	assert_int_equal(tracker_meta_bytes_get(f->t, TRACKER_META_DEVICE_UUID, &p, &n), 0);
	assert_int_equal(n, 16);
	assert_memory_equal(p, uuid, 16);
	/* a value of another type is refused, the format key is the tracker's */
	assert_int_equal(tracker_meta_u64_get(f->t, TRACKER_META_DEVICE_UUID, &v), -EBADMSG);
	assert_int_equal(tracker_meta_u64_set(f->t, TRACKER_META_FORMAT, 2), -EINVAL);
	assert_int_equal(tracker_meta_u64_get(f->t, TRACKER_META_FORMAT, &v), 0);
	assert_true(v == TRACKER_FORMAT_VERSION);
	assert_int_equal(tracker_meta_u64_get(f->t, TRACKER_META_ARENA_BASE, &v), -ENOENT);

	assert_int_equal(tracker_reply_set(f->t, 41, "r41", 3), 0);
	assert_int_equal(tracker_reply_set(f->t, 42, "reply-42", 8), 0);
	assert_int_equal(tracker_reply_get(f->t, &seq, &p, &n), 0);
	assert_true(seq == 42);
	assert_int_equal(n, 8);
	assert_memory_equal(p, "reply-42", 8);
}

static void test_image_refcount(void **state)
{
	struct fixture *f = *state;
	uint8_t img[5000], other[100], h1[16], h2[16], h3[16];
	struct tracker_image im;
	struct tracker_stats st;
	const void *bytes;

	for (size_t i = 0; i < sizeof(img); i++)
		img[i] = (uint8_t)(i * 31);
	memset(other, 0x5a, sizeof(other));

	assert_int_equal(tracker_image_ref(f->t, img, sizeof(img), 2, h1), 0);
	assert_int_equal(tracker_image_ref(f->t, img, sizeof(img), 9, h2), 0);
	assert_memory_equal(h1, h2, 16);
	assert_int_equal(tracker_image_ref(f->t, other, sizeof(other), 1, h3), 0);
	assert_memory_not_equal(h1, h3, 16);

	assert_int_equal(tracker_image_get(f->t, h1, &im, &bytes), 0);
	assert_true(im.refs == 2 && im.size == sizeof(img));
	assert_int_equal(im.format, 2); /* kept from the first ref */
	assert_memory_equal(bytes, img, sizeof(img));
	assert_int_equal(tracker_stats_get(f->t, &st), 0);
	assert_true(st.images == 2);
	assert_true(st.image_bytes == sizeof(img) + sizeof(other)); /* one copy */
	assert_true(st.image_refs == 3);

	assert_int_equal(tracker_image_unref(f->t, h1), 0);
	assert_int_equal(tracker_image_get(f->t, h1, &im, NULL), 0);
	assert_true(im.refs == 1);
	assert_int_equal(tracker_image_unref(f->t, h1), 0);
	assert_int_equal(tracker_image_get(f->t, h1, &im, NULL), -ENOENT);
	assert_int_equal(tracker_image_unref(f->t, h1), -ENOENT);
	assert_int_equal(tracker_stats_get(f->t, &st), 0);
	assert_true(st.images == 1 && st.image_bytes == sizeof(other));

	/* an empty image is still an image */
	assert_int_equal(tracker_image_ref(f->t, NULL, 0, 1, h2), 0);
	assert_int_equal(tracker_image_get(f->t, h2, &im, NULL), 0);
	assert_true(im.size == 0 && im.refs == 1);
}

struct seen {
	uint64_t keys[64];
	uint32_t kinds[64];
	uint8_t hashes[64][16];
	int n;
	int stop_at;
};

static int object_collect(void *ctx, uint64_t handle, const struct tracker_object *o)
{
	struct seen *s = ctx;

	if (s->n == s->stop_at)
		return 77;
	s->keys[s->n] = handle;
	s->kinds[s->n++] = o->kind;
	return 0;
}

static int region_collect(void *ctx, uint64_t addr, const struct tracker_region *r)
{
	struct seen *s = ctx;

	s->keys[s->n++] = addr;
	return 0;
}

static int image_collect(void *ctx, const uint8_t hash[16], const struct tracker_image *im,
			 const void *bytes)
{
	struct seen *s = ctx;
	uint8_t h[16];

	tracker_image_hash(bytes, im->size, h);
	assert_memory_equal(h, hash, 16);
	memcpy(s->hashes[s->n++], hash, 16);
	return 0;
}

struct writer_ctx {
	struct tracker *t;
	int put_rc, get_rc;
};

static int object_write_inside(void *ctx, uint64_t handle, const struct tracker_object *o)
{
	struct writer_ctx *w = ctx;
	struct tracker_object got;

	w->put_rc = tracker_object_put(w->t, 999, o);
	w->get_rc = tracker_object_get(w->t, handle, &got);
	return 1;
}

enum { K_CTX = 10, K_MODULE = 20, K_FUNC = 30, K_STREAM = 40, K_ODD = 99 };

static void test_iteration_order(void **state)
{
	struct fixture *f = *state;
	/* handles deliberately not in dependency order */
	static const struct { uint64_t h; uint32_t kind; } objs[] = {
		{0x300, K_STREAM}, {0x1, K_FUNC}, {0x50, K_CTX}, {0x2, K_MODULE},
		{0x10000, K_FUNC}, {0x7, K_ODD}, {0x3, K_CTX}, {0x100, K_MODULE}, {0x4, K_STREAM},
	};
	static const uint32_t order[] = {K_CTX, K_MODULE, K_FUNC, K_STREAM};
	static const uint64_t want[] = {0x3, 0x50, 0x2, 0x100, 0x1, 0x10000, 0x4, 0x300, 0x7};
	static const uint64_t addrs[] = {0x9000, 0x100000000ull, 0x1000, 0xff00, 0x200};
	struct seen s = {.stop_at = -1};
	struct writer_ctx w;
	uint8_t h[16];

	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
		struct tracker_object o = {.kind = objs[i].kind};

		assert_int_equal(tracker_object_put(f->t, objs[i].h, &o), 0);
	}
	assert_int_equal(tracker_object_foreach(f->t, order, 4, object_collect, &s), 0);
	assert_int_equal(s.n, 9);
	for (int i = 0; i < 9; i++)
		assert_true(s.keys[i] == want[i]);
	assert_int_equal(s.kinds[8], K_ODD); /* unlisted kinds last */

	/* no order: plain handle order */
	s = (struct seen){.stop_at = -1};
	assert_int_equal(tracker_object_foreach(f->t, NULL, 0, object_collect, &s), 0);
	for (int i = 1; i < s.n; i++)
		assert_true(s.keys[i - 1] < s.keys[i]);

	/* a callback's value stops the walk and comes back */
	s = (struct seen){.stop_at = 2};
	assert_int_equal(tracker_object_foreach(f->t, order, 4, object_collect, &s), 77);
	assert_int_equal(s.n, 2);

	/* callbacks may read, not write */
	w = (struct writer_ctx){.t = f->t};
	assert_int_equal(tracker_object_foreach(f->t, order, 4, object_write_inside, &w), 1);
	assert_int_equal(w.put_rc, -EBUSY);
	assert_int_equal(w.get_rc, 0);

	for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
		struct tracker_region r = {.size = 0x100};

		assert_int_equal(tracker_region_put(f->t, addrs[i], &r), 0);
	}
	s = (struct seen){.stop_at = -1};
	assert_int_equal(tracker_region_foreach(f->t, region_collect, &s), 0);
	assert_int_equal(s.n, 5);
	for (int i = 1; i < s.n; i++)
		assert_true(s.keys[i - 1] < s.keys[i]);
	assert_true(s.keys[0] == 0x200 && s.keys[4] == 0x100000000ull);

	for (int i = 0; i < 6; i++) {
		char img[32];

		snprintf(img, sizeof(img), "image %d", i);
		assert_int_equal(tracker_image_ref(f->t, img, strlen(img), 1, h), 0);
	}
	s = (struct seen){.stop_at = -1};
	assert_int_equal(tracker_image_foreach(f->t, image_collect, &s), 0);
	assert_int_equal(s.n, 6);
	for (int i = 1; i < s.n; i++)
		assert_true(memcmp(s.hashes[i - 1], s.hashes[i], 16) < 0);
}

static void test_batch(void **state)
{
	struct fixture *f = *state;
	struct tracker_object o = {.kind = 1}, got;
	uint64_t seq;
	const void *p;
	size_t n;

	assert_int_equal(tracker_txn_begin(f->t), 0);
	assert_true(tracker_txn_active(f->t));
	assert_int_equal(tracker_txn_begin(f->t), -EALREADY);
	for (uint64_t h = 1; h <= 100; h++)
		assert_int_equal(tracker_object_put(f->t, h, &o), 0);
	assert_int_equal(tracker_object_get(f->t, 50, &got), 0); /* a batch sees itself */
	tracker_txn_abort(f->t);
	assert_false(tracker_txn_active(f->t));
	assert_int_equal(tracker_object_get(f->t, 50, &got), -ENOENT);

	assert_int_equal(tracker_txn_begin(f->t), 0);
	for (uint64_t h = 1; h <= 100; h++)
		assert_int_equal(tracker_object_put(f->t, h, &o), 0);
	/* a refused write leaves the batch whole */
	assert_int_equal(tracker_object_del(f->t, 1000), -ENOENT);
	assert_int_equal(tracker_object_del(f->t, 7), 0);
	assert_int_equal(tracker_reply_set(f->t, 9, "ok", 2), 0);
	assert_int_equal(tracker_txn_commit(f->t), 0);
	assert_int_equal(tracker_txn_commit(f->t), -EINVAL);
	assert_int_equal(tracker_object_get(f->t, 100, &got), 0);
	assert_int_equal(tracker_object_get(f->t, 7, &got), -ENOENT);
	assert_int_equal(tracker_reply_get(f->t, &seq, &p, &n), 0);
	assert_true(seq == 9);
}

/* --- copies ---------------------------------------------------------- */

struct dump {
	char *buf;
	size_t len, cap;
};

static void dump_add(struct dump *d, const void *p, size_t n)
{
	if (d->len + n > d->cap) {
		d->cap = (d->len + n) * 2;
		d->buf = realloc(d->buf, d->cap);
		assert_non_null(d->buf);
	}
	memcpy(d->buf + d->len, p, n);
	d->len += n;
}

static int dump_object(void *ctx, uint64_t h, const struct tracker_object *o)
{
	dump_add(ctx, &h, 8);
	dump_add(ctx, &o->kind, 4);
	dump_add(ctx, &o->flags, 4);
	dump_add(ctx, &o->parent, 8);
	dump_add(ctx, &o->args_len, 4);
	if (o->args_len)
		dump_add(ctx, o->args, o->args_len);
	return 0;
}

static int dump_region(void *ctx, uint64_t a, const struct tracker_region *r)
{
	dump_add(ctx, &a, 8);
	dump_add(ctx, r, sizeof(*r));
	return 0;
}

static int dump_image(void *ctx, const uint8_t hash[16], const struct tracker_image *im,
		      const void *bytes)
{
	dump_add(ctx, hash, 16);
	dump_add(ctx, &im->refs, 8);
	dump_add(ctx, &im->format, 4);
	if (im->size)
		dump_add(ctx, bytes, im->size);
	return 0;
}

static int dump_meta(void *ctx, uint32_t key, const struct tracker_meta_value *v)
{
	dump_add(ctx, &key, 4);
	dump_add(ctx, &v->type, 4);
	dump_add(ctx, &v->u64, 8);
	if (v->len)
		dump_add(ctx, v->bytes, v->len);
	return 0;
}

/* Everything a journal holds, as one byte string. */
static void journal_dump(struct tracker *t, struct dump *d)
{
	static const uint32_t order[] = {1, 2, 3};

	memset(d, 0, sizeof(*d));
	assert_int_equal(tracker_object_foreach(t, order, 3, dump_object, d), 0);
	assert_int_equal(tracker_region_foreach(t, dump_region, d), 0);
	assert_int_equal(tracker_image_foreach(t, dump_image, d), 0);
	assert_int_equal(tracker_meta_foreach(t, dump_meta, d), 0);
}

static void journal_fill(struct tracker *t, uint64_t base, int n)
{
	uint8_t args[200], h[16];

	for (int i = 0; i < n; i++) {
		struct tracker_object o = {.kind = 1 + i % 3, .parent = i ? base + i - 1 : 0,
					   .args = args, .args_len = (uint32_t)(i % 200)};
		struct tracker_region r = {.size = 4096u * (1 + i), .owner = base, .kind = 1};

		memset(args, i, sizeof(args));
		assert_int_equal(tracker_object_put(t, base + i, &o), 0);
		assert_int_equal(tracker_region_put(t, 0x7f0000000000ull + 0x100000ull * i, &r), 0);
		if (i % 10 == 0)
			assert_int_equal(tracker_image_ref(t, args, sizeof(args), 1, h), 0);
	}
	assert_int_equal(tracker_reply_set(t, base + n, "last", 4), 0);
	assert_int_equal(tracker_meta_u64_set(t, TRACKER_META_ARENA_BASE, 0x7f0000000000ull), 0);
}

static void test_copy_read_only(void **state)
{
	struct fixture *f = *state;
	struct tracker *ro, *ro_dir;
	struct tracker_stats a, b;
	struct tracker_object o = {.kind = 1};
	struct dump live, copy;
	char path[320], dir[320], file[340];

	journal_fill(f->t, 100, 500);
	for (uint64_t h = 100; h < 600; h += 2)
		assert_int_equal(tracker_object_del(f->t, h), 0);
	/* uncommitted: the copy holds the last commit only */
	assert_int_equal(tracker_txn_begin(f->t), 0);
	assert_int_equal(tracker_object_put(f->t, 5000, &o), 0);

	path_in(f, "copy.mdb", path, sizeof(path));
	assert_int_equal(tracker_copy_file(f->t, path), 0);
	assert_int_equal(tracker_copy_file(f->t, path), -EEXIST);
	tracker_txn_abort(f->t);

	assert_int_equal(tracker_open(path, TRACKER_OPEN_RDONLY, &ro), 0);
	journal_dump(f->t, &live);
	journal_dump(ro, &copy);
	assert_true(live.len > 10000);
	assert_int_equal(live.len, copy.len);
	assert_memory_equal(live.buf, copy.buf, live.len);
	assert_int_equal(tracker_stats_get(f->t, &a), 0);
	assert_int_equal(tracker_stats_get(ro, &b), 0);
	assert_true(a.objects == 250 && b.objects == 250);
	assert_true(a.regions == b.regions && a.region_bytes == b.region_bytes);
	assert_true(a.images == b.images && a.image_bytes == b.image_bytes);
	assert_true(a.image_refs == b.image_refs && a.meta == b.meta);
	assert_true(b.used_bytes <= a.used_bytes); /* compacted */

	/* a copy cannot be written */
	assert_int_equal(tracker_object_put(ro, 1, &o), -EROFS);
	assert_int_equal(tracker_object_del(ro, 101), -EROFS);
	assert_int_equal(tracker_txn_begin(ro), -EROFS);

	/* a directory holding data.mdb opens too, through an fd copy */
	path_in(f, "snapdir", dir, sizeof(dir));
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(file, sizeof(file), "%s/data.mdb", dir);
	int fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(tracker_copy_fd(ro, fd), 0); /* a copy of a copy */
	close(fd);
	assert_int_equal(tracker_open(dir, TRACKER_OPEN_RDONLY, &ro_dir), 0);
	free(copy.buf);
	journal_dump(ro_dir, &copy);
	assert_int_equal(live.len, copy.len);
	assert_memory_equal(live.buf, copy.buf, live.len);

	tracker_close(ro_dir);
	tracker_close(ro);
	free(live.buf);
	free(copy.buf);
}

static void test_reopen(void **state)
{
	struct fixture *f = *state;
	struct dump before, after;
	struct tracker *t;
	uint64_t seq;
	const void *p;
	size_t n;

	journal_fill(f->t, 1, 300);
	journal_dump(f->t, &before);
	tracker_close(f->t);
	f->t = NULL;
	assert_int_equal(tracker_open(f->journal, 0, &f->t), 0);
	journal_dump(f->t, &after);
	assert_int_equal(before.len, after.len);
	assert_memory_equal(before.buf, after.buf, before.len);
	assert_int_equal(tracker_reply_get(f->t, &seq, &p, &n), 0);
	assert_true(seq == 301);
	/* and it keeps working */
	journal_fill(f->t, 1000, 50);
	assert_int_equal(tracker_sync(f->t), 0);
	free(before.buf);
	free(after.buf);

	/* the live directory is no copy: read-only needs data.mdb in it, which
	 * it has, so it opens; an empty directory does not */
	char empty[320];
	path_in(f, "empty", empty, sizeof(empty));
	assert_int_equal(mkdir(empty, 0700), 0);
	assert_true(tracker_open(empty, TRACKER_OPEN_RDONLY, &t) < 0);
	assert_null(t);
	assert_int_equal(tracker_open("/nonexistent/x", TRACKER_OPEN_RDONLY, &t), -ENOENT);
}

/* A journal written by a newer build, or a foreign LMDB file, is refused. */
static void test_format_refused(void **state)
{
	struct fixture *f = *state;
	char dir[320];
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	struct tracker *t;
	static const char *names[] = {"objects", "regions", "images", "image_data", "meta"};
	uint8_t key[4], rec[64];
	struct tracker_meta_value mv = {.type = TRACKER_META_T_U64, .u64 = TRACKER_FORMAT_VERSION + 1};
	MDB_val k = {4, key}, v = {TRACKER_META_FIXED + 8, rec};

	path_in(f, "newer", dir, sizeof(dir));
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(mdb_env_create(&env), 0);
	mdb_env_set_maxdbs(env, 8);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(mdb_dbi_open(txn, names[i], MDB_CREATE, &dbi), 0);
	tracker_key_u32_encode(TRACKER_META_FORMAT, key);
	assert_int_equal(tracker_meta_encode(&mv, rec, sizeof(rec)), 0);
	assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	assert_int_equal(tracker_open(dir, 0, &t), -EPROTONOSUPPORT);

	/* an LMDB file that is not a journal */
	path_in(f, "foreign", dir, sizeof(dir));
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(mdb_env_create(&env), 0);
	mdb_env_set_maxdbs(env, 8);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "other", MDB_CREATE, &dbi), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	assert_int_equal(tracker_open(dir, 0, &t), -EBADMSG);
}

/* --- growth ---------------------------------------------------------- */

static void test_map_growth(void **state)
{
	struct fixture *f = *state;
	static uint8_t args[2048];
	struct tracker_object o = {.kind = 1, .args = args, .args_len = sizeof(args)}, got;
	struct tracker_stats st0, st;
	uint8_t *img, h[16];
	const size_t img_size = 24u << 20;
	struct tracker_image im;
	const void *bytes;

	assert_int_equal(tracker_stats_get(f->t, &st0), 0);
	/* one commit per call: grows before each begin */
	for (uint64_t i = 1; i <= 8000; i++) {
		memcpy(args, &i, sizeof(i));
		assert_int_equal(tracker_object_put(f->t, i, &o), 0);
	}
	/* one batch, far larger than the map: MAP_FULL, grow, replay */
	assert_int_equal(tracker_txn_begin(f->t), 0);
	for (uint64_t i = 8001; i <= 40000; i++) {
		memcpy(args, &i, sizeof(i));
		assert_int_equal(tracker_object_put(f->t, i, &o), 0);
	}
	img = malloc(img_size);
	assert_non_null(img);
	for (size_t i = 0; i < img_size; i++)
		img[i] = (uint8_t)(i ^ (i >> 9));
	assert_int_equal(tracker_image_ref(f->t, img, img_size, 3, h), 0);
	assert_int_equal(tracker_txn_commit(f->t), 0);

	assert_int_equal(tracker_stats_get(f->t, &st), 0);
	assert_true(st.objects == 40000);
	assert_true(st.map_size > st0.map_size);
	assert_true(st.map_size >= st.used_bytes);
	assert_true(st.used_bytes > 40000ull * sizeof(args));
	for (uint64_t i = 1; i <= 40000; i += 997) {
		uint64_t tag;

		assert_int_equal(tracker_object_get(f->t, i, &got), 0);
		memcpy(&tag, got.args, sizeof(tag));
		assert_true(tag == i);
	}
	assert_int_equal(tracker_image_get(f->t, h, &im, &bytes), 0);
	assert_true(im.size == img_size);
	assert_memory_equal(bytes, img, img_size);
	free(img);

	/* deleting everything frees pages that later puts reuse */
	assert_int_equal(tracker_txn_begin(f->t), 0);
	for (uint64_t i = 1; i <= 40000; i++)
		assert_int_equal(tracker_object_del(f->t, i), 0);
	assert_int_equal(tracker_txn_commit(f->t), 0);
	assert_int_equal(tracker_stats_get(f->t, &st0), 0);
	assert_true(st0.objects == 0);
	for (uint64_t i = 1; i <= 20000; i++)
		assert_int_equal(tracker_object_put(f->t, i, &o), 0);
	assert_int_equal(tracker_stats_get(f->t, &st), 0);
	assert_true(st.used_bytes == st0.used_bytes);
}

/* A full disk (here a file size limit) fails writes with an error, keeps
 * what was committed, and the journal works again once there is room. */
static void test_disk_full(void **state)
{
	struct fixture *f = *state;
	static uint8_t args[4096];
	struct tracker_object o = {.kind = 1, .args = args, .args_len = sizeof(args)}, got;
	struct rlimit old, lim;
	uint64_t h, committed = 0;
	int rc = 0;

	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 48u << 20;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	for (h = 1; h < 100000; h++) {
		rc = tracker_object_put(f->t, h, &o);
		if (rc)
			break;
		committed = h;
	}
	assert_true(rc == -EFBIG || rc == -ENOSPC);
	assert_true(committed > 1000);
	/* in a batch too: the batch fails as a whole */
	assert_int_equal(tracker_txn_begin(f->t), 0);
	for (rc = 0; rc == 0 && h < 200000; h++)
		rc = tracker_object_put(f->t, h, &o);
	assert_true(rc < 0);
	assert_int_equal(tracker_object_put(f->t, 1, &o), rc); /* the batch stays failed */
	assert_int_equal(tracker_txn_commit(f->t), rc);
	assert_int_equal(tracker_object_get(f->t, committed, &got), 0);
	assert_int_equal(tracker_object_get(f->t, committed + 1, &got), -ENOENT);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	for (h = committed + 1; h < committed + 20000; h++)
		assert_int_equal(tracker_object_put(f->t, h, &o), 0);
}

/* Copies taken on another thread while the owner writes (and the map grows)
 * are each consistent: every record decodes, counts only go up. */
static int object_collect_none(void *ctx, uint64_t handle, const struct tracker_object *o)
{
	return o->args_len == 2048 ? 0 : -1;
}

struct copier {
	const struct fixture *f;
	struct tracker *t;
	volatile int done;
	int copies;
	uint64_t last_count;
	int failed;
};

static void *copier_run(void *arg)
{
	struct copier *c = arg;

	while (!c->done || c->copies == 0) {
		char path[340];
		struct tracker *ro;
		struct tracker_stats st;

		snprintf(path, sizeof(path), "%s/copy-%d", c->f->dir, c->copies);
		if (tracker_copy_file(c->t, path) || tracker_open(path, TRACKER_OPEN_RDONLY, &ro)) {
			c->failed = 1;
			break;
		}
		if (tracker_object_foreach(ro, NULL, 0, object_collect_none, NULL) ||
		    tracker_stats_get(ro, &st) || st.objects < c->last_count)
			c->failed = 1;
		c->last_count = st.objects;
		tracker_close(ro);
		unlink(path);
		c->copies++;
		if (c->failed)
			break;
	}
	return NULL;
}

static void test_copy_while_writing(void **state)
{
	struct fixture *f = *state;
	static uint8_t args[2048];
	struct tracker_object o = {.kind = 1, .args = args, .args_len = sizeof(args)};
	struct copier c = {.f = f, .t = f->t};
	struct tracker_stats st;
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, copier_run, &c), 0);
	for (uint64_t i = 1; i <= 30000; i++) {
		if (i % 64 == 1)
			assert_int_equal(tracker_txn_begin(f->t), 0);
		assert_int_equal(tracker_object_put(f->t, i, &o), 0);
		if (i % 64 == 0 || i == 30000)
			assert_int_equal(tracker_txn_commit(f->t), 0);
	}
	c.done = 1;
	pthread_join(th, NULL);
	assert_false(c.failed);
	assert_true(c.copies >= 1);
	assert_int_equal(tracker_stats_get(f->t, &st), 0);
	assert_true(st.objects == 30000);
	assert_true(c.last_count <= 30000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_object_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_region_and_meta_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_refcount, setup, teardown),
		cmocka_unit_test_setup_teardown(test_iteration_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_read_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_growth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_while_writing, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
