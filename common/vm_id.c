/* The names of libvirt domains and their sessions (vm_id.h). */
#include "vm_id.h"

#include <string.h>

bool vm_uuid_valid(const char *uuid)
{
	for (size_t i = 0; i < VM_UUID_LEN; i++) {
		char c = uuid[i];
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return uuid[VM_UUID_LEN] == '\0';
}

bool vm_name_valid(const char *name)
{
	size_t n = 0;

	for (; name[n]; n++) {
		unsigned char c = (unsigned char)name[n];

		/* Bytes >= 0x80 are UTF-8 (control_msg.c refuses invalid UTF-8). */
		if (n >= VM_NAME_MAX || c < 0x20 || c == 0x7f || c == '/')
			return false;
	}
	return n > 0;
}

bool vm_generation_valid(const char *generation)
{
	size_t n = 0;

	for (; generation[n]; n++)
		if (n >= VM_GENERATION_MAX ||
		    !((generation[n] >= '0' && generation[n] <= '9') || (generation[n] >= 'a' && generation[n] <= 'f')))
			return false;
	return n > 0;
}

bool vm_session_of(const char *id, const char *uuid)
{
	return !strncmp(id, uuid, VM_UUID_LEN) && strlen(uuid) == VM_UUID_LEN && id[VM_UUID_LEN] == VM_SESSION_SEP &&
	       id[VM_UUID_LEN + 1] != '\0';
}

bool vm_session_id_valid(const char *id)
{
	char uuid[VM_UUID_LEN + 1];

	if (strnlen(id, VM_UUID_LEN + 1) < VM_UUID_LEN + 1)
		return false;
	memcpy(uuid, id, VM_UUID_LEN);
	uuid[VM_UUID_LEN] = '\0';
	return vm_uuid_valid(uuid) && vm_session_of(id, uuid) && !strchr(id + VM_UUID_LEN + 1, VM_SESSION_SEP);
}
