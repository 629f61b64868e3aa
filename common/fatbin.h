/* CUDA device images: fatbin containers, cubin ELF files and PTX text.
 *
 * Two jobs, for two kinds of caller:
 *
 *  - Measuring (guest shim).  cuModuleLoadData and friends get a bare pointer;
 *    cuimage_measure() finds how many bytes the image spans from its own
 *    headers, reading nothing past @limit.  It never follows pointers, so it
 *    is safe on any bytes given a true bound.  A cudart fatbin *wrapper*
 *    (__fatBinC_Wrapper_t) holds a pointer to the fatbin: the caller, who
 *    trusts that pointer, unwraps it with cuimage_wrapper_data() first.
 *
 *  - Parsing (sim backend, ckpt inspect).  cuimage_parse() takes untrusted
 *    bytes, lists the entries of a fatbin, picks the one that suits a target
 *    compute capability, decompresses it (zstd or LZ4, as nvcc 13 emits) and
 *    reads its kernels (name, parameter offsets and sizes) and its global
 *    variables (name, size, initial bytes).  Cubins are read from their
 *    .nv.info records and symbol table; PTX from its .entry and
 *    .global/.const declarations.
 *
 * Errors are negative errno values: -EINVAL malformed or truncated input,
 * -ENOMEM, -ENOTSUP an unknown compression or ELF flavour, -ENOENT no entry
 * usable on the requested target, -E2BIG a size over CUIMAGE_SIZE_MAX.
 *
 * Threading: no global state.  A struct cuimage is immutable after parse and
 * may be read from several threads at once; free it from one.
 */
#ifndef TERN_FATBIN_H
#define TERN_FATBIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* No image, and no decompressed entry, may be larger than this. */
#define CUIMAGE_SIZE_MAX (1ull << 30)

enum cuimage_format {
	CUIMAGE_FORMAT_UNKNOWN = 0,
	CUIMAGE_FORMAT_FATBIN,  /* magic 0xBA55ED50 */
	CUIMAGE_FORMAT_WRAPPER, /* __fatBinC_Wrapper_t, magic 0x466243B1 */
	CUIMAGE_FORMAT_ELF,     /* cubin */
	CUIMAGE_FORMAT_PTX,     /* NUL-terminated text */
};

/* What @image starts with.  Compares byte by byte and stops at the first
 * mismatch, so a short NUL-terminated PTX string is never over-read; reads at
 * most @avail bytes.  Anything that is not a known magic is taken as PTX,
 * which is what the driver does too. */
enum cuimage_format cuimage_format_detect(const void *image, size_t avail);

/* Size in bytes of the image at @image: the fatbin header and its entries, the
 * extent of an ELF file's headers and sections, or a PTX string with its NUL.
 * Reads only inside [image, image + limit).  Returns 0, -EINVAL (no complete
 * image inside @limit, or a wrapper: unwrap it first), -E2BIG (headers claim
 * more than CUIMAGE_SIZE_MAX). */
int cuimage_measure(const void *image, size_t limit, size_t *size_out);

/* The fatbin a cudart wrapper points at, or NULL when @image is not a wrapper
 * of a known version.  Dereferences the wrapper's pointer field only through
 * the returned value: call it only on memory of the calling process. */
const void *cuimage_wrapper_data(const void *image);

enum cuimage_entry_kind {
	CUIMAGE_ENTRY_OTHER = 0,
	CUIMAGE_ENTRY_PTX = 1,
	CUIMAGE_ENTRY_CUBIN = 2,
};

enum cuimage_compression {
	CUIMAGE_COMPRESSION_NONE = 0,
	CUIMAGE_COMPRESSION_ZSTD,
	CUIMAGE_COMPRESSION_LZ4,
	CUIMAGE_COMPRESSION_UNKNOWN, /* flags name both: refused when selected */
};

/* One code object of the image.  A bare cubin or PTX image has one entry. */
struct cuimage_entry {
	enum cuimage_entry_kind kind;
	unsigned sm;                /* 90 for sm_90 / compute_90 */
	bool arch_specific;         /* sm_90a: runs on exactly that arch */
	bool family_specific;       /* sm_100f */
	enum cuimage_compression compression;
	uint64_t offset;            /* of its payload, from the image start */
	uint64_t stored_size;       /* payload bytes in the image */
	uint64_t size;              /* bytes once decompressed */
	uint64_t flags;             /* raw fatbin entry flags, 0 outside fatbins */
};

struct cuimage_param {
	uint32_t offset;            /* in the parameter buffer */
	uint32_t size;
};

struct cuimage_kernel {
	const char *name;           /* mangled, as cuModuleGetFunction wants it */
	uint32_t param_count;
	uint32_t param_bytes;       /* size of the whole parameter buffer */
	const struct cuimage_param *params;  /* param_count, by ordinal */
};

enum cuimage_space {
	CUIMAGE_SPACE_GLOBAL = 1,   /* __device__ */
	CUIMAGE_SPACE_CONSTANT = 2, /* __constant__ */
};

struct cuimage_global {
	const char *name;
	uint64_t size;
	const uint8_t *init;        /* size bytes, or NULL: zero-initialised */
	enum cuimage_space space;
	bool managed;               /* __managed__ */
	bool init_unknown;          /* PTX initialiser not understood (e.g. an
	                             * address); init is NULL but not zeros */
};

struct cuimage;

/* Parse @size bytes at @data (a fatbin, cubin or PTX; not a wrapper) and read
 * the entry chosen for @target_sm (e.g. 90), or the best entry when 0:
 * a cubin of exactly that arch, else the highest cubin of the same major
 * version below it (not arch-specific ones), else the highest PTX at or below
 * it.  The bytes are copied as needed; @data may be freed after the call.
 * On success *@out owns everything the accessors return. */
int cuimage_parse(const void *data, size_t size, unsigned target_sm,
		  struct cuimage **out);

/* Accepts NULL. */
void cuimage_free(struct cuimage *img);

enum cuimage_format cuimage_format(const struct cuimage *img);

unsigned cuimage_entry_count(const struct cuimage *img);
/* NULL when @i is out of range. */
const struct cuimage_entry *cuimage_entry(const struct cuimage *img, unsigned i);
/* Index of the entry that was read. */
unsigned cuimage_entry_selected(const struct cuimage *img);

/* The selected entry's bytes, decompressed (a cubin, or PTX with its NUL). */
const void *cuimage_code(const struct cuimage *img, size_t *size_out);

unsigned cuimage_kernel_count(const struct cuimage *img);
const struct cuimage_kernel *cuimage_kernel(const struct cuimage *img, unsigned i);
const struct cuimage_kernel *cuimage_kernel_find(const struct cuimage *img,
						 const char *name);

unsigned cuimage_global_count(const struct cuimage *img);
const struct cuimage_global *cuimage_global(const struct cuimage *img, unsigned i);
const struct cuimage_global *cuimage_global_find(const struct cuimage *img,
						 const char *name);

#endif
