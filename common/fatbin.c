/* CUDA device images: fatbin containers, cubin ELF, PTX.  See fatbin.h.
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
#define LOG_PREFIX "fatbin: "
#include "fatbin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "log.h"

#include "fatbin_layout.h"

struct cuimage {
	enum cuimage_format format;
	struct cuimage_entry *entries;
	unsigned entry_count;
	unsigned selected;
	uint8_t *code;          /* selected entry, decompressed, NUL appended */
	size_t code_size;
	struct cuimage_kernel *kernels;
	unsigned kernel_count;
	struct cuimage_global *globals;
	unsigned global_count;
	bool globals_own_init;  /* PTX: init buffers are allocated; cubin: they
	                         * point into code */
};

/* ---- decompression ---- */

/* LZ4 block format: sequences of literals and back-references. */
static int lz4_block_decompress(const uint8_t *src, size_t src_size,
				uint8_t *dst, size_t dst_size)
{
	size_t ip = 0, op = 0;

	while (ip < src_size) {
		unsigned token = src[ip++];
		size_t lit = token >> 4, match, offset;

		if (lit == 15) {
			uint8_t b;

			do {
				if (ip >= src_size)
					return -EINVAL;
				b = src[ip++];
				lit += b;
			} while (b == 255 && lit < dst_size);
		}
		if (lit > src_size - ip || lit > dst_size - op)
			return -EINVAL;
		memcpy(dst + op, src + ip, lit);
		ip += lit;
		op += lit;
		if (ip == src_size)
			break; /* the last sequence has literals only */
		if (src_size - ip < 2)
			return -EINVAL;
		offset = le16_get(src + ip);
		ip += 2;
		if (!offset || offset > op)
			return -EINVAL;
		match = (token & 15) + 4;
		if ((token & 15) == 15) {
			uint8_t b;

			do {
				if (ip >= src_size)
					return -EINVAL;
				b = src[ip++];
				match += b;
			} while (b == 255 && match < dst_size);
		}
		if (match > dst_size - op)
			return -EINVAL;
		/* Overlapping copies repeat the pattern: byte by byte on purpose. */
		for (size_t i = 0; i < match; i++, op++)
			dst[op] = dst[op - offset];
	}
	return op == dst_size ? 0 : -EINVAL;
}

/* ---- fatbin entries ---- */

