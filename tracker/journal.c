/* The journal: LMDB storage behind tracker.h.
 *
 * Writes go through one path, journal_write(): an operation (put, del, image
 * ref/unref) is applied to the open write transaction.  In a batch every
 * applied operation is also kept in a redo log, because MDB_MAP_FULL kills the
 * transaction and the map can only be resized with none open: we abort, grow
 * the map, and apply the log again.  Outside a batch the one operation is
 * simply retried.
 */
#define LOG_PREFIX "tracker: "
#include "tracker.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

enum journal_db {
	DB_OBJECTS,
	DB_REGIONS,
	DB_IMAGES,
	DB_IMAGE_DATA,
	DB_META,
	DB_COUNT,
};

static const char *const journal_db_names[DB_COUNT] = {
	[DB_OBJECTS] = "objects",
	[DB_REGIONS] = "regions",
	[DB_IMAGES] = "images",
	[DB_IMAGE_DATA] = "image_data",
	[DB_META] = "meta",
};

#define JOURNAL_MAP_INITIAL (8ull << 20)
#define JOURNAL_MAP_STEP_MAX (1ull << 30)
#define JOURNAL_MAP_MAX (1ull << 40)
/* A redo log larger than this is freed after its batch, not kept for reuse. */
#define JOURNAL_LOG_KEEP (1u << 20)

enum journal_op_type {
	OP_PUT,
	OP_DEL,
	OP_IMAGE_REF,
	OP_IMAGE_UNREF,
};

struct journal_op {
	uint8_t type;
	uint8_t db;
	uint16_t key_len;
	uint32_t format; /* OP_IMAGE_REF */
	uint8_t key[TRACKER_HASH_SIZE];
	const void *val; /* OP_PUT: encoded record; OP_IMAGE_REF: image bytes */
	size_t val_len;
};

/* Redo log entry, in memory only: this header, then val_len bytes, padded. */
struct journal_log_entry {
	uint8_t type;
	uint8_t db;
	uint16_t key_len;
	uint32_t format;
	uint64_t val_len;
	uint8_t key[TRACKER_HASH_SIZE];
};

struct tracker {
	MDB_env *env;
	MDB_dbi dbi[DB_COUNT];
	bool rdonly;
	size_t psize;

	MDB_txn *wtxn; /* the batch's, or one operation's */
	bool batch;
	int batch_err; /* a failed batch: returned until commit/abort */
	int iterating; /* foreach depth: writes are refused */

	/* Cached reader for gets: renewed per call, reset at the next call. */
	MDB_txn *rtxn;
	bool rtxn_live;

	uint8_t *log;
	size_t log_len, log_cap;
	uint8_t *scratch; /* encode buffer for one record */
	size_t scratch_cap;

	/* Held by map growth and by copies: mdb_env_set_mapsize remaps, which a
	 * copy running on another thread must not see. */
	pthread_mutex_t map_lock;
	int broken; /* -EIO once LMDB lost its map: every call fails */
};

/* LMDB's own codes lie in [MDB_KEYEXIST, MDB_LAST_ERRCODE], far below any
 * -errno; it also returns positive errno values from system calls. */
static bool journal_rc_is_mdb(int rc)
{
	return rc > 0 || rc <= MDB_LAST_ERRCODE;
}

