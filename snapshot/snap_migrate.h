/* The migration stream: snapshots of one session carried from a source's
 * store to a destination ternd's store (docs/migration.md).
 *
 *     dest -> src   CHALLENGE nonce
 *     src  -> dest  AUTH session, auth_migrate_proof (common/auth.h)
 *     dest -> src   ACK (0, or the refusal)
 *     then per round (or, from a destination that asks for a domain's
 *     state, one PULL answered by one ACK when that migration ends):
 *     src  -> dest  BEGIN, REGION * n, CHUNK * m, JOURNAL * k, END sha256
 *                   (in a round with a parent, the journal goes as a delta
 *                   against the parent's: JOURNAL_BASE, then JOURNAL and
 *                   JOURNAL_COPY frames, appended in turn)
 *     dest -> src   ACK status, message
 *
 * Parallel streams: before the first round the source may send STREAMS
 * (count, key), acknowledged once the destination awaits them, and open
 * count more connections, each authenticated as the first and then sending
 * JOIN key; the destination's receiver takes each over
 * (snap_migrate_conn.joined) and acknowledges its JOIN, then STREAMS again.
 * In every round after, once REGIONs are sent, data CHUNKs go on any of
 * them; each joined stream ends its share with an END of its own (the hash
 * of its frames since its JOIN's ACK).  BEGIN, REGIONs, the records without
 * bytes, JOURNAL, the round's END and ACK stay on the first.
 *
 * Every frame is a 12-byte header (magic, version, type, payload length,
 * little endian) and its payload.  The source hashes every frame it sends
 * (SHA-256, from the first AUTH byte), a CHUNK's record but not its data;
 * END carries that running hash and the destination compares it with its
 * own.  A CHUNK with data carries the chunk's XXH3-128 in its record, which
 * the destination checks before it stores it (of the decompressed bytes for
 * a compressed chunk): so every byte is covered.
 *
 * Chunk data goes as the source's store holds it: a chunk stored
 * compressed (zstd) is sent compressed, its stored bytes as they are, and
 * stored so at the destination; one stored raw was incompressible and goes
 * raw.  Nothing is compressed on the way.
 *
 * The stream runs over a plain socket or a TLS session (tls:// listeners:
 * set conn.tls after snap_migrate_conn_init); the frames are the same.
 *
 * The decoders take hostile bytes: every length is checked against the
 * payload and the caps below; they never allocate; strings point into the
 * payload (not NUL-terminated; copy with snap_migrate_str_copy).
 *
 * Errors: 0 or a negative errno; -EBADMSG a malformed or mis-hashed frame,
 * -EPROTO a frame out of order, -EPERM a bad proof.
 *
 * Threading: a struct snap_migrate_conn is used by one thread.
 */
#ifndef TERN_SNAP_MIGRATE_H
#define TERN_SNAP_MIGRATE_H

#include <stdint.h>
#include <stddef.h>
#include <pthread.h>

#include "auth.h"
#include "sha256.h"
#include "snap_format.h"
#include "snap_store.h"

#define SNAP_MIGRATE_MAGIC 0x47494d54u      /* "TMIG" */
/* 2: chunk data out of the stream hash; 3: compressed chunks (ZSTD);
 * 4: journal deltas (JOURNAL_BASE, JOURNAL_COPY) */
#define SNAP_MIGRATE_VERSION 4u
#define SNAP_MIGRATE_HEADER_BYTES 12u
/* The largest payload: a chunk of the largest size and its record. */
#define SNAP_MIGRATE_CHUNK_HEAD_BYTES 48u
#define SNAP_MIGRATE_PAYLOAD_MAX (SNAP_CHUNK_SIZE_MAX + SNAP_MIGRATE_CHUNK_HEAD_BYTES)
#define SNAP_MIGRATE_JOURNAL_PIECE (1u << 20)
#define SNAP_MIGRATE_REGIONS_MAX (1u << 20)
#define SNAP_MIGRATE_MESSAGE_MAX 1024u
/* A journal larger than this is refused (a hostile source's memfd). */
#define SNAP_MIGRATE_JOURNAL_MAX (1ull << 30)

