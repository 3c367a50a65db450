/* Dense f16 chunks made of whole selection units (Quest pages, SentKV
 * sentences), shared by the quest and sentkv methods. Leaving tokens are
 * appended to the stream's last chunk while it has room for whole units
 * (`block` tokens), otherwise a new chunk is started; with `indexed` every
 * chunk carries a min/max bound index (select/minmax.h) with one entry per
 * unit, so the driver can score and pick units; without it the chunks are
 * plain dense storage (the dense first layers of quest). A unit is never
 * split across chunks; a unit longer than `block` gets a chunk of its own.
 * Units can also be encoded once into a chunk of another codec (the far
 * tier's), with the same index. */
#ifndef KVC_KV_METHOD_UNIT_CHUNKS_H
#define KVC_KV_METHOD_UNIT_CHUNKS_H

#include "kv/stream.h"

/* `indexed`: no index (KVC_UNITS_PLAIN), or KVC_UNITS_INDEXED with the
 * index's flags (minmax.h KVC_MM_*: its format and how heads combine) or-ed
 * in; a unit joins a chunk only if the chunk's index has the same flags. */
enum { KVC_UNITS_PLAIN = 0, KVC_UNITS_INDEXED = 0x100 };

/* k, v [sum len][s->dim], positions pos0.. (consecutive), unit lengths
 * len[0..n_units) (each >= 1). New chunks get `flags`. Bumps s->version. */
kvc_status kvc_unit_chunks_append(kvc_stream *s, int block, int indexed, uint32_t flags,
                                  const float *k, const float *v, int64_t pos0, const int *len,
                                  int n_units);

/* One new chunk of the units, encoded with codec c for K and V (a codec that
 * is not appendable: the far tier), with a min/max index of the units (as
 * `indexed` says, which must ask for one); inserted at the end of the stream
 * with `flags`. */
kvc_status kvc_unit_chunks_encode(kvc_stream *s, const kvc_codec *c, int indexed, uint32_t flags, const float *k,
                                  const float *v, int64_t pos0, const int *len, int n_units);

#endif