static int journal_errno(int rc)
{
	if (!journal_rc_is_mdb(rc))
		return rc;
	if (rc > 0)
		return -rc;
	switch (rc) {
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
		return -ENOSPC;
	case MDB_TXN_FULL:
		return -E2BIG;
	case MDB_VERSION_MISMATCH:
		return -EPROTONOSUPPORT;
	case MDB_INVALID:
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
		return -EBADMSG;
	case MDB_READERS_FULL:
	case MDB_MAP_RESIZED:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* Log LMDB's message where the failure arises, return it as -errno. */
static int journal_fail(const char *what, int rc)
{
	if (journal_rc_is_mdb(rc) && rc != MDB_NOTFOUND)
		pr_err("%s: %s", what, mdb_strerror(rc));
	return journal_errno(rc);
}

static MDB_val journal_val(const void *p, size_t n)
{
	MDB_val v = {.mv_size = n, .mv_data = (void *)p};
	return v;
}

static void *journal_scratch(struct tracker *t, size_t n)
{
	if (n > t->scratch_cap) {
		size_t cap = n < 256 ? 256 : n;
		void *p = realloc(t->scratch, cap);

		if (!p)
			return NULL;
		t->scratch = p;
		t->scratch_cap = cap;
	}
	return t->scratch;
}

/* --- readers --------------------------------------------------------- */

static void journal_reader_release(struct tracker *t)
{
	if (t->rtxn_live) {
		mdb_txn_reset(t->rtxn);
		t->rtxn_live = false;
	}
}

/* The transaction reads use: the open write one (so a batch sees itself),
 * else the cached reader, renewed. */
static int journal_reader(struct tracker *t, MDB_txn **out)
{
	int rc;

	if (t->broken)
		return t->broken;
	if (t->wtxn) {
		*out = t->wtxn;
		return 0;
	}
	if (!t->rtxn)
		rc = mdb_txn_begin(t->env, NULL, MDB_RDONLY, &t->rtxn);
	else if (!t->rtxn_live)
		rc = mdb_txn_renew(t->rtxn);
	else
		rc = 0;
	if (rc) {
		return journal_fail("read transaction", rc);
	}
	t->rtxn_live = true;
	*out = t->rtxn;
	return 0;
}

/* A get: release the previous call's reader, look @key up in @db. */
static int journal_get(struct tracker *t, enum journal_db db, const void *key, size_t key_len,
		       MDB_val *val)
{
	MDB_txn *txn = NULL;
	MDB_val k = journal_val(key, key_len);
	int rc;

	journal_reader_release(t);
	rc = journal_reader(t, &txn);
	if (rc)
		return rc;
	rc = mdb_get(txn, t->dbi[db], &k, val);
	return rc ? journal_fail("get", rc) : 0;
}

/* --- map growth ------------------------------------------------------ */

/* The map is writable (MDB_WRITEMAP: a commit stores through it, three times
 * faster than LMDB's write() path for small commits).  A page of the sparse
 * file without a disk block behind it would then raise SIGBUS on a full
 * disk instead of failing a call, so every page of the map gets its block
 * when the map is sized, and a full disk fails the growth. */
static int journal_map_reserve(struct tracker *t, uint64_t from, uint64_t to)
{
	int fd, rc;

	rc = mdb_env_get_fd(t->env, &fd);
	if (rc)
		return journal_fail("map fd", rc);
	rc = posix_fallocate(fd, (off_t)from, (off_t)(to - from));
	return -rc;
}

/* Blocks first, then the map: a failed mdb_env_set_mapsize leaves LMDB
 * without a map at all, so it must not fail for want of space. */
static int journal_map_grow(struct tracker *t, bool wait)
{
	MDB_envinfo info;
	uint64_t cur, next;
	int rc;

	if (wait)
		pthread_mutex_lock(&t->map_lock);
	else if (pthread_mutex_trylock(&t->map_lock))
		return -EBUSY;
	mdb_env_info(t->env, &info);
	cur = info.me_mapsize;
	next = cur + (cur < JOURNAL_MAP_STEP_MAX ? cur : JOURNAL_MAP_STEP_MAX);
	if (next > JOURNAL_MAP_MAX) {
		pthread_mutex_unlock(&t->map_lock);
		pr_err("map full at %llu bytes", (unsigned long long)cur);
		return -ENOSPC;
	}
	rc = journal_map_reserve(t, cur, next);
	if (rc) {
		pthread_mutex_unlock(&t->map_lock);
		/* an early growth may fail quietly: the one MAP_FULL forces reports */
		log_msg(wait ? LOG_ERR : LOG_DEBUG, LOG_PREFIX, "grow map to %llu bytes: %s",
			(unsigned long long)next, strerror(-rc));
		return rc;
	}
	rc = mdb_env_set_mapsize(t->env, next);
	if (rc && mdb_env_set_mapsize(t->env, cur)) {
		pr_err("map lost after a failed resize: journal unusable");
		t->broken = -EIO;
	}
	pthread_mutex_unlock(&t->map_lock);
	if (rc)
		return journal_fail("grow map", rc);
	pr_debug("map grown to %llu bytes", (unsigned long long)next);
	return 0;
}

/* Begin the write transaction, first growing the map while it is cheap (no
 * transaction to replay) once three quarters of it are in use. */
static int journal_wtxn_begin(struct tracker *t)
{
	MDB_envinfo info;
	int rc;

	mdb_env_info(t->env, &info);
	if ((info.me_last_pgno + 1) * t->psize > info.me_mapsize / 4 * 3)
		journal_map_grow(t, false); /* best effort: MAP_FULL handles the rest */
	rc = mdb_txn_begin(t->env, NULL, 0, &t->wtxn);
	if (rc) {
		t->wtxn = NULL;
		return journal_fail("begin", rc);
	}
	return 0;
}

/* --- applying operations --------------------------------------------- */

/* Returns 0; -errno when the operation is refused and nothing was written
 * (the transaction stays usable); or an LMDB code (journal_rc_is_mdb) after
 * which the transaction must be aborted. */
static int journal_image_ref_apply(struct tracker *t, MDB_txn *txn, const struct journal_op *op)
{
	MDB_val k = journal_val(op->key, op->key_len), v, data;
	uint8_t rec[TRACKER_IMAGE_SIZE];
	struct tracker_image im;
	int rc;

	rc = mdb_get(txn, t->dbi[DB_IMAGES], &k, &v);
	if (rc == 0) {
		rc = tracker_image_decode(&im, v.mv_data, v.mv_size);
		if (rc)
			return rc;
		rc = mdb_get(txn, t->dbi[DB_IMAGE_DATA], &k, &data);
		if (rc)
			return rc == MDB_NOTFOUND ? -EBADMSG : rc;
		if (im.size != op->val_len || data.mv_size != op->val_len ||
		    memcmp(data.mv_data, op->val, op->val_len))
			return -EEXIST;
		im.refs++;
	} else if (rc == MDB_NOTFOUND) {
		data = journal_val(NULL, op->val_len);
		rc = mdb_put(txn, t->dbi[DB_IMAGE_DATA], &k, &data, MDB_RESERVE);
		if (rc)
			return rc;
		if (op->val_len)
			memcpy(data.mv_data, op->val, op->val_len);
		im = (struct tracker_image){.format = op->format, .refs = 1, .size = op->val_len};
	} else {
		return rc;
	}
	tracker_image_encode(&im, rec, sizeof(rec));
	v = journal_val(rec, sizeof(rec));
	return mdb_put(txn, t->dbi[DB_IMAGES], &k, &v, 0);
}

static int journal_image_unref_apply(struct tracker *t, MDB_txn *txn, const struct journal_op *op)
{
	MDB_val k = journal_val(op->key, op->key_len), v;
	uint8_t rec[TRACKER_IMAGE_SIZE];
	struct tracker_image im;
	int rc;

	rc = mdb_get(txn, t->dbi[DB_IMAGES], &k, &v);
	if (rc)
		return rc == MDB_NOTFOUND ? -ENOENT : rc;
	rc = tracker_image_decode(&im, v.mv_data, v.mv_size);
	if (rc)
		return rc;
	if (--im.refs == 0) {
		rc = mdb_del(txn, t->dbi[DB_IMAGES], &k, NULL);
		if (rc)
			return rc;
		rc = mdb_del(txn, t->dbi[DB_IMAGE_DATA], &k, NULL);
		/* a missing copy was already reported by the ref that found it */
		return rc == MDB_NOTFOUND ? 0 : rc;
	}
	tracker_image_encode(&im, rec, sizeof(rec));
	v = journal_val(rec, sizeof(rec));
	return mdb_put(txn, t->dbi[DB_IMAGES], &k, &v, 0);
}

static int journal_apply(struct tracker *t, MDB_txn *txn, const struct journal_op *op)
{
	MDB_val k = journal_val(op->key, op->key_len), v;
	int rc;

	switch (op->type) {
	case OP_PUT:
		v = journal_val(op->val, op->val_len);
		return mdb_put(txn, t->dbi[op->db], &k, &v, 0);
	case OP_DEL:
		rc = mdb_del(txn, t->dbi[op->db], &k, NULL);
		return rc == MDB_NOTFOUND ? -ENOENT : rc;
	case OP_IMAGE_REF:
		return journal_image_ref_apply(t, txn, op);
	case OP_IMAGE_UNREF:
		return journal_image_unref_apply(t, txn, op);
	}
	return -EINVAL;
}

/* --- the redo log ---------------------------------------------------- */

static size_t journal_log_entry_size(size_t val_len)
{
	return (sizeof(struct journal_log_entry) + val_len + 7) & ~(size_t)7;
}

static int journal_log_append(struct tracker *t, const struct journal_op *op)
{
	size_t need = journal_log_entry_size(op->val_len);
	struct journal_log_entry e = {
		.type = op->type, .db = op->db, .key_len = op->key_len,
		.format = op->format, .val_len = op->val_len,
	};

	if (t->log_cap - t->log_len < need) {
		size_t cap = t->log_cap ? t->log_cap : 4096;
		void *p;

		while (cap - t->log_len < need)
			cap *= 2;
		p = realloc(t->log, cap);
		if (!p)
			return -ENOMEM;
		t->log = p;
		t->log_cap = cap;
	}
	memcpy(e.key, op->key, op->key_len);
	memcpy(t->log + t->log_len, &e, sizeof(e));
	if (op->val_len)
		memcpy(t->log + t->log_len + sizeof(e), op->val, op->val_len);
	t->log_len += need;
	return 0;
}

static void journal_log_reset(struct tracker *t)
{
	t->log_len = 0;
	if (t->log_cap > JOURNAL_LOG_KEEP) {
		free(t->log);
		t->log = NULL;
		t->log_cap = 0;
	}
}

/* The batch's transaction died of MDB_MAP_FULL (or its commit did): grow
 * the map and apply the whole log again in a new one.  Returns 0 with the
 * batch whole again, or -errno with no transaction open. */
static int journal_batch_redo(struct tracker *t)
{
	int rc;

	for (;;) {
		if (t->wtxn) {
			mdb_txn_abort(t->wtxn);
			t->wtxn = NULL;
		}
		rc = journal_map_grow(t, true);
		if (rc)
			return rc;
		rc = journal_wtxn_begin(t);
		if (rc)
			return rc;
		for (size_t at = 0; at < t->log_len && rc == 0;) {
			struct journal_log_entry e;
			struct journal_op op;

			memcpy(&e, t->log + at, sizeof(e));
			op = (struct journal_op){
				.type = e.type, .db = e.db, .key_len = e.key_len, .format = e.format,
				.val = t->log + at + sizeof(e), .val_len = e.val_len,
			};
			memcpy(op.key, e.key, sizeof(op.key));
			rc = journal_apply(t, t->wtxn, &op);
			at += journal_log_entry_size(e.val_len);
		}
		if (rc != MDB_MAP_FULL)
			break;
	}
	if (rc) {
		/* the same operations on the same state succeeded before */
		mdb_txn_abort(t->wtxn);
		t->wtxn = NULL;
		return journal_rc_is_mdb(rc) ? journal_fail("batch replay", rc) : -EIO;
	}
	return 0;
}

static int journal_batch_write(struct tracker *t, const struct journal_op *op)
{
	size_t mark = t->log_len;
	int rc;

	if (t->batch_err)
		return t->batch_err;
	rc = journal_log_append(t, op);
	if (rc)
		return rc;
	rc = journal_apply(t, t->wtxn, op);
	if (rc == MDB_MAP_FULL)
		rc = journal_batch_redo(t);
	if (rc == 0)
		return 0;
	if (journal_rc_is_mdb(rc) || !t->wtxn) {
		t->batch_err = journal_rc_is_mdb(rc) ? journal_fail("batch write", rc) : rc;
		return t->batch_err;
	}
	t->log_len = mark; /* refused, nothing written */
	return rc;
}

static int journal_write(struct tracker *t, const struct journal_op *op)
{
	int rc;

	if (t->rdonly)
		return -EROFS;
	if (t->iterating)
		return -EBUSY;
	if (t->broken)
		return t->broken;
	journal_reader_release(t);
	if (t->batch)
		return journal_batch_write(t, op);
	for (;;) {
		rc = journal_wtxn_begin(t);
		if (rc)
			return rc;
		rc = journal_apply(t, t->wtxn, op);
		if (rc == 0)
			rc = mdb_txn_commit(t->wtxn);
		else
			mdb_txn_abort(t->wtxn);
		t->wtxn = NULL;
		if (rc != MDB_MAP_FULL)
			return journal_rc_is_mdb(rc) ? journal_fail("write", rc) : rc;
		rc = journal_map_grow(t, true);
		if (rc)
			return rc;
	}
}

/* Encode-and-put of one record into @db under a big-endian key. */
static int journal_put(struct tracker *t, enum journal_db db, const uint8_t *key, size_t key_len,
		       const void *val, size_t val_len)
{
	struct journal_op op = {.type = OP_PUT, .db = db, .key_len = key_len,
				.val = val, .val_len = val_len};

	memcpy(op.key, key, key_len);
	return journal_write(t, &op);
}

static int journal_del(struct tracker *t, enum journal_db db, const uint8_t *key, size_t key_len)
{
	struct journal_op op = {.type = OP_DEL, .db = db, .key_len = key_len};

	memcpy(op.key, key, key_len);
	return journal_write(t, &op);
}

/* --- open and close -------------------------------------------------- */

static int journal_format_check(struct tracker *t, MDB_txn *txn, bool fresh)
{
	uint8_t key[4], rec[TRACKER_META_FIXED + 8];
	struct tracker_meta_value mv = {.type = TRACKER_META_T_U64, .u64 = TRACKER_FORMAT_VERSION};
	MDB_val k = journal_val(key, sizeof(key)), v;
	int rc;

	tracker_key_u32_encode(TRACKER_META_FORMAT, key);
	rc = mdb_get(txn, t->dbi[DB_META], &k, &v);
	if (rc == MDB_NOTFOUND && fresh) {
		tracker_meta_encode(&mv, rec, sizeof(rec));
		v = journal_val(rec, sizeof(rec));
		rc = mdb_put(txn, t->dbi[DB_META], &k, &v, 0);
		return rc ? journal_fail("write format", rc) : 0;
	}
	if (rc == MDB_NOTFOUND) {
		pr_err("no format record: not a tern journal");
		return -EBADMSG;
	}
	if (rc)
		return journal_fail("read format", rc);
	rc = tracker_meta_decode(&mv, v.mv_data, v.mv_size);
	if (rc || mv.type != TRACKER_META_T_U64) {
		pr_err("format record does not decode");
		return -EBADMSG;
	}
	if (mv.u64 != TRACKER_FORMAT_VERSION) {
		pr_err("journal format %llu, this build reads %u",
		       (unsigned long long)mv.u64, TRACKER_FORMAT_VERSION);
		return -EPROTONOSUPPORT;
	}
	return 0;
}

/* Open every database (creating them in a fresh writable journal) and check
 * the format record. */
static int journal_dbs_open(struct tracker *t)
{
	MDB_txn *txn = NULL;
	MDB_dbi main_dbi;
	MDB_stat st;
	bool fresh;
	int rc;

	rc = mdb_txn_begin(t->env, NULL, t->rdonly ? MDB_RDONLY : 0, &txn);
	if (rc)
		return journal_fail("begin", rc);
	/* the unnamed database lists the named ones: empty means a new file */
	rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
	if (rc == 0)
		rc = mdb_stat(txn, main_dbi, &st);
	if (rc)
		goto out_abort;
	fresh = st.ms_entries == 0 && !t->rdonly;
	for (int i = 0; i < DB_COUNT; i++) {
		rc = mdb_dbi_open(txn, journal_db_names[i], fresh ? MDB_CREATE : 0, &t->dbi[i]);
		if (rc == MDB_NOTFOUND) {
			pr_err("database %s missing: not a tern journal", journal_db_names[i]);
			rc = -EBADMSG;
			goto out_abort_quiet;
		}
		if (rc)
			goto out_abort;
	}
	rc = journal_format_check(t, txn, fresh);
	if (rc)
		goto out_abort_quiet;
	/* committing, even read-only, is what keeps the dbi handles open */
	rc = mdb_txn_commit(txn);
	return rc ? journal_fail("commit", rc) : 0;

out_abort:
	rc = journal_fail("open databases", rc);
out_abort_quiet:
	mdb_txn_abort(txn);
	return rc;
}

int tracker_open(const char *path, uint32_t flags, struct tracker **out)
{
	unsigned int env_flags = MDB_NOTLS;
	struct tracker *t;
	struct stat sb;
	MDB_stat st;
	int rc;

	*out = NULL;
	if (flags & ~TRACKER_OPEN_RDONLY)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->rdonly = flags & TRACKER_OPEN_RDONLY;
	pthread_mutex_init(&t->map_lock, NULL);

	if (t->rdonly) {
		if (stat(path, &sb)) {
			rc = -errno;
			goto out_free;
		}
		/* a copy is immutable: no lock file, which a read-only
		 * snapshot directory could not hold anyway */
		env_flags |= MDB_RDONLY | MDB_NOLOCK;
		if (!S_ISDIR(sb.st_mode))
			env_flags |= MDB_NOSUBDIR;
	} else {
		if (mkdir(path, 0700) && errno != EEXIST) {
			rc = -errno;
			pr_err("mkdir %s: %s", path, strerror(errno));
			goto out_free;
		}
		env_flags |= MDB_NOSYNC | MDB_NOMETASYNC | MDB_WRITEMAP;
	}

	rc = mdb_env_create(&t->env);
	if (rc) {
		rc = journal_fail("create env", rc);
		goto out_free;
	}
	mdb_env_set_maxdbs(t->env, DB_COUNT);
	if (!t->rdonly)
		mdb_env_set_mapsize(t->env, JOURNAL_MAP_INITIAL); /* LMDB raises it to the file's use */
	rc = mdb_env_open(t->env, path, env_flags, 0600);
	if (rc) {
		pr_err("open %s: %s", path, mdb_strerror(rc));
		rc = journal_errno(rc);
		goto out_env;
	}
	mdb_env_stat(t->env, &st);
	t->psize = st.ms_psize;
	if (!t->rdonly) {
		MDB_envinfo info;

		mdb_env_info(t->env, &info);
		rc = journal_map_reserve(t, 0, info.me_mapsize);
		if (rc) {
			pr_err("reserve %s: %s", path, strerror(-rc));
			goto out_env;
		}
	}
	rc = journal_dbs_open(t);
	if (rc)
		goto out_env;
	*out = t;
	return 0;

out_env:
	mdb_env_close(t->env);
out_free:
	pthread_mutex_destroy(&t->map_lock);
	free(t);
	return rc;
}

void tracker_close(struct tracker *t)
{
	if (!t)
		return;
	if (t->wtxn)
		mdb_txn_abort(t->wtxn);
	if (t->rtxn)
		mdb_txn_abort(t->rtxn);
	mdb_env_close(t->env);
	pthread_mutex_destroy(&t->map_lock);
	free(t->log);
	free(t->scratch);
	free(t);
}

/* --- batches --------------------------------------------------------- */

int tracker_txn_begin(struct tracker *t)
{
	int rc;

	if (t->rdonly)
		return -EROFS;
	if (t->batch)
		return -EALREADY;
	if (t->iterating)
		return -EBUSY;
	if (t->broken)
		return t->broken;
	journal_reader_release(t);
	rc = journal_wtxn_begin(t);
	if (rc)
		return rc;
	t->batch = true;
	t->batch_err = 0;
	t->log_len = 0;
	return 0;
}

static void journal_batch_end(struct tracker *t)
{
	if (t->wtxn)
		mdb_txn_abort(t->wtxn);
	t->wtxn = NULL;
	t->batch = false;
	t->batch_err = 0;
	journal_log_reset(t);
}

int tracker_txn_commit(struct tracker *t)
{
	int rc;

	if (!t->batch)
		return -EINVAL;
	if (t->iterating)
		return -EBUSY;
	journal_reader_release(t);
	rc = t->batch_err;
	while (rc == 0) {
		rc = mdb_txn_commit(t->wtxn);
		t->wtxn = NULL; /* freed by LMDB on failure too */
		if (rc != MDB_MAP_FULL) {
			rc = rc ? journal_fail("commit", rc) : 0;
			break;
		}
		rc = journal_batch_redo(t);
	}
	journal_batch_end(t);
	return rc;
}

void tracker_txn_abort(struct tracker *t)
{
	if (t->batch && !t->iterating)
		journal_batch_end(t);
}

bool tracker_txn_active(const struct tracker *t)
{
	return t->batch;
}

/* --- objects and regions --------------------------------------------- */

int tracker_object_put(struct tracker *t, uint64_t handle, const struct tracker_object *o)
{
	uint8_t key[8];
	size_t n = tracker_object_encoded_size(o);
	void *buf;
	int rc;

	if (!handle || o->args_len > TRACKER_OBJECT_ARGS_MAX)
		return -EINVAL;
	buf = journal_scratch(t, n);
	if (!buf)
		return -ENOMEM;
	rc = tracker_object_encode(o, buf, n);
	if (rc)
		return rc;
	tracker_key_u64_encode(handle, key);
	return journal_put(t, DB_OBJECTS, key, sizeof(key), buf, n);
}

int tracker_object_get(struct tracker *t, uint64_t handle, struct tracker_object *o)
{
	uint8_t key[8];
	MDB_val v;
	int rc;

	tracker_key_u64_encode(handle, key);
	rc = journal_get(t, DB_OBJECTS, key, sizeof(key), &v);
	if (rc)
		return rc;
	rc = tracker_object_decode(o, v.mv_data, v.mv_size);
	if (rc)
		pr_err("object %#llx: record does not decode (%d)", (unsigned long long)handle, rc);
	return rc;
}

int tracker_object_del(struct tracker *t, uint64_t handle)
{
	uint8_t key[8];

	tracker_key_u64_encode(handle, key);
	return journal_del(t, DB_OBJECTS, key, sizeof(key));
}

int tracker_region_put(struct tracker *t, uint64_t addr, const struct tracker_region *r)
{
	uint8_t key[8], rec[TRACKER_REGION_SIZE];
	int rc;

	rc = tracker_region_encode(r, rec, sizeof(rec));
	if (rc)
		return rc;
	tracker_key_u64_encode(addr, key);
	return journal_put(t, DB_REGIONS, key, sizeof(key), rec, sizeof(rec));
}

int tracker_region_get(struct tracker *t, uint64_t addr, struct tracker_region *r)
{
	uint8_t key[8];
	MDB_val v;
	int rc;

	tracker_key_u64_encode(addr, key);
	rc = journal_get(t, DB_REGIONS, key, sizeof(key), &v);
	if (rc)
		return rc;
	rc = tracker_region_decode(r, v.mv_data, v.mv_size);
	if (rc)
		pr_err("region %#llx: record does not decode (%d)", (unsigned long long)addr, rc);
	return rc;
}

int tracker_region_del(struct tracker *t, uint64_t addr)
{
	uint8_t key[8];

	tracker_key_u64_encode(addr, key);
	return journal_del(t, DB_REGIONS, key, sizeof(key));
}

/* --- images ---------------------------------------------------------- */

int tracker_image_ref(struct tracker *t, const void *bytes, size_t size, uint32_t format,
		      uint8_t hash[TRACKER_HASH_SIZE])
{
	struct journal_op op = {.type = OP_IMAGE_REF, .key_len = TRACKER_HASH_SIZE,
				.format = format, .val = bytes, .val_len = size};

	if (size > TRACKER_IMAGE_MAX || (size && !bytes))
		return -EINVAL;
	tracker_image_hash(bytes, size, op.key);
	memcpy(hash, op.key, TRACKER_HASH_SIZE);
	return journal_write(t, &op);
}

int tracker_image_unref(struct tracker *t, const uint8_t hash[TRACKER_HASH_SIZE])
{
	struct journal_op op = {.type = OP_IMAGE_UNREF, .key_len = TRACKER_HASH_SIZE};

	memcpy(op.key, hash, TRACKER_HASH_SIZE);
	return journal_write(t, &op);
}

/* Reads the image record and its bytes from @txn. */
static int journal_image_read(struct tracker *t, MDB_txn *txn, const uint8_t *hash,
			      struct tracker_image *im, const void **bytes)
{
	MDB_val k = journal_val(hash, TRACKER_HASH_SIZE), v;
	int rc;

	rc = mdb_get(txn, t->dbi[DB_IMAGES], &k, &v);
	if (rc)
		return journal_fail("image", rc);
	rc = tracker_image_decode(im, v.mv_data, v.mv_size);
	if (rc)
		goto out_corrupt;
	rc = mdb_get(txn, t->dbi[DB_IMAGE_DATA], &k, &v);
	if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != im->size)) {
		rc = -EBADMSG;
		goto out_corrupt;
	}
	if (rc)
		return journal_fail("image data", rc);
	if (bytes)
		*bytes = v.mv_data;
	return 0;

out_corrupt:
	pr_err("image record or bytes do not match (%d)", rc);
	return rc;
}

