/* One CEDD k-NN query on the GPU -- the single-launch engine (k_tc_one:
 * pilot, threshold, filtering scan and final ranking in one cooperative
 * launch; gpu/knn_tc.cuh) that answers a call of one query with k <= 64 --
 * against the CPU search (device CPU), bit for bit: the same count, the same
 * ids in the same order (ties by id), the same distance bits.
 *   - random tables (bins 0..7, 70% zero, ~3% duplicated rows, a zero row,
 *     ids shuffled) of 1, 2, 127, 129, 5000, 8193, 100003 (not with
 *     PATINA_TEST_QUICK=2, for racecheck) and 1000003 (not with
 *     PATINA_TEST_QUICK) rows -- sizes that are not a multiple of
 *     the scan's 128-row stage, below and above the 8192-row pilot -- k in
 *     {1, 10, 64}, k above the table's size; queries random, copies of table
 *     rows (exact matches and their duplicates: ties), the zero query (the
 *     CPU's by the engine's rule);
 *   - an empty table (0 rows);
 *   - ties: a few hundred distinct rows each repeated (3 times: ties inside
 *     the answer; 60 times: ties that overflow the candidate list, answered
 *     by the retry or the CPU, still the CPU's answer);
 *   - real CEDD descriptors of the photographs under samples/ (and their
 *     perturbed copies) as table and queries;
 *   - the ties and the photographs through the one-launch kernel (the
 *     default) and through the multi-launch path;
 *   - the random queries again with theta selected from all the pilot
 *     values (staged in shared memory, or read through L2) instead of the
 *     blocks' top-k lists, and through the multi-launch path
 *     (patina_gpu__knn_one's modes), and with the measurement on
 *     (patina_gpu__knn_prof: the same answers; the figures present, not
 *     negative, the kernel's phases within its event time);
 *   - rows removed and added between calls (the device copy's dead rows and
 *     appended rows), the same query twice (the launch's own counters), and
 *     single queries between batches (buffers shared with the multi-launch
 *     path);
 *   - range search of one query (the same kernel's range mode), radii 0 to
 *     100, max_hits, through the one launch and the multi-launch path;
 *   - a device budget with room for the copy but not for its packed rows:
 *     the multi-launch kernels answer, the CPU's answer.
 * Every GPU answer that the engine settles counts in stats.gpu_tensor; the
 * test also checks that the random queries were answered on the GPU.
 * Skipped (77) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h" /* patina_gpu__knn_one, patina_gpu__knn_prof */
#include "patina/patina.h"
#include "testutil.h"

#define DIM PATINA_CEDD_DIM

static patina_context_t *CTX;
static int QUICK;

static void random_row(uint8_t *d, tu_rng_t *r)
{
    for (int i = 0; i < DIM; i++) {
        const uint32_t u = tu_rng_below(r, 100);
        d[i] = (uint8_t)(u < 70 ? 0 : 1 + tu_rng_below(r, 7));
    }
}

/* rows (n, DIM): random, ~3% copies of earlier rows, row 0 zero */
static uint8_t *random_rows(size_t n, tu_rng_t *r)
{
    uint8_t *rows = malloc(n * DIM + 1);
    assert_non_null(rows);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && tu_rng_below(r, 100) < 3)
            memcpy(rows + i * DIM, rows + tu_rng_below(r, (uint32_t)i) * DIM, DIM);
        else
            random_row(rows + i * DIM, r);
    }
    if (n) memset(rows, 0, DIM);
    return rows;
}

