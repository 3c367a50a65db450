/* Peak memory of this process, for the eval and bench reports: the peak
 * resident set size (VmHWM in /proc/self/status, the same as getrusage's
 * ru_maxrss), and its reset through /proc/self/clear_refs ("5", Linux 4.0+)
 * so that each method of a run gets its own peak. The figure counts every
 * resident page, the mapped model file's included. */
#ifndef KVC_BASE_RSS_H
#define KVC_BASE_RSS_H

#include <stdint.h>

/* Starts a new peak at the current resident size; 0 when the kernel allowed it
 * (otherwise peaks keep counting from the start of the process). */
int kvc_peak_rss_reset(void);

/* Peak resident bytes since the start or the last successful reset; 0 if unknown. */
int64_t kvc_peak_rss_bytes(void);

#endif