int tracker_image_get(struct tracker *t, const uint8_t hash[TRACKER_HASH_SIZE],
		      struct tracker_image *im, const void **bytes)
{
	MDB_txn *txn = NULL;
	int rc;

	journal_reader_release(t);
	rc = journal_reader(t, &txn);
	if (rc)
		return rc;
	return journal_image_read(t, txn, hash, im, bytes);
}

/* --- meta ------------------------------------------------------------ */

static int journal_meta_set(struct tracker *t, uint32_t key, const struct tracker_meta_value *mv)
{
	uint8_t k[4];
	size_t n = tracker_meta_encoded_size(mv);
	void *buf;
	int rc;

	if (key <= TRACKER_META_FORMAT || !n)
		return -EINVAL;
	buf = journal_scratch(t, n);
	if (!buf)
		return -ENOMEM;
	rc = tracker_meta_encode(mv, buf, n);
	if (rc)
		return rc;
	tracker_key_u32_encode(key, k);
	return journal_put(t, DB_META, k, sizeof(k), buf, n);
}

static int journal_meta_get(struct tracker *t, uint32_t key, uint32_t type,
			    struct tracker_meta_value *mv)
{
	uint8_t k[4];
	MDB_val v;
	int rc;

	tracker_key_u32_encode(key, k);
	rc = journal_get(t, DB_META, k, sizeof(k), &v);
	if (rc)
		return rc;
	rc = tracker_meta_decode(mv, v.mv_data, v.mv_size);
	if (rc) {
		pr_err("meta %u: record does not decode (%d)", key, rc);
		return rc;
	}
	return mv->type == type ? 0 : -EBADMSG;
}

