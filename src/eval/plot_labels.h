/* Where each point's label goes in a scatter plot (src/eval/plot_labels.c). */
#ifndef KVC_EVAL_PLOT_LABELS_H
#define KVC_EVAL_PLOT_LABELS_H

/* A label's place relative to its point, in character cells: the label's
 * anchor is the point moved by (dx, dy); right_aligned puts the text to the
 * anchor's left (gnuplot's `right`), else to its right (`left`). */
typedef struct kvc_label_spot {
    double dx, dy;
    int right_aligned;
} kvc_label_spot;

/* One label: its point in character cells of the plot area (origin bottom
 * left), its length in characters, and the spot chosen for it. */
typedef struct kvc_label {
    double x, y;
    int len;
    kvc_label_spot spot; /* written by kvc_place_labels */
} kvc_label;

/* Chooses the spot of each of n labels in a plot area w cells wide and h
 * high; keep_out: a box no label
 * should cover (x0, y0, x1, y1 in cells, e.g. the key), or NULL. Points are
 * taken in the order given; each label goes to the first spot of a fixed list
 * (right above, right below, left above, left below, right, left, then
 * further up and down) whose box is free of the labels placed before, of
 * every point, of keep_out and of the area's edges, else to the spot it
 * overlaps least. Deterministic. */
void kvc_place_labels(kvc_label *labels, int n, double w, double h, const double *keep_out);

#endif
