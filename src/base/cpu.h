/* CPU feature detection and the active ISA level (see kvc_active_isa in
 * kvcomp.h). Kernel tables call kvc_active_isa() once at start-up and register
 * the AVX2 or AVX-512 variants over their scalar references. */
#ifndef KVC_BASE_CPU_H
#define KVC_BASE_CPU_H

#include "kvcomp.h"

/* The highest level this CPU (and OS, via XCR0) supports, ignoring KVC_ISA. */
kvc_isa kvc_cpu_isa(void);

/* 1 when BMI2's PDEP/PEXT are fast on this CPU: every Intel CPU with BMI2
 * and AMD from Zen 3 (family 19h) on; AMD Zen 1 and 2 (families 17h, 18h)
 * microcode them. KVC_PDEP=0 or 1 overrides the answer (comparisons, tests). */
int kvc_cpu_fast_pdep(void);

#endif
