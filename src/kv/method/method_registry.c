/* The method registry (docs/design.md §5): one row per method, defined in its own
 * file under src/kv/method/. Adding a method = an extern line and a row here. */
#include "kv/method/method.h"

extern const kvc_method kvc_method_full;
extern const kvc_method kvc_method_mustafar;
extern const kvc_method kvc_method_h2o;
extern const kvc_method kvc_method_think;
extern const kvc_method kvc_method_kivi;
extern const kvc_method kvc_method_kvmix;

const kvc_method *const kvc_method_registry[] = {
    &kvc_method_full,
    &kvc_method_mustafar,
    &kvc_method_h2o,
    &kvc_method_think,
    &kvc_method_kivi,
    &kvc_method_kvmix,
    NULL,
};
