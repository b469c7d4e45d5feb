/* Core services: status and messages, option tables, thread pool, the
 * family registry, device resolution without a GPU. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/internal.h"
#include "testutil.h"

static void test_status_messages(void **state)
{
    (void)state;
    patina_clear_error();
    assert_string_equal(patina_last_error(), "");
    assert_int_equal(patina__fail(PATINA_E_CORRUPT, "decode: truncated %s in '%s'", "PNG", "x.png"),
                     PATINA_E_CORRUPT);
    assert_string_equal(patina_last_error(), "decode: truncated PNG in 'x.png'");
    patina__prefix_error("index");
    assert_string_equal(patina_last_error(), "index: decode: truncated PNG in 'x.png'");
    for (int s = PATINA_OK; s <= PATINA_DONE; s++)
        assert_true(strlen(patina_status_str((patina_status)s)) > 0);
    assert_string_equal(patina_status_str((patina_status)999), "unknown status");
}

typedef struct params {
    int n;
    double t;
    int flag;
    int mode;
    char list[PATINA_OPT_STRMAX];
} params_t;

static const patina_optdef_t defs[] = {
    {"n", PATINA_OPT_INT, 1, 32, "8", NULL, "count", offsetof(params_t, n)},
    {"t", PATINA_OPT_DOUBLE, 0, 1, "0.5", NULL, "threshold", offsetof(params_t, t)},
    {"flag", PATINA_OPT_BOOL, 0, 1, "0", NULL, "a flag", offsetof(params_t, flag)},
    {"mode", PATINA_OPT_ENUM, 0, 0, "b", "a|b|c", "mode", offsetof(params_t, mode)},
    {"list", PATINA_OPT_STRING, 0, 0, "1", NULL, "a list", offsetof(params_t, list)},
};
#define NDEFS (sizeof defs / sizeof defs[0])

static void test_options(void **state)
{
    params_t p;
    char buf[512];
    (void)state;
    TU_OK(patina_opts_parse(&p, defs, NDEFS, NULL, "fam"));
    assert_int_equal(p.n, 8);
    assert_true(p.t == 0.5);
    assert_int_equal(p.mode, 1);
    assert_string_equal(p.list, "1");
    TU_OK(patina_opts_parse(&p, defs, NDEFS, "n=16,list=1,2,4,mode=c,flag=yes,t=0.25", "fam"));
    assert_int_equal(p.n, 16);
    assert_string_equal(p.list, "1,2,4");
    assert_int_equal(p.mode, 2);
    assert_int_equal(p.flag, 1);
    assert_true(p.t == 0.25);
    patina_opts_format(buf, sizeof buf, &p, defs, NDEFS, 0);
    assert_string_equal(buf, "n=16,t=0.25,flag=1,mode=c,list=1,2,4");

    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "n=33", "fam"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "out of range"));
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "n=x", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "bogus=1", "fam"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "unknown option 'bogus'"));
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "mode=d", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "n=1,n=2", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "n=1,2", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "n=", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "t=nan", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "t=1e400", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "t=inf", "fam"), PATINA_E_INVALID);
    /* A subnormal value (hexadecimal or decimal, where strtod reports
     * underflow) is kept, and its canonical text reads back to it (the
     * options fuzz target found "t=0x1p-1074" formatted as 5e-324, which
     * was then refused). */
    TU_OK(patina_opts_parse(&p, defs, NDEFS, "t=0x1p-1074", "fam"));
    assert_true(p.t > 0 && p.t < 1e-323);
    patina_opts_format(buf, sizeof buf, &p, defs, NDEFS, 0);
    assert_non_null(strstr(buf, "t=5e-324"));
    TU_OK(patina_opts_parse(&p, defs, NDEFS, "t=5e-324", "fam"));
    assert_true(p.t > 0 && p.t < 1e-323);
    TU_OK(patina_opts_parse(&p, defs, NDEFS, "t=1e-330", "fam"));
    assert_true(p.t == 0);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "flag=2", "fam"), PATINA_E_INVALID);
    assert_int_equal(patina_opts_parse(&p, defs, NDEFS, "justtext", "fam"), PATINA_E_INVALID);
}