/* Frame types: ids never reused. */
enum snap_migrate_type {
	SNAP_MIGRATE_CHALLENGE = 1,
	SNAP_MIGRATE_AUTH = 2,
	SNAP_MIGRATE_BEGIN = 3,
	SNAP_MIGRATE_REGION = 4,
	SNAP_MIGRATE_CHUNK = 5,
	SNAP_MIGRATE_JOURNAL = 6,
	SNAP_MIGRATE_END = 7,
	SNAP_MIGRATE_ACK = 8,
	/* dest -> src after AUTH, instead of rounds: send me domain uuid's GPU
	 * state, to url (a virsh migrate's destination asking; the AUTH named
	 * the uuid). Answered by one ACK when that migration ends. */
	SNAP_MIGRATE_PULL = 9,
	/* src -> dest on the first stream, after AUTH's ACK and before any
	 * round: count more streams will JOIN with key. Answered by an ACK
	 * once they are awaited, and another once all joined. */
	SNAP_MIGRATE_STREAMS = 10,
	/* src -> dest, the first frame after AUTH's ACK on an added stream:
	 * key (STREAMS's). Answered by one ACK once the receiver holds it. */
	SNAP_MIGRATE_JOIN = 11,
	/* src -> dest in a round with a parent, before its journal: the
	 * journal goes as a delta against the parent's, which the destination
	 * holds: JOURNAL frames then carry literal bytes and JOURNAL_COPY
	 * frames ranges of the parent's journal, appended in turn. */
	SNAP_MIGRATE_JOURNAL_BASE = 12,
	SNAP_MIGRATE_JOURNAL_COPY = 13,
};

/* Streams of one migration, the first included. */
#define SNAP_MIGRATE_STREAMS_MAX 8u
#define SNAP_MIGRATE_STREAM_KEY_BYTES 16u

/* BEGIN flags. */
#define SNAP_MIGRATE_FINAL 0x1u   /* the stop-and-copy round: the destination plans the restore */
#define SNAP_MIGRATE_FLAGS_KNOWN SNAP_MIGRATE_FINAL

/* CHUNK kinds. */
enum snap_migrate_chunk_kind {
	SNAP_MIGRATE_CHUNK_ZERO = 0,
	SNAP_MIGRATE_CHUNK_UNCHANGED = 1,   /* equal to the previous round's at this address */
	SNAP_MIGRATE_CHUNK_DATA = 2,
	/* A zstd frame shorter than the chunk that decompresses to exactly
	 * the chunk's bytes (its record's hash is theirs). */
	SNAP_MIGRATE_CHUNK_ZSTD = 3,
};

/* Whether a CHUNK of @kind carries bytes (it must, and no other may). */
static inline int snap_migrate_chunk_has_data(uint32_t kind)
{
	return kind == SNAP_MIGRATE_CHUNK_DATA || kind == SNAP_MIGRATE_CHUNK_ZSTD;
}

struct snap_migrate_str {
	const char *ptr;
	uint32_t len;
};

struct snap_migrate_challenge {
	uint8_t nonce[AUTH_NONCE_BYTES];
};

struct snap_migrate_auth {
	struct snap_migrate_str session;
	uint8_t proof[AUTH_PROOF_BYTES];
};

struct snap_migrate_begin {
	uint32_t flags;
	uint32_t chunk_size;
	uint32_t region_count;
	uint32_t driver_version;
	uint32_t auth_flags;
	uint32_t owner_uid;
	/* masked: auth_migrate_credential_mask */
	uint8_t credential[SNAP_CREDENTIAL_BYTES];
	uint8_t device_uuid[16];
	struct snap_migrate_str name;      /* this round's snapshot */
	struct snap_migrate_str parent;    /* the previous round's, "" in the first */
	struct snap_migrate_str device_name;
};

struct snap_migrate_region {
	uint64_t addr;
	uint64_t size;
	uint32_t flags;
};