int tracker_meta_u64_set(struct tracker *t, uint32_t key, uint64_t v)
{
	struct tracker_meta_value mv = {.type = TRACKER_META_T_U64, .u64 = v};

	return journal_meta_set(t, key, &mv);
}

int tracker_meta_u64_get(struct tracker *t, uint32_t key, uint64_t *v)
{
	struct tracker_meta_value mv;
	int rc = journal_meta_get(t, key, TRACKER_META_T_U64, &mv);

	if (rc == 0)
		*v = mv.u64;
	return rc;
}

int tracker_meta_bytes_set(struct tracker *t, uint32_t key, const void *bytes, size_t len)
{
	struct tracker_meta_value mv = {.type = TRACKER_META_T_BYTES, .bytes = bytes,
					.len = (uint32_t)len};

	if (len > TRACKER_META_VALUE_MAX)
		return -EINVAL;
	return journal_meta_set(t, key, &mv);
}

int tracker_meta_bytes_get(struct tracker *t, uint32_t key, const void **bytes, size_t *len)
{
	struct tracker_meta_value mv;
	int rc = journal_meta_get(t, key, TRACKER_META_T_BYTES, &mv);

	if (rc == 0) {
		*bytes = mv.bytes;
		*len = mv.len;
	}
	return rc;
}

