/* A fast 64-bit checksum for data this program wrote itself and reads back
 * (the far tier's blocks, eval kl's reference logits): it detects truncation,
 * stray writes and bit flips, it is not a cryptographic hash. FNV-1a over
 * 8-byte words with an extra shift-xor per word (so that a change in the high
 * bytes of a word reaches the low bits), the tail byte by byte; the seed is
 * mixed into the start value, so the same bytes at two places (a file offset,
 * a window index) give different sums. */
#ifndef KVC_BASE_HASH_H
#define KVC_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t kvc_hash64(const void *p, size_t n, uint64_t seed);

#endif
