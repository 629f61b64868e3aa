/* The hook's domain XML handling (libvirt-hooks/domain_xml.h): what it
 * reads from good documents, and every wrong, truncated, huge or hostile
 * one refused with a reason, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "domain_xml.h"

#define UUID "6f1c1c51-3d3c-4b57-9e0e-0123456789ab"
#define SOCK "/run/tern/vm/" UUID ".sock"
#define CHANNEL "<channel type='unix'><source mode='connect' path='" SOCK "'/>" \
		"<target type='virtio' name='org.tern.0'/></channel>"
#define GPU(gen) "<tern:gpu xmlns:tern='https://tern.dev/xmlns/libvirt/1' generation='" gen "'/>"

/* A domain document from its parts, as libvirt would write it. */
static char *doc_make(const char *name, const char *uuid, const char *metadata, const char *devices)
{
	char *s;

	assert_true(asprintf(&s, "<domain type='qemu'>\n  <name>%s</name>\n  <uuid>%s</uuid>\n%s"
			     "  <memory unit='KiB'>65536</memory>\n  <devices>%s</devices>\n</domain>\n",
			     name, uuid, metadata, devices) > 0);
	return s;
}

static int parse(const char *xml, struct domain_info *info, char *err)
{
	err[0] = 0;
	return domain_xml_parse(xml, strlen(xml), info, err, 256);
}

/* Parsing @xml must fail with -EBADMSG and a reason containing @why. */
static void refused(const char *xml, const char *why)
{
	struct domain_info info;
	char err[256];

	assert_int_equal(parse(xml, &info, err), -EBADMSG);
	if (!err[0] || !strstr(err, why))
		fail_msg("reason '%s' does not say '%s'", err, why);
}

static void test_good(void **state)
{
	char *xml = doc_make("vm-1", UUID, "  <metadata>" GPU("00ff") "<other xmlns='urn:x'/></metadata>\n",
			     "<channel type='pty'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>"
			     CHANNEL);
	struct domain_info info;
	char err[256];

	assert_int_equal(parse(xml, &info, err), 0);
	assert_string_equal(info.uuid, UUID);
	assert_string_equal(info.name, "vm-1");
	assert_true(info.tern_channel);
	assert_string_equal(info.channel_path, SOCK);
	assert_string_equal(info.generation, "00ff");
	free(xml);
}

static void test_no_channel_no_generation(void **state)
{
	char *xml = doc_make("vm-1", UUID, "", "");
	struct domain_info info;
	char err[256];

	assert_int_equal(parse(xml, &info, err), 0);
	assert_false(info.tern_channel);
	assert_string_equal(info.generation, "");
	free(xml);
}

/* Names tern cannot carry are refused only for tern's domains. */
static void test_names(void **state)
{
	static const char *const bad[] = { "a/b", "tab\there", "del\x7f", "" };
	char long_name[VM_NAME_MAX + 2];
	struct domain_info info;
	char err[256], *xml;

	memset(long_name, 'n', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = 0;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 1; i++) {
		const char *name = i < sizeof(bad) / sizeof(bad[0]) ? bad[i] : long_name;

		xml = doc_make(name, UUID, "", "");
		assert_int_equal(parse(xml, &info, err), 0);
		free(xml);
		xml = doc_make(name, UUID, "", CHANNEL);
		refused(xml, "domain name");
		free(xml);
	}
	/* UTF-8 is a name libvirt and ternd both take (common/vm_id.h). */
	xml = doc_make("caf\xc3\xa9", UUID, "", CHANNEL);
	assert_int_equal(parse(xml, &info, err), 0);
	assert_string_equal(info.name, "caf\xc3\xa9");
	free(xml);
	long_name[VM_NAME_MAX] = 0;
	xml = doc_make(long_name, UUID, "", CHANNEL);
	assert_int_equal(parse(xml, &info, err), 0);
	assert_int_equal(strlen(info.name), VM_NAME_MAX);
	free(xml);
}