static void add_one(void *arg, size_t i, int worker)
{
    unsigned *hits = arg;
    (void)worker;
    __atomic_fetch_add(&hits[i], 1u, __ATOMIC_RELAXED);
}

static void test_pool(void **state)
{
    patina_pool_t *pool;
    unsigned *hits = calloc(10007, sizeof *hits);
    (void)state;
    TU_OK(patina_pool_new(&pool, 4));
    assert_int_equal(patina_pool_size(pool), 4);
    for (int round = 0; round < 50; round++) patina_pool_run(pool, 10007, add_one, hits);
    patina_pool_run(pool, 0, add_one, hits);
    for (size_t i = 0; i < 10007; i++) assert_int_equal(hits[i], 50);
    patina_pool_free(pool);
    patina_pool_free(NULL);
    assert_int_equal(patina_pool_new(&pool, 100000), PATINA_E_INVALID);
    free(hits);
}

/* ---- slice runners (patina__context_run_slices) */

typedef struct run_rec {
    long tid[4];          /* the thread that ran part i */
    atomic_int ran[4];    /* times part i ran */
} run_rec_t;

static void record_part(void *arg, size_t i)
{
    run_rec_t *r = arg;
    r->tid[i] = (long)syscall(SYS_gettid);
    atomic_fetch_add(&r->ran[i], 1);
}

typedef struct run_caller {
    patina_context_t *ctx;
    run_rec_t rec[50];
} run_caller_t;

static void *call_parts(void *p)
{
    run_caller_t *c = p;
    for (int k = 0; k < 50; k++) patina__context_run_slices(c->ctx, 3, record_part, &c->rec[k]);
    return NULL;
}

/* Every part runs once, part 0 in the caller, parts >= 1 on threads the
 * context keeps (the same thread call after call, not one made per call),
 * and two callers at once both finish with every part run once. */
/* patina_cpu_count follows the calling thread's affinity mask: pinned to
 * one CPU it says 1, and never more than the online CPUs. */
static void test_cpu_count(void **state)
{
    cpu_set_t old, one;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int n = patina_cpu_count();
    int first = -1;
    (void)state;
    assert_true(n >= 1 && n <= online);
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    assert_true(n <= CPU_COUNT(&old)); /* within the mask (and any quota) */
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &old)) first = c;
    assert_true(first >= 0);
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    assert_int_equal(patina_cpu_count(), 1);
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
    assert_int_equal(patina_cpu_count(), n);
}

static void test_slice_runners(void **state)
{
    patina_context_t *ctx = NULL;
    patina_context_opts_t o;
    run_rec_t a, b;
    run_caller_t *c1 = calloc(1, sizeof *c1), *c2 = calloc(1, sizeof *c2);
    pthread_t th;
    const long me = (long)syscall(SYS_gettid);
    (void)state;
    patina_context_opts_init(&o);
    o.gpus = "0,0,0";
    o.threads = 3;
    assert_int_equal(patina_context_new(&ctx, &o), PATINA_OK);
    assert_int_equal(patina__context_slices(ctx), 3);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    patina__context_run_slices(ctx, 3, record_part, &a);
    usleep(20000); /* past the runners' spin: they sleep, and must wake */
    patina__context_run_slices(ctx, 3, record_part, &b);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(atomic_load(&a.ran[i]), 1);
        assert_int_equal(atomic_load(&b.ran[i]), 1);
    }
    assert_true(a.tid[0] == me && b.tid[0] == me);
    assert_true(a.tid[1] != me && a.tid[2] != me && a.tid[1] != a.tid[2]);
    assert_true(b.tid[1] == a.tid[1] && b.tid[2] == a.tid[2]); /* kept, not made per call */
    /* two callers at once: a busy runner's part goes to a thread of its own */
    c1->ctx = c2->ctx = ctx;
    assert_int_equal(pthread_create(&th, NULL, call_parts, c1), 0);
    call_parts(c2);
    pthread_join(th, NULL);
    for (int k = 0; k < 50; k++)
        for (int i = 0; i < 3; i++) {
            assert_int_equal(atomic_load(&c1->rec[k].ran[i]), 1);
            assert_int_equal(atomic_load(&c2->rec[k].ran[i]), 1);
        }
    patina_context_free(ctx); /* stops and joins the runners */
    /* without a context: threads per call, every part once */
    memset(&a, 0, sizeof a);
    patina__context_run_slices(NULL, 3, record_part, &a);
    for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&a.ran[i]), 1);
    free(c1);
    free(c2);
}

