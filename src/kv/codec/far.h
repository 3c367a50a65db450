/* The far tier (SentKVCompress's GPU-CPU offload, on a CPU: RAM and a file):
 * a far store is one file on local disk holding dense f16 K or V rows of
 * sealed chunks, written once when a chunk is built and read with pread when
 * attention needs them, so that a context larger than the memory a user
 * allows lives mostly on disk while the selection index, the sinks, the hot
 * window stay in RAM.
 *
 * File format: an 8-byte header "KVCFAR01", then regions appended one after
 * another, one per blob (a chunk's K or its V): n rows of dim f16 values,
 * little-endian, row-major. The file carries no index: each blob, in RAM,
 * knows its region (offset, rows) and the checksum of every block of
 * KVC_FAR_BLOCK bytes of it (the last block may be short). Every read covers
 * whole blocks and verifies them; a short read (truncated file), an I/O error
 * or a checksum mismatch (altered file) is never used: the affected tokens
 * score -inf (qk), add nothing (pv) or decode as zeros, and the store records
 * the first failure, which kvc_far_take_error returns (the cache reports it
 * as the attention's error). Checksum: 64-bit FNV-1a over the block's 8-byte
 * words (a shift-xor after each multiply), seeded with the block's file
 * offset (a block copied elsewhere in the file does not verify).
 *
 * Blobs of this codec (kvc_codec_far_f16, cfg = the kvc_far) are not
 * appendable. Thread-safe: regions are reserved with an atomic add and
 * written with pwrite; reads use pread into per-call scratch. */
#ifndef KVC_KV_CODEC_FAR_H
#define KVC_KV_CODEC_FAR_H

#include <stdint.h>

#include "kv/codec/codec.h"

enum { KVC_FAR_BLOCK = 1024 };

typedef struct kvc_far kvc_far;

/* Creates (or truncates) the file at path, mode 0600, and writes the header. */
kvc_status kvc_far_open(const char *path, kvc_far **out);
/* Closes the file (the file stays on disk). */
void kvc_far_close(kvc_far *f);

/* The first read failure since the last call (KVC_ERR_FORMAT for a checksum
 * mismatch or a short read, KVC_ERR_IO for a read error, with a message
 * naming the file, offset and block), and clears it; KVC_OK if none. */
kvc_status kvc_far_take_error(kvc_far *f);

typedef struct kvc_far_stats {
    uint64_t stored;   /* bytes written (header included) */
    uint64_t read;     /* bytes read back (whole blocks) */
    double read_s;     /* seconds spent in pread and verification, summed over threads */
} kvc_far_stats;
void kvc_far_stats_get(kvc_far *f, kvc_far_stats *out);

/* The 64-bit checksum of a block at file offset off. */
uint64_t kvc_far_checksum(const void *p, size_t n, uint64_t off);

extern const kvc_codec_ops kvc_codec_far_f16;

#endif
