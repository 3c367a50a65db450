/* Labelled scatter plots through gnuplot (see include/kvcomp/plot.h). Data go inline as a
 * gnuplot datablock, so no temporary files; labels are quoted with gnuplot's
 * double-quote rules (backslash and quote escaped). */
#include "kvcomp/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/status.h"
#include "eval/plot_labels.h"

/* A gnuplot double-quoted string. */
static void put_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if (*s == '\n') {
            fputs("\\n", f);
            continue;
        }
        fputc(*s, f);
    }
    fputc('"', f);
}

void kvc_plot_pareto(const kvc_plot_point *pts, int n, unsigned char *front) {
    for (int i = 0; i < n; i++) {
        front[i] = isfinite(pts[i].x) && isfinite(pts[i].y);
        for (int j = 0; j < n && front[i]; j++)
            if (j != i && isfinite(pts[j].x) && isfinite(pts[j].y) && pts[j].x <= pts[i].x &&
                pts[j].y <= pts[i].y && (pts[j].x < pts[i].x || pts[j].y < pts[i].y))
                front[i] = 0;
    }
}

static const kvc_plot_point *cmp_pts;
static int by_x(const void *a, const void *b) {
    double x = cmp_pts[*(const int *)a].x, y = cmp_pts[*(const int *)b].x;
    return x < y ? -1 : x > y;
}

static int drawable(const kvc_plot *plot, const kvc_plot_point *p) {
    return isfinite(p->x) && isfinite(p->y) && !(plot->log_y && p->y <= 0);
}

/* The drawable points' indices in order of x; returns how many. */
static int drawable_by_x(const kvc_plot *plot, const kvc_plot_point *pts, int n, int *order) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (drawable(plot, &pts[i])) order[m++] = i;
    cmp_pts = pts;
    qsort(order, (size_t)m, sizeof(int), by_x);
    return m;
}

/* A datablock of "x y" rows: the points of order. */
static void put_points(FILE *g, const kvc_plot_point *pts, const int *order, int m) {
    fputs("$data << EOD\n", g);
    for (int k = 0; k < m; k++) fprintf(g, "%.9g %.9g\n", pts[order[k]].x, pts[order[k]].y);
    fputs("EOD\n", g);
}

/* The shown ranges, fixed here rather than left to gnuplot so that the labels
 * can be placed in the same geometry: the data plus a margin (more on the
 * right, where the labels go), whole decades on a logarithmic axis, 0 at the
 * bottom of a linear axis of non-negative values. */
typedef struct plot_frame {
    double x0, x1, y0, y1;
} plot_frame;

static plot_frame frame_of(const kvc_plot *plot, const kvc_plot_point *pts, const int *order, int m) {
    double xmin = pts[order[0]].x, xmax = pts[order[m - 1]].x, ymin = pts[order[0]].y, ymax = ymin;
    for (int k = 1; k < m; k++) {
        double y = pts[order[k]].y;
        ymin = y < ymin ? y : ymin;
        ymax = y > ymax ? y : ymax;
    }
    double xs = xmax - xmin > 0 ? xmax - xmin : (xmax != 0 ? fabs(xmax) * 0.1 : 1);
    plot_frame f = {xmin - 0.08 * xs, xmax + 0.25 * xs, 0, 0};
    if (f.x0 < 0 && xmin >= 0) f.x0 = 0;
    if (plot->log_y) {
        double lo = log10(ymin), hi = log10(ymax), pad = 0.1 * (hi - lo > 1 ? hi - lo : 1);
        f.y0 = pow(10, floor(lo - pad));
        f.y1 = pow(10, ceil(hi + pad));
    } else {
        double ys = ymax - (ymin < 0 ? ymin : 0);
        ys = ys > 0 ? ys : 1;
        f.y0 = ymin >= 0 ? 0 : ymin - 0.1 * ys;
        f.y1 = ymax + 0.1 * ys;
    }
    return f;
}

/* The canvas in character cells (pngcairo 960x640, Sans 11: cells of about
 * 7.5 x 16 pixels) and the fixed margins around the plot area. */
static const double canvas_w = 128, canvas_h = 40, margin_l = 11, margin_r = 3, margin_t = 3,
                    margin_b = 4;