static void test_uuids(void **state)
{
	static const char *const bad[] = {
		"6F1C1C51-3D3C-4B57-9E0E-0123456789AB", "6f1c1c513d3c4b579e0e0123456789ab",
		"6f1c1c51-3d3c-4b57-9e0e-0123456789a", "6f1c1c51-3d3c-4b57-9e0e-0123456789abc",
		" 6f1c1c51-3d3c-4b57-9e0e-0123456789ab", "6f1c1c51-3d3c-4b57-9e0e-0123456789ag",
		"6f1c1c51+3d3c-4b57-9e0e-0123456789ab", "",
	};
	char *xml;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(vm_uuid_valid(bad[i]));
		xml = doc_make("vm", bad[i], "", CHANNEL);
		refused(xml, "uuid");
		free(xml);
	}
	assert_true(vm_uuid_valid(UUID));
	refused("<domain><name>vm</name><devices>" CHANNEL "</devices></domain>", "no <uuid>");
	refused("<domain><uuid>" UUID "</uuid></domain>", "no <name>");
	refused("<domain><name>vm</name><uuid>" UUID "</uuid><uuid>" UUID "</uuid></domain>", "two <uuid>");
	refused("<domain><name>vm</name><name>vn</name><uuid>" UUID "</uuid></domain>", "two <name>");
	/* An element inside the uuid is not a uuid. */
	refused("<domain><name>vm</name><uuid>6f1c1c51<b/>-3d3c-4b57-9e0e-0123456789ab</uuid><devices>" CHANNEL
		"</devices></domain>", "uuid");
}

static void test_channels(void **state)
{
	struct domain_info info;
	char err[256], *xml;

	xml = doc_make("vm", UUID, "", CHANNEL CHANNEL);
	refused(xml, "two channels");
	free(xml);
	/* Bind mode: QEMU would listen, nobody connects; the hook names it. */
	xml = doc_make("vm", UUID, "", "<channel type='unix'><source mode='bind' path='/tmp/x'/>"
		       "<target type='virtio' name='org.tern.0'/></channel>");
	assert_int_equal(parse(xml, &info, err), 0);
	assert_true(info.tern_channel);
	assert_string_equal(info.channel_path, "");
	free(xml);
	/* A near-miss target name is another channel. */
	xml = doc_make("vm", UUID, "", "<channel type='unix'><target type='virtio' name='org.tern.00'/></channel>");
	assert_int_equal(parse(xml, &info, err), 0);
	assert_false(info.tern_channel);
	free(xml);
	/* A socket path longer than sun_path. */
	{
		char path[200], devices[512];

		memset(path, 'p', sizeof(path) - 1);
		path[sizeof(path) - 1] = 0;
		snprintf(devices, sizeof(devices), "<channel type='unix'><source mode='connect' path='/%s'/>"
			 "<target type='virtio' name='org.tern.0'/></channel>", path);
		xml = doc_make("vm", UUID, "", devices);
		refused(xml, "too long");
		free(xml);
	}
}

