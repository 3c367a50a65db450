/* Charts of quality against cache size (docs/design.md §6: every quality number
 * next to the bytes it was bought with): a labelled scatter plot drawn by
 * gnuplot (a pipe to the `gnuplot` command, PNG via pngcairo). */
#ifndef KVCOMP_PLOT_H
#define KVCOMP_PLOT_H

#include "kvcomp.h"

typedef struct kvc_plot_point {
    const char *label; /* shown beside the point */
    double x, y;       /* non-finite points are left out */
} kvc_plot_point;

typedef struct kvc_plot {
    const char *title;
    const char *xlabel, *ylabel;
    int log_y;         /* logarithmic y axis (points with y <= 0 are left out) */
    int pareto;        /* mark the Pareto front of (x, y), both smaller is better: the
                        * points no other point matches or beats on both, in red,
                        * joined as a staircase */
} kvc_plot;

/* front[i] = 1 if point i is on the Pareto front (no other finite point has
 * x <= and y <= with one strictly smaller), else 0; non-finite points 0. */
void kvc_plot_pareto(const kvc_plot_point *pts, int n, unsigned char *front);

/* Writes a PNG to path. KVC_ERR_IO if gnuplot cannot be run or fails (the
 * message says so; the caller's table and JSON do not depend on it). */
kvc_status kvc_plot_png(const char *path, const kvc_plot *plot, const kvc_plot_point *pts, int n);

#endif
