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

/* The front's points in order of x, as a second datablock for the staircase. */
static void put_front(FILE *g, const kvc_plot *plot, const kvc_plot_point *pts, int n) {
    unsigned char *front = malloc((size_t)(n > 0 ? n : 1));
    int *order = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1)), m = 0;
    fputs("$front << EOD\n", g);
    if (front && order) {
        kvc_plot_pareto(pts, n, front);
        for (int i = 0; i < n; i++)
            if (front[i] && !(plot->log_y && pts[i].y <= 0)) order[m++] = i;
        cmp_pts = pts;
        qsort(order, (size_t)m, sizeof(int), by_x);
        for (int i = 0; i < m; i++) fprintf(g, "%.9g %.9g\n", pts[order[i]].x, pts[order[i]].y);
    }
    fputs("EOD\n", g);
    free(front);
    free(order);
}

kvc_status kvc_plot_png(const char *path, const kvc_plot *plot, const kvc_plot_point *pts, int n) {
    KVC_CHECK(path && *path, KVC_ERR_ARG, "--plot: empty file name");
    for (const char *c = path; *c; c++)
        KVC_CHECK(*c != '\n', KVC_ERR_ARG, "--plot: file name with a newline");
    FILE *g = popen("gnuplot 2>&1", "w");
    KVC_CHECK(g, KVC_ERR_IO, "--plot %s: cannot run gnuplot", path);
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
    fputs("$data << EOD\n", g);
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(pts[i].x) || !isfinite(pts[i].y) || (plot->log_y && pts[i].y <= 0)) continue;
        fprintf(g, "%.9g %.9g ", pts[i].x, pts[i].y);
        put_quoted(g, pts[i].label ? pts[i].label : "");
        fputc('\n', g);
        kept++;
    }
    fputs("EOD\n", g);
    if (kept > 0 && plot->pareto) {
        put_front(g, plot, pts, n);
        fputs("set key top right\n"
              "plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' title 'method', \\\n"
              "     $front using 1:2 with steps lw 2 lc rgb '#d62728' title 'Pareto front', \\\n"
              "     $front using 1:2 with points pt 7 ps 1.8 lc rgb '#d62728' notitle, \\\n"
              "     $data every 2 using 1:2:3 with labels noenhanced offset char 1,0.8 left notitle, \\\n"
              "     $data every 2::1 using 1:2:3 with labels noenhanced offset char 1,-0.8 left notitle\n",
              g);
    } else if (kept > 0)
        fputs("plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4', \\\n"
              "     $data every 2 using 1:2:3 with labels noenhanced offset char 1,0.8 left, \\\n"
              "     $data every 2::1 using 1:2:3 with labels noenhanced offset char 1,-0.8 left\n",
              g); /* alternate labels above and below: close points stay readable */
    else
        fputs("set label 1 'no finite points' at graph 0.5, graph 0.5 center\n"
              "set xrange [0:1]\nset yrange [0:1]\nplot NaN\n", g);
    int rc = pclose(g);
    KVC_CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, KVC_ERR_IO,
              "--plot %s: gnuplot failed (exit status %d)", path, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    return KVC_OK;
}
