#include "domain_xml.h"
#include "auth.h"
#include "reason.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

/* Where the hook and listener pick the nodes they read or change. */
struct domain_nodes {
	xmlNodePtr root;
	xmlNodePtr metadata;    /* <metadata>, NULL if none */
	xmlNodePtr gpu;         /* <tern:gpu> inside it, NULL if none */
	xmlNodePtr source;      /* the tern channel's <source>, NULL if none */
};

__attribute__((format(printf, 2, 3)))
static void libxml_quiet(void *ctx, const char *fmt, ...)
{
}

void domain_xml_init(void)
{
	xmlInitParser();
	xmlSetGenericErrorFunc(NULL, libxml_quiet);
}

int domain_generation_fresh(char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char bytes[DOMAIN_GENERATION_FRESH_LEN / 2];
	int ret = auth_random(bytes, sizeof(bytes));

	if (ret)
		return ret;
	for (size_t i = 0; i < sizeof(bytes); i++) {
		out[2 * i] = hex[bytes[i] >> 4];
		out[2 * i + 1] = hex[bytes[i] & 15];
	}
	out[DOMAIN_GENERATION_FRESH_LEN] = 0;
	return 0;
}

int domain_xml_read_fd(int fd, char **xml, size_t *len)
{
	size_t n = 0, cap = 65536;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t r;

		if (n + 1 == cap) {
			char *p = cap <= DOMAIN_XML_MAX ? realloc(buf, cap * 2) : NULL;

			if (!p) {
				free(buf);
				return cap <= DOMAIN_XML_MAX ? -ENOMEM : -EMSGSIZE;
			}
			buf = p;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int ret = -errno;

			free(buf);
			return ret;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > DOMAIN_XML_MAX) {
			free(buf);
			return -EMSGSIZE;
		}
	}
	buf[n] = 0;
	*xml = buf;
	*len = n;
	return 0;
}

static bool node_is(xmlNodePtr n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && n->ns == NULL && !strcmp((const char *)n->name, name);
}

/* The text of a leaf element (no child elements, no entity references) into
 * @out of @cap bytes; false if it has other children or does not fit. */
static bool leaf_text(xmlNodePtr n, char *out, size_t cap)
{
	size_t used = 0;

	for (xmlNodePtr c = n->children; c; c = c->next) {
		size_t len;

		if (c->type != XML_TEXT_NODE)
			return false;
		len = strlen((const char *)c->content);
		if (len >= cap - used)
			return false;
		memcpy(out + used, c->content, len);
		used += len;
	}
	out[used] = 0;
	return true;
}

/* Copy attribute @name of @n into @out; "" when absent, false when too long. */
static bool attr_copy(xmlNodePtr n, const char *name, char *out, size_t cap)
{
	xmlChar *v = xmlGetNoNsProp(n, (const xmlChar *)name);
	bool fits = true;

	out[0] = 0;
	if (v) {
		fits = strlen((const char *)v) < cap;
		if (fits)
			strcpy(out, (const char *)v);
		xmlFree(v);
	}
	return fits;
}

static int channel_scan(xmlNodePtr channel, struct domain_info *info, struct domain_nodes *nodes,
			char *err, size_t errlen)
{
	char target[64] = "", source_path[sizeof(info->channel_path)] = "", mode[16] = "";
	bool is_tern = false;

	for (xmlNodePtr c = channel->children; c; c = c->next) {
		if (node_is(c, "target")) {
			if (!attr_copy(c, "name", target, sizeof(target)))
				continue;       /* longer than any tern name: not ours */
			if (!strcmp(target, TERN_CHANNEL_NAME))
				is_tern = true;
		}
	}
	if (!is_tern)
		return 0;
	if (info->tern_channel)
		return reason_refuse(err, errlen, "the domain has two channels named %s", TERN_CHANNEL_NAME);
	info->tern_channel = true;
	for (xmlNodePtr c = channel->children; c; c = c->next) {
		if (!node_is(c, "source"))
			continue;
		nodes->source = c;
		if (!attr_copy(c, "path", source_path, sizeof(source_path)))
			return reason_refuse(err, errlen, "the %s channel's socket path is too long", TERN_CHANNEL_NAME);
		attr_copy(c, "mode", mode, sizeof(mode));
		if (strcmp(mode, "connect"))
			source_path[0] = 0;
		break;
	}
	strcpy(info->channel_path, source_path);
	return 0;
}

