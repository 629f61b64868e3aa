/* A libvirt domain's record in ternd's state directory (STATE/vm/UUID.domain):
 * the domain ternd attached (so that a restarted ternd listens on its socket
 * again) and, per save generation, the snapshot each of its sessions was
 * saved in (what `vm-restore UUID G` restores).  docs/libvirt.md, "ternd's
 * side", and docs/snapshot-format.md "Domain record" are the reference.
 *
 * Errors: 0 or a negative errno.  -EBADMSG: damaged or not a domain record
 * (magic, checksum, structure, a name vm_id.h or snap_format.h refuses, a
 * session of another domain, a generation twice); -ENOTSUP: a version this
 * build does not read; -EINVAL from the encoder for what the decoder would
 * refuse.  The decoder takes untrusted bytes: every count is bounded by the
 * input and by the limits below.
 *
 * Threading: pure functions and whole-file operations; ternd's supervisor
 * is the only writer.
 */
#ifndef TERN_SNAP_VM_H
#define TERN_SNAP_VM_H

#include <stddef.h>
#include <stdint.h>

#include "snap_format.h"
#include "vm_id.h"

#define SNAP_MAGIC_VM_DOMAIN "TRNVMDOM"
#define SNAP_VM_DOMAIN_VERSION 1u
#define SNAP_VM_DOMAIN_EXT ".domain"
#define SNAP_VM_HEADER_BYTES 20u        /* magic, version, flags, generation count */
/* Flags: ids never reused. */
#define SNAP_VM_ATTACHED 1u             /* attached: a restarted ternd listens for it again */
#define SNAP_VM_GENERATIONS_MAX 32u     /* kept per domain: the oldest goes first */
#define SNAP_VM_SESSIONS_MAX 256u       /* sessions in one generation */

struct snap_vm_entry {
	char session[SNAP_NAME_MAX + 1];        /* "UUID/guest-id" of this domain */
	char snapshot[SNAP_NAME_MAX + 1];
};

struct snap_vm_generation {
	char generation[VM_GENERATION_MAX + 1];
	uint32_t count;
	struct snap_vm_entry *entries;          /* count of them; malloc'd */
};

struct snap_vm_domain {
	uint32_t flags;                         /* SNAP_VM_* */
	char uuid[VM_UUID_LEN + 1];
	char name[VM_NAME_MAX + 1];
	uint32_t generation_count;
	struct snap_vm_generation *generations; /* oldest first; malloc'd */
};

int snap_vm_domain_encode(const struct snap_vm_domain *d, struct snap_buf *out);
/* Decode @len bytes into *d (released with snap_vm_domain_release, also
 * after an error). */
int snap_vm_domain_decode(const uint8_t *buf, size_t len, struct snap_vm_domain *d);
/* Free what @d owns and zero it; accepts a zeroed record. */
void snap_vm_domain_release(struct snap_vm_domain *d);

/* Read @path; -ENOENT when there is none. */
int snap_vm_domain_read(const char *path, struct snap_vm_domain *d);
/* Write @path atomically and durably (as snap_sessions_write). */
int snap_vm_domain_write(const char *path, const struct snap_vm_domain *d);

/* The generation @generation of @d, or NULL. */
struct snap_vm_generation *snap_vm_generation_find(const struct snap_vm_domain *d, const char *generation);
/* Record @count entries under @generation, replacing a generation of that
 * name and dropping the oldest past SNAP_VM_GENERATIONS_MAX.  0, -EINVAL,
 * -E2BIG (too many entries), -ENOMEM. */
int snap_vm_generation_set(struct snap_vm_domain *d, const char *generation,
			   const struct snap_vm_entry *entries, uint32_t count);

#endif
