/* CUDA device images: fatbin containers, cubin ELF, PTX.  Finding and measuring images: the part of fatbin.h that the guest shim
 * links. See fatbin.h and fatbin_layout.h.
 *
 * Layouts, as nvcc 13.0 writes them (all little-endian):
 *   fatbin header (16): u32 magic 0xBA55ED50, u16 version 1, u16 header size,
 *                       u64 bytes of entries that follow the header
 *   entry header (64, or 80/112 for newer archs): u16 kind (1 PTX, 2 ELF),
 *     u16 version, u32 header size, u64 payload size (padded to 8),
 *     u32 compressed size, u32 ?, u16 minor, u16 major, u32 arch,
 *     u32 name offset, u32 name length, u64 flags, u64 ?, u64 decompressed size
 *   entry flags: 0x2000 LZ4 block, 0x8000 zstd frame, 0x100000 sm_XXa,
 *     0x200000 sm_XXf.  nvcc 13 compresses PTX with zstd by default; with
 *     -Xfatbin -compress-all every entry, and --compress-mode=speed uses LZ4.
 *   .nv.info records: u8 format, u8 attribute, then either a u16 value
 *     (formats 1-3) or a u16 length and that many bytes (format 4).
 */
#include "fatbin.h"

#include <errno.h>
#include <string.h>

#include "fatbin_layout.h"

enum cuimage_format cuimage_format_detect(const void *image, size_t avail)
{
	const uint8_t *p = image;

	if (!p || !avail)
		return CUIMAGE_FORMAT_UNKNOWN;
	if (prefix_is(p, avail, magic_fatbin))
		return CUIMAGE_FORMAT_FATBIN;
	if (prefix_is(p, avail, magic_wrapper))
		return CUIMAGE_FORMAT_WRAPPER;
	if (prefix_is(p, avail, magic_elf))
		return CUIMAGE_FORMAT_ELF;
	return CUIMAGE_FORMAT_PTX;
}

const void *cuimage_wrapper_data(const void *image)
{
	const uint8_t *p = image;
	uint32_t version;
	uint64_t data;

	if (!prefix_is(p, 4, magic_wrapper))
		return NULL;
	version = le32_get(p + 4);
	if (version < WRAPPER_VERSION_MIN || version > WRAPPER_VERSION_MAX)
		return NULL;
	/* struct { int magic; int version; const unsigned long long *data; ... } */
	data = le64_get(p + 8);
	return (const void *)(uintptr_t)data;
}

static int fatbin_measure(const uint8_t *p, size_t limit, size_t *size_out)
{
	uint64_t total;

	if (limit < FATBIN_HEADER_SIZE)
		return -EINVAL;
	if (le16_get(p + 4) != FATBIN_VERSION || le16_get(p + 6) < FATBIN_HEADER_SIZE)
		return -EINVAL;
	if (le64_get(p + 8) > CUIMAGE_SIZE_MAX)
		return -E2BIG;
	total = le16_get(p + 6) + le64_get(p + 8);
	if (total > CUIMAGE_SIZE_MAX)
		return -E2BIG;
	if (total > limit)
		return -EINVAL;
	*size_out = (size_t)total;
	return 0;
}

/* Section types whose bytes are not in the file. */
/* An ELF file ends with the last of its header tables and section contents. */
static int elf_measure(const uint8_t *p, size_t limit, size_t *size_out)
{
	uint64_t end = ELF_EHDR_SIZE, shoff, phoff, shnum;
	uint16_t phnum;

	if (limit < ELF_EHDR_SIZE || p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* LSB */)
		return -EINVAL;
	shoff = le64_get(p + 0x28);
	phoff = le64_get(p + 0x20);
	phnum = le16_get(p + 0x38);
	shnum = le16_get(p + 0x3c);
	if ((shnum && le16_get(p + 0x3a) != ELF_SHDR_SIZE) ||
	    (phnum && le16_get(p + 0x36) != ELF_PHDR_SIZE))
		return -EINVAL;
	if (shoff > CUIMAGE_SIZE_MAX || phoff > CUIMAGE_SIZE_MAX)
		return -E2BIG;
	if (shoff && !shnum) {
		/* Extended numbering: the count is in section 0's sh_size. */
		if (!range_ok(shoff, ELF_SHDR_SIZE, limit))
			return -EINVAL;
		shnum = le64_get(p + shoff + 0x20);
		if (shnum > CUIMAGE_SIZE_MAX / ELF_SHDR_SIZE)
			return -E2BIG;
	}
	if (phnum) {
		if (!range_ok(phoff, (uint64_t)phnum * ELF_PHDR_SIZE, limit))
			return -EINVAL;
		if (phoff + (uint64_t)phnum * ELF_PHDR_SIZE > end)
			end = phoff + (uint64_t)phnum * ELF_PHDR_SIZE;
		for (unsigned i = 0; i < phnum; i++) {
			const uint8_t *ph = p + phoff + (uint64_t)i * ELF_PHDR_SIZE;
			uint64_t off = le64_get(ph + 0x08), filesz = le64_get(ph + 0x20);

			if (off > CUIMAGE_SIZE_MAX || filesz > CUIMAGE_SIZE_MAX)
				return -E2BIG;
			if (off + filesz > end)
				end = off + filesz;
		}
	}
	if (shnum) {
		if (!range_ok(shoff, shnum * ELF_SHDR_SIZE, limit))
			return -EINVAL;
		if (shoff + shnum * ELF_SHDR_SIZE > end)
			end = shoff + shnum * ELF_SHDR_SIZE;
		for (uint64_t i = 0; i < shnum; i++) {
			const uint8_t *sh = p + shoff + i * ELF_SHDR_SIZE;
			uint32_t type = le32_get(sh + 0x04);
			uint64_t off = le64_get(sh + 0x18), sz = le64_get(sh + 0x20);

			if (!type || elf_type_nobits(type))
				continue;
			if (off > CUIMAGE_SIZE_MAX || sz > CUIMAGE_SIZE_MAX)
				return -E2BIG;
			if (off + sz > end)
				end = off + sz;
		}
	}
	if (end > CUIMAGE_SIZE_MAX)
		return -E2BIG;
	if (end > limit)
		return -EINVAL;
	*size_out = (size_t)end;
	return 0;
}

int cuimage_measure(const void *image, size_t limit, size_t *size_out)
{
	const uint8_t *p = image;
	size_t n;

	if (!p || !limit || !size_out)
		return -EINVAL;
	switch (cuimage_format_detect(p, limit)) {
	case CUIMAGE_FORMAT_FATBIN:
		return fatbin_measure(p, limit, size_out);
	case CUIMAGE_FORMAT_ELF:
		return elf_measure(p, limit, size_out);
	case CUIMAGE_FORMAT_PTX:
		n = strnlen((const char *)p, limit < CUIMAGE_SIZE_MAX ? limit : CUIMAGE_SIZE_MAX);
		if (n == limit)
			return -EINVAL;
		if (n >= CUIMAGE_SIZE_MAX)
			return -E2BIG;
		*size_out = n + 1;
		return 0;
	default:
		return -EINVAL;
	}
}
