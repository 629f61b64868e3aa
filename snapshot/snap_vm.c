/* A libvirt domain's record on disk (snap_vm.h); the encoding is in
 * snap_format.c with the state directory's other records. */
#include "snap_vm.h"
#include "snap_sessions.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest record the limits allow: every string at its longest. */
#define VM_DOMAIN_FILE_MAX ((size_t)SNAP_VM_HEADER_BYTES + SNAP_TRAILER_BYTES + 4 + VM_UUID_LEN + VM_NAME_MAX + \
			    (size_t)SNAP_VM_GENERATIONS_MAX * (6 + VM_GENERATION_MAX + \
			    (size_t)SNAP_VM_SESSIONS_MAX * 2 * (2 + SNAP_NAME_MAX)))

int snap_vm_domain_read(const char *path, struct snap_vm_domain *d)
{
	uint8_t *buf;
	size_t len;
	int rc = snap_state_file_read(path, VM_DOMAIN_FILE_MAX, &buf, &len);

	memset(d, 0, sizeof(*d));
	if (rc)
		return rc;
	rc = snap_vm_domain_decode(buf, len, d);
	free(buf);
	return rc;
}

int snap_vm_domain_write(const char *path, const struct snap_vm_domain *d)
{
	struct snap_buf b = { 0 };
	int rc = snap_vm_domain_encode(d, &b);

	if (!rc)
		rc = snap_state_file_write(path, &b);
	snap_buf_free(&b);
	return rc;
}

struct snap_vm_generation *snap_vm_generation_find(const struct snap_vm_domain *d, const char *generation)
{
	for (uint32_t i = 0; i < d->generation_count; i++)
		if (!strcmp(d->generations[i].generation, generation))
			return &d->generations[i];
	return NULL;
}

int snap_vm_generation_set(struct snap_vm_domain *d, const char *generation,
			   const struct snap_vm_entry *entries, uint32_t count)
{
	struct snap_vm_generation *g, *grown;
	struct snap_vm_entry *copy;

	if (!vm_generation_valid(generation))
		return -EINVAL;
	if (count > SNAP_VM_SESSIONS_MAX)
		return -E2BIG;
	for (uint32_t i = 0; i < count; i++)
		if (!snap_session_id_valid(entries[i].session) || !vm_session_of(entries[i].session, d->uuid) ||
		    !snap_name_valid(entries[i].snapshot))
			return -EINVAL;
	copy = calloc(count ? count : 1, sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	if (count)
		memcpy(copy, entries, count * sizeof(*copy));
	g = snap_vm_generation_find(d, generation);
	if (!g) {
		if (d->generation_count == SNAP_VM_GENERATIONS_MAX) {
			/* The oldest goes: a save image that old is not restored. */
			free(d->generations[0].entries);
			memmove(d->generations, d->generations + 1,
				(d->generation_count - 1) * sizeof(*d->generations));
			d->generation_count--;
		}
		grown = realloc(d->generations, (d->generation_count + 1) * sizeof(*grown));
		if (!grown) {
			free(copy);
			return -ENOMEM;
		}
		d->generations = grown;
		g = &d->generations[d->generation_count++];
		memset(g, 0, sizeof(*g));
		snprintf(g->generation, sizeof(g->generation), "%s", generation);
	}
	free(g->entries);
	g->entries = copy;
	g->count = count;
	return 0;
}
