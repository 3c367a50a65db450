/* CPU feature detection and the active ISA level (see kvc_active_isa in
 * kvcomp.h). Kernel tables call kvc_active_isa() once at start-up and register
 * the AVX2 or AVX-512 variants over their scalar references. */
#ifndef KVC_BASE_CPU_H
#define KVC_BASE_CPU_H

#include "kvcomp.h"

/* The highest level this CPU (and OS, via XCR0) supports, ignoring KVC_ISA. */
kvc_isa kvc_cpu_isa(void);

#endif