static void test_registry(void **state)
{
    patina_extractor_t *ex;
    patina_device d;
    (void)state;
    assert_true(patina_family_count() >= 1);
    TU_OK(patina_extractor_new(&ex, "cedd"));
    assert_string_equal(patina_extractor_spec(ex), "cedd:compact=0");
    assert_int_equal(patina_extractor_dim(ex), 144);
    assert_int_equal(patina_extractor_bytes(ex), 144);
    assert_string_equal(patina_extractor_distance_name(ex), "tanimoto");
    patina_extractor_free(ex);
    TU_OK(patina_extractor_new(&ex, "cedd:compact=1"));
    assert_string_equal(patina_extractor_spec(ex), "cedd:compact=1");
    patina_extractor_free(ex);
    assert_int_equal(patina_extractor_new(&ex, "nope"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "unknown family 'nope'"));
    assert_null(ex);
    assert_int_equal(patina_extractor_new(&ex, "cedd:compact=2"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, ""), PATINA_E_INVALID);
    patina_extractor_free(NULL);

    {   /* the option tables, as bindings see them */
        patina_option_info_t o;
        size_t f, i, lbp = (size_t)-1;
        for (f = 0; f < patina_family_count(); f++) {
            if (!strcmp(patina_family_name(f), "lbp")) lbp = f;
            for (i = 0; i < patina_family_option_count(f); i++) {
                TU_OK(patina_family_option(&o, f, i));
                assert_non_null(o.name);
                assert_non_null(o.def);
                assert_non_null(o.help);
                assert_true((o.type == PATINA_OPTION_ENUM) == (o.choices != NULL));
                if (o.type == PATINA_OPTION_INT || o.type == PATINA_OPTION_DOUBLE) assert_true(o.min <= o.max);
            }
            assert_int_equal(patina_family_option(&o, f, i), PATINA_E_INVALID);
        }
        assert_true(lbp != (size_t)-1);
        TU_OK(patina_family_option(&o, lbp, 0));
        assert_string_equal(o.name, "P");
        assert_int_equal(o.type, PATINA_OPTION_INT);
        assert_true(o.min == 1 && o.max == 32);
        assert_string_equal(o.def, "8");
        TU_OK(patina_family_option(&o, lbp, 2));
        assert_string_equal(o.name, "method");
        assert_int_equal(o.type, PATINA_OPTION_ENUM);
        assert_string_equal(o.choices, "default|ror|uniform|nri_uniform|var");
        assert_int_equal(patina_family_option_count(patina_family_count()), 0);
        assert_int_equal(patina_family_option(&o, patina_family_count(), 0), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "no family"));
    }

    TU_OK(patina_device_parse(&d, "hybrid"));
    assert_int_equal(d, PATINA_DEVICE_HYBRID);
    assert_int_equal(patina_device_parse(&d, "tpu"), PATINA_E_INVALID);
}