static int entries_push(struct cuimage *img, const struct cuimage_entry *e,
			unsigned *cap)
{
	if (img->entry_count == *cap) {
		unsigned ncap = *cap ? *cap * 2 : 8;
		struct cuimage_entry *n = realloc(img->entries, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		img->entries = n;
		*cap = ncap;
	}
	img->entries[img->entry_count++] = *e;
	return 0;
}

static int fatbin_entries_read(struct cuimage *img, const uint8_t *d, size_t size)
{
	uint64_t pos, end;
	unsigned cap = 0;
	int rc;

	if (size < FATBIN_HEADER_SIZE || le16_get(d + 4) != FATBIN_VERSION)
		return -EINVAL;
	pos = le16_get(d + 6);
	if (pos < FATBIN_HEADER_SIZE || !range_ok(pos, le64_get(d + 8), size))
		return -EINVAL;
	end = pos + le64_get(d + 8);
	while (pos < end) {
		const uint8_t *h = d + pos;
		struct cuimage_entry e = {0};
		uint32_t hsize, kind, csize;
		uint64_t psize;

		if (!range_ok(pos, FATBIN_ENTRY_HEADER_MIN, end))
			return -EINVAL;
		kind = le16_get(h);
		hsize = le32_get(h + 4);
		psize = le64_get(h + 8);
		csize = le32_get(h + 16);
		if (hsize < FATBIN_ENTRY_HEADER_MIN || !range_ok(pos, hsize, end) ||
		    !range_ok(pos + hsize, psize, end))
			return -EINVAL;
		e.kind = kind == FATBIN_ENTRY_PTX ? CUIMAGE_ENTRY_PTX :
			 kind == FATBIN_ENTRY_ELF ? CUIMAGE_ENTRY_CUBIN : CUIMAGE_ENTRY_OTHER;
		e.sm = le32_get(h + 28);
		e.flags = le64_get(h + 40);
		e.arch_specific = e.flags & FATBIN_FLAG_ARCH_SPECIFIC;
		e.family_specific = e.flags & FATBIN_FLAG_FAMILY;
		e.offset = pos + hsize;
		if ((e.flags & FATBIN_FLAG_LZ4) && (e.flags & FATBIN_FLAG_ZSTD))
			e.compression = CUIMAGE_COMPRESSION_UNKNOWN;
		else if (e.flags & FATBIN_FLAG_LZ4)
			e.compression = CUIMAGE_COMPRESSION_LZ4;
		else if (e.flags & FATBIN_FLAG_ZSTD)
			e.compression = CUIMAGE_COMPRESSION_ZSTD;
		if (e.compression != CUIMAGE_COMPRESSION_NONE) {
			if (csize > psize)
				return -EINVAL;
			e.stored_size = csize;
			e.size = le64_get(h + 56);
		} else {
			e.stored_size = psize;
			e.size = psize;
		}
		if (e.size > CUIMAGE_SIZE_MAX)
			return -E2BIG;
		rc = entries_push(img, &e, &cap);
		if (rc)
			return rc;
		pos += hsize + psize;
	}
	return 0;
}

static bool entry_cubin_runs_on(const struct cuimage_entry *e, unsigned target)
{
	if (e->arch_specific)
		return e->sm == target;
	/* SASS is compatible within a major version, upwards only. */
	return e->sm / 10 == target / 10 && e->sm <= target;
}

/* Returns the index of the entry to read, or -ENOENT. */
static int entry_select(const struct cuimage *img, unsigned target)
{
	int best = -1;

	for (unsigned i = 0; i < img->entry_count; i++) {
		const struct cuimage_entry *e = &img->entries[i];

		if (e->kind != CUIMAGE_ENTRY_CUBIN)
			continue;
		if (target && !entry_cubin_runs_on(e, target))
			continue;
		if (best < 0 || e->sm > img->entries[best].sm ||
		    (e->sm == img->entries[best].sm && !e->arch_specific &&
		     img->entries[best].arch_specific))
			best = (int)i;
	}
	if (best >= 0)
		return best;
	for (unsigned i = 0; i < img->entry_count; i++) {
		const struct cuimage_entry *e = &img->entries[i];

		if (e->kind != CUIMAGE_ENTRY_PTX)
			continue;
		if (target && (e->arch_specific ? e->sm != target : e->sm > target))
			continue;
		if (best < 0 || e->sm > img->entries[best].sm)
			best = (int)i;
	}
	return best >= 0 ? best : -ENOENT;
}

/* Copy (and decompress) the entry into img->code, NUL-terminated. */
static int entry_load(struct cuimage *img, const uint8_t *d,
		      const struct cuimage_entry *e)
{
	const uint8_t *src = d + e->offset;
	uint8_t *buf;
	size_t got;
	int rc = 0;

	buf = malloc((size_t)e->size + 1);
	if (!buf)
		return -ENOMEM;
	switch (e->compression) {
	case CUIMAGE_COMPRESSION_NONE:
		memcpy(buf, src, (size_t)e->size);
		break;
	case CUIMAGE_COMPRESSION_ZSTD:
		got = ZSTD_decompress(buf, (size_t)e->size, src, (size_t)e->stored_size);
		if (ZSTD_isError(got) || got != e->size) {
			pr_debug("zstd entry: %s", ZSTD_isError(got) ?
				 ZSTD_getErrorName(got) : "size differs from header");
			rc = -EINVAL;
		}
		break;
	case CUIMAGE_COMPRESSION_LZ4:
		rc = lz4_block_decompress(src, (size_t)e->stored_size, buf, (size_t)e->size);
		break;
	default:
		rc = -ENOTSUP;
		break;
	}
	if (rc) {
		free(buf);
		return rc;
	}
	buf[e->size] = 0;
	img->code = buf;
	img->code_size = (size_t)e->size;
	return 0;
}

/* ---- cubin ---- */

struct elf_section {
	uint32_t name;
	uint32_t type;
	uint64_t offset;
	uint64_t size;
	uint32_t link;
	uint32_t info;
	uint64_t entsize;
};

struct elf {
	const uint8_t *d;
	size_t size;
	uint64_t shoff;
	unsigned shnum;
	const uint8_t *shstr;   /* section name table */
	uint64_t shstr_size;
};

static void elf_section_get(const struct elf *e, unsigned i, struct elf_section *s)
{
	const uint8_t *h = e->d + e->shoff + (uint64_t)i * ELF_SHDR_SIZE;

	s->name = le32_get(h);
	s->type = le32_get(h + 0x04);
	s->offset = le64_get(h + 0x18);
	s->size = le64_get(h + 0x20);
	s->link = le32_get(h + 0x28);
	s->info = le32_get(h + 0x2c);
	s->entsize = le64_get(h + 0x38);
}

/* The section's bytes, or NULL when they are not inside the file. */
static const uint8_t *elf_section_bytes(const struct elf *e, const struct elf_section *s)
{
	if (elf_type_nobits(s->type) || !range_ok(s->offset, s->size, e->size))
		return NULL;
	return e->d + s->offset;
}

/* A NUL-terminated string inside the table, or NULL. */
static const char *elf_string(const uint8_t *tab, uint64_t tab_size, uint32_t off)
{
	if (!tab || off >= tab_size || !memchr(tab + off, 0, tab_size - off))
		return NULL;
	return (const char *)tab + off;
}

static int elf_open(struct elf *e, const uint8_t *d, size_t size)
{
	struct elf_section s;
	unsigned shstrndx;

	if (size < ELF_EHDR_SIZE || !prefix_is(d, size, magic_elf))
		return -EINVAL;
	if (d[4] != 2 || d[5] != 1)
		return -ENOTSUP; /* cubins have been 64-bit little-endian for years */
	if (le16_get(d + 0x12) != EM_CUDA)
		return -EINVAL;
	e->d = d;
	e->size = size;
	e->shoff = le64_get(d + 0x28);
	e->shnum = le16_get(d + 0x3c);
	shstrndx = le16_get(d + 0x3e);
	if (!e->shnum || le16_get(d + 0x3a) != ELF_SHDR_SIZE ||
	    !range_ok(e->shoff, (uint64_t)e->shnum * ELF_SHDR_SIZE, size) ||
	    shstrndx >= e->shnum)
		return -EINVAL;
	elf_section_get(e, shstrndx, &s);
	e->shstr = elf_section_bytes(e, &s);
	e->shstr_size = s.size;
	if (!e->shstr)
		return -EINVAL;
	return 0;
}

static unsigned elf_sm(const uint8_t *d)
{
	uint32_t flags = le32_get(d + 0x30);

	/* ABI version 8 (CUDA 13) moved the SM number up a byte. */
	return d[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
}

/* Checks that the records of a .nv.info section tile it exactly, so the
 * walks below need no bounds checks of their own. */
static int info_records_check(const uint8_t *info, uint64_t n)
{
	uint64_t pos = 0;

	while (pos + 4 <= n) {
		uint8_t fmt = info[pos];

		if (fmt == EIFMT_SVAL)
			pos += 4 + (uint64_t)le16_get(info + pos + 2);
		else if (fmt >= 1 && fmt <= 3)
			pos += 4;
		else
			return -EINVAL;
	}
	return pos == n ? 0 : -EINVAL;
}

static bool info_is_param(const uint8_t *rec)
{
	return rec[0] == EIFMT_SVAL && le16_get(rec + 2) >= 12 &&
	       (rec[1] == EIATTR_KPARAM_INFO || rec[1] == EIATTR_KPARAM_INFO_V2);
}

static int kernel_params_read(struct cuimage_kernel *k, const uint8_t *info, uint64_t n)
{
	struct cuimage_param *params;
	uint8_t *seen;
	uint32_t count = 0, end = 0, bytes = 0;
	bool have_bytes = false;
	uint64_t pos;
	int rc;

	rc = info_records_check(info, n);
	if (rc)
		return rc;
	for (pos = 0; pos < n; pos += info[pos] == EIFMT_SVAL ? 4 + le16_get(info + pos + 2) : 4) {
		const uint8_t *rec = info + pos;

		if (info_is_param(rec)) {
			count++;
		} else if (rec[0] == EIFMT_SVAL && rec[1] == EIATTR_PARAM_CBANK &&
			   le16_get(rec + 2) >= 8 && !have_bytes) {
			bytes = le16_get(rec + 4 + 6);
			have_bytes = true;
		} else if (rec[0] != EIFMT_SVAL && rec[1] == EIATTR_CBANK_PARAM_SIZE) {
			/* the total, preferred over the bank record's size */
			bytes = le16_get(rec + 2);
			have_bytes = true;
		}
	}
	if (!count) {
		k->param_bytes = bytes;
		return 0;
	}
	params = calloc(count, sizeof(*params));
	seen = calloc(count, 1);
	if (!params || !seen) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = -EINVAL;
	for (pos = 0; pos < n; pos += info[pos] == EIFMT_SVAL ? 4 + le16_get(info + pos + 2) : 4) {
		const uint8_t *rec = info + pos, *v = rec + 4;
		uint32_t ordinal, offset, size;

		if (!info_is_param(rec))
			continue;
		ordinal = le16_get(v + 4);
		offset = le16_get(v + 6);
		/* v1 packs the size in the top 14 bits; v2 has a whole word. */
		size = rec[1] == EIATTR_KPARAM_INFO ? le32_get(v + 8) >> 18 : le32_get(v + 8);
		if (ordinal >= count || seen[ordinal] || size > PARAM_BYTES_MAX ||
		    offset + size > PARAM_BYTES_MAX)
			goto out_free;
		seen[ordinal] = 1;
		params[ordinal].offset = offset;
		params[ordinal].size = size;
		if (offset + size > end)
			end = offset + size;
	}
	if (!have_bytes)
		bytes = end;
	if (end > bytes)
		goto out_free;
	k->param_count = count;
	k->param_bytes = bytes;
	k->params = params;
	params = NULL;
	rc = 0;
out_free:
	free(seen);
	free(params);
	return rc;
}

enum section_class {
	SECTION_OTHER = 0,
	SECTION_GLOBAL,        /* .nv.global: zero-initialised */
	SECTION_GLOBAL_INIT,   /* .nv.global.init */
	SECTION_CONSTANT,      /* .nv.constantN, N > 0 */
};

static enum section_class section_classify(const char *name)
{
	if (!name)
		return SECTION_OTHER;
	if (!strcmp(name, ".nv.global"))
		return SECTION_GLOBAL;
	if (!strcmp(name, ".nv.global.init"))
		return SECTION_GLOBAL_INIT;
	/* Bank 0 holds kernel parameters, not variables. */
	if (!strncmp(name, ".nv.constant", 12) && name[12] >= '1' && name[12] <= '9')
		return SECTION_CONSTANT;
	return SECTION_OTHER;
}

static int cubin_read(struct cuimage *img)
{
	struct elf e;
	struct elf_section symtab, strtab, s;
	const uint8_t *syms, *strs;
	uint32_t *info_of_text = NULL;
	uint8_t *sec_class = NULL;
	uint64_t nsyms;
	unsigned symtab_idx = 0, nk = 0, ng = 0;
	int rc;

	rc = elf_open(&e, img->code, img->code_size);
	if (rc)
		return rc;
	for (unsigned i = 0; i < e.shnum; i++) {
		elf_section_get(&e, i, &s);
		if (s.type == SHT_SYMTAB) {
			symtab_idx = i;
			break;
		}
	}
	if (!symtab_idx)
		return 0; /* nothing named: no kernels, no globals */
	elf_section_get(&e, symtab_idx, &symtab);
	syms = elf_section_bytes(&e, &symtab);
	if (!syms || symtab.entsize != ELF_SYM_SIZE || symtab.link >= e.shnum)
		return -EINVAL;
	elf_section_get(&e, symtab.link, &strtab);
	strs = elf_section_bytes(&e, &strtab);
	if (!strs)
		return -EINVAL;
	nsyms = symtab.size / ELF_SYM_SIZE;

	/* One pass over sections, so the symbol pass need not search them.
	 * A .nv.info.<kernel> section's sh_info is its kernel's .text section,
	 * which is also the kernel symbol's st_shndx. */
	info_of_text = calloc(e.shnum, sizeof(*info_of_text));
	sec_class = calloc(e.shnum, 1);
	if (!info_of_text || !sec_class) {
		rc = -ENOMEM;
		goto out_free;
	}
	for (unsigned i = 0; i < e.shnum; i++) {
		const char *name;

		elf_section_get(&e, i, &s);
		name = elf_string(e.shstr, e.shstr_size, s.name);
		sec_class[i] = (uint8_t)section_classify(name);
		if (s.type == SHT_CUDA_INFO && name && !strncmp(name, ".nv.info.", 9) &&
		    s.info && s.info < e.shnum)
			info_of_text[s.info] = i;
	}
	for (uint64_t i = 0; i < nsyms; i++) {
		const uint8_t *sym = syms + i * ELF_SYM_SIZE;
		uint8_t type = sym[4] & 15, other = sym[5];
		uint16_t shndx = le16_get(sym + 6);

		if (type == STT_FUNC && (other & STO_CUDA_ENTRY))
			nk++;
		else if ((type == STT_OBJECT || type == STT_CUDA_OBJECT) &&
			 shndx < e.shnum && sec_class[shndx] != SECTION_OTHER)
			ng++;
	}
	img->kernels = calloc(nk + 1, sizeof(*img->kernels));
	img->globals = calloc(ng + 1, sizeof(*img->globals));
	if (!img->kernels || !img->globals) {
		rc = -ENOMEM;
		goto out_free;
	}
	for (uint64_t i = 0; i < nsyms; i++) {
		const uint8_t *sym = syms + i * ELF_SYM_SIZE;
		uint8_t type = sym[4] & 15, other = sym[5];
		uint16_t shndx = le16_get(sym + 6);
		uint64_t value = le64_get(sym + 8), size = le64_get(sym + 16);
		const char *name = elf_string(strs, strtab.size, le32_get(sym));

		if (type == STT_FUNC && (other & STO_CUDA_ENTRY)) {
			struct cuimage_kernel *k = &img->kernels[img->kernel_count];

			if (!name || !*name) {
				rc = -EINVAL;
				goto out_free;
			}
			k->name = strdup(name);
			if (!k->name) {
				rc = -ENOMEM;
				goto out_free;
			}
			img->kernel_count++;
			if (shndx < e.shnum && info_of_text[shndx]) {
				const uint8_t *info;

				elf_section_get(&e, info_of_text[shndx], &s);
				info = elf_section_bytes(&e, &s);
				if (!info) {
					rc = -EINVAL;
					goto out_free;
				}
				rc = kernel_params_read(k, info, s.size);
				if (rc)
					goto out_free;
			}
		} else if ((type == STT_OBJECT || type == STT_CUDA_OBJECT) &&
			   shndx < e.shnum && sec_class[shndx] != SECTION_OTHER) {
			struct cuimage_global *g = &img->globals[img->global_count];

			if (!name || !*name) {
				rc = -EINVAL;
				goto out_free;
			}
			elf_section_get(&e, shndx, &s);
			if (!range_ok(value, size, s.size) || size > CUIMAGE_SIZE_MAX) {
				rc = -EINVAL;
				goto out_free;
			}
			g->name = strdup(name);
			if (!g->name) {
				rc = -ENOMEM;
				goto out_free;
			}
			img->global_count++;
			g->size = size;
			g->space = sec_class[shndx] == SECTION_CONSTANT ?
				   CUIMAGE_SPACE_CONSTANT : CUIMAGE_SPACE_GLOBAL;
			g->managed = other & STO_CUDA_MANAGED;
			if (sec_class[shndx] != SECTION_GLOBAL && !elf_type_nobits(s.type)) {
				const uint8_t *bytes = elf_section_bytes(&e, &s);

				if (!bytes) {
					rc = -EINVAL;
					goto out_free;
				}
				/* Points into img->code, which the image owns. */
				g->init = bytes + value;
			}
		}
	}
	rc = 0;
out_free:
	free(sec_class);
	free(info_of_text);
	return rc;
}

/* ---- PTX ---- */

struct ptx_lex {
	const char *p, *end;
	const char *tok;        /* current token, not NUL-terminated */
	size_t len;
};

static bool ptx_punct(char c)
{
	return strchr("(){}[],;=<>+:", c) != NULL;
}

/* Comments and quoted strings read as blanks, so directives inside them are
 * not taken for code. */
static void ptx_skip_blank(struct ptx_lex *lx)
{
	while (lx->p < lx->end) {
		char c = *lx->p;

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
			lx->p++;
		} else if (c == '/' && lx->p + 1 < lx->end && lx->p[1] == '/') {
			while (lx->p < lx->end && *lx->p != '\n')
				lx->p++;
		} else if (c == '/' && lx->p + 1 < lx->end && lx->p[1] == '*') {
			lx->p += 2;
			while (lx->p + 1 < lx->end && !(lx->p[0] == '*' && lx->p[1] == '/'))
				lx->p++;
			lx->p = lx->p + 1 < lx->end ? lx->p + 2 : lx->end;
		} else if (c == '"') {
			lx->p++;
			while (lx->p < lx->end && *lx->p != '"' && *lx->p != '\n')
				lx->p++;
			if (lx->p < lx->end)
				lx->p++;
		} else {
			return;
		}
	}
}

/* Advances to the next token; false at the end of the text. */
static bool ptx_next(struct ptx_lex *lx)
{
	ptx_skip_blank(lx);
	lx->tok = lx->p;
	if (lx->p >= lx->end) {
		lx->len = 0;
		return false;
	}
	if (ptx_punct(*lx->p)) {
		lx->p++;
	} else {
		while (lx->p < lx->end && !ptx_punct(*lx->p) && *lx->p != '"' &&
		       !strchr(" \t\n\r\f\v", *lx->p) &&
		       !(*lx->p == '/' && lx->p + 1 < lx->end &&
			 (lx->p[1] == '/' || lx->p[1] == '*')))
			lx->p++;
	}
	lx->len = (size_t)(lx->p - lx->tok);
	return true;
}

static bool ptx_is(const struct ptx_lex *lx, const char *s)
{
	return lx->len == strlen(s) && !memcmp(lx->tok, s, lx->len);
}

/* Size in bytes of a PTX fundamental type token, 0 if it is not one. */
static unsigned ptx_type_size(const struct ptx_lex *lx)
{
	static const struct { const char *name; unsigned size; } types[] = {
		{".b8", 1}, {".u8", 1}, {".s8", 1}, {".b16", 2}, {".u16", 2},
		{".s16", 2}, {".f16", 2}, {".bf16", 2}, {".f16x2", 4}, {".bf16x2", 4},
		{".b32", 4}, {".u32", 4}, {".s32", 4}, {".f32", 4}, {".b64", 8},
		{".u64", 8}, {".s64", 8}, {".f64", 8}, {".b128", 16}, {".pred", 1},
		{".e4m3x2", 2}, {".e5m2x2", 2},
	};

	for (unsigned i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (ptx_is(lx, types[i].name))
			return types[i].size;
	}
	return 0;
}

/* Parses an unsigned decimal/hex/octal count token. */
static bool ptx_number(const struct ptx_lex *lx, uint64_t max, uint64_t *out)
{
	char buf[32], *endp;
	unsigned long long v;

	if (!lx->len || lx->len >= sizeof(buf) || lx->tok[0] < '0' || lx->tok[0] > '9')
		return false;
	memcpy(buf, lx->tok, lx->len);
	buf[lx->len] = 0;
	errno = 0;
	v = strtoull(buf, &endp, 0);
	if (errno || *endp || v > max)
		return false;
	*out = v;
	return true;
}

/* One element of an initialiser, as little-endian bytes of @size. */
static bool ptx_literal(const struct ptx_lex *lx, unsigned size, bool is_float,
			uint8_t *out)
{
	char buf[64], *endp;
	uint64_t bits;

	if (!lx->len || lx->len >= sizeof(buf))
		return false;
	memcpy(buf, lx->tok, lx->len);
	buf[lx->len] = 0;
	errno = 0;
	if ((buf[0] == '0') && (buf[1] == 'f' || buf[1] == 'F' || buf[1] == 'd' ||
				buf[1] == 'D')) {
		/* 0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX: the raw IEEE bits in hex. */
		bits = strtoull(buf + 2, &endp, 16);
	} else if (is_float && strpbrk(buf, ".eE")) {
		double dv = strtod(buf, &endp);

		if (size == 4) {
			float fv = (float)dv;
			uint32_t b32;

			memcpy(&b32, &fv, 4);
			bits = b32;
		} else {
			memcpy(&bits, &dv, 8);
		}
	} else if (buf[0] == '-') {
		bits = (uint64_t)strtoll(buf, &endp, 0);
	} else {
		bits = strtoull(buf, &endp, 0);
	}
	if (errno || *endp || endp == buf)
		return false;
	for (unsigned i = 0; i < size; i++)
		out[i] = i < 8 ? (uint8_t)(bits >> (8 * i)) : 0;
	return true;
}

static int globals_push(struct cuimage *img, unsigned *cap)
{
	if (img->global_count == *cap) {
		unsigned ncap = *cap ? *cap * 2 : 8;
		struct cuimage_global *n = realloc(img->globals, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		img->globals = n;
		*cap = ncap;
	}
	memset(&img->globals[img->global_count], 0, sizeof(img->globals[0]));
	img->global_count++;
	return 0;
}

static int kernels_push(struct cuimage *img, unsigned *cap)
{
	if (img->kernel_count == *cap) {
		unsigned ncap = *cap ? *cap * 2 : 8;
		struct cuimage_kernel *n = realloc(img->kernels, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		img->kernels = n;
		*cap = ncap;
	}
	memset(&img->kernels[img->kernel_count], 0, sizeof(img->kernels[0]));
	img->kernel_count++;
	return 0;
}

/* After ".entry": name ( .param ... , ... ).  Offsets follow PTX's rule: each
 * parameter at its alignment (explicit, else its element size). */
static int ptx_entry_read(struct cuimage *img, struct ptx_lex *lx, unsigned *cap)
{
	struct cuimage_kernel *k;
	struct cuimage_param *params = NULL;
	uint32_t count = 0, pcap = 0, offset = 0;
	int rc;

	if (!ptx_next(lx) || ptx_punct(*lx->tok))
		return -EINVAL;
	rc = kernels_push(img, cap);
	if (rc)
		return rc;
	k = &img->kernels[img->kernel_count - 1];
	k->name = strndup(lx->tok, lx->len);
	if (!k->name)
		return -ENOMEM;
	if (!ptx_next(lx) || !ptx_is(lx, "("))
		return 0; /* no parameter list */
	if (!ptx_next(lx))
		return -EINVAL;
	while (!ptx_is(lx, ")")) {
		uint64_t align = 0, elem = 0, n = 1, size;
		bool ptr = false;

		if (!ptx_is(lx, ".param"))
			goto out_einval;
		for (;;) {
			unsigned ts;

			if (!ptx_next(lx))
				goto out_einval;
			if (ptx_is(lx, ".align")) {
				uint64_t a;

				if (!ptx_next(lx) || !ptx_number(lx, 4096, &a) || !a || (a & (a - 1)))
					goto out_einval;
				if (!ptr) /* after .ptr it is the pointee's alignment */
					align = a;
			} else if (ptx_is(lx, ".ptr")) {
				ptr = true;
			} else if ((ts = ptx_type_size(lx))) {
				elem = ts;
			} else if (lx->tok[0] != '.') {
				break; /* the name */
			}
			/* other directives (.global after .ptr ...) change nothing */
		}
		if (!elem || ptx_punct(*lx->tok))
			goto out_einval;
		if (!ptx_next(lx))
			goto out_einval;
		while (ptx_is(lx, "[")) {
			uint64_t dim;

			if (!ptx_next(lx) || !ptx_number(lx, PARAM_BYTES_MAX, &dim) ||
			    !ptx_next(lx) || !ptx_is(lx, "]") || !ptx_next(lx))
				goto out_einval;
			n *= dim;
			if (n > PARAM_BYTES_MAX)
				goto out_einval;
		}
		if (!align)
			align = elem;
		size = elem * n;
		offset = (uint32_t)((offset + align - 1) & ~(align - 1));
		if (offset + size > PARAM_BYTES_MAX)
			goto out_einval;
		if (count == pcap) {
			uint32_t ncap = pcap ? pcap * 2 : 8;
			struct cuimage_param *np = realloc(params, ncap * sizeof(*np));

			if (!np) {
				free(params);
				return -ENOMEM;
			}
			params = np;
			pcap = ncap;
		}
		params[count].offset = offset;
		params[count].size = (uint32_t)size;
		count++;
		offset += (uint32_t)size;
		if (ptx_is(lx, ",")) {
			if (!ptx_next(lx))
				goto out_einval;
		} else if (!ptx_is(lx, ")")) {
			goto out_einval;
		}
	}
	k->params = params;
	k->param_count = count;
	k->param_bytes = offset;
	return 0;
out_einval:
	free(params);
	return -EINVAL;
}

/* Skips to the ';' that ends a declaration. */
static void ptx_skip_statement(struct ptx_lex *lx)
{
	while (!ptx_is(lx, ";") && ptx_next(lx))
		;
}

/* After ".global" or ".const" at module scope. */
static int ptx_global_read(struct cuimage *img, struct ptx_lex *lx,
			   enum cuimage_space space, unsigned *cap)
{
	struct cuimage_global *g;
	uint64_t elem = 0, vec = 1, n = 1, size, filled = 0;
	bool managed = false, is_float = false;
	uint8_t *init = NULL;
	unsigned depth = 0;
	int rc;

	for (;;) {
		unsigned ts;

		if (!ptx_next(lx))
			return -EINVAL;
		if (ptx_is(lx, ".attribute")) {
			/* .attribute( .managed ) */
			while (ptx_next(lx) && !ptx_is(lx, ")")) {
				if (ptx_is(lx, ".managed"))
					managed = true;
			}
			if (!ptx_is(lx, ")"))
				return -EINVAL;
		} else if (ptx_is(lx, ".align")) {
			if (!ptx_next(lx))
				return -EINVAL;
		} else if (ptx_is(lx, ".v2")) {
			vec = 2;
		} else if (ptx_is(lx, ".v4")) {
			vec = 4;
		} else if (ptx_is(lx, ".v8")) {
			vec = 8;
		} else if ((ts = ptx_type_size(lx))) {
			elem = ts;
			is_float = lx->tok[1] == 'f';
		} else if (lx->tok[0] != '.') {
			break;
		}
	}
	if (ptx_punct(*lx->tok))
		return -EINVAL;
	if (!elem) {
		/* .texref, .samplerref, .surfref: handles, not data */
		ptx_skip_statement(lx);
		return 0;
	}
	rc = globals_push(img, cap);
	if (rc)
		return rc;
	g = &img->globals[img->global_count - 1];
	g->name = strndup(lx->tok, lx->len);
	if (!g->name)
		return -ENOMEM;
	g->space = space;
	g->managed = managed;
	elem *= vec;
	if (!ptx_next(lx))
		return -EINVAL;
	while (ptx_is(lx, "[")) {
		uint64_t dim;

		/* An empty dimension ("x[]") sizes from the initialiser: not handled. */
		if (!ptx_next(lx) || !ptx_number(lx, CUIMAGE_SIZE_MAX, &dim) ||
		    !ptx_next(lx) || !ptx_is(lx, "]") || !ptx_next(lx))
			return -EINVAL;
		n *= dim;
		if (n > CUIMAGE_SIZE_MAX)
			return -E2BIG;
	}
	size = elem * n;
	if (size > CUIMAGE_SIZE_MAX)
		return -E2BIG;
	g->size = size;
	if (ptx_is(lx, ";"))
		return 0;
	if (!ptx_is(lx, "="))
		return -EINVAL;
	if (size > PTX_INIT_MAX)
		return -E2BIG;
	init = calloc(1, size ? size : 1);
	if (!init)
		return -ENOMEM;
	g->init = init;
	/* Elements are laid out in order; vectors' lanes are elements too. */
	elem /= vec;
	while (ptx_next(lx) && !ptx_is(lx, ";")) {
		if (ptx_is(lx, "{")) {
			depth++;
		} else if (ptx_is(lx, "}")) {
			if (!depth)
				return -EINVAL;
			depth--;
		} else if (ptx_is(lx, ",")) {
			continue;
		} else if (filled + elem <= size && ptx_literal(lx, (unsigned)elem, is_float,
								init + filled)) {
			filled += elem;
		} else {
			/* An address (generic(sym), sym+4) or an overlong list. */
			free(init);
			g->init = NULL;
			g->init_unknown = true;
			ptx_skip_statement(lx);
			return 0;
		}
	}
	return ptx_is(lx, ";") && !depth ? 0 : -EINVAL;
}

static int ptx_read(struct cuimage *img)
{
	struct ptx_lex lx = {
		.p = (const char *)img->code,
		.end = (const char *)img->code + strnlen((const char *)img->code, img->code_size),
	};
	unsigned kcap = 0, gcap = 0, depth = 0, parens = 0;
	bool external = false;
	int rc;

	img->globals_own_init = true;
	while (ptx_next(&lx)) {
		if (ptx_is(&lx, "{")) {
			depth++;
		} else if (ptx_is(&lx, "}")) {
			if (!depth)
				return -EINVAL;
			depth--;
		} else if (depth) {
			continue;
		} else if (ptx_is(&lx, "(")) {
			parens++;
		} else if (ptx_is(&lx, ")")) {
			if (!parens)
				return -EINVAL;
			parens--;
		} else if (parens) {
			continue; /* a .func parameter list: ".param .ptr .global" */
		} else if (ptx_is(&lx, ";")) {
			external = false;
		} else if (ptx_is(&lx, ".extern")) {
			external = true;
		} else if (ptx_is(&lx, ".entry")) {
			if (external) {
				ptx_skip_statement(&lx);
				external = false;
				continue;
			}
			rc = ptx_entry_read(img, &lx, &kcap);
			if (rc)
				return rc;
			/* The entry's name/params are read; its body braces, or a
			 * ";" of a prototype, are handled by the main loop. */
			if (ptx_is(&lx, "{"))
				depth++;
		} else if (ptx_is(&lx, ".global") || ptx_is(&lx, ".const")) {
			enum cuimage_space space = lx.tok[1] == 'g' ? CUIMAGE_SPACE_GLOBAL :
							      CUIMAGE_SPACE_CONSTANT;

			if (external) {
				/* a declaration: the storage is in another module */
				ptx_skip_statement(&lx);
				external = false;
				continue;
			}
			rc = ptx_global_read(img, &lx, space, &gcap);
			if (rc)
				return rc;
			external = false;
		}
	}
	return depth ? -EINVAL : 0;
}

/* ---- the image ---- */

void cuimage_free(struct cuimage *img)
{
	if (!img)
		return;
	for (unsigned i = 0; i < img->kernel_count; i++) {
		free((char *)img->kernels[i].name);
		free((struct cuimage_param *)img->kernels[i].params);
	}
	for (unsigned i = 0; i < img->global_count; i++) {
		const struct cuimage_global *g = &img->globals[i];

		free((char *)g->name);
		if (img->globals_own_init)
			free((uint8_t *)g->init);
	}
	free(img->kernels);
	free(img->globals);
	free(img->entries);
	free(img->code);
	free(img);
}

int cuimage_parse(const void *data, size_t size, unsigned target_sm,
		  struct cuimage **out)
{
	const uint8_t *d = data;
	struct cuimage *img;
	struct cuimage_entry whole = {0};
	int sel, rc;

	if (!d || !size || !out)
		return -EINVAL;
	if (size > CUIMAGE_SIZE_MAX)
		return -E2BIG;
	img = calloc(1, sizeof(*img));
	if (!img)
		return -ENOMEM;
	img->format = cuimage_format_detect(d, size);
	switch (img->format) {
	case CUIMAGE_FORMAT_FATBIN:
		rc = fatbin_entries_read(img, d, size);
		if (rc)
			goto out_free;
		break;
	case CUIMAGE_FORMAT_ELF:
	case CUIMAGE_FORMAT_PTX:
		whole.kind = img->format == CUIMAGE_FORMAT_ELF ? CUIMAGE_ENTRY_CUBIN :
								 CUIMAGE_ENTRY_PTX;
		whole.stored_size = whole.size = size;
		if (img->format == CUIMAGE_FORMAT_ELF && size >= ELF_EHDR_SIZE)
			whole.sm = elf_sm(d);
		img->entries = malloc(sizeof(whole));
		if (!img->entries) {
			rc = -ENOMEM;
			goto out_free;
		}
		img->entries[0] = whole;
		img->entry_count = 1;
		break;
	default:
		/* A wrapper holds a pointer: the caller must unwrap it. */
		rc = -EINVAL;
		goto out_free;
	}
	if (img->format == CUIMAGE_FORMAT_FATBIN) {
		sel = entry_select(img, target_sm);
		if (sel < 0) {
			rc = sel;
			goto out_free;
		}
	} else {
		sel = 0; /* a bare cubin or PTX is read whatever the target */
	}
	img->selected = (unsigned)sel;
	rc = entry_load(img, d, &img->entries[sel]);
	if (rc)
		goto out_free;
	if (img->entries[sel].kind == CUIMAGE_ENTRY_CUBIN) {
		rc = cubin_read(img);
	} else {
		/* PTX text ends at its NUL; the padding after it is not code. */
		img->code_size = strnlen((const char *)img->code, img->code_size) + 1;
		rc = ptx_read(img);
	}
	if (rc)
		goto out_free;
	*out = img;
	return 0;
out_free:
	pr_debug("image of %zu bytes rejected: %s", size, strerror(-rc));
	cuimage_free(img);
	return rc;
}

enum cuimage_format cuimage_format(const struct cuimage *img)
{
	return img->format;
}

unsigned cuimage_entry_count(const struct cuimage *img)
{
	return img->entry_count;
}

const struct cuimage_entry *cuimage_entry(const struct cuimage *img, unsigned i)
{
	return i < img->entry_count ? &img->entries[i] : NULL;
}

unsigned cuimage_entry_selected(const struct cuimage *img)
{
	return img->selected;
}

const void *cuimage_code(const struct cuimage *img, size_t *size_out)
{
	if (size_out)
		*size_out = img->code_size;
	return img->code;
}

unsigned cuimage_kernel_count(const struct cuimage *img)
{
	return img->kernel_count;
}

const struct cuimage_kernel *cuimage_kernel(const struct cuimage *img, unsigned i)
{
	return i < img->kernel_count ? &img->kernels[i] : NULL;
}

const struct cuimage_kernel *cuimage_kernel_find(const struct cuimage *img,
						 const char *name)
{
	for (unsigned i = 0; name && i < img->kernel_count; i++) {
		if (!strcmp(img->kernels[i].name, name))
			return &img->kernels[i];
	}
	return NULL;
}

unsigned cuimage_global_count(const struct cuimage *img)
{
	return img->global_count;
}

const struct cuimage_global *cuimage_global(const struct cuimage *img, unsigned i)
{
	return i < img->global_count ? &img->globals[i] : NULL;
}

const struct cuimage_global *cuimage_global_find(const struct cuimage *img,
						 const char *name)
{
	for (unsigned i = 0; name && i < img->global_count; i++) {
		if (!strcmp(img->globals[i].name, name))
			return &img->globals[i];
	}
	return NULL;
}