static void test_metadata(void **state)
{
	char too_long[VM_GENERATION_MAX + 2], meta[256], *xml;
	struct domain_info info;
	char err[256];
	struct {
		const char *metadata, *why;
	} bad[] = {
		{ "<metadata>" GPU("00ff") GPU("00ff") "</metadata>", "two tern elements" },
		{ "<metadata>" GPU("XYZ") "</metadata>", "generation" },
		{ "<metadata>" GPU("00FF") "</metadata>", "generation" },
		{ "<metadata><tern:cpu xmlns:tern='https://tern.dev/xmlns/libvirt/1'/></metadata>", "unknown element" },
		{ "<metadata>" GPU("1") "</metadata><metadata/>", "two <metadata>" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		xml = doc_make("vm", UUID, bad[i].metadata, CHANNEL);
		refused(xml, bad[i].why);
		free(xml);
	}
	memset(too_long, 'a', sizeof(too_long) - 1);
	too_long[sizeof(too_long) - 1] = 0;
	assert_false(vm_generation_valid(too_long));
	snprintf(meta, sizeof(meta), "<metadata><t:gpu xmlns:t='https://tern.dev/xmlns/libvirt/1' generation='%s'/>"
		 "</metadata>", too_long);
	xml = doc_make("vm", UUID, meta, CHANNEL);
	refused(xml, "generation");
	free(xml);
	/* Another prefix for tern's namespace is still tern's; tern's element
	 * name in another namespace is not. */
	xml = doc_make("vm", UUID, "<metadata><x:gpu xmlns:x='https://tern.dev/xmlns/libvirt/1' generation='ab'/>"
		       "<gpu xmlns='urn:other' generation='cd'/></metadata>", CHANNEL);
	assert_int_equal(parse(xml, &info, err), 0);
	assert_string_equal(info.generation, "ab");
	free(xml);
}

static void test_malformed(void **state)
{
	char *xml = doc_make("vm", UUID, "<metadata>" GPU("00ff") "</metadata>", CHANNEL);
	size_t len = strlen(xml);
	struct domain_info info;
	char err[256];

	/* Every truncation is refused (the document is cut inside <domain>). */
	for (size_t n = 0; n + 2 < len; n++)
		assert_int_not_equal(domain_xml_parse(xml, n, &info, err, sizeof(err)), 0);
	free(xml);
	refused("", "malformed");
	refused("<domain>", "malformed");
	refused("<domain><name>vm</name></domain><domain/>", "malformed");
	refused("<notdomain><name>vm</name><uuid>" UUID "</uuid></notdomain>", "not a <domain>");
	refused("<x:domain xmlns:x='urn:x'><name>vm</name><uuid>" UUID "</uuid></x:domain>", "not a <domain>");
	refused("<domain><name>\xff\xfe</name><uuid>" UUID "</uuid></domain>", "malformed");
	/* A NUL inside the buffer ends nothing early: the length rules. */
	assert_int_not_equal(domain_xml_parse("<domain>\0</domain>", 18, &info, err, sizeof(err)), 0);
}

/* Entity tricks: a DTD is refused outright, so neither expansion bombs nor
 * external entities (files, network) are ever looked at.  libxml2 itself
 * already stops an expansion bomb while parsing. */
static void test_entities(void **state)
{
	refused("<!DOCTYPE domain [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>"
		"<!ENTITY c '&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;'><!ENTITY d '&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;'>]>"
		"<domain><name>&d;</name><uuid>" UUID "</uuid></domain>", "");
	refused("<!DOCTYPE domain [<!ENTITY x SYSTEM 'file:///etc/passwd'>]>"
		"<domain><name>&x;</name><uuid>" UUID "</uuid></domain>", "DTD");
	refused("<!DOCTYPE domain SYSTEM 'http://127.0.0.1:9/d.dtd'><domain><name>vm</name><uuid>" UUID
		"</uuid></domain>", "DTD");
	refused("<!DOCTYPE domain [<!ENTITY u '" UUID "'>]><domain><name>vm</name><uuid>&u;</uuid>"
		"<devices>" CHANNEL "</devices></domain>", "DTD");
	/* Without a DTD an entity is undefined. */
	refused("<domain><name>&x;</name><uuid>" UUID "</uuid></domain>", "malformed");
	/* XInclude is not processed: the element is ignored, nothing is read. */
	{
		struct domain_info info;
		char err[256];

		assert_int_equal(parse("<domain><name>vm</name><uuid>" UUID "</uuid>"
				       "<xi:include xmlns:xi='http://www.w3.org/2001/XInclude' href='/etc/passwd'/>"
				       "</domain>", &info, err), 0);
		assert_false(info.tern_channel);
	}
}

static void test_huge(void **state)
{
	size_t depth = 100000, len = depth * 7 + 64;
	struct domain_info info;
	char err[256], *xml = malloc(DOMAIN_XML_MAX + 2);
	char *p;

	assert_non_null(xml);
	memset(xml, ' ', DOMAIN_XML_MAX + 1);
	xml[DOMAIN_XML_MAX + 1] = 0;
	assert_int_equal(domain_xml_parse(xml, DOMAIN_XML_MAX + 1, &info, err, sizeof(err)), -EMSGSIZE);
	/* Nesting deeper than libxml2 allows without XML_PARSE_HUGE. */
	p = xml;
	p += sprintf(p, "<domain><name>vm</name><uuid>" UUID "</uuid>");
	for (size_t i = 0; i < depth; i++)
		p += sprintf(p, "<a>");
	for (size_t i = 0; i < depth; i++)
		p += sprintf(p, "</a>");
	p += sprintf(p, "</domain>");
	assert_true((size_t)(p - xml) < len * 2);
	refused(xml, "malformed");
	/* One 3 MiB text node is within the limit and is simply not a name. */
	memset(xml, 'n', DOMAIN_XML_MAX);
	memcpy(xml, "<domain><uuid>" UUID "</uuid><devices>" CHANNEL "</devices><name>",
	       strlen("<domain><uuid>" UUID "</uuid><devices>" CHANNEL "</devices><name>"));
	strcpy(xml + (3u << 20), "</name></domain>");
	refused(xml, "domain name");
	free(xml);
}

static void test_generation_set(void **state)
{
	char *with = doc_make("vm", UUID, "<metadata><o xmlns='urn:o'>keep</o>" GPU("00ff") "</metadata>", CHANNEL);
	char *without = doc_make("vm", UUID, "", CHANNEL);
	char *empty_meta = doc_make("vm", UUID, "<metadata/>", CHANNEL);
	const char *inputs[] = { with, without, empty_meta };
	struct domain_info info;
	char err[256], *out;

	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(domain_xml_generation_set(inputs[i], strlen(inputs[i]), "0123abcd", &out, err,
							   sizeof(err)), 0);
		assert_int_equal(parse(out, &info, err), 0);
		assert_string_equal(info.generation, "0123abcd");
		assert_string_equal(info.uuid, UUID);
		assert_true(info.tern_channel);
		if (i == 0)
			assert_non_null(strstr(out, "<o xmlns=\"urn:o\">keep</o>"));
		free(out);
	}
	assert_int_equal(domain_xml_generation_set(with, strlen(with), "XY", &out, err, sizeof(err)), -EBADMSG);
	assert_int_equal(domain_xml_generation_set(with, strlen(with), "", &out, err, sizeof(err)), -EBADMSG);
	assert_int_equal(domain_xml_generation_set("<domain/>", 9, "00", &out, err, sizeof(err)), -EBADMSG);
	assert_int_equal(domain_xml_generation_set("<!DOCTYPE d []><domain/>", 24, "00", &out, err, sizeof(err)),
			 -EBADMSG);
	free(with);
	free(without);
	free(empty_meta);
}