static void test_device_resolution(void **state)
{
    patina_context_t *ctx;
    patina_extractor_t *ex;
    patina_device got;
    patina_image_t img;
    uint8_t a[144], b[144];
    patina_status st;
    tu_rng_t r;
    (void)state;
    TU_OK(patina_context_new(&ctx, NULL));
    TU_OK(patina_extractor_new(&ex, "cedd"));
    TU_OK(patina_context_resolve(ctx, ex, PATINA_DEVICE_AUTO, &got));
    if (patina_gpu_count() == 0) {
        printf("no GPU here: checking that auto falls back to cpu and gpu/hybrid say why\n");
        assert_int_equal(got, PATINA_DEVICE_CPU);
        assert_int_equal(patina_context_resolve(ctx, ex, PATINA_DEVICE_GPU, &got), PATINA_E_UNAVAILABLE);
        assert_true(strlen(patina_last_error()) > 0);
        assert_int_equal(patina_context_resolve(ctx, ex, PATINA_DEVICE_HYBRID, &got), PATINA_E_UNAVAILABLE);
    } else {
        assert_int_equal(got, PATINA_DEVICE_GPU);
    }
    /* The batch API on the CPU equals the direct reference. */
    tu_rng_seed(&r, 7);
    tu_random_image(&img, 123, 97, 1, &r);
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, &img, 1, &st));
    TU_OK(st);
    TU_OK(patina_cedd_extract(b, &img, 0));
    assert_memory_equal(a, b, 144);
    assert_int_equal(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, NULL, &img, 1, &st), PATINA_E_INVALID);
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, &img, 0, &st));
    patina_image_release(&img);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    patina_context_free(NULL);
}

/* Every public options struct's _init fills the documented defaults. */
/* The default of option `name` of `set` as a number (enums: the index of
 * the word in choices). */
static double table_default(patina_option_set set, const char *name)
{
    patina_option_info_t o;
    assert_int_equal(patina_options_find(&o, set, name), PATINA_OK);
    assert_non_null(o.def);
    if (o.type == PATINA_OPTION_ENUM) {
        const char *p = o.choices;
        size_t l = strlen(o.def);
        for (int i = 0; p; i++) {
            if (!strncmp(p, o.def, l) && (p[l] == '|' || !p[l])) return i;
            p = strchr(p, '|');
            if (p) p++;
        }
        fail_msg("%s: default '%s' is not one of %s", name, o.def, o.choices);
    }
    return strtod(o.def, NULL);
}

/* The option tables of include/patina/options.h: every entry well formed
 * (a default within its bounds or among its choices), the _init functions
 * fill exactly the tables' defaults, the constants are the tables' bounds,
 * and patina_options_check says what is wrong and where. */
