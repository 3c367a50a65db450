/* The entry points shared by the SIMD kernels of the packed format
 * (src/kernels/<isa>/kv_packed_<isa>.c): each file defines the bodies
 * qk_heads(k, n, q, G, ldq, s, lds, g) and pv_heads(v, n, p, G, ldp, o, ldo, g)
 * for compile-time head counts G <= 8 and group sizes g, and this macro
 * defines the kvc_packed_kernels functions that cut the heads into groups of
 * up to 8, p·v's tokens into runs of PV_TOKENS, and dispatch each (G, g) to
 * its constant body (so the accumulators stay in registers and the masks need
 * no division). */
#ifndef KVC_KV_CODEC_PACKED_DISPATCH_H
#define KVC_KV_CODEC_PACKED_DISPATCH_H

#include "kv/codec/packed.h"

#define KVC_PACKED_BY_HEADS(body, g, ...)                                                          \
    switch (gb) {                                                                                  \
    case 1: body(__VA_ARGS__, 1, g); break;                                                        \
    case 2: body(__VA_ARGS__, 2, g); break;                                                        \
    case 3: body(__VA_ARGS__, 3, g); break;                                                        \
    case 4: body(__VA_ARGS__, 4, g); break;                                                        \
    case 5: body(__VA_ARGS__, 5, g); break;                                                        \
    case 6: body(__VA_ARGS__, 6, g); break;                                                        \
    case 7: body(__VA_ARGS__, 7, g); break;                                                        \
    default: body(__VA_ARGS__, 8, g); break;                                                       \
    }
#define KVC_PACKED_BY_GROUP(body, ...)                                                             \
    switch (group) {                                                                               \
    case 1: KVC_PACKED_BY_HEADS(body, 1, __VA_ARGS__) break;                                       \
    case 2: KVC_PACKED_BY_HEADS(body, 2, __VA_ARGS__) break;                                       \
    default: KVC_PACKED_BY_HEADS(body, 4, __VA_ARGS__) break;                                      \
    }
#define KVC_PACKED_QK_CALL(k, n, q, ldq, s, lds, G, g) qk_heads(k, n, q, G, ldq, s, lds, g)
#define KVC_PACKED_PV_CALL(v, n, p, ldp, o, ldo, G, g) pv_heads(v, n, p, G, ldp, o, ldo, g)

#define KVC_PACKED_ENTRY_POINTS(qk_fn, pv_fn)                                                      \
    static void qk_fn(const kvc_packed_view *k, int n, const float *q, int G, int ldq, float *s,   \
                      int lds) {                                                                   \
        const int group = k->group;                                                                \
        for (int h0 = 0; h0 < G; h0 += 8) {                                                        \
            int gb = G - h0 < 8 ? G - h0 : 8;                                                      \
            KVC_PACKED_BY_GROUP(KVC_PACKED_QK_CALL, k, n, q + (size_t)h0 * ldq, ldq,               \
                                s + (size_t)h0 * lds, lds)                                         \
        }                                                                                          \
    }                                                                                              \
    static void pv_fn(const kvc_packed_view *v, int n, const float *p, int G, int ldp, float *o,   \
                      int ldo) {                                                                   \
        const int group = v->group;                                                                \
        for (int t0 = 0; t0 < n; t0 += PV_TOKENS) {                                                \
            kvc_packed_view w = *v;                                                                \
            w.bits += (size_t)t0 * v->nw;                                                          \
            w.vals += (size_t)t0 * v->nv;                                                          \
            int nt = n - t0 < PV_TOKENS ? n - t0 : PV_TOKENS;                                      \
            for (int h0 = 0; h0 < G; h0 += 8) {                                                    \
                int gb = G - h0 < 8 ? G - h0 : 8;                                                  \
                KVC_PACKED_BY_GROUP(KVC_PACKED_PV_CALL, &w, nt, p + t0 + (size_t)h0 * ldp, ldp,    \
                                    o + (size_t)h0 * ldo, ldo)                                     \
            }                                                                                      \
        }                                                                                          \
    }

#endif