int tracker_reply_set(struct tracker *t, uint64_t seq, const void *reply, size_t len)
{
	struct tracker_meta_value mv = {.type = TRACKER_META_T_REPLY, .u64 = seq, .bytes = reply,
					.len = (uint32_t)len};

	if (len > TRACKER_META_VALUE_MAX)
		return -EINVAL;
	return journal_meta_set(t, TRACKER_META_REPLY, &mv);
}

int tracker_reply_get(struct tracker *t, uint64_t *seq, const void **reply, size_t *len)
{
	struct tracker_meta_value mv;
	int rc = journal_meta_get(t, TRACKER_META_REPLY, TRACKER_META_T_REPLY, &mv);

	if (rc == 0) {
		*seq = mv.u64;
		*reply = mv.bytes;
		*len = mv.len;
	}
	return rc;
}

/* --- iteration ------------------------------------------------------- */

/* Iterations read through their own transaction (or the batch's), so that
 * gets made from a callback do not end it. */
static int journal_iter_begin(struct tracker *t, MDB_txn **txn)
{
	int rc;

	if (t->broken)
		return t->broken;
	if (t->wtxn) {
		*txn = t->wtxn;
	} else {
		rc = mdb_txn_begin(t->env, NULL, MDB_RDONLY, txn);
		if (rc)
			return journal_fail("read transaction", rc);
	}
	t->iterating++;
	return 0;
}

