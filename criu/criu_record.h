/* The images folder's record of its GPU half: which tern snapshot belongs
 * to the process images CRIU wrote beside it (docs/criu.md).
 *
 * CRIU's images hold the application's process; its GPU state is in ternd's
 * snapshot store.  The plugin (tern_criu.c) writes this record into the
 * images folder once each session of the dumped process has a durable
 * snapshot, and reads it back on restore to tell ternd what to restore,
 * after checking that the store's snapshot is the very one (its journal
 * and chunk-list hashes, which cover every byte of it).
 *
 * File CRIU_RECORD_FILE, little endian, fixed size per session:
 *   0   u8[8]  magic "TERNCRIU"
 *   8   u32    version (1)
 *   12  u32    session count, 1..CRIU_RECORD_SESSIONS_MAX
 *   16  u32    pid of the dumped process
 *   20  u32    0 (reserved)
 *   24  entries, CRIU_RECORD_ENTRY_SIZE each:
 *         u8[256] session id, NUL-padded    u8[256] snapshot name, NUL-padded
 *         u64 seq (the last request the snapshot holds)   u64 created_ns
 *         u8[16] journal hash   u8[16] chunk-list hash (the manifest's)
 *   ..  u64    XXH64 (seed 0) of every byte before it
 *
 * Threading: no globals; reentrant.
 */
#ifndef TERN_CRIU_RECORD_H
#define TERN_CRIU_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define CRIU_RECORD_FILE "tern-gpu.img"
#define CRIU_RECORD_MAGIC "TERNCRIU"
#define CRIU_RECORD_VERSION 1u
#define CRIU_RECORD_SESSIONS_MAX 16u
#define CRIU_RECORD_NAME_MAX 255        /* = CONTROL_NAME_MAX, SNAP_NAME_MAX */
#define CRIU_RECORD_HASH_BYTES 16
#define CRIU_RECORD_HEAD_SIZE 24u
#define CRIU_RECORD_ENTRY_SIZE (2u * (CRIU_RECORD_NAME_MAX + 1) + 16u + 2u * CRIU_RECORD_HASH_BYTES)
#define CRIU_RECORD_SIZE(n) (CRIU_RECORD_HEAD_SIZE + (n) * CRIU_RECORD_ENTRY_SIZE + 8u)
#define CRIU_RECORD_SIZE_MAX CRIU_RECORD_SIZE(CRIU_RECORD_SESSIONS_MAX)

struct criu_record_entry {
	char session[CRIU_RECORD_NAME_MAX + 1];
	char snapshot[CRIU_RECORD_NAME_MAX + 1];
	uint64_t seq;
	uint64_t created_ns;
	uint8_t journal_hash[CRIU_RECORD_HASH_BYTES];
	uint8_t chunks_hash[CRIU_RECORD_HASH_BYTES];
};

struct criu_record {
	uint32_t pid;
	uint32_t count;
	struct criu_record_entry entries[CRIU_RECORD_SESSIONS_MAX];
};

/* Encode @r into @out (@cap bytes): its length, or -EINVAL (count out of
 * range, a name that is empty or has no NUL), -ENOSPC (cap too small). */
int criu_record_encode(const struct criu_record *r, uint8_t *out, size_t cap);
/* Decode @len bytes: 0, or -EBADMSG with why in @err (@errlen bytes with its
 * NUL): wrong magic, version, count, size, checksum, a name that is empty,
 * unterminated or not a valid snapshot name.  Never reads past @len. */
int criu_record_decode(const uint8_t *in, size_t len, struct criu_record *r, char *err, size_t errlen);

/* The record file in the folder open as @dirfd: written to a temporary name,
 * synced, then renamed, so a crash leaves the old record or the new one.
 * 0 or -errno. */
int criu_record_write(int dirfd, const struct criu_record *r);
/* Read and decode it: 0, -ENOENT (no record: not a tern process's images),
 * -EBADMSG (why in @err), other -errno. */
int criu_record_read(int dirfd, struct criu_record *r, char *err, size_t errlen);

#endif
