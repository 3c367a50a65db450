/* Label placement for the frontier and accuracy plots: quality-against-bytes
 * pictures put many methods within a few percent of each other's bytes, and a
 * label at a fixed offset then covers its neighbours'. A greedy placement in
 * character cells is enough for a few dozen points: each label takes the first
 * free spot of a short list around its point, so isolated points keep the
 * usual "right, a little above" and only crowded ones move. Boxes are
 * estimated from the label's length (one cell per character, one cell high),
 * which is what the caller's font and geometry make them, roughly. */
#include "eval/plot_labels.h"

/* The spots tried, in order of preference. */
static const kvc_label_spot spots[] = {
    {1, 0.8, 0}, {1, -0.8, 0}, {-1, 0.8, 1}, {-1, -0.8, 1}, {1, 0, 0},
    {-1, 0, 1},  {1, 1.8, 0},  {1, -1.8, 0}, {-1, 1.8, 1},  {-1, -1.8, 1},
};
enum { N_SPOTS = sizeof spots / sizeof spots[0] };

static const double point_half = 0.6; /* half the side of a point's marker, in cells */

typedef struct box {
    double x0, y0, x1, y1;
} box;

static box label_box(const kvc_label *l, kvc_label_spot s) {
    double ax = l->x + s.dx, ay = l->y + s.dy;
    return s.right_aligned ? (box){ax - l->len, ay - 0.5, ax, ay + 0.5}
                           : (box){ax, ay - 0.5, ax + l->len, ay + 0.5};
}

static double overlap(box a, box b) {
    double w = (a.x1 < b.x1 ? a.x1 : b.x1) - (a.x0 > b.x0 ? a.x0 : b.x0);
    double h = (a.y1 < b.y1 ? a.y1 : b.y1) - (a.y0 > b.y0 ? a.y0 : b.y0);
    return w > 0 && h > 0 ? w * h : 0;
}

/* How much of box b is covered by the labels placed before label i, by the
 * points or by the keep-out box, or lies outside the w x h area. */
static double crowding(box b, int i, const kvc_label *l, int n, double w, double h,
                       const double *keep_out) {
    double c = (b.x1 - b.x0) * (b.y1 - b.y0) - overlap(b, (box){0, 0, w, h});
    if (keep_out) c += overlap(b, (box){keep_out[0], keep_out[1], keep_out[2], keep_out[3]});
    for (int j = 0; j < i; j++) c += overlap(b, label_box(&l[j], l[j].spot));
    for (int j = 0; j < n; j++)
        c += overlap(b, (box){l[j].x - point_half, l[j].y - point_half, l[j].x + point_half,
                              l[j].y + point_half});
    return c;
}

void kvc_place_labels(kvc_label *l, int n, double w, double h, const double *keep_out) {
    for (int i = 0; i < n; i++) {
        int best = 0;
        double least = -1;
        for (int s = 0; s < N_SPOTS; s++) {
            double c = crowding(label_box(&l[i], spots[s]), i, l, n, w, h, keep_out);
            if (least < 0 || c < least) {
                least = c;
                best = s;
            }
            if (c == 0) break;
        }
        l[i].spot = spots[best];
    }
}
