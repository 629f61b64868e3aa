/* What tern's libvirt hook and listener need from a domain's XML
 * (docs/libvirt.md): its uuid and name, whether it has tern's channel, and
 * the generation in its live metadata that pairs a save image with the GPU
 * state ternd kept for it.
 *
 * The XML is hostile: a hook's stdin is whatever a save image holds, and an
 * image file can be written by anyone who can write the images folder.  The
 * parser reads at most DOMAIN_XML_MAX bytes, never loads anything over the
 * network or from files (XML_PARSE_NONET, no DTD, no entity substitution),
 * refuses a document with a DTD at all (entity expansion tricks), and refuses
 * ambiguity (two uuids, two tern channels, two tern metadata elements) rather
 * than picking one.  Errors: -EBADMSG with a one-line reason in @err,
 * -EMSGSIZE over the size limit, -ENOMEM.
 *
 * Uses libxml2: a program calls domain_xml_init() once, before threads if
 * there are any (the hook and the listener are single-threaded).  No globals
 * of its own.
 */
#ifndef TERN_LIBVIRT_DOMAIN_XML_H
#define TERN_LIBVIRT_DOMAIN_XML_H

#include <stdbool.h>
#include <stddef.h>

#include "vm_id.h"

#define DOMAIN_XML_MAX (4u << 20)       /* bytes of domain XML read from a hook's stdin */
#define DOMAIN_GENERATION_FRESH_LEN 32  /* what domain_generation_fresh() makes */
#define DOMAIN_MIGRATE_URL_MAX 255      /* the metadata's migrate address, bytes */

/* Where tern's metadata lives: <tern:gpu xmlns:tern=URI generation="G"
 * migrate="URL"/>; migrate is the migration listener of the ternd that
 * holds the domain's GPU state now (tern-libvirt --migrate-url), which a
 * destination's hook asks for that state at `migrate begin`. */
#define TERN_XMLNS_URI "https://tern.dev/xmlns/libvirt/1"
#define TERN_XMLNS_KEY "tern"
#define TERN_METADATA_ELEMENT "gpu"
/* The virtio-serial port the guest agent opens. */
#define TERN_CHANNEL_NAME "org.tern.0"

struct domain_info {
	char uuid[VM_UUID_LEN + 1];
	char name[VM_NAME_MAX + 1];
	bool tern_channel;                      /* a <channel> with <target name='org.tern.0'/> */
	/* The channel's <source path=...> (mode='connect'), "" when it has none.
	 * Bounded by sun_path: a longer one is refused. */
	char channel_path[108];
	char generation[VM_GENERATION_MAX + 1];     /* "" when the metadata has none */
	char migrate_url[DOMAIN_MIGRATE_URL_MAX + 1];  /* "" when the metadata has none */
};

/* Start libxml2 for this process and silence what it would print on
 * stderr itself (an encoding error, say): the reasons these functions give
 * are what is reported, once, where the caller handles them. */
void domain_xml_init(void);

/* Parse @len bytes of a <domain> document into @info.  The uuid and name
 * must pass the checks below only when the domain has the tern channel
 * (other domains are left alone by callers, and their names are libvirt's
 * business); every domain needs one <uuid> and one <name>. */
int domain_xml_parse(const char *xml, size_t len, struct domain_info *info, char *err, size_t errlen);

/* The same document with the tern metadata's generation set to @generation
 * (the element is added, inside <metadata>, if the document has none).
 * On success *out is a malloc'd NUL-terminated document the caller frees. */
int domain_xml_generation_set(const char *xml, size_t len, const char *generation, char **out,
			      char *err, size_t errlen);

/* What domain_xml_edit changes; NULL members are left as they are. */
struct domain_edit {
	const char *generation;         /* tern's metadata generation */
	const char *migrate_url;        /* tern's metadata migrate address */
	const char *channel_path;       /* the tern channel's socket (made mode='connect') */
};

/* The same document with @e's members set; *out as for
 * domain_xml_generation_set.  A channel path needs the tern channel's
 * <source>. */
int domain_xml_edit(const char *xml, size_t len, const struct domain_edit *e, char **out, char *err,
		    size_t errlen);

/* tcp://... or unix:..., 1-DOMAIN_MIGRATE_URL_MAX printable bytes without
 * spaces or quotes (it goes into an XML attribute and a control request). */
bool domain_migrate_url_valid(const char *url);

/* Read all of @fd (a hook's stdin) into a malloc'd NUL-terminated buffer of
 * at most DOMAIN_XML_MAX bytes: -EMSGSIZE past that, -errno on a read error. */
int domain_xml_read_fd(int fd, char **xml, size_t *len);

/* The identifiers that go to ternd are checked by common/vm_id.h's rules,
 * the ones ternd applies. */

/* A fresh random generation (DOMAIN_GENERATION_FRESH_LEN hex digits) in @out
 * (at least VM_GENERATION_MAX + 1 bytes).  0 or -errno (getrandom). */
int domain_generation_fresh(char *out);

#endif