/* An index of n rows, ids 1 + 5 i shuffled (ties must follow ids, not rows). */
static patina_index_t *index_of(const uint8_t *rows, size_t n, tu_rng_t *r)
{
    patina_extractor_t *ex;
    patina_index_t *idx;
    uint64_t *ids = malloc((n + 1) * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) ids[i] = 1 + 5 * (uint64_t)i;
    for (size_t i = n; i > 1; i--) {
        const size_t j = tu_rng_below(r, (uint32_t)i);
        const uint64_t t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    TU_OK(patina_extractor_new(&ex, "cedd"));
    TU_OK(patina_index_new(&idx, ex, ids, rows, n));
    patina_extractor_free(ex);
    free(ids);
    return idx;
}

/* The CPU's hits a (ca) against the GPU's b (cb): the same count, ids and
 * distance bits; mismatches counted, the first few printed with `what`, the
 * table's size and `param` (k or the radius). */
static size_t compare_hits(const char *what, size_t n, double param, const patina_hit_t *a, size_t ca,
                           const patina_hit_t *b, size_t cb)
{
    size_t bad = 0;
    if (ca != cb) {
        printf("  %s: n %zu (%g): cpu %zu hits, gpu %zu\n", what, n, param, ca, cb);
        bad++;
    }
    for (size_t i = 0; i < ca && i < cb; i++)
        if (a[i].id != b[i].id || memcmp(&a[i].distance, &b[i].distance, sizeof(double)) != 0) {
            if (bad < 4)
                printf("  %s: n %zu (%g) rank %zu: cpu id %llu %.17g, gpu id %llu %.17g\n", what, n, param, i,
                       (unsigned long long)a[i].id, a[i].distance, (unsigned long long)b[i].id, b[i].distance);
            bad++;
        }
    return bad;
}

/* One query, k: GPU against CPU; mismatches counted (first few printed).
 * *on_gpu += 1 when the GPU's engines answered it. */
static size_t check(const patina_index_t *idx, const uint8_t *q, size_t k, const char *what, size_t *on_gpu)
{
    patina_hit_t *a = calloc(k, sizeof *a), *b = calloc(k, sizeof *b);
    size_t ca = 0, cb = 0, bad = 0;
    patina_search_opts_t cpu, gpu;
    patina_search_stats_t gs;
    assert_true(a && b);
    patina_search_opts_init(&cpu);
    patina_search_opts_init(&gpu);
    cpu.device = PATINA_DEVICE_CPU;
    gpu.device = PATINA_DEVICE_GPU;
    memset(&gs, 0, sizeof gs);
    gpu.stats = &gs;
    TU_OK(patina_index_knn(NULL, idx, q, 1, k, &cpu, a, &ca));
    TU_OK(patina_index_knn(CTX, idx, q, 1, k, &gpu, b, &cb));
    bad += compare_hits(what, patina_index_size(idx), (double)k, a, ca, b, cb);
    if (on_gpu && gs.gpu_tensor >= 1 && gs.cpu == 0) (*on_gpu)++; /* >= 1: a context of several GPUs counts each */
    free(a);
    free(b);
    return bad;
}

/* The last call's measurement (patina_gpu__knn_prof), when k_tc_one ran
 * (a device without cooperative launches takes the multi-launch path: not
 * measured; *valid counts the others): no figure negative, the kernel's
 * phases inside the kernel's event time (2 us for the two clocks' reading
 * apart), at most TC_CAND candidates. */
static size_t prof_bad(size_t n, size_t k, size_t *valid)
{
    pgpu_knn_prof_t p;
    patina_gpu__knn_prof_last(&p);
    if (!p.valid) return 0;
    (*valid)++;
    const double phases = p.spread_us + p.pilot_us + p.theta_us + p.scan_us + p.sync_us + p.final_us;
    const double f[] = {p.kernel_us, p.spread_us, p.pilot_us, p.theta_us, p.scan_us, p.sync_us, p.final_us,
                        p.begin_us, p.prep_us, p.launch_us, p.wait_us, p.out_us, p.meas_us};
    int ok = p.kernel_us > 0 && p.cand <= 4096 && phases - p.spread_us <= p.kernel_us + 2.0;
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) ok = ok && f[i] >= 0;
    if (!ok)
        printf("  measurement, %zu rows, k %zu: valid %d kernel %.1f us, phases %.1f us, cand %zu\n", n, k, p.valid,
               p.kernel_us, phases, p.cand);
    return !ok;
}

