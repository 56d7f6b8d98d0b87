/* sha256.h: SHA-256 (FIPS 180-4), for the cubin cache keys and the fatbin stamps. */
#ifndef MMAEMU_SHA256_H
#define MMAEMU_SHA256_H

#include <stddef.h>

#include "kernels/mmaemu_base.h" /* fixed-width types; refuses fast math */

#pragma GCC visibility push(hidden)

typedef struct {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t used;
} mm_sha256;

void mm_sha256_init(mm_sha256* c);
void mm_sha256_update(mm_sha256* c, const void* data, size_t n);
/* Finishes the hash and writes it as 64 hex digits and a NUL. */
void mm_sha256_hex(mm_sha256* c, char out[65]);
/* A named, length-prefixed field (name NUL, decimal length NUL, bytes), so that concatenations
 * cannot collide; setup.py stamps fatbins with the same encoding. */
void mm_sha256_field(mm_sha256* c, const char* name, const void* data, size_t n);

#pragma GCC visibility pop

#endif /* MMAEMU_SHA256_H */
