/* Fuzz target for the libvirt hook's domain XML extraction
 * (libvirt-hooks/domain_xml.h): a restore hook's stdin is a save image's
 * XML, which anyone who can write the images folder controls.  What parses
 * must take a new generation and parse again to the same domain. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "domain_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct domain_info a, b;
	char err[256], *out;

	if (domain_xml_parse((const char *)data, size, &a, err, sizeof(err)))
		return 0;
	if (domain_xml_generation_set((const char *)data, size, "0123456789abcdef", &out, err, sizeof(err)))
		abort();
	if (domain_xml_parse(out, strlen(out), &b, err, sizeof(err)))
		abort();
	if (strcmp(a.uuid, b.uuid) || strcmp(a.name, b.name) || a.tern_channel != b.tern_channel ||
	    strcmp(a.channel_path, b.channel_path) || strcmp(b.generation, "0123456789abcdef"))
		abort();
	free(out);
	return 0;
}