struct snap_migrate_chunk {
	uint32_t region;
	uint32_t kind;
	uint64_t index;
	uint64_t device_hash;
	uint8_t hash[SNAP_HASH_BYTES];     /* XXH3-128 of the chunk's bytes (DATA, ZSTD) */
	const uint8_t *data;
	uint32_t len;
};

struct snap_migrate_end {
	uint8_t stream_hash[SHA256_BYTES];
};

struct snap_migrate_pull {
	struct snap_migrate_str uuid;
	struct snap_migrate_str url;       /* the asker's --migrate-listen, as the source reaches it */
};

struct snap_migrate_streams {
	uint32_t count;                    /* streams to join: 1 .. SNAP_MIGRATE_STREAMS_MAX - 1 */
	uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES];
};

struct snap_migrate_join {
	uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES];
};

struct snap_migrate_journal_base {
	/* The parent's journal file as its manifest has it (XXH3-128 of the
	 * file, its header included, and the bytes after the header). */
	uint8_t base_hash[SNAP_HASH_BYTES];
	uint64_t base_bytes;
	/* The journal this round's delta rebuilds, the same way. */
	uint8_t hash[SNAP_HASH_BYTES];
	uint64_t bytes;                    /* at most SNAP_MIGRATE_JOURNAL_MAX */
};

struct snap_migrate_journal_copy {
	uint64_t offset;                   /* in the parent's journal */
	uint64_t len;                      /* non-zero, no wrap */
};

struct snap_migrate_ack {
	int32_t status;                    /* 0 or a negative errno */
	struct snap_migrate_str message;
};

/* Decoders of one payload each. */
int snap_migrate_challenge_decode(const uint8_t *p, uint32_t len, struct snap_migrate_challenge *out);
int snap_migrate_auth_decode(const uint8_t *p, uint32_t len, struct snap_migrate_auth *out);
int snap_migrate_begin_decode(const uint8_t *p, uint32_t len, struct snap_migrate_begin *out);
int snap_migrate_region_decode(const uint8_t *p, uint32_t len, struct snap_migrate_region *out);
int snap_migrate_chunk_decode(const uint8_t *p, uint32_t len, struct snap_migrate_chunk *out);
int snap_migrate_end_decode(const uint8_t *p, uint32_t len, struct snap_migrate_end *out);
int snap_migrate_ack_decode(const uint8_t *p, uint32_t len, struct snap_migrate_ack *out);
int snap_migrate_pull_decode(const uint8_t *p, uint32_t len, struct snap_migrate_pull *out);
int snap_migrate_streams_decode(const uint8_t *p, uint32_t len, struct snap_migrate_streams *out);
int snap_migrate_join_decode(const uint8_t *p, uint32_t len, struct snap_migrate_join *out);
int snap_migrate_journal_base_decode(const uint8_t *p, uint32_t len, struct snap_migrate_journal_base *out);
int snap_migrate_journal_copy_decode(const uint8_t *p, uint32_t len, struct snap_migrate_journal_copy *out);
/* Check a frame header: 0 and *type, *len, or -EBADMSG. */
int snap_migrate_header_decode(const uint8_t h[SNAP_MIGRATE_HEADER_BYTES], uint16_t *type, uint32_t *len);
/* Copy @s to @out (@cap bytes with its NUL); -ENAMETOOLONG or -EBADMSG (a NUL inside). */
int snap_migrate_str_copy(struct snap_migrate_str s, char *out, size_t cap);

/* One end of a stream over @fd (blocking; the caller sets a timeout on it
 * with SO_RCVTIMEO/SO_SNDTIMEO).  The fd stays the caller's. */
struct tls_conn;

/* --max-bandwidth over every stream of a migration: shared by their conns. */
struct snap_migrate_cap {
	uint64_t bytes_per_s;
	pthread_mutex_t mu;        /* guards start_ns, bytes */
	uint64_t start_ns;
	uint64_t bytes;
};

void snap_migrate_cap_init(struct snap_migrate_cap *cap, uint64_t bytes_per_s);
void snap_migrate_cap_fini(struct snap_migrate_cap *cap);