static void test_random(void **state)
{
    static const size_t ns[] = {1, 2, 127, 129, 5000, 8193, 100003, 1000003};
    static const size_t ks[] = {1, 10, 64};
    const size_t nn = sizeof ns / sizeof *ns - (QUICK ? (QUICK > 1 ? 2 : 1) : 0);
    tu_rng_t r;
    size_t bad = 0, runs = 0, on_gpu = 0, random_q = 0, measured = 0;
    (void)state;
    tu_rng_seed(&r, 32);
    for (size_t a = 0; a < nn; a++) {
        const size_t n = ns[a];
        uint8_t *rows = random_rows(n, &r), q[DIM];
        patina_index_t *idx = index_of(rows, n, &r);
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
            const size_t k = ks[b];
            for (int t = 0; t < (QUICK ? 2 : 4); t++) { /* random queries */
                random_row(q, &r);
                bad += check(idx, q, k, "random", &on_gpu);
                random_q++;
                runs++;
                /* theta from all the pilot values (shared memory, then
                 * L2), and the multi-launch path: the same answers */
                for (int m = 0; m < 3; m++) {
                    static const int modes[3] = {PGPU_KNN_ONE_ALL, PGPU_KNN_ONE_L2, PGPU_KNN_ONE_MULTI};
                    static const char *what[3] = {"select of all", "select through L2", "multi-launch"};
                    patina_gpu__knn_one(modes[m]);
                    bad += check(idx, q, k, what[m], NULL);
                }
                patina_gpu__knn_one(PGPU_KNN_ONE_DEFAULT);
                /* measured: the same answer, and its figures */
                patina_gpu__knn_prof(1);
                bad += check(idx, q, k, "measured", NULL);
                bad += prof_bad(n, k, &measured);
                patina_gpu__knn_prof(0);
            }
            for (int t = 0; t < 2; t++) { /* a row of the table: distance 0, and its duplicates */
                memcpy(q, rows + tu_rng_below(&r, (uint32_t)n) * DIM, DIM);
                bad += check(idx, q, k, "table row", NULL);
                runs++;
            }
            memset(q, 0, DIM); /* the zero query: the CPU's, same answer */
            bad += check(idx, q, k, "zero query", NULL);
            runs++;
        }
        patina_index_free(idx);
        free(rows);
    }
    printf("  %zu single queries, %zu of %zu random ones answered on the GPU (%zu measured in one launch), "
           "%zu differences\n", runs, on_gpu, random_q, measured, bad);
    assert_int_equal(bad, 0);
    assert_int_equal(on_gpu, random_q);
}

static void test_empty(void **state)
{
    tu_rng_t r;
    uint8_t q[DIM];
    patina_index_t *idx;
    (void)state;
    tu_rng_seed(&r, 0);
    idx = index_of(q, 0, &r);
    random_row(q, &r);
    for (size_t k = 1; k <= 64; k *= 8) assert_int_equal(check(idx, q, k, "empty", NULL), 0);
    patina_index_free(idx);
}

/* distinct rows, each `copies` times, interleaved */
static void ties(size_t distinct, size_t copies, tu_rng_t *r)
{
    const size_t n = distinct * copies;
    uint8_t *base = malloc(distinct * DIM), *rows = malloc(n * DIM), q[DIM];
    patina_index_t *idx;
    size_t bad = 0;
    assert_true(base && rows);
    for (size_t i = 0; i < distinct; i++) random_row(base + i * DIM, r);
    for (size_t i = 0; i < n; i++) memcpy(rows + i * DIM, base + (i % distinct) * DIM, DIM);
    idx = index_of(rows, n, r);
    for (int t = 0; t < 6; t++) {
        if (t % 2) memcpy(q, base + tu_rng_below(r, (uint32_t)distinct) * DIM, DIM);
        else random_row(q, r);
        for (int m = 0; m < 2; m++) { /* one launch, then the multi-launch path */
            patina_gpu__knn_one(m ? PGPU_KNN_ONE_MULTI : PGPU_KNN_ONE_DEFAULT);
            bad += check(idx, q, 1, m ? "ties, multi-launch" : "ties", NULL);
            bad += check(idx, q, 10, m ? "ties, multi-launch" : "ties", NULL);
            bad += check(idx, q, 64, m ? "ties, multi-launch" : "ties", NULL);
        }
        patina_gpu__knn_one(PGPU_KNN_ONE_DEFAULT);
    }
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    free(base);
    free(rows);
}

