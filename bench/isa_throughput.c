/* Throughput of the SIMD instructions a compressed-attention kernel can be
 * built from, on this CPU, in instructions per core clock: vpdpbusd (VNNI
 * u8 x s8 dot products of 4, the integer K/V kernels), vpexpandw (scatter a
 * bitmap's nonzeros into their lanes), vgf2p8affineqb (GFNI: bit-matrix
 * transforms of bytes, e.g. unpack of 1-3 bit codes), vpermb (VBMI byte
 * shuffles, e.g. nibble or code lookups), and vfmadd231ps / vcvtph2ps for
 * scale; on every CPU also the AVX2 instructions the AVX2 kernels use
 * (ymm FMA, VCVTPH2PS, PSHUFB, PMADDUBSW, PMADDWD, PERMD, PSRLVD, 256-bit and
 * broadcast loads, and the bitmap kernels' broadcast + PSHUFB piece); the
 * AVX-512 set runs only where the CPU has AVX-512F. Each loop runs 12
 * independent chains, so it measures throughput,
 * not latency. The core clock is measured with a chain of dependent
 * multiplies (3 cycles each), so the result does not depend on the TSC rate
 * or on boost; the loops run for ~0.1 s each and the best of 5 is kept.
 *
 * Build and run (a measurement, not a test; not part of the CMake build):
 *   gcc -O2 -march=native bench/isa_throughput.c -o /tmp/isa_throughput
 *   /tmp/isa_throughput            # prints one line per instruction
 *
 * Then, for each cache format: bytes per token per KV head B (from
 * `kvcomp bench attn`, MiB/layer / (ctx x kv heads)) and the read bandwidth
 * BW give the cycle budget per token per KV head that keeps a kernel
 * memory-bound on c cores at f GHz: c * f * B / BW. Pass B values to print
 * that table:  /tmp/isa_throughput --budget BW_GBs CORES B1 [B2 ...] */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ITERS = 4000000, REPS = 5 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Core clock in GHz: ITERS x 8 dependent 64-bit multiplies of 3 cycles
 * latency. Not adds of an immediate: Golden Cove and later fold chains of
 * those at rename (an Intel Xeon of that kind ran them at 9.6 "GHz"). */
static double core_ghz(void) {
    double best = 1e9;
    for (int r = 0; r < REPS; r++) {
        uint64_t x = (uint64_t)r;
        double t0 = now_s();
        for (long i = 0; i < ITERS; i++)
            __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
                             "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0"
                             : "+r"(x));
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return (double)ITERS * 8 * 3 / best / 1e9;
}

/* 12 independent zmm chains of one instruction; the asm keeps the compiler
 * from merging or removing them. OP is the AT&T text with %%zmm0..11 as the
 * destination via the X macro below. */
#define CHAINS(OP)                                                                             \
    __asm__ volatile(OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11) \
                     ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",       \
                     "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "memory")

#define DPBUSD(i) "vpdpbusd %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define EXPANDW(i) "vpexpandw %%zmm12, %%zmm" #i "%{%%k1%}\n\t"
#define GF2P8(i) "vgf2p8affineqb $0, %%zmm12, %%zmm" #i ", %%zmm" #i "\n\t"
#define PERMB(i) "vpermb %%zmm" #i ", %%zmm12, %%zmm" #i "\n\t"
#define FMA(i) "vfmadd231ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define CVTPH(i) "vcvtph2ps %%ymm12, %%zmm" #i "\n\t"
#define MADDUBS(i) "vpmaddubsw %%zmm12, %%zmm" #i ", %%zmm" #i "\n\t"

/* The AVX2 instructions the AVX2 kernels are built from (ymm, 12 chains). */
#define FMA_Y(i) "vfmadd231ps %%ymm12, %%ymm13, %%ymm" #i "\n\t"
#define CVTPH_Y(i) "vcvtph2ps %%xmm12, %%ymm" #i "\n\t"
#define PSHUFB_Y(i) "vpshufb %%ymm12, %%ymm" #i ", %%ymm" #i "\n\t"
#define MADDUBS_Y(i) "vpmaddubsw %%ymm12, %%ymm" #i ", %%ymm" #i "\n\t"
#define MADDWD_Y(i) "vpmaddwd %%ymm12, %%ymm" #i ", %%ymm" #i "\n\t"
#define PERMD_Y(i) "vpermd %%ymm" #i ", %%ymm12, %%ymm" #i "\n\t"
#define SRLVD_Y(i) "vpsrlvd %%ymm12, %%ymm" #i ", %%ymm" #i "\n\t"
/* Loads from one 64-byte line of L1 (%0), 12 per round. */
static _Alignas(64) uint8_t line[64];
#define LOADS(OP)                                                                              \
    __asm__ volatile(OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11) \
                     ::"r"(line)                                                               \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                       "xmm9", "xmm10", "xmm11", "memory")
#define LOAD_Y(i) "vmovups (%0), %%ymm" #i "\n\t"
#define BCAST128_Y(i) "vbroadcasti128 (%0), %%ymm" #i "\n\t"
/* The bitmap kernels' bf16 piece: a broadcast load and a PSHUFB with a
 * pattern from memory (counted as one per pair). */
