/* The names a libvirt domain is known by on ternd's control socket and in
 * its state directory (docs/libvirt.md, "ternd's side"): its uuid, its
 * name, a save generation, and the id of a session reached through the
 * domain's channel ("UUID/guest-id").
 *
 * Every string here comes from a control client or a guest: the predicates
 * take any NUL-terminated text and never read past its NUL.
 *
 * Threading: pure functions.
 */
#ifndef TERN_VM_ID_H
#define TERN_VM_ID_H

#include <stdbool.h>
#include <stddef.h>

#define VM_UUID_LEN 36                  /* canonical form, lowercase hex and four '-' */
#define VM_NAME_MAX 200                 /* a libvirt domain name, bytes */
#define VM_GENERATION_MAX 64            /* 1-64 of [0-9a-f] */
#define VM_SESSION_SEP '/'              /* between the uuid and the guest's own id */

/* "01234567-89ab-cdef-0123-456789abcdef": lowercase, dashes at 8 13 18 23. */
bool vm_uuid_valid(const char *uuid);
/* 1-VM_NAME_MAX printable ASCII or UTF-8 bytes (no control byte), no '/'. */
bool vm_name_valid(const char *name);
/* 1-VM_GENERATION_MAX of [0-9a-f]. */
bool vm_generation_valid(const char *generation);

/* Whether @id is a session of domain @uuid: "UUID/" and a non-empty rest. */
bool vm_session_of(const char *id, const char *uuid);
/* Whether @id names a domain's session at all: a valid uuid, the separator
 * and a non-empty rest without another separator. */
bool vm_session_id_valid(const char *id);

#endif