struct snap_migrate_conn {
	int fd;
	/* When set, every frame goes through this TLS session on fd, which
	 * stays the caller's (as the fd does). */
	struct tls_conn *tls;
	struct sha256 sent;        /* frames this end sent since AUTH */
	struct sha256 received;    /* frames this end received since AUTH */
	uint8_t *buf;              /* SNAP_MIGRATE_PAYLOAD_MAX, the last frame received */
	uint64_t bytes_sent;
	uint64_t bytes_received;
	/* Optional cap on what this end sends, with the other streams of its
	 * migration (NULL: none); the caller's. */
	struct snap_migrate_cap *cap;
	/* The streams that joined this one (parallel streams): each round's
	 * data chunks are spread over this and them.  The conns are the
	 * caller's; one thread each while a round is sent or received. */
	struct snap_migrate_conn *joined[SNAP_MIGRATE_STREAMS_MAX - 1];
	unsigned joined_count;
	char error[SNAP_MIGRATE_MESSAGE_MAX + 64];
	char ack_message[SNAP_MIGRATE_MESSAGE_MAX + 1];   /* the last ACK's */
};

int snap_migrate_conn_init(struct snap_migrate_conn *c, int fd);
void snap_migrate_conn_fini(struct snap_migrate_conn *c);  /* the fd is not closed */
/* Send one frame: its header, then @head and @data as one payload. */
int snap_migrate_send(struct snap_migrate_conn *c, uint16_t type, const void *head, uint32_t head_len,
		      const void *data, uint32_t data_len);
/* Receive one frame into c->buf: 0 and *type, *len; -EPIPE at EOF. */
int snap_migrate_recv(struct snap_migrate_conn *c, uint16_t *type, uint32_t *len);
/* Send an ACK. */
int snap_migrate_ack_send(struct snap_migrate_conn *c, int status, const char *message);
/* Destination: refuse with an ACK of @status, then wait for the source to
 * hang up (it stops sending once it sees the ACK). */
void snap_migrate_refuse(struct snap_migrate_conn *c, int status, const char *message);

/* The handshake.  Source: read the CHALLENGE, send AUTH for @session;
 * *nonce keeps the challenge (it masks the credential in BEGIN).
 * Destination: send a fresh CHALLENGE, check AUTH (-EPERM: a bad proof, or
 * no token here); the session it names in @session. */
int snap_migrate_client_auth(struct snap_migrate_conn *c, const struct auth_token *token, const char *session,
			     uint8_t nonce[AUTH_NONCE_BYTES]);
int snap_migrate_server_auth(struct snap_migrate_conn *c, const struct auth_token *token,
			     char session[SNAP_NAME_MAX + 1], uint8_t nonce[AUTH_NONCE_BYTES]);

/* Parallel streams, the source's side: snap_migrate_streams_offer sends
 * STREAMS on the first stream @c and reads the ACK that says the
 * destination awaits them; then each added stream, authenticated with
 * snap_migrate_client_auth, is offered with snap_migrate_join (JOIN, then
 * its ACK); snap_migrate_streams_wait reads the first stream's second ACK
 * (all joined) and, on 0, lists them in c->joined.  A joined stream's
 * hashes start afresh after its JOIN's ACK. */
int snap_migrate_streams_offer(struct snap_migrate_conn *c, uint32_t count,
			       const uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES]);
int snap_migrate_join(struct snap_migrate_conn *extra, const uint8_t key[SNAP_MIGRATE_STREAM_KEY_BYTES]);
int snap_migrate_streams_wait(struct snap_migrate_conn *c, struct snap_migrate_conn **extra, unsigned count);
/* The destination's side, for each stream handed over after its JOIN: it
 * joins @c (hashes afresh) and its JOIN is acknowledged. -ENOSPC: too many. */
int snap_migrate_stream_adopt(struct snap_migrate_conn *c, struct snap_migrate_conn *extra);