static int metadata_scan(xmlNodePtr metadata, struct domain_info *info, struct domain_nodes *nodes,
			 char *err, size_t errlen)
{
	for (xmlNodePtr c = metadata->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE || !c->ns || !c->ns->href ||
		    strcmp((const char *)c->ns->href, TERN_XMLNS_URI))
			continue;
		if (strcmp((const char *)c->name, TERN_METADATA_ELEMENT))
			return reason_refuse(err, errlen, "unknown element <%.32s> in tern's metadata namespace",
				      (const char *)c->name);
		if (nodes->gpu)
			return reason_refuse(err, errlen, "the domain's metadata has two tern elements");
		nodes->gpu = c;
		if (!attr_copy(c, "generation", info->generation, sizeof(info->generation)) ||
		    (info->generation[0] && !vm_generation_valid(info->generation)))
			return reason_refuse(err, errlen, "tern's metadata generation is not 1-%d hex digits",
				      VM_GENERATION_MAX);
		if (!attr_copy(c, "migrate", info->migrate_url, sizeof(info->migrate_url)) ||
		    (info->migrate_url[0] && !domain_migrate_url_valid(info->migrate_url)))
			return reason_refuse(err, errlen, "tern's metadata migrate address is not tcp://HOST:PORT "
					     "or unix:PATH of at most %d printable bytes", DOMAIN_MIGRATE_URL_MAX);
	}
	return 0;
}

static int domain_doc_scan(xmlDocPtr doc, struct domain_info *info, struct domain_nodes *nodes,
			   char *err, size_t errlen)
{
	bool have_uuid = false, have_name = false, uuid_ok = false, name_ok = false;
	int ret;

	memset(info, 0, sizeof(*info));
	memset(nodes, 0, sizeof(*nodes));
	/* A DTD is how entity expansion and external entities get in; libvirt
	 * never writes one. */
	if (doc->intSubset || doc->extSubset)
		return reason_refuse(err, errlen, "domain XML with a DTD is refused");
	nodes->root = xmlDocGetRootElement(doc);
	if (!nodes->root || !node_is(nodes->root, "domain"))
		return reason_refuse(err, errlen, "the document is not a <domain>");
	for (xmlNodePtr c = nodes->root->children; c; c = c->next) {
		if (node_is(c, "uuid")) {
			if (have_uuid)
				return reason_refuse(err, errlen, "the domain has two <uuid> elements");
			have_uuid = true;
			uuid_ok = leaf_text(c, info->uuid, sizeof(info->uuid)) && vm_uuid_valid(info->uuid);
		} else if (node_is(c, "name")) {
			if (have_name)
				return reason_refuse(err, errlen, "the domain has two <name> elements");
			have_name = true;
			name_ok = leaf_text(c, info->name, sizeof(info->name)) && vm_name_valid(info->name);
		} else if (node_is(c, "metadata")) {
			if (nodes->metadata)
				return reason_refuse(err, errlen, "the domain has two <metadata> elements");
			nodes->metadata = c;
			ret = metadata_scan(c, info, nodes, err, errlen);
			if (ret)
				return ret;
		} else if (node_is(c, "devices")) {
			for (xmlNodePtr d = c->children; d; d = d->next) {
				if (!node_is(d, "channel"))
					continue;
				ret = channel_scan(d, info, nodes, err, errlen);
				if (ret)
					return ret;
			}
		}
	}
	if (!have_uuid)
		return reason_refuse(err, errlen, "the domain has no <uuid>");
	if (!have_name)
		return reason_refuse(err, errlen, "the domain has no <name>");
	/* What goes to ternd must pass ternd's checks; other domains' names are
	 * libvirt's business. */
	if (!info->tern_channel)
		return 0;
	if (!uuid_ok)
		return reason_refuse(err, errlen, "the domain's <uuid> is not a canonical lowercase uuid");
	if (!name_ok)
		return reason_refuse(err, errlen, "tern needs a domain name of 1-%d printable ASCII bytes without '/'",
				     VM_NAME_MAX);
	return 0;
}

