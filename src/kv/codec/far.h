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
    uint64_t read;     /* bytes read back from the file (whole blocks) */
    double read_s;     /* seconds spent reading (file, verification, near buffer), summed over threads */
    uint64_t reused;   /* bytes of attention reads served by the near buffer instead of the file */
    uint64_t near;     /* bytes held in the near buffer now */
} kvc_far_stats;
void kvc_far_stats_get(kvc_far *f, kvc_far_stats *out);

/* The near buffer (SentKVCompress §4.2.2's reuse, for the far tier): when on,
 * the blocks that attention reads (q·k, p·v) stay in RAM after the read, and
 * later reads of them are served from RAM; the method drops the blocks that
 * its current selection no longer covers with kvc_far_near_keep before the
 * step's attention, so the buffer holds the previous step's selection and
 * only newly selected sentences are read from the file. Blocks in RAM were
 * verified when read; a later change of the file under them is seen when they
 * are read again. Decoding (reference attention) neither uses nor fills it. */
void kvc_far_set_near(kvc_far *f, int on);

/* Keeps in the near buffer only the blocks of the blob (of codec c) that
 * overlap the sorted row ranges r[0..nr); nr = 0 drops all. Thread-safe. */
void kvc_far_near_keep(const kvc_codec *c, void *blob, const kvc_range *r, int nr);

extern const kvc_codec_ops kvc_codec_far_f16;

#endif