#define PIECE_Y(i) "vbroadcasti128 16(%0), %%ymm" #i "\n\tvpshufb (%0), %%ymm" #i ", %%ymm" #i "\n\t"

typedef void (*loop_fn)(void);
static void l_dpbusd(void) { for (int i = 0; i < ITERS; i++) CHAINS(DPBUSD); }
static void l_expandw(void) { for (int i = 0; i < ITERS; i++) CHAINS(EXPANDW); }
static void l_gf2p8(void) { for (int i = 0; i < ITERS; i++) CHAINS(GF2P8); }
static void l_permb(void) { for (int i = 0; i < ITERS; i++) CHAINS(PERMB); }
static void l_fma(void) { for (int i = 0; i < ITERS; i++) CHAINS(FMA); }
static void l_cvtph(void) { for (int i = 0; i < ITERS; i++) CHAINS(CVTPH); }
static void l_maddubs(void) { for (int i = 0; i < ITERS; i++) CHAINS(MADDUBS); }

static void l_fma_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(FMA_Y); }
static void l_cvtph_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(CVTPH_Y); }
static void l_pshufb_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(PSHUFB_Y); }
static void l_maddubs_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(MADDUBS_Y); }
static void l_maddwd_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(MADDWD_Y); }
static void l_permd_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(PERMD_Y); }
static void l_srlvd_y(void) { for (int i = 0; i < ITERS; i++) CHAINS(SRLVD_Y); }
static void l_load_y(void) { for (int i = 0; i < ITERS; i++) LOADS(LOAD_Y); }
static void l_bcast128_y(void) { for (int i = 0; i < ITERS; i++) LOADS(BCAST128_Y); }
static void l_piece_y(void) { for (int i = 0; i < ITERS; i++) LOADS(PIECE_Y); }

/* Zeroed sources and an every-other-lane mask for the AVX-512 loops (its own
 * target, so that the file also builds for CPUs without AVX-512). */
__attribute__((target("avx512f"))) static void init_avx512(void) {
    __asm__ volatile("vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13\n\t"
                     "kxnorw %%k1, %%k1, %%k1\n\tmovl $0x5555, %%eax\n\tkmovw %%eax, %%k1" ::
                         : "xmm12", "xmm13", "eax", "k1");
}

static double per_cycle(loop_fn f, double ghz) {
    if (__builtin_cpu_supports("avx512f"))
        init_avx512();
    else
        __asm__ volatile("vpxor %%ymm12, %%ymm12, %%ymm12\n\tvpxor %%ymm13, %%ymm13, %%ymm13" ::
                             : "xmm12", "xmm13");
    double best = 1e9;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        f();
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return (double)ITERS * 12 / (best * ghz * 1e9);
}

int main(int argc, char **argv) {
    double ghz = core_ghz();
    printf("core clock (dependent multiplies): %.2f GHz\n", ghz);
    struct { const char *name; loop_fn f; } ins[] = {
        {"vpdpbusd zmm (VNNI)", l_dpbusd},       {"vpexpandw zmm{k} (VBMI2)", l_expandw},
        {"vgf2p8affineqb zmm (GFNI)", l_gf2p8},  {"vpermb zmm (VBMI)", l_permb},
        {"vfmadd231ps zmm", l_fma},              {"vcvtph2ps ymm->zmm", l_cvtph},
        {"vpmaddubsw zmm", l_maddubs},
    };
    struct { const char *name; loop_fn f; } ins2[] = {
        {"vfmadd231ps ymm", l_fma_y},            {"vcvtph2ps xmm->ymm", l_cvtph_y},
        {"vpshufb ymm", l_pshufb_y},             {"vpmaddubsw ymm", l_maddubs_y},
        {"vpmaddwd ymm", l_maddwd_y},            {"vpermd ymm", l_permd_y},
        {"vpsrlvd ymm", l_srlvd_y},              {"vmovups ymm (L1 load)", l_load_y},
        {"vbroadcasti128 (L1 load)", l_bcast128_y},
        {"vbroadcasti128+vpshufb m", l_piece_y},
    };
    if (__builtin_cpu_supports("avx512f"))
        for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
            printf("%-28s %.2f per cycle\n", ins[i].name, per_cycle(ins[i].f, ghz));
    for (size_t i = 0; i < sizeof ins2 / sizeof ins2[0]; i++)
        printf("%-28s %.2f per cycle\n", ins2[i].name, per_cycle(ins2[i].f, ghz));
    if (argc >= 5 && argv[1][0] == '-') {
        double bw = atof(argv[2]), cores = atof(argv[3]);
        printf("cycle budget per token per KV head at %.1f GB/s on %.0f cores:\n", bw, cores);
        for (int a = 4; a < argc; a++) {
            double b = atof(argv[a]);
            printf("  %7.1f B/token/kv-head: %6.1f cycles\n", b, cores * ghz * b / bw);
        }
    }
    return 0;
}