/* The asking end of a PULL, after snap_migrate_client_auth for @uuid:
 * send it, then wait (the socket's receive timeout bounds it) for the ACK
 * that ends the migration; 0, or its error in c->error. */
int snap_migrate_pull(struct snap_migrate_conn *c, const char *uuid, const char *url);

/* What one round sent. */
struct snap_migrate_stats {
	uint64_t chunks;
	uint64_t zero_chunks;
	uint64_t unchanged_chunks;
	uint64_t data_chunks;      /* with bytes, raw or compressed */
	uint64_t compressed_chunks;
	uint64_t data_bytes;       /* bytes of the chunks sent with data, as the chunks hold them */
	uint64_t data_sent_bytes;  /* what of them the stream carried (compressed ones smaller) */
	uint64_t journal_bytes;    /* of the journal, the bytes the stream carried */
	uint64_t journal_reused_bytes; /* ... and those the destination copied from the parent's */
	uint64_t stream_bytes;     /* every byte of the round's frames */
	/* Chunk frames the streams sent while the round's writer still wrote
	 * it (snap_migrate_snapshot_follow; 0 for a stored snapshot). */
	uint64_t chunks_before_commit;
};

/* Source: send snapshot @name of @store, whose parent in the store is the
 * previous round's (sent before on this stream, @parent; NULL in the first
 * round), and wait for the destination's ACK.  @token and @nonce mask the
 * credential.  0, or the error (c->error says what, with the
 * destination's message when it refused). */
int snap_migrate_snapshot_send(struct snap_migrate_conn *c, struct snap_store *store, const char *name,
			       const char *parent, uint32_t flags, const struct auth_token *token,
			       const uint8_t nonce[AUTH_NONCE_BYTES], struct snap_migrate_stats *stats);

/* The writer of a round that is sent while it is written: another
 * process (the source's worker), whose end the caller learns of. */
struct snap_migrate_writer_watch {
	/* 0 while the writer runs, 1 once it committed the snapshot, or the
	 * negative errno it failed with.  @sent: chunk frames sent so far (a
	 * test's writer waits on it).  Called often, on the sending thread. */
	int (*state)(void *arg, uint64_t sent);
	void *arg;
};

/* Source: as snap_migrate_snapshot_send, for snapshot @name of the store at
 * @store_dir while its writer (with a progress log, snap_writer.h) still
 * writes it: the store and the log are opened once they are there; BEGIN
 * and the REGIONs go once the log declared every region, each chunk as
 * soon as the log says it is settled (its frame read from the pack the
 * writer appended it to, checked); the journal, END and the wait for the
 * ACK once the writer committed, after the committed chunk list was
 * checked against what was sent.  A writer that ends before its log is
 * seen: the committed snapshot is sent.  A writer that fails (@watch) fails
 * the round; so does a log that is damaged, out of order, or that ends
 * without its COMMIT once the writer committed (-EBADMSG, "its progress log
 * is refused: record N ...").  The destination stores nothing of a failed
 * round (the caller closes the stream). */
int snap_migrate_snapshot_follow(struct snap_migrate_conn *c, const char *store_dir, const char *name,
				 const char *parent, uint32_t flags, const struct auth_token *token,
				 const uint8_t nonce[AUTH_NONCE_BYTES],
				 const struct snap_migrate_writer_watch *watch, struct snap_migrate_stats *stats);

/* Destination: read one round (BEGIN .. END) whose BEGIN is in c->buf
 * (@len bytes) into @store as a snapshot of the session @session (the one
 * AUTH named; a BEGIN for another session is refused).  On success the
 * committed snapshot's name is in @name and *flags holds BEGIN's flags.
 * The ACK is the caller's to send.  @quota_bytes: refuse a snapshot whose
 * regions exceed it (0: no limit). */
int snap_migrate_snapshot_recv(struct snap_migrate_conn *c, uint32_t len, struct snap_store *store,
			       const char *session, const struct auth_token *token,
			       const uint8_t nonce[AUTH_NONCE_BYTES], uint64_t quota_bytes,
			       char name[SNAP_NAME_MAX + 1], uint32_t *flags);

#endif
