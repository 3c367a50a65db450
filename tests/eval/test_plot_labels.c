/* Label placement of the quality plots (kvc_place_labels): an isolated point's
 * label sits right above it; crowded points get labels that cover neither each
 * other nor any point; the area's edges and the keep-out box (the key) are
 * avoided; the result does not depend on anything but the input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "eval/plot_labels.h"

typedef struct box {
    double x0, y0, x1, y1;
} box;

/* The same box the placer assumes: one cell per character, one cell high. */
static box box_of(double x, double y, int len, kvc_label_spot s) {
    double ax = x + s.dx, ay = y + s.dy;
    return s.right_aligned ? (box){ax - len, ay - 0.5, ax, ay + 0.5}
                           : (box){ax, ay - 0.5, ax + len, ay + 0.5};
}

static int overlaps(box a, box b) {
    return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

static void test_isolated_point_right_above(void **state) {
    (void)state;
    double x = 10, y = 10;
    int len = 8;
    kvc_label_spot s;
    kvc_place_labels(&x, &y, &len, 1, 100, 30, NULL, &s);
    assert_true(s.dx > 0 && s.dy > 0);
    assert_int_equal(s.right_aligned, 0);
}

static void test_near_right_edge_goes_left(void **state) {
    (void)state;
    double x = 95, y = 10;
    int len = 12;
    kvc_label_spot s;
    kvc_place_labels(&x, &y, &len, 1, 100, 30, NULL, &s);
    assert_int_equal(s.right_aligned, 1);
    box b = box_of(x, y, len, s);
    assert_true(b.x0 >= 0 && b.x1 <= 100);
}

/* A column of close points, as the 2-bit methods of a frontier are (0.7 cells
 * apart, so labels all right above would overlap): no label covers another
 * label or any point. */
static void test_crowded_column_disjoint(void **state) {
    (void)state;
    enum { N = 6 };
    double x[N], y[N];
    int len[N];
    for (int i = 0; i < N; i++) {
        x[i] = 20 + 0.3 * i;
        y[i] = 15 - 0.7 * i;
        len[i] = 10 + i;
    }
    kvc_label_spot s[N];
    kvc_place_labels(x, y, len, N, 100, 30, NULL, s);
    for (int i = 0; i < N; i++) {
        box b = box_of(x[i], y[i], len[i], s[i]);
        for (int j = 0; j < N; j++) {
            if (j != i) assert_false(overlaps(b, box_of(x[j], y[j], len[j], s[j])));
            assert_false(overlaps(b, (box){x[j] - 0.6, y[j] - 0.6, x[j] + 0.6, y[j] + 0.6}));
        }
    }
}

static void test_keep_out_avoided(void **state) {
    (void)state;
    double x = 5, y = 2;
    int len = 6;
    const double key[4] = {0, 0, 22, 3};
    kvc_label_spot s;
    kvc_place_labels(&x, &y, &len, 1, 100, 30, key, &s);
    box b = box_of(x, y, len, s);
    assert_false(overlaps(b, (box){key[0], key[1], key[2], key[3]}));
}

/* Two points at the same place: the labels still part. */
static void test_same_place_labels_part(void **state) {
    (void)state;
    double x[2] = {40, 40}, y[2] = {12, 12};
    int len[2] = {9, 9};
    kvc_label_spot s[2], again[2];
    kvc_place_labels(x, y, len, 2, 100, 30, NULL, s);
    assert_false(overlaps(box_of(x[0], y[0], len[0], s[0]), box_of(x[1], y[1], len[1], s[1])));
    kvc_place_labels(x, y, len, 2, 100, 30, NULL, again);
    assert_memory_equal(s, again, sizeof s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isolated_point_right_above),
        cmocka_unit_test(test_near_right_edge_goes_left),
        cmocka_unit_test(test_crowded_column_disjoint),
        cmocka_unit_test(test_keep_out_avoided),
        cmocka_unit_test(test_same_place_labels_part),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
