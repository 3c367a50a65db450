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

/* above[k] for the k-th point in order of x: labels alternate above and below,
 * and of two neighbours within 5% of the x range the lower point's label goes
 * below it, so that each label sits next to its own point. */
static void choose_label_sides(const kvc_plot_point *pts, const int *order, int m,
                               unsigned char *above) {
    double span = m > 0 ? pts[order[m - 1]].x - pts[order[0]].x : 0;
    double near = 0.05 * (span > 0 ? span : 1);
    for (int k = 0; k < m; k++) above[k] = k % 2 == 0;
    for (int k = 0; k + 1 < m; k++) {
        const kvc_plot_point *a = &pts[order[k]], *b = &pts[order[k + 1]];
        if (b->x - a->x <= near) {
            above[k] = a->y >= b->y;
            above[k + 1] = b->y > a->y;
        }
    }
}

/* A datablock of "x y label" rows: the points of order whose side is `side`
 * (all of them when sides is NULL). */
static void put_points(FILE *g, const char *name, const kvc_plot_point *pts, const int *order,
                       int m, const unsigned char *sides, int side) {
    fprintf(g, "%s << EOD\n", name);
    for (int k = 0; k < m; k++) {
        if (sides && sides[k] != side) continue;
        const kvc_plot_point *p = &pts[order[k]];
        fprintf(g, "%.9g %.9g ", p->x, p->y);
        put_quoted(g, p->label ? p->label : "");
        fputc('\n', g);
    }
    fputs("EOD\n", g);
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

kvc_status kvc_plot_png(const char *path, const kvc_plot *plot, const kvc_plot_point *pts, int n) {
    KVC_CHECK(path && *path, KVC_ERR_ARG, "--plot: empty file name");
    for (const char *c = path; *c; c++)
        KVC_CHECK(*c != '\n', KVC_ERR_ARG, "--plot: file name with a newline");
    int *order = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    unsigned char *above = calloc((size_t)(n > 0 ? n : 1), 1);
    int allocated = order && above;
    FILE *g = allocated ? popen("gnuplot 1>&2", "w") : NULL;
    if (!g) {
        free(order);
        free(above);
        return allocated ? kvc_fail(KVC_ERR_IO, "--plot %s: cannot run gnuplot", path)
                              : kvc_fail(KVC_ERR_NOMEM, "--plot %s: out of memory for %d points", path, n);
    }
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
    if (plot->log_y) fputs("set logscale y\n", g);
    int nonneg = 1; /* quality numbers are >= 0: start the axis at 0 */
    for (int i = 0; i < n; i++) nonneg &= !(pts[i].y < 0);
    if (nonneg && !plot->log_y) fputs("set yrange [0:*]\n", g);
    fprintf(g, "set offsets graph 0.08, graph 0.2, graph 0.1, graph %s\n",
            nonneg && !plot->log_y ? "0" : "0.1");
    int m = drawable_by_x(plot, pts, n, order);
    choose_label_sides(pts, order, m, above);
    put_points(g, "$data", pts, order, m, NULL, 0);
    put_points(g, "$above", pts, order, m, above, 1);
    put_points(g, "$below", pts, order, m, above, 0);
    if (m > 0 && plot->pareto) {
        put_front(g, pts, n, order, m);
        fputs("set key top right\n"
              "plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' title 'method', \\\n"
              "     $front using 1:2 with steps lw 2 lc rgb '#d62728' title 'Pareto front', \\\n"
              "     $front using 1:2 with points pt 7 ps 1.8 lc rgb '#d62728' notitle",
              g);
    } else if (m > 0)
        fputs("plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' notitle", g);
    else
        fputs("set label 1 'no finite points' at graph 0.5, graph 0.5 center\n"
              "set xrange [0:1]\nset yrange [0:1]\nplot NaN", g);
    int n_above = 0;
    for (int k = 0; k < m; k++) n_above += above[k];
    if (n_above > 0) /* an empty datablock would make gnuplot warn */
        fputs(", \\\n     $above using 1:2:3 with labels noenhanced offset char 1,0.8 left notitle", g);
    if (n_above < m)
        fputs(", \\\n     $below using 1:2:3 with labels noenhanced offset char 1,-0.8 left notitle", g);
    fputc('\n', g);
    free(order);
    free(above);
    int rc = pclose(g);
    KVC_CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, KVC_ERR_IO,
              "--plot %s: gnuplot failed (exit status %d)", path, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    return KVC_OK;
}