static void test_ties(void **state)
{
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 3);
    ties(3001, 3, &r);  /* 9003 rows: ties inside the answers */
    ties(300, 60, &r);  /* 18000 rows: ties that overflow the candidates */
}

/* CEDD of the photographs under $PATINA_SAMPLES (else PATINA_SAMPLES_DIR:
 * samples/, scripts/fetch-samples.sh), then perturbed copies
 * (a few bins moved by one) up to 20000 rows. */
static void test_samples(void **state)
{
    const char *env = getenv("PATINA_SAMPLES"), *dir = env && *env ? env : PATINA_SAMPLES_DIR;
    char **files = NULL;
    const size_t nf = tu_list_files(dir, "jpg,jpeg,png", &files);
    const size_t n = 20000;
    uint8_t *rows = malloc(n * DIM);
    size_t m = 0, bad = 0;
    tu_rng_t r;
    patina_index_t *idx;
    (void)state;
    assert_non_null(rows);
    tu_rng_seed(&r, 7);
    for (size_t i = 0; i < nf && m < 200; i++) {
        patina_image_t img;
        memset(&img, 0, sizeof img);
        if (patina_image_load(&img, files[i], NULL) != PATINA_OK) continue;
        if (patina_cedd_extract(rows + m * DIM, &img, 0) == PATINA_OK) m++;
        patina_image_release(&img);
    }
    tu_free_list(files, nf);
    if (m == 0) {
        printf("  samples: no photographs under '%s' (set PATINA_SAMPLES); skipped\n", dir);
        free(rows);
        return;
    }
    printf("  samples: %zu photographs\n", m);
    for (size_t i = m; i < n; i++) {
        uint8_t *d = rows + i * DIM;
        memcpy(d, rows + tu_rng_below(&r, (uint32_t)m) * DIM, DIM);
        for (int j = 0; j < 4; j++) {
            const uint32_t e = tu_rng_below(&r, DIM);
            d[e] = (uint8_t)(d[e] == 7 ? 6 : d[e] == 0 ? 1 : d[e] + (tu_rng_below(&r, 2) ? 1 : -1));
        }
    }
    idx = index_of(rows, n, &r);
    for (int md = 0; md < 2; md++) { /* one launch, then the multi-launch path */
        patina_gpu__knn_one(md ? PGPU_KNN_ONE_MULTI : PGPU_KNN_ONE_DEFAULT);
        for (size_t i = 0; i < m; i++) {
            bad += check(idx, rows + i * DIM, 1, "samples", NULL);
            bad += check(idx, rows + i * DIM, 10, "samples", NULL);
            bad += check(idx, rows + i * DIM, 64, "samples", NULL);
        }
    }
    patina_gpu__knn_one(PGPU_KNN_ONE_DEFAULT);
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    free(rows);
}

/* Removed and added rows between calls; the same query twice; single
 * queries between batches. */
