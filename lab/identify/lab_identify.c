/* The identification kernel lab (docs/lab/identify.md): the paper's
 * cuBLAS 2-NN (cublas_2nn.h) beside the library's fused kernel
 * (patina_gpu_identify), on random RootSIFT-like references.
 *
 *   lab_identify --validate   the CTest test: the cuBLAS path with exact fp32
 *                             outputs and the library (int8 and fp16) give
 *                             every reference the same one-to-one score
 *   lab_identify [N]          times both on N references (default 65536),
 *                             m = 384, n = 768, one query
 * Exits 77 without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "cublas_2nn.h"
#include "core/context.h"
#include "features/rootsift.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

static void die(const char *what)
{
    fprintf(stderr, "lab_identify: %s: %s\n", what, patina_last_error());
    exit(1);
}

/* References (nref, m, 128) rows + counts, and a query of n rows: every
 * other query row a perturbed row of some reference. */
typedef struct data {
    size_t m, n, nref;
    uint8_t *rows;     /* (nref, m, 128) */
    uint16_t *count;   /* (nref) */
    uint64_t *stamp;   /* (nref) zero */
    const uint8_t **ptr; /* (nref) each reference's rows */
    uint8_t *q;        /* (n, 128) */
} data_t;

static void make_data(data_t *d, size_t m, size_t n, size_t nref, uint64_t seed)
{
    bench_rng_t r = {seed};
    size_t i, j, k;
    d->m = m;
    d->n = n;
    d->nref = nref;
    d->rows = calloc(nref * m * 128 + 1, 1);
    d->count = malloc((nref + 1) * sizeof *d->count);
    d->stamp = calloc(nref + 1, sizeof *d->stamp);
    d->q = malloc(n * 128 + 1);
    d->ptr = malloc((nref + 1) * sizeof *d->ptr);
    if (!d->rows || !d->count || !d->stamp || !d->q || !d->ptr) die("out of memory");
    for (i = 0; i < nref; i++) d->ptr[i] = d->rows + i * m * 128;
    for (i = 0; i < nref; i++) {
        d->count[i] = (uint16_t)(i % 13 == 0 ? bench_rng_below(&r, 4) : m - bench_rng_below(&r, (uint32_t)(m / 4 + 1)));
        for (j = 0; j < d->count[i]; j++) bench_rootsift_row(d->rows + (i * m + j) * 128, &r);
    }
    for (j = 0; j < n; j++) {
        const size_t src = bench_rng_below(&r, (uint32_t)nref);
        if (j % 2 == 0 && d->count[src]) {
            const uint8_t *row = d->rows + (src * m + bench_rng_below(&r, d->count[src])) * 128;
            for (k = 0; k < 128; k++) {
                int x = row[k] + (int)bench_rng_below(&r, 7) - 3;
                d->q[j * 128 + k] = (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
            }
        } else {
            bench_rootsift_row(d->q + j * 128, &r);
        }
    }
}

static void free_data(data_t *d)
{
    free(d->rows);
    free(d->count);
    free(d->stamp);
    free(d->q);
    free(d->ptr);
}

static pgpu_idf_refs_t view_of(const data_t *d, uint64_t serial)
{
    pgpu_idf_refs_t v;
    memset(&v, 0, sizeof v);
    v.serial = serial;
    v.nslots = d->nref;
    v.m = d->m;
    v.rows = d->ptr;
    v.count = d->count;
    v.stamp = d->stamp;
    return v;
}

/* The library's scores of every slot (ncap >= nref: every candidate). */
static void library_scores(patina_gpu_t *g, const data_t *d, int prec, uint32_t *scores)
{
    pgpu_idf_refs_t v = view_of(d, 1);
    pgpu_idf_opts_t o;
    uint16_t qc = (uint16_t)d->n;
    uint64_t *keys = calloc(d->nref, sizeof *keys);
    memset(&o, 0, sizeof o);
    o.precision = prec;
    o.ratio = 0.8;
    o.scoring = 0;
    o.ncap = d->nref;
    if (patina_gpu_identify(g, &v, d->q, d->n * 128, &qc, 1, d->n, &o, keys, NULL) != PATINA_OK)
        die("patina_gpu_identify");
    memset(scores, 0, d->nref * sizeof *scores);
    for (size_t i = 0; i < d->nref && keys[i]; i++) scores[0xffffffffu - (uint32_t)keys[i]] = (uint32_t)(keys[i] >> 32);
    free(keys);
}

static int validate(patina_gpu_t *g)
{
    static const size_t shapes[][3] = {{384, 768, 1000}, {100, 200, 700}, {13, 40, 300}};
    int bad = 0;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        data_t d;
        char err[256];
        lab_2nn_t *l;
        uint32_t *ls, *gs;
        size_t i, hits = 0;
        make_data(&d, shapes[t][0], shapes[t][1], shapes[t][2], 99 + t);
        ls = malloc(d.nref * sizeof *ls);
        gs = malloc(d.nref * sizeof *gs);
        if (!(l = lab_2nn_new(d.m, d.n, 256, 0, err, sizeof err))) {
            fprintf(stderr, "lab_identify: %s\n", err);
            return 1;
        }
        if (lab_2nn_set_refs(l, d.ptr, d.count, d.nref) || lab_2nn_set_query(l, d.q, d.n) ||
            lab_2nn_run(l, 0.8, ls)) {
            fprintf(stderr, "lab_identify: the cuBLAS path failed\n");
            return 1;
        }
        for (int prec = 0; prec < 2; prec++) {
            library_scores(g, &d, prec, gs);
            for (i = 0; i < d.nref; i++) {
                if (ls[i] != gs[i]) {
                    if (bad++ < 10)
                        fprintf(stderr, "m %zu n %zu precision %d reference %zu: cuBLAS %u, library %u\n", d.m, d.n,
                                prec, i, ls[i], gs[i]);
                }
                hits += prec == 0 && ls[i] > 0;
            }
        }
        printf("m %zu n %zu: %zu references, %zu with a score > 0: cuBLAS (fp32) == library int8 == fp16: %s\n", d.m,
               d.n, d.nref, hits, bad ? "NO" : "yes");
        lab_2nn_free(l);
        free(ls);
        free(gs);
        free_data(&d);
    }
    return bad ? 1 : 0;
}