static void test_option_tables(void **state)
{
    static const patina_option_set sets[] = {PATINA_OPTIONS_SEARCH, PATINA_OPTIONS_IDENTIFY, PATINA_OPTIONS_INDEX};
    patina_option_info_t o;
    patina_identify_opts_t ido;
    patina_search_opts_t so;
    patina_index_opts_t io;
    (void)state;
    for (size_t s = 0; s < 3; s++) {
        size_t n = patina_options_count(sets[s]);
        assert_true(n > 0);
        assert_non_null(patina_option_set_name(sets[s]));
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(patina_options_get(&o, sets[s], i), PATINA_OK);
            assert_non_null(o.name);
            assert_non_null(o.help);
            for (size_t j = 0; j < i; j++) {
                patina_option_info_t p;
                assert_int_equal(patina_options_get(&p, sets[s], j), PATINA_OK);
                assert_string_not_equal(p.name, o.name);
            }
            if (o.def && (o.type == PATINA_OPTION_INT || o.type == PATINA_OPTION_DOUBLE))
                assert_int_equal(patina_options_check(sets[s], o.name, strtod(o.def, NULL)), PATINA_OK);
            if (o.type == PATINA_OPTION_ENUM) assert_non_null(o.choices), (void)table_default(sets[s], o.name);
            else assert_null(o.choices);
        }
        assert_int_equal(patina_options_get(&o, sets[s], n), PATINA_E_INVALID);
        assert_int_equal(patina_options_find(&o, sets[s], "no_such_option"), PATINA_E_NOTFOUND);
    }
    assert_int_equal(patina_options_count((patina_option_set)3), 0);
    assert_null(patina_option_set_name((patina_option_set)3));

    /* _init = the table */
    patina_identify_opts_init(&ido);
    assert_true(ido.k == table_default(PATINA_OPTIONS_IDENTIFY, "k"));
    assert_true(ido.ratio == table_default(PATINA_OPTIONS_IDENTIFY, "ratio"));
    assert_true(ido.scoring == table_default(PATINA_OPTIONS_IDENTIFY, "scoring"));
    assert_true(ido.verify == table_default(PATINA_OPTIONS_IDENTIFY, "verify"));
    assert_true(ido.verify_top == table_default(PATINA_OPTIONS_IDENTIFY, "verify_top"));
    assert_true(ido.model == table_default(PATINA_OPTIONS_IDENTIFY, "model"));
    assert_true(ido.ransac_threshold == table_default(PATINA_OPTIONS_IDENTIFY, "ransac_threshold"));
    assert_true(ido.iterations == table_default(PATINA_OPTIONS_IDENTIFY, "iterations"));
    assert_true(ido.shape_check == table_default(PATINA_OPTIONS_IDENTIFY, "shape_check"));
    assert_true(ido.seed == table_default(PATINA_OPTIONS_IDENTIFY, "seed"));
    { /* threshold: no value in the table; the struct's default is the calibrated one, resolved by the call */
        patina_option_info_t ti;
        TU_OK(patina_options_find(&ti, PATINA_OPTIONS_IDENTIFY, "threshold"));
        assert_null(ti.def);
        assert_true(ido.threshold == PATINA_THRESHOLD_CALIBRATED);
    }
    assert_true(ido.device == table_default(PATINA_OPTIONS_IDENTIFY, "device"));
    assert_true(ido.precision == table_default(PATINA_OPTIONS_IDENTIFY, "precision"));
    assert_true(ido.gpu_arena_slots == table_default(PATINA_OPTIONS_IDENTIFY, "gpu_arena_slots"));
    assert_true(ido.guided == table_default(PATINA_OPTIONS_IDENTIFY, "guided"));
    assert_true(ido.guided_ratio == table_default(PATINA_OPTIONS_IDENTIFY, "guided_ratio"));
    assert_true(ido.ambiguity == table_default(PATINA_OPTIONS_IDENTIFY, "ambiguity"));
    assert_true(ido.distinct == table_default(PATINA_OPTIONS_IDENTIFY, "distinct") && ido.distinct == 0);
    assert_true(ido.sibling_inliers == table_default(PATINA_OPTIONS_IDENTIFY, "sibling_inliers") &&
                ido.sibling_inliers == PATINA_SIBLING_INLIERS_DEFAULT);
    assert_true(ido.accept == table_default(PATINA_OPTIONS_IDENTIFY, "accept") &&
                ido.accept == PATINA_ACCEPT_SIGNIFICANCE);
    assert_true(ido.view_candidates == table_default(PATINA_OPTIONS_IDENTIFY, "view_candidates") &&
                ido.view_candidates == 0);
    assert_true(ido.first_features == table_default(PATINA_OPTIONS_IDENTIFY, "first_features") &&
                ido.first_features == 0);
    assert_true(ido.half_view_features == table_default(PATINA_OPTIONS_IDENTIFY, "half_view_features") &&
                ido.half_view_features == 0);
    assert_int_equal(patina_options_count(PATINA_OPTIONS_IDENTIFY), 23);
    patina_search_opts_init(&so);
    assert_true(so.max_hits == table_default(PATINA_OPTIONS_SEARCH, "max_hits"));
    assert_true(so.device == table_default(PATINA_OPTIONS_SEARCH, "device"));
    assert_true(so.ratio == table_default(PATINA_OPTIONS_SEARCH, "ratio"));
    patina_index_opts_init(&io);
    assert_true(io.device == table_default(PATINA_OPTIONS_INDEX, "device"));
    assert_true(io.batch == table_default(PATINA_OPTIONS_INDEX, "batch"));
    assert_true(io.batch_memory == table_default(PATINA_OPTIONS_INDEX, "batch_memory"));
    assert_true(io.batch_memory == PATINA_DEFAULT_BATCH_MEMORY);
    assert_true(io.strict == table_default(PATINA_OPTIONS_INDEX, "strict"));
    assert_true(io.jpeg_decoder == table_default(PATINA_OPTIONS_INDEX, "jpeg_decoder"));
    assert_true(io.apply_orientation == table_default(PATINA_OPTIONS_INDEX, "apply_orientation"));
    assert_int_equal(io.apply_orientation, 0); /* pixels as stored: LIRE's */

    /* the constants are the tables' */
    assert_int_equal(patina_options_find(&o, PATINA_OPTIONS_SEARCH, "k"), PATINA_OK);
    assert_true(o.min == 1 && o.max == PATINA_K_MAX && !strcmp(o.def, "10"));
    assert_true(table_default(PATINA_OPTIONS_SEARCH, "k") == PATINA_SEARCH_K_DEFAULT);
    assert_int_equal(patina_options_find(&o, PATINA_OPTIONS_IDENTIFY, "k"), PATINA_OK);
    assert_true(o.min == 1 && o.max == PATINA_K_MAX && o.def && atoi(o.def) == PATINA_IDENTIFY_K_DEFAULT);
    assert_int_equal(patina_options_find(&o, PATINA_OPTIONS_IDENTIFY, "ratio"), PATINA_OK);
    assert_true(o.min == PATINA_RATIO_MIN && o.min_open && o.max == PATINA_RATIO_MAX && !strcmp(o.def, "0.8"));
    assert_true(PATINA_RATIO_DEFAULT == 0.8);
    assert_int_equal(patina_options_find(&o, PATINA_OPTIONS_SEARCH, "range"), PATINA_OK);
    assert_null(o.def);
    assert_true(o.min == 0 && !o.min_open && isinf(o.max));

    /* one check, naming the option and its bounds */
    assert_int_equal(patina_options_check(PATINA_OPTIONS_SEARCH, "k", PATINA_K_MAX), PATINA_OK);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_SEARCH, "k", PATINA_K_MAX + 1.0), PATINA_E_LIMIT);
    assert_string_equal(patina_last_error(), "search: k = 1000001 is over the limit of 1000000");
    assert_int_equal(patina_options_check(PATINA_OPTIONS_SEARCH, "k", 0), PATINA_E_INVALID);
    assert_string_equal(patina_last_error(), "search: k = 0 is outside [1, 1000000] (an integer)");
    assert_int_equal(patina_options_check(PATINA_OPTIONS_SEARCH, "k", 2.5), PATINA_E_INVALID);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_IDENTIFY, "ratio", 0), PATINA_E_INVALID);
    assert_string_equal(patina_last_error(), "identify: ratio = 0 is outside (0, 1]");
    assert_int_equal(patina_options_check(PATINA_OPTIONS_IDENTIFY, "ratio", NAN), PATINA_E_INVALID);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_IDENTIFY, "ratio", 1), PATINA_OK);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_IDENTIFY, "ratio", 1.0000001), PATINA_E_INVALID);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_SEARCH, "range", -1), PATINA_E_INVALID);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_SEARCH, "range", INFINITY), PATINA_OK);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_IDENTIFY, "scoring", 0), PATINA_E_INVALID);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_IDENTIFY, "nope", 0), PATINA_E_INVALID);
    assert_int_equal(patina_options_check(PATINA_OPTIONS_INDEX, "batch", PATINA_BATCH_MAX + 1.0), PATINA_E_LIMIT);
}