static void test_live(void **state)
{
    const size_t n = 30011;
    tu_rng_t r;
    uint8_t *rows, q[DIM], batch[7 * DIM];
    uint64_t rm[500], add_ids[300];
    uint8_t add[300 * DIM];
    patina_index_t *idx;
    size_t bad = 0, removed = 0;
    (void)state;
    tu_rng_seed(&r, 9);
    rows = random_rows(n, &r);
    idx = index_of(rows, n, &r);
    random_row(q, &r);
    bad += check(idx, q, 10, "live", NULL);
    bad += check(idx, q, 10, "live again", NULL);
    /* the query's own nearest rows removed: the dead rows must not answer */
    {
        patina_hit_t h[64];
        size_t c = 0;
        patina_search_opts_t o;
        patina_search_opts_init(&o);
        o.device = PATINA_DEVICE_CPU;
        TU_OK(patina_index_knn(NULL, idx, q, 1, 64, &o, h, &c));
        for (size_t i = 0; i < c; i++) rm[i] = h[i].id;
        for (size_t i = c; i < 500; i++) rm[i] = 1 + 5 * (uint64_t)tu_rng_below(&r, (uint32_t)n);
        TU_OK(patina_index_remove(idx, rm, 500, &removed));
    }
    bad += check(idx, q, 1, "removed", NULL);
    bad += check(idx, q, 64, "removed", NULL);
    for (size_t i = 0; i < 300; i++) { /* new rows, some equal to the query */
        add_ids[i] = 1000000 + i;
        if (i % 50 == 0) memcpy(add + i * DIM, q, DIM);
        else random_row(add + i * DIM, &r);
    }
    TU_OK(patina_index_put(idx, add_ids, add, 300));
    bad += check(idx, q, 10, "added", NULL);
    bad += check(idx, q, 64, "added", NULL);
    for (int t = 0; t < 3; t++) { /* a batch, then one query */
        patina_hit_t h[7 * 10];
        size_t c[7];
        patina_search_opts_t o;
        patina_search_opts_init(&o);
        o.device = PATINA_DEVICE_GPU;
        for (int i = 0; i < 7; i++) random_row(batch + i * DIM, &r);
        TU_OK(patina_index_knn(CTX, idx, batch, 7, 10, &o, h, c));
        random_row(q, &r);
        bad += check(idx, q, 10, "after a batch", NULL);
    }
    assert_true(removed > 0);
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    free(rows);
}

/* One range query, GPU against CPU (counts, ids, distance bits); *on_gpu
 * += 1 when the GPU answered it. */
static size_t check_range(const patina_index_t *idx, const uint8_t *q, double radius, size_t max_hits,
                          const char *what, size_t *on_gpu)
{
    patina_hit_t *a = NULL, *b = NULL;
    size_t ca = 0, cb = 0, bad = 0;
    patina_search_opts_t cpu, gpu;
    patina_search_stats_t gs;
    patina_search_opts_init(&cpu);
    patina_search_opts_init(&gpu);
    cpu.device = PATINA_DEVICE_CPU;
    gpu.device = PATINA_DEVICE_GPU;
    cpu.max_hits = gpu.max_hits = max_hits;
    memset(&gs, 0, sizeof gs);
    gpu.stats = &gs;
    TU_OK(patina_index_range(NULL, idx, q, 1, radius, &cpu, &a, &ca));
    TU_OK(patina_index_range(CTX, idx, q, 1, radius, &gpu, &b, &cb));
    bad += compare_hits(what, patina_index_size(idx), radius, a, ca, b, cb);
    if (on_gpu && gs.gpu_tensor >= 1 && gs.cpu == 0) (*on_gpu)++;
    free(a);
    free(b);
    return bad;
}

/* Range search of one query (k_tc_one's range mode: no pilot, theta from
 * the radius, the final block's range pass) against the CPU: random
 * tables, radii from 0 (exact copies) to 100 (every row: the CPU's by the
 * engine's rule), max_hits, table rows (distance 0 and duplicates),
 * random queries, the zero query; and through the multi-launch path. The
 * random queries within radius 60 are answered on the GPU. */