static void timing(patina_gpu_t *g, size_t nref)
{
    data_t d;
    char err[256];
    make_data(&d, 384, 768, nref, 5);
    printf("one query, n = 768, m = 384, %zu references (GPU time, median of 5)\n", nref);
    printf("| path | batch | ms | reference images/s |\n|---|---|---|---|\n");
    for (int fp16_out = 0; fp16_out < 2; fp16_out++)
        for (size_t batch = 256; batch <= 1024; batch *= 4) {
            lab_2nn_t *l = lab_2nn_new(d.m, d.n, batch, fp16_out, err, sizeof err);
            double ms;
            if (!l || lab_2nn_set_refs(l, d.ptr, d.count, d.nref) || lab_2nn_set_query(l, d.q, d.n)) {
                fprintf(stderr, "lab_identify: %s\n", l ? "upload failed" : err);
                lab_2nn_free(l);
                continue;
            }
            ms = lab_2nn_time(l, 0.8, 5);
            printf("| cuBLAS GEMM %s + top-2 + score | %zu | %.3f | %.0f |\n", fp16_out ? "fp16 out" : "fp32 out",
                   batch, ms, nref / (ms / 1e3));
            lab_2nn_free(l);
        }
    for (int prec = 0; prec < 2; prec++) {
        pgpu_idf_refs_t v = view_of(&d, 2);
        pgpu_idf_opts_t o;
        pgpu_idf_stats_t st;
        uint16_t qc = 768;
        uint64_t keys[10];
        double t[5];
        memset(&o, 0, sizeof o);
        o.precision = prec;
        o.ratio = 0.8;
        o.ncap = 10;
        for (int i = 0; i < 6; i++) {
            if (patina_gpu_identify(g, &v, d.q, 768 * 128, &qc, 1, 768, &o, keys, &st) != PATINA_OK) die("identify");
            if (i) t[i - 1] = st.ms_resident;
        }
        printf("| fused %s (library) | all | %.3f | %.0f |\n", prec ? "fp16" : "int8", bench_median(t, 5),
               nref / (bench_median(t, 5) / 1e3));
    }
    free_data(&d);
}

int main(int argc, char **argv)
{
    patina_context_t *ctx = NULL;
    patina_gpu_t *g = NULL;
    int rc = 0;
    if (patina_gpu__count() == 0) {
        fprintf(stderr, "lab_identify: no usable CUDA GPU (skipped)\n");
        return 77;
    }
    if (patina_context_new(&ctx, NULL) != PATINA_OK || patina__context_gpu_acquire(ctx, &g) != PATINA_OK)
        die("context");
    if (argc > 1 && !strcmp(argv[1], "--validate"))
        rc = validate(g);
    else
        timing(g, argc > 1 ? (size_t)atol(argv[1]) : 65536);
    patina__context_gpu_release(ctx);
    patina_context_free(ctx);
    return rc;
}