/* The migrate address: read, refused when it is not one, and the edit a
 * migration's destination makes (its own channel path, kept metadata). */
static void test_migrate(void **state)
{
	static const char *bad[] = { "ftp://h:1", "tcp://a b", "unix:", "tcp://\x01", "udp://h:2" };
	char *with = doc_make("vm", UUID, "<metadata><tern:gpu xmlns:tern='https://tern.dev/xmlns/libvirt/1' "
			      "generation='0a' migrate='tcp://192.0.2.1:7700'/></metadata>", CHANNEL);
	char *no_channel = doc_make("vm", UUID, "", "");
	struct domain_edit e = { .channel_path = "/run/other/vm/x.sock" };
	struct domain_info info;
	char err[256], *out, long_path[200];

	(void)state;
	assert_int_equal(parse(with, &info, err), 0);
	assert_string_equal(info.migrate_url, "tcp://192.0.2.1:7700");
	assert_int_equal(domain_xml_edit(with, strlen(with), &e, &out, err, sizeof(err)), 0);
	assert_int_equal(parse(out, &info, err), 0);
	assert_string_equal(info.channel_path, "/run/other/vm/x.sock");
	assert_string_equal(info.generation, "0a");
	assert_string_equal(info.migrate_url, "tcp://192.0.2.1:7700");
	free(out);
	e = (struct domain_edit){ .generation = "0b", .migrate_url = "unix:/run/tern/migrate.sock" };
	assert_int_equal(domain_xml_edit(with, strlen(with), &e, &out, err, sizeof(err)), 0);
	assert_int_equal(parse(out, &info, err), 0);
	assert_string_equal(info.migrate_url, "unix:/run/tern/migrate.sock");
	assert_string_equal(info.channel_path, SOCK);
	free(out);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *doc = NULL;

		assert_false(domain_migrate_url_valid(bad[i]));
		assert_true(asprintf(&doc, "<domain><name>vm</name><uuid>" UUID "</uuid><metadata><tern:gpu "
				     "xmlns:tern='https://tern.dev/xmlns/libvirt/1' migrate='%s'/></metadata><devices>"
				     CHANNEL "</devices></domain>", bad[i]) > 0);
		/* A control byte is no XML at all: refused by the parser itself. */
		refused(doc, strchr(bad[i], '\x01') ? "malformed" : "migrate address");
		free(doc);
		e = (struct domain_edit){ .migrate_url = bad[i] };
		assert_int_equal(domain_xml_edit(with, strlen(with), &e, &out, err, sizeof(err)), -EBADMSG);
	}
	e = (struct domain_edit){ .channel_path = "/x.sock" };
	assert_int_equal(domain_xml_edit(no_channel, strlen(no_channel), &e, &out, err, sizeof(err)), -EBADMSG);
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = 0;
	e = (struct domain_edit){ .channel_path = long_path };
	assert_int_equal(domain_xml_edit(with, strlen(with), &e, &out, err, sizeof(err)), -EBADMSG);
	e = (struct domain_edit){ .channel_path = "" };
	assert_int_equal(domain_xml_edit(with, strlen(with), &e, &out, err, sizeof(err)), -EBADMSG);
	free(with);
	free(no_channel);
}