static void test_range(void **state)
{
    static const size_t ns[] = {129, 5000, 100003};
    static const double radii[] = {0.0, 30.0, 45.0, 60.0, 100.0};
    tu_rng_t r;
    size_t bad = 0, runs = 0, on_gpu = 0, want = 0;
    (void)state;
    tu_rng_seed(&r, 45);
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        const size_t n = ns[a];
        uint8_t *rows = random_rows(n, &r), q[DIM];
        patina_index_t *idx = index_of(rows, n, &r);
        for (size_t b = 0; b < sizeof radii / sizeof *radii; b++)
            for (int t = 0; t < 4; t++) {
                const size_t max_hits = t == 3 ? 5 : 0;
                if (t < 2) random_row(q, &r);
                else memcpy(q, rows + tu_rng_below(&r, (uint32_t)n) * DIM, DIM);
                const int counted = t < 2 && radii[b] <= 60.0;
                bad += check_range(idx, q, radii[b], max_hits, "range", counted ? &on_gpu : NULL);
                want += (size_t)counted;
                patina_gpu__knn_one(PGPU_KNN_ONE_MULTI);
                bad += check_range(idx, q, radii[b], max_hits, "range, multi-launch", NULL);
                patina_gpu__knn_one(PGPU_KNN_ONE_DEFAULT);
                runs++;
            }
        memset(q, 0, DIM);
        bad += check_range(idx, q, 30.0, 0, "range, zero query", NULL);
        patina_index_free(idx);
        free(rows);
    }
    printf("  %zu single range queries, %zu of %zu random ones within radius 60 answered on the GPU, %zu "
           "differences\n", runs, on_gpu, want, bad);
    assert_int_equal(bad, 0);
    assert_int_equal(on_gpu, want);
}

/* A device budget with room for the copy but not for its packed rows (80
 * bytes a row more, knn_layout.cuh): the copy is made without them and a
 * single query takes the multi-launch kernels (the measurement says
 * k_tc_one did not run) with the CPU's answer; a context with room runs
 * k_tc_one on the same index. */
static void test_no_room(void **state)
{
    static const size_t ks[] = {1, 10, 64};
    const size_t n = 100003, alloc = n + n / 4 + 1024 + 128; /* the copy's rows: room for appends, a stage */
    patina_context_opts_t co;
    patina_context_t *saved = CTX, *tight;
    tu_rng_t r;
    size_t bad = 0, on_gpu = 0, runs = 0, one = 0;
    (void)state;
    tu_rng_seed(&r, 77);
    uint8_t *rows = random_rows(n, &r), q[DIM];
    patina_index_t *idx = index_of(rows, n, &r);
    patina_context_opts_init(&co);
    /* the copy and 5 MB for the buffers: 5 MB short of the packed rows */
    co.gpu_mem_budget = alloc * (144 + 16 + 21) + (5u << 20);
    TU_OK(patina_context_new(&tight, &co));
    for (int c = 0; c < 2; c++) {
        CTX = c ? saved : tight;
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
            for (int t = 0; t < 3; t++) {
                pgpu_knn_prof_t p;
                random_row(q, &r);
                patina_gpu__knn_prof(1);
                bad += check(idx, q, ks[b], c ? "with room" : "no room for the packed rows", c ? NULL : &on_gpu);
                patina_gpu__knn_prof_last(&p);
                patina_gpu__knn_prof(0);
                if (c) one += (size_t)p.valid;
                else bad += (size_t)p.valid; /* k_tc_one must not have run */
                runs += !c;
            }
    }
    CTX = saved;
    patina_context_free(tight);
    patina_index_free(idx);
    free(rows);
    printf("  no room for the packed rows: %zu of %zu queries answered on the GPU (multi-launch); with room, %zu "
           "by k_tc_one; %zu differences\n", on_gpu, runs, one, bad);
    assert_int_equal(bad, 0);
    assert_int_equal(on_gpu, runs);
    assert_true(one > 0); /* the contrast: with room, the one-launch kernel */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random), cmocka_unit_test(test_empty),   cmocka_unit_test(test_ties),
        cmocka_unit_test(test_samples), cmocka_unit_test(test_live), cmocka_unit_test(test_range),
        cmocka_unit_test(test_no_room),
    };
    int rc;
    const char *quick = getenv("PATINA_TEST_QUICK");
    QUICK = quick && *quick ? atoi(quick) : 0;
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test (a sanitizer's run): its name, * and ? allowed */
    tu_require_gpu();
    if (patina_context_new(&CTX, NULL) != PATINA_OK) {
        fprintf(stderr, "test_knn_one_gpu: no context: %s\n", patina_last_error());
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    patina_context_free(CTX);
    return rc;
}