static void journal_iter_end(struct tracker *t, MDB_txn *txn)
{
	t->iterating--;
	if (txn != t->wtxn)
		mdb_txn_abort(txn);
}

struct journal_ranked {
	uint64_t handle;
	size_t rank;
};

static size_t journal_kind_rank(const uint32_t *order, size_t n, uint32_t kind)
{
	for (size_t i = 0; i < n; i++)
		if (order[i] == kind)
			return i;
	return n;
}

/* One pass collects (rank, handle) in handle order, a counting sort by rank
 * keeps that order within a rank, then each object is read again. */
static int journal_objects_walk(struct tracker *t, MDB_txn *txn, const uint32_t *order,
				size_t nkinds, tracker_object_fn fn, void *ctx)
{
	struct journal_ranked *seen = NULL;
	uint64_t *sorted = NULL;
	size_t *start = NULL, count = 0;
	struct tracker_object o;
	MDB_cursor *cur;
	MDB_stat st;
	MDB_val k, v;
	int rc;

	rc = mdb_stat(txn, t->dbi[DB_OBJECTS], &st);
	if (rc)
		return journal_fail("stat objects", rc);
	seen = malloc((st.ms_entries + 1) * sizeof(*seen));
	sorted = malloc((st.ms_entries + 1) * sizeof(*sorted));
	start = calloc(nkinds + 2, sizeof(*start));
	if (!seen || !sorted || !start) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = mdb_cursor_open(txn, t->dbi[DB_OBJECTS], &cur);
	if (rc) {
		rc = journal_fail("cursor", rc);
		goto out_free;
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && count < st.ms_entries;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != 8 || tracker_object_decode(&o, v.mv_data, v.mv_size)) {
			pr_err("object record does not decode");
			rc = -EBADMSG;
			break;
		}
		seen[count].handle = tracker_key_u64_decode(k.mv_data);
		seen[count].rank = journal_kind_rank(order, nkinds, o.kind);
		start[seen[count].rank + 1]++;
		count++;
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND && rc != 0) {
		rc = journal_rc_is_mdb(rc) ? journal_fail("walk objects", rc) : rc;
		goto out_free;
	}
	for (size_t r = 1; r <= nkinds + 1; r++)
		start[r] += start[r - 1];
	for (size_t i = 0; i < count; i++)
		sorted[start[seen[i].rank]++] = seen[i].handle;

	rc = 0;
	for (size_t i = 0; i < count && rc == 0; i++) {
		uint8_t key[8];

		tracker_key_u64_encode(sorted[i], key);
		k = journal_val(key, sizeof(key));
		rc = mdb_get(txn, t->dbi[DB_OBJECTS], &k, &v);
		if (rc) {
			rc = journal_fail("read object", rc);
			break;
		}
		rc = tracker_object_decode(&o, v.mv_data, v.mv_size);
		if (rc == 0)
			rc = fn(ctx, sorted[i], &o);
	}

