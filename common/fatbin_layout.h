/* Byte layouts of CUDA images, shared by the measurer (which the guest shim
 * links, without zstd) and the parser. Internal to common/. */
#ifndef TERN_FATBIN_LAYOUT_H
#define TERN_FATBIN_LAYOUT_H

#include "le.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_VERSION 1
#define FATBIN_HEADER_SIZE 16
#define FATBIN_ENTRY_HEADER_MIN 64
#define FATBIN_ENTRY_PTX 1
#define FATBIN_ENTRY_ELF 2
#define FATBIN_FLAG_LZ4 0x2000u
#define FATBIN_FLAG_ZSTD 0x8000u
#define FATBIN_FLAG_ARCH_SPECIFIC 0x100000u
#define FATBIN_FLAG_FAMILY 0x200000u

#define WRAPPER_MAGIC 0x466243B1u
#define WRAPPER_VERSION_MIN 1
#define WRAPPER_VERSION_MAX 2

#define ELF_EHDR_SIZE 64
#define ELF_SHDR_SIZE 64
#define ELF_PHDR_SIZE 56
#define ELF_SYM_SIZE 24
#define EM_CUDA 190
#define SHT_SYMTAB 2
#define SHT_NOBITS 8
#define SHT_CUDA_INFO 0x70000000u
#define SHT_CUDA_GLOBAL 0x70000007u /* nobits, in relocatable cubins */
#define SHT_CUDA_SHARED 0x7000000au /* nobits, in relocatable cubins */
#define SHN_LORESERVE 0xff00u
#define STT_OBJECT 1
#define STT_FUNC 2
#define STT_CUDA_OBJECT 13
#define STO_CUDA_MANAGED 0x04
#define STO_CUDA_ENTRY 0x10

#define EIFMT_SVAL 4
#define EIATTR_PARAM_CBANK 0x0a
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_KPARAM_INFO_V2 0x45 /* seen for parameters over 16 KiB */

/* A kernel's parameter buffer is at most 32764 bytes (CUDA 12.1+). */
#define PARAM_BYTES_MAX 0xffffu
/* PTX initialisers are expanded into a buffer: bound what text can make us
 * allocate. */
#define PTX_INIT_MAX (64u << 20)

__attribute__((unused)) static const uint8_t magic_fatbin[4] = {0x50, 0xed, 0x55, 0xba};
__attribute__((unused)) static const uint8_t magic_wrapper[4] = {0xb1, 0x43, 0x62, 0x46};
__attribute__((unused)) static const uint8_t magic_elf[4] = {0x7f, 'E', 'L', 'F'};

/* True when [off, off + len) lies inside [0, size). */
static inline bool range_ok(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* Byte by byte, so a short string that differs early is not over-read. */
static inline bool prefix_is(const uint8_t *p, size_t avail, const uint8_t magic[4])
{
	for (unsigned i = 0; i < 4; i++) {
		if (i >= avail || p[i] != magic[i])
			return false;
	}
	return true;
}

/* Sections that occupy no file bytes. */
static inline bool elf_type_nobits(uint32_t type)
{
	return type == SHT_NOBITS || type == SHT_CUDA_GLOBAL || type == SHT_CUDA_SHARED;
}

#endif