static void test_fresh(void **state)
{
	char a[VM_GENERATION_MAX + 1], b[VM_GENERATION_MAX + 1];

	assert_int_equal(domain_generation_fresh(a), 0);
	assert_int_equal(domain_generation_fresh(b), 0);
	assert_int_equal(strlen(a), DOMAIN_GENERATION_FRESH_LEN);
	assert_true(vm_generation_valid(a));
	assert_string_not_equal(a, b);
}

static void test_read_fd(void **state)
{
	char path[] = "/tmp/test_domain_xml.XXXXXX", *xml;
	int fd = mkstemp(path);
	size_t len;

	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(write(fd, "<domain/>", 9), 9);
	lseek(fd, 0, SEEK_SET);
	assert_int_equal(domain_xml_read_fd(fd, &xml, &len), 0);
	assert_int_equal(len, 9);
	assert_string_equal(xml, "<domain/>");
	free(xml);
	/* Exactly the limit is read; one byte more is refused. */
	assert_int_equal(ftruncate(fd, DOMAIN_XML_MAX), 0);
	lseek(fd, 0, SEEK_SET);
	assert_int_equal(domain_xml_read_fd(fd, &xml, &len), 0);
	assert_int_equal(len, DOMAIN_XML_MAX);
	free(xml);
	assert_int_equal(ftruncate(fd, DOMAIN_XML_MAX + 1), 0);
	lseek(fd, 0, SEEK_SET);
	assert_int_equal(domain_xml_read_fd(fd, &xml, &len), -EMSGSIZE);
	close(fd);
	assert_int_equal(domain_xml_read_fd(fd, &xml, &len), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_no_channel_no_generation),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_uuids),
		cmocka_unit_test(test_channels),
		cmocka_unit_test(test_metadata),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_entities),
		cmocka_unit_test(test_huge),
		cmocka_unit_test(test_generation_set),
		cmocka_unit_test(test_migrate),
		cmocka_unit_test(test_fresh),
		cmocka_unit_test(test_read_fd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