out_free:
	free(start);
	free(sorted);
	free(seen);
	return rc;
}

int tracker_object_foreach(struct tracker *t, const uint32_t *kind_order, size_t nkinds,
			   tracker_object_fn fn, void *ctx)
{
	MDB_txn *txn = NULL;
	int rc;

	if (nkinds && !kind_order)
		return -EINVAL;
	journal_reader_release(t);
	rc = journal_iter_begin(t, &txn);
	if (rc)
		return rc;
	rc = journal_objects_walk(t, txn, kind_order, nkinds, fn, ctx);
	journal_iter_end(t, txn);
	return rc;
}

/* Walk @db in key order; @visit decodes a record and calls the user. */
typedef int (*journal_visit_fn)(struct tracker *t, MDB_txn *txn, const MDB_val *k,
				const MDB_val *v, void *fn, void *ctx);

static int journal_db_walk(struct tracker *t, enum journal_db db, journal_visit_fn visit,
			   void *fn, void *ctx)
{
	MDB_cursor *cur;
	MDB_txn *txn = NULL;
	MDB_val k, v;
	int rc;

	journal_reader_release(t);
	rc = journal_iter_begin(t, &txn);
	if (rc)
		return rc;
	rc = mdb_cursor_open(txn, t->dbi[db], &cur);
	if (rc) {
		rc = journal_fail("cursor", rc);
		goto out_end;
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		rc = visit(t, txn, &k, &v, fn, ctx);
		if (rc)
			break;
	}
	mdb_cursor_close(cur);
	if (rc == MDB_NOTFOUND)
		rc = 0;
	else if (journal_rc_is_mdb(rc))
		rc = journal_fail("walk", rc);
out_end:
	journal_iter_end(t, txn);
	return rc;
}