static void test_opts_init(void **state)
{
    patina_limits_t lim;
    patina_context_opts_t co;
    patina_decode_opts_t dec;
    patina_index_opts_t io;
    patina_load_opts_t lo;
    patina_search_opts_t so;
    patina_identify_opts_t ido;
    patina_refset_spec_t rsp;
    (void)state;
    memset(&lim, 0xa5, sizeof lim);
    patina_limits_init(&lim);
    assert_true(lim.max_pixels == PATINA_DEFAULT_MAX_PIXELS && lim.max_pixels == 100000000ull);
    assert_true(lim.max_file_bytes == PATINA_DEFAULT_MAX_FILE_BYTES);
    memset(&co, 0xa5, sizeof co);
    patina_context_opts_init(&co);
    assert_int_equal(co.threads, 0);
    assert_int_equal(co.gpu_index, 0);
    assert_true(co.gpu_mem_budget == 0);
    assert_true(co.limits.max_pixels == PATINA_DEFAULT_MAX_PIXELS);
    assert_null(co.nvjpeg_library);
    assert_int_equal(co.nvjpeg_lanes, 2);
    memset(&dec, 0xa5, sizeof dec);
    patina_decode_opts_init(&dec);
    assert_int_equal(dec.strict, 0);
    assert_true(dec.limits.max_pixels == PATINA_DEFAULT_MAX_PIXELS);
    memset(&io, 0xa5, sizeof io);
    patina_index_opts_init(&io);
    assert_int_equal(io.device, PATINA_DEVICE_AUTO);
    assert_null(io.progress);
    assert_null(io.on_error);
    assert_int_equal(io.jpeg_decoder, PATINA_JPEG_AUTO);
    assert_int_equal(io.batch, PATINA_BATCH_DEFAULT);
    assert_true(io.batch_memory == PATINA_DEFAULT_BATCH_MEMORY);
    memset(&lo, 0xa5, sizeof lo);
    patina_load_opts_init(&lo);
    assert_true(lo.batch_memory == PATINA_DEFAULT_BATCH_MEMORY);
    memset(&so, 0xa5, sizeof so);
    patina_search_opts_init(&so);
    assert_int_equal(so.device, PATINA_DEVICE_AUTO);
    assert_int_equal(so.max_hits, 0);
    assert_true(so.ratio == PATINA_RATIO_DEFAULT);
    memset(&ido, 0xa5, sizeof ido);
    patina_identify_opts_init(&ido);
    assert_int_equal(ido.k, 5);
    assert_true(ido.ratio == 0.8);
    assert_int_equal(ido.scoring, PATINA_SCORE_ONE2ONE);
    assert_int_equal(ido.verify, 1);
    assert_int_equal(ido.verify_top, 10);
    assert_int_equal(ido.model, PATINA_MODEL_SIMILARITY);
    assert_true(ido.ransac_threshold == 0.01);
    assert_int_equal(ido.iterations, 1000);
    assert_int_equal(ido.shape_check, 1);
    assert_true(ido.seed == 0);
    assert_true(ido.threshold == -1.0);
    assert_int_equal(ido.guided, 0);
    assert_true(ido.guided_ratio == 0.9);
    assert_int_equal(ido.device, PATINA_DEVICE_AUTO);
    assert_int_equal(ido.precision, PATINA_PRECISION_INT8);
    assert_int_equal(ido.gpu_arena_slots, 0);
    memset(&rsp, 0xa5, sizeof rsp);
    patina_refset_spec_init(&rsp);
    assert_null(rsp.table);
    assert_int_equal(rsp.shard, 0);
    assert_int_equal(rsp.shards, 1);
    assert_null(rsp.snapshot);
    /* NULL is accepted and does nothing */
    patina_identify_opts_init(NULL);
    patina_refset_spec_init(NULL);
    patina_limits_init(NULL);
    patina_context_opts_init(NULL);
    patina_search_opts_init(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_messages),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_cpu_count),
        cmocka_unit_test(test_slice_runners),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_device_resolution),
        cmocka_unit_test(test_opts_init),
        cmocka_unit_test(test_option_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
