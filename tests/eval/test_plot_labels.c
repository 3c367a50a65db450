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
static box box_of(const kvc_label *l) {
    double ax = l->x + l->spot.dx, ay = l->y + l->spot.dy;
    return l->spot.right_aligned ? (box){ax - l->len, ay - 0.5, ax, ay + 0.5}
                                 : (box){ax, ay - 0.5, ax + l->len, ay + 0.5};
}

static int overlaps(box a, box b) {
    return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

static void test_isolated_point_right_above(void **state) {
    (void)state;
    kvc_label l = {10, 10, 8, {0, 0, 0}};
    kvc_place_labels(&l, 1, 100, 30, NULL);
    assert_true(l.spot.dx > 0 && l.spot.dy > 0);
    assert_int_equal(l.spot.right_aligned, 0);
}

static void test_near_right_edge_goes_left(void **state) {
    (void)state;
    kvc_label l = {95, 10, 12, {0, 0, 0}};
    kvc_place_labels(&l, 1, 100, 30, NULL);
    assert_int_equal(l.spot.right_aligned, 1);
    box b = box_of(&l);
    assert_true(b.x0 >= 0 && b.x1 <= 100);
}

/* A column of close points, as the 2-bit methods of a frontier are (0.7 cells
 * apart, so labels all right above would overlap): no label covers another
 * label or any point. */
static void test_crowded_column_disjoint(void **state) {
    (void)state;
    enum { N = 6 };
    kvc_label l[N];
    for (int i = 0; i < N; i++) l[i] = (kvc_label){20 + 0.3 * i, 15 - 0.7 * i, 10 + i, {0, 0, 0}};
    kvc_place_labels(l, N, 100, 30, NULL);
    for (int i = 0; i < N; i++) {
        box b = box_of(&l[i]);
        for (int j = 0; j < N; j++) {
            if (j != i) assert_false(overlaps(b, box_of(&l[j])));
            assert_false(overlaps(b, (box){l[j].x - 0.6, l[j].y - 0.6, l[j].x + 0.6, l[j].y + 0.6}));
        }
    }
}

static void test_keep_out_avoided(void **state) {
    (void)state;
    kvc_label l = {5, 2, 6, {0, 0, 0}};
    const double key[4] = {0, 0, 22, 3};
    kvc_place_labels(&l, 1, 100, 30, key);
    box b = box_of(&l);
    assert_false(overlaps(b, (box){key[0], key[1], key[2], key[3]}));
}

/* Two points at the same place: the labels still part. */
static void test_same_place_labels_part(void **state) {
    (void)state;
    kvc_label l[2] = {{40, 12, 9, {0, 0, 0}}, {40, 12, 9, {0, 0, 0}}}, again[2];
    memcpy(again, l, sizeof l);
    kvc_place_labels(l, 2, 100, 30, NULL);
    assert_false(overlaps(box_of(&l[0]), box_of(&l[1])));
    kvc_place_labels(again, 2, 100, 30, NULL);
    assert_memory_equal(l, again, sizeof l);
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