static int journal_region_visit(struct tracker *t, MDB_txn *txn, const MDB_val *k,
				const MDB_val *v, void *fn, void *ctx)
{
	struct tracker_region r;
	tracker_region_fn cb = (tracker_region_fn)fn;

	if (k->mv_size != 8 || tracker_region_decode(&r, v->mv_data, v->mv_size)) {
		pr_err("region record does not decode");
		return -EBADMSG;
	}
	return cb(ctx, tracker_key_u64_decode(k->mv_data), &r);
}

static int journal_image_visit(struct tracker *t, MDB_txn *txn, const MDB_val *k,
			       const MDB_val *v, void *fn, void *ctx)
{
	struct tracker_image im;
	tracker_image_fn cb = (tracker_image_fn)fn;
	const void *bytes;
	int rc;

	if (k->mv_size != TRACKER_HASH_SIZE)
		return -EBADMSG;
	rc = journal_image_read(t, txn, k->mv_data, &im, &bytes);
	return rc ? rc : cb(ctx, k->mv_data, &im, bytes);
}

static int journal_meta_visit(struct tracker *t, MDB_txn *txn, const MDB_val *k,
			      const MDB_val *v, void *fn, void *ctx)
{
	struct tracker_meta_value mv;
	tracker_meta_fn cb = (tracker_meta_fn)fn;

	if (k->mv_size != 4 || tracker_meta_decode(&mv, v->mv_data, v->mv_size)) {
		pr_err("meta record does not decode");
		return -EBADMSG;
	}
	return cb(ctx, tracker_key_u32_decode(k->mv_data), &mv);
}

/* Function pointers travel as void * through the walker; POSIX guarantees
 * the round trip (dlsym relies on it). */
int tracker_region_foreach(struct tracker *t, tracker_region_fn fn, void *ctx)
{
	return journal_db_walk(t, DB_REGIONS, journal_region_visit, (void *)fn, ctx);
}

int tracker_image_foreach(struct tracker *t, tracker_image_fn fn, void *ctx)
{
	return journal_db_walk(t, DB_IMAGES, journal_image_visit, (void *)fn, ctx);
}

int tracker_meta_foreach(struct tracker *t, tracker_meta_fn fn, void *ctx)
{
	return journal_db_walk(t, DB_META, journal_meta_visit, (void *)fn, ctx);
}

/* --- stats, copies, sync --------------------------------------------- */

static int journal_stats_region(void *ctx, uint64_t addr, const struct tracker_region *r)
{
	struct tracker_stats *st = ctx;

	st->region_bytes += r->size;
	return 0;
}

static int journal_stats_image(void *ctx, const uint8_t hash[TRACKER_HASH_SIZE],
			       const struct tracker_image *im, const void *bytes)
{
	struct tracker_stats *st = ctx;

	st->image_bytes += im->size;
	st->image_refs += im->refs;
	return 0;
}

int tracker_stats_get(struct tracker *t, struct tracker_stats *st)
{
	static const enum journal_db dbs[] = {DB_OBJECTS, DB_REGIONS, DB_IMAGES, DB_META};
	uint64_t *counts[] = {&st->objects, &st->regions, &st->images, &st->meta};
	MDB_envinfo info;
	MDB_stat ms;
	MDB_txn *txn = NULL;
	int rc;

	memset(st, 0, sizeof(*st));
	journal_reader_release(t);
	rc = journal_reader(t, &txn);
	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++) {
		rc = mdb_stat(txn, t->dbi[dbs[i]], &ms);
		if (rc)
			return journal_fail("stat", rc);
		*counts[i] = ms.ms_entries;
	}
	journal_reader_release(t);
	rc = tracker_region_foreach(t, journal_stats_region, st);
	if (rc == 0)
		rc = tracker_image_foreach(t, journal_stats_image, st);
	mdb_env_info(t->env, &info);
	st->map_size = info.me_mapsize;
	st->used_bytes = (uint64_t)(info.me_last_pgno + 1) * t->psize;
	return rc;
}

int tracker_copy_fd(struct tracker *t, int fd)
{
	int rc;

	pthread_mutex_lock(&t->map_lock);
	rc = t->broken ? t->broken : mdb_env_copyfd2(t->env, fd, MDB_CP_COMPACT);
	pthread_mutex_unlock(&t->map_lock);
	return rc ? journal_fail("copy", rc) : 0;
}

int tracker_copy_file(struct tracker *t, const char *path)
{
	int fd, rc;

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		pr_err("copy to %s: %s", path, strerror(errno));
		return rc;
	}
	rc = tracker_copy_fd(t, fd);
	if (rc == 0 && fsync(fd)) {
		rc = -errno;
		pr_err("fsync %s: %s", path, strerror(errno));
	}
	if (close(fd) && rc == 0)
		rc = -errno;
	if (rc)
		unlink(path);
	return rc;
}

int tracker_sync(struct tracker *t)
{
	int rc;

	if (t->rdonly)
		return 0;
	if (t->broken)
		return t->broken;
	rc = mdb_env_sync(t->env, 1);
	return rc ? journal_fail("sync", rc) : 0;
}