/* One `set label` per point, at the spot kvc_place_labels chose. */
static void put_labels(FILE *g, const kvc_plot *plot, const kvc_plot_point *pts, const int *order,
                       int m, plot_frame f, kvc_label *labels) {
    double w = canvas_w - margin_l - margin_r, h = canvas_h - margin_t - margin_b;
    for (int k = 0; k < m; k++) {
        const kvc_plot_point *p = &pts[order[k]];
        labels[k] = (kvc_label){(p->x - f.x0) / (f.x1 - f.x0) * w,
                                plot->log_y ? log10(p->y / f.y0) / log10(f.y1 / f.y0) * h
                                            : (p->y - f.y0) / (f.y1 - f.y0) * h,
                                p->label ? (int)strlen(p->label) : 0,
                                {0, 0, 0}};
    }
    const double key[4] = {0, 0, 22, 3}; /* the key, bottom left: see put_script */
    kvc_place_labels(labels, m, w, h, plot->pareto ? key : NULL);
    for (int k = 0; k < m; k++) {
        const kvc_plot_point *p = &pts[order[k]];
        kvc_label_spot s = labels[k].spot;
        fprintf(g, "set label %d ", k + 1);
        put_quoted(g, p->label ? p->label : "");
        fprintf(g, " at first %.9g, first %.9g offset char %g,%g %s noenhanced front\n", p->x, p->y,
                s.dx, s.dy, s.right_aligned ? "right" : "left");
    }
}

/* The front's points in order of x, as a datablock for the staircase. */
static void put_front(FILE *g, const kvc_plot_point *pts, int n, const int *order, int m) {
    unsigned char *front = malloc((size_t)(n > 0 ? n : 1));
    fputs("$front << EOD\n", g);
    if (front) {
        kvc_plot_pareto(pts, n, front);
        for (int k = 0; k < m; k++)
            if (front[order[k]]) fprintf(g, "%.9g %.9g\n", pts[order[k]].x, pts[order[k]].y);
    }
    fputs("EOD\n", g);
    free(front);
}

/* The gnuplot script: header, ranges, labels, data and the plot command. */
static void put_script(FILE *g, const char *path, const kvc_plot *plot, const kvc_plot_point *pts,
                       int n, int *order, kvc_label *labels) {
    fputs("set terminal pngcairo size 960,640 enhanced font 'Sans,11'\n", g);
    fputs("set output ", g);
    put_quoted(g, path);
    fputs("\nset title ", g);
    put_quoted(g, plot->title ? plot->title : "");
    fputs(" noenhanced\nset xlabel ", g);
    put_quoted(g, plot->xlabel ? plot->xlabel : "");
    fputs(" noenhanced\nset ylabel ", g);
    put_quoted(g, plot->ylabel ? plot->ylabel : "");
    fputs(" noenhanced\nset grid\nset key off\n", g);
    fprintf(g, "set lmargin %g\nset rmargin %g\nset tmargin %g\nset bmargin %g\n", margin_l,
            margin_r, margin_t, margin_b);
    if (plot->log_y) fputs("set logscale y\n", g);
    int m = drawable_by_x(plot, pts, n, order);
    if (m == 0) {
        fputs("set label 1 'no finite points' at graph 0.5, graph 0.5 center\n"
              "set xrange [0:1]\nset yrange [0:1]\nplot NaN\n",
              g);
        return;
    }
    plot_frame f = frame_of(plot, pts, order, m);
    fprintf(g, "set xrange [%.9g:%.9g]\nset yrange [%.9g:%.9g]\n", f.x0, f.x1, f.y0, f.y1);
    put_labels(g, plot, pts, order, m, f, labels);
    put_points(g, pts, order, m);
    if (plot->pareto) {
        put_front(g, pts, n, order, m);
        /* the key bottom left: fewest bytes at the least loss is the one corner a
         * trade-off leaves empty */
        fputs("set key bottom left Left reverse\n"
              "plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' title 'method', \\\n"
              "     $front using 1:2 with steps lw 2 lc rgb '#d62728' title 'Pareto front', \\\n"
              "     $front using 1:2 with points pt 7 ps 1.8 lc rgb '#d62728' notitle\n",
              g);
    } else
        fputs("plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' notitle\n", g);
}

kvc_status kvc_plot_png(const char *path, const kvc_plot *plot, const kvc_plot_point *pts, int n) {
    KVC_CHECK(path && *path, KVC_ERR_ARG, "--plot: empty file name");
    for (const char *c = path; *c; c++)
        KVC_CHECK(*c != '\n', KVC_ERR_ARG, "--plot: file name with a newline");
    size_t cap = (size_t)(n > 0 ? n : 1);
    int *order = malloc(sizeof(int) * cap);
    kvc_label *labels = malloc(sizeof(kvc_label) * cap);
    int allocated = order && labels;
    FILE *g = allocated ? popen("gnuplot 1>&2", "w") : NULL; /* its messages to stderr */
    if (g) put_script(g, path, plot, pts, n, order, labels);
    free(order);
    free(labels);
    KVC_CHECK(allocated, KVC_ERR_NOMEM, "--plot %s: out of memory for %d points", path, n);
    KVC_CHECK(g, KVC_ERR_IO, "--plot %s: cannot run gnuplot", path);
    int rc = pclose(g);
    KVC_CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, KVC_ERR_IO,
              "--plot %s: gnuplot failed (exit status %d)", path, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    return KVC_OK;
}