static int domain_doc_open(const char *xml, size_t len, xmlDocPtr *doc, char *err, size_t errlen)
{
	xmlParserCtxtPtr ctxt;
	const xmlError *e;

	if (len > DOMAIN_XML_MAX)
		return -EMSGSIZE;
	ctxt = xmlNewParserCtxt();
	if (!ctxt)
		return -ENOMEM;
	/* No XML_PARSE_NOENT (entities stay references), no DTD loading, no
	 * XML_PARSE_HUGE (libxml2's own depth and size limits hold). */
	*doc = xmlCtxtReadMemory(ctxt, xml, (int)len, "domain.xml", NULL,
				 XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	e = xmlCtxtGetLastError(ctxt);
	if (!*doc || (e && e->level >= XML_ERR_ERROR)) {
		char why[160];

		snprintf(why, sizeof(why), "%s", e && e->message ? e->message : "no document");
		why[strcspn(why, "\n")] = 0;
		if (*doc)
			xmlFreeDoc(*doc);
		*doc = NULL;
		xmlFreeParserCtxt(ctxt);
		return reason_refuse(err, errlen, "malformed domain XML: %s", why);
	}
	xmlFreeParserCtxt(ctxt);
	return 0;
}

int domain_xml_parse(const char *xml, size_t len, struct domain_info *info, char *err, size_t errlen)
{
	struct domain_nodes nodes;
	xmlDocPtr doc;
	int ret = domain_doc_open(xml, len, &doc, err, errlen);

	if (ret)
		return ret;
	ret = domain_doc_scan(doc, info, &nodes, err, errlen);
	xmlFreeDoc(doc);
	return ret;
}

/* Give @nodes a <tern:gpu/> (and a <metadata> for it) if it has none. */
static int gpu_element_ensure(struct domain_nodes *nodes)
{
	xmlNsPtr ns;

	if (nodes->gpu)
		return 0;
	if (!nodes->metadata) {
		nodes->metadata = xmlNewChild(nodes->root, NULL, (const xmlChar *)"metadata", NULL);
		if (!nodes->metadata)
			return -ENOMEM;
	}
	nodes->gpu = xmlNewChild(nodes->metadata, NULL, (const xmlChar *)TERN_METADATA_ELEMENT, NULL);
	if (!nodes->gpu)
		return -ENOMEM;
	ns = xmlNewNs(nodes->gpu, (const xmlChar *)TERN_XMLNS_URI, (const xmlChar *)TERN_XMLNS_KEY);
	if (!ns)
		return -ENOMEM;
	xmlSetNs(nodes->gpu, ns);
	return 0;
}

bool domain_migrate_url_valid(const char *url)
{
	size_t n = strlen(url), prefix = !strncmp(url, "tcp://", 6) ? 6 : !strncmp(url, "unix:", 5) ? 5 : 0;

	if (!prefix || n == prefix || n > DOMAIN_MIGRATE_URL_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (url[i] <= ' ' || url[i] > '~' || url[i] == '\'' || url[i] == '"')
			return false;
	return true;
}

int domain_xml_edit(const char *xml, size_t len, const struct domain_edit *e, char **out, char *err,
		    size_t errlen)
{
	struct domain_info info;
	struct domain_nodes nodes;
	xmlChar *mem = NULL;
	int size = 0;
	xmlDocPtr doc;
	int ret;

	if (e->generation && !vm_generation_valid(e->generation))
		return reason_refuse(err, errlen, "generation is not 1-%d hex digits", VM_GENERATION_MAX);
	if (e->migrate_url && !domain_migrate_url_valid(e->migrate_url))
		return reason_refuse(err, errlen, "'%.60s' is not a migration address tern announces", e->migrate_url);
	if (e->channel_path && (!*e->channel_path || strlen(e->channel_path) >= sizeof(info.channel_path)))
		return reason_refuse(err, errlen, "the channel path is empty or too long for a socket");
	ret = domain_doc_open(xml, len, &doc, err, errlen);
	if (ret)
		return ret;
	ret = domain_doc_scan(doc, &info, &nodes, err, errlen);
	if (!ret && e->channel_path && !nodes.source)
		ret = reason_refuse(err, errlen, "the domain has no %s channel with a <source>", TERN_CHANNEL_NAME);
	if (!ret && e->channel_path &&
	    (!xmlSetProp(nodes.source, (const xmlChar *)"mode", (const xmlChar *)"connect") ||
	     !xmlSetProp(nodes.source, (const xmlChar *)"path", (const xmlChar *)e->channel_path)))
		ret = -ENOMEM;
	if (!ret && (e->generation || e->migrate_url))
		ret = gpu_element_ensure(&nodes);
	if (!ret && e->generation && !xmlSetProp(nodes.gpu, (const xmlChar *)"generation", (const xmlChar *)e->generation))
		ret = -ENOMEM;
	if (!ret && e->migrate_url && !xmlSetProp(nodes.gpu, (const xmlChar *)"migrate", (const xmlChar *)e->migrate_url))
		ret = -ENOMEM;
	if (!ret) {
		xmlDocDumpMemory(doc, &mem, &size);
		*out = mem ? strndup((const char *)mem, (size_t)size) : NULL;
		if (!*out)
			ret = -ENOMEM;
		xmlFree(mem);
	}
	xmlFreeDoc(doc);
	return ret;
}

int domain_xml_generation_set(const char *xml, size_t len, const char *generation, char **out,
			      char *err, size_t errlen)
{
	struct domain_edit e = { .generation = generation };

	return domain_xml_edit(xml, len, &e, out, err, errlen);
}
