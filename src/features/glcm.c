/* GLCM C reference and multi-threaded CPU path; graycoprops properties and
 * Haralick's features (docs/glcm.md has every formula and convention).
 *
 * Counting is scikit-image's _glcm_loop: for each offset, every pixel pair
 * (r, c), (r+dy, c+dx) inside the image. The fast path computes the same
 * integers: rows are cut into bands spread over a thread pool, each worker
 * counts into private matrices (several interleaved copies when levels is
 * small, so that runs of equal pairs do not serialise on one counter), and
 * the private matrices are summed at the end. Integer addition commutes, so
 * every schedule gives identical counts.
 *
 * Properties use exact integer sums (64- and 128-bit) wherever the formula
 * allows, and one rounding at the end; scikit-image sums doubles, so the two
 * agree to ~1e-15 relative (tests: 1e-9). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "algo/glcm_core.h"
#include "features/glcm_ref.h"
#include "patina/glcm.h"

static const char *const prop_names[PATINA_GLCM_NPROPS] = {
    "contrast", "dissimilarity", "homogeneity", "ASM", "energy",
    "correlation", "mean", "variance", "std", "entropy"};

static const char *const haralick_names[PATINA_HARALICK_N] = {
    "asm", "contrast", "correlation", "sum_of_squares", "idm", "sum_average", "sum_variance",
    "sum_entropy", "entropy", "difference_variance", "difference_entropy", "imc1", "imc2",
    "mcc"};

const char *patina_glcm_prop_name(int k)
{
    return k >= 0 && k < PATINA_GLCM_NPROPS ? prop_names[k] : NULL;
}

const char *patina_haralick_name(int k)
{
    return k >= 0 && k < PATINA_HARALICK_N ? haralick_names[k] : NULL;
}

/* scikit-image's round(): half away from zero, then truncation by the cast,
 * on the binary64 product sin(θ)·d (θ in radians as numpy's deg2rad gives it). */
static long sk_round(double x) { return (long)(x > 0.0 ? x + 0.5 : x - 0.5); }

patina_glcm_offset_t patina_glcm_offset(double distance, double angle_deg)
{
    patina_glcm_offset_t o;
    double theta = angle_deg * (M_PI / 180.0);
    long dy = sk_round(sin(theta) * distance), dx = sk_round(cos(theta) * distance);
    /* |d| is bounded by the option tables; clamp anyway so int cannot overflow. */
    o.dy = (int)(dy > INT_MAX / 2 ? INT_MAX / 2 : dy < -INT_MAX / 2 ? -INT_MAX / 2 : dy);
    o.dx = (int)(dx > INT_MAX / 2 ? INT_MAX / 2 : dx < -INT_MAX / 2 ? -INT_MAX / 2 : dx);
    return o;
}

patina_status patina_glcm_quantize(uint8_t *q, const uint8_t *grey, size_t n, int levels,
                                   patina_glcm_quant quant)
{
    size_t i;
    if (levels < 2 || levels > PATINA_GLCM_MAX_LEVELS)
        return patina__fail(PATINA_E_INVALID, "glcm: levels=%d is out of range [2, 256]", levels);
    if ((!q || !grey) && n) return patina__fail(PATINA_E_INVALID, "glcm: null buffer");
    if (quant == PATINA_GLCM_QUANT_NONE) {
        for (i = 0; i < n; i++) {
            if (grey[i] >= levels)
                return patina__fail(PATINA_E_INVALID,
                                    "glcm: quant=none: grey value %d at pixel %zu is not below "
                                    "levels=%d",
                                    grey[i], i, levels);
            q[i] = grey[i];
        }
        return PATINA_OK;
    }
    if (quant != PATINA_GLCM_QUANT_UNIFORM)
        return patina__fail(PATINA_E_INVALID, "glcm: unknown quantisation %d", (int)quant);
    for (i = 0; i < n; i++) q[i] = (uint8_t)(((unsigned)grey[i] * (unsigned)levels) >> 8);
    return PATINA_OK;
}

patina_status glcm_check_size(int w, int h, int symmetric, const char *what)
{
    /* A cell can hold every pair of the image (twice when symmetric). */
    uint64_t pairs = (uint64_t)(w > 0 ? w : 0) * (uint64_t)(h > 0 ? h : 0);
    if (w < 0 || h < 0)
        return patina__fail(PATINA_E_INVALID, "%s: bad image size %dx%d", what, w, h);
    if (pairs > (symmetric ? (uint64_t)UINT32_MAX / 2 : (uint64_t)UINT32_MAX))
        return patina__fail(PATINA_E_LIMIT,
                            "%s: %dx%d pixels could overflow 32-bit co-occurrence counts", what,
                            w, h);
    return PATINA_OK;
}

void glcm_symmetrise(uint32_t *counts, int levels, size_t noff)
{
    size_t o, L = (size_t)levels;
    for (o = 0; o < noff; o++) {
        uint32_t *P = counts + o * L * L;
        size_t i, j;
        for (i = 0; i < L; i++) {
            P[i * L + i] *= 2;
            for (j = i + 1; j < L; j++) {
                uint32_t s = P[i * L + j] + P[j * L + i];
                P[i * L + j] = s;
                P[j * L + i] = s;
            }
        }
    }
}

static patina_status check_args(const uint32_t *counts, const uint8_t *q, int w, int h,
                                size_t stride, const uint8_t *mask, size_t mstride, int levels,
                                const patina_glcm_offset_t *off, size_t noff, int symmetric)
{
    if (levels < 2 || levels > PATINA_GLCM_MAX_LEVELS)
        return patina__fail(PATINA_E_INVALID, "glcm: levels=%d is out of range [2, 256]", levels);
    if (!counts || (noff && !off))
        return patina__fail(PATINA_E_INVALID, "glcm: null counts or offsets");
    if (noff > PATINA_GLCM_MAX_OFFSETS)
        return patina__fail(PATINA_E_LIMIT, "glcm: %zu offsets (at most %d)", noff,
                            PATINA_GLCM_MAX_OFFSETS);
    PATINA_TRY(glcm_check_size(w, h, symmetric, "glcm"));
    if (w > 0 && h > 0) {
        if (!q || stride < (size_t)w)
            return patina__fail(PATINA_E_INVALID, "glcm: null image or stride %zu < width %d",
                                stride, w);
        if (mask && mstride < (size_t)w)
            return patina__fail(PATINA_E_INVALID, "glcm: mask stride %zu < width %d", mstride, w);
    }
    return PATINA_OK;
}

/* The pairs of offset (dy, dx) have their first pixel in rows [rs, re) and
 * columns [cs, ce): the ranges where both pixels are inside. */
typedef struct span {
    int rs, re, cs, ce;
} span_t;

static span_t pair_span(int w, int h, patina_glcm_offset_t o)
{
    span_t s;
    s.rs = o.dy < 0 ? -o.dy : 0;
    s.re = o.dy > 0 ? h - o.dy : h;
    s.cs = o.dx < 0 ? -o.dx : 0;
    s.ce = o.dx > 0 ? w - o.dx : w;
    if (o.dy <= -h || o.dy >= h) s.re = s.rs; /* offset taller than the image: no pair */
    if (o.dx <= -w || o.dx >= w) s.ce = s.cs;
    return s;
}

patina_status patina_glcm_counts_ref(uint32_t *counts, const uint8_t *q, int w, int h,
                                     size_t stride, const uint8_t *mask, size_t mstride,
                                     int levels, const patina_glcm_offset_t *off, size_t noff,
                                     int symmetric)
{
    size_t o, L = (size_t)levels;
    PATINA_TRY(check_args(counts, q, w, h, stride, mask, mstride, levels, off, noff, symmetric));
    memset(counts, 0, noff * L * L * sizeof *counts);
    for (o = 0; o < noff; o++) {
        uint32_t *P = counts + o * L * L;
        span_t s = pair_span(w, h, off[o]);
        int r, c;
        for (r = s.rs; r < s.re; r++)
            for (c = s.cs; c < s.ce; c++) {
                size_t a = (size_t)r * stride + (size_t)c;
                size_t b = (size_t)(r + off[o].dy) * stride + (size_t)(c + off[o].dx);
                if (mask && (!mask[(size_t)r * mstride + (size_t)c] ||
                             !mask[(size_t)(r + off[o].dy) * mstride + (size_t)(c + off[o].dx)]))
                    continue;
                P[(size_t)q[a] * L + q[b]]++;
            }
    }
    if (symmetric) glcm_symmetrise(counts, levels, noff);
    return PATINA_OK;
}

/* ------------------------------------------------------------ fast path */

#define BAND_ROWS 64                       /* rows per work item */
#define WORKER_BYTES (2u << 20)            /* private matrices per worker per pass */
#define PARALLEL_MIN_PAIRS (1u << 21)      /* below: one thread */

/* Elements between the interleaved copies of one matrix: L*L plus 64 bytes,
 * so that equal cells of different copies never sit a multiple of 4 KiB
 * apart (x86 "4K aliasing" would make their loads wait on each other's
 * stores, which costs 3x on images with long runs of one pair). */
static size_t copy_stride(size_t LL) { return LL + 16; }

typedef struct count_job {
    const uint8_t *q, *mask;
    size_t stride, mstride;
    int w, h, levels, copies;
    const patina_glcm_offset_t *off;       /* this pass's offsets */
    size_t noff;
    uint32_t *priv;                        /* (workers, noff, copies, copy_stride) */
    size_t priv_per_worker;                /* elements */
} count_job_t;

/* Counts the pairs of one offset whose first pixel lies in rows [r0, r1)
 * into `copies` interleaved matrices H[k] = H + k*L*L. */
static void count_band(uint32_t *H, const count_job_t *j, patina_glcm_offset_t o, int r0, int r1)
{
    const size_t L = (size_t)j->levels, CS = copy_stride(L * L);
    span_t s = pair_span(j->w, j->h, o);
    int r;
    if (r0 < s.rs) r0 = s.rs;
    if (r1 > s.re) r1 = s.re;
    for (r = r0; r < r1; r++) {
        const uint8_t *a = j->q + (size_t)r * j->stride + (size_t)s.cs;
        const uint8_t *b = j->q + (size_t)(r + o.dy) * j->stride + (size_t)(s.cs + o.dx);
        const int n = s.ce - s.cs;
        int c = 0;
        if (j->mask) {
            const uint8_t *ma = j->mask + (size_t)r * j->mstride + (size_t)s.cs;
            const uint8_t *mb = j->mask + (size_t)(r + o.dy) * j->mstride + (size_t)(s.cs + o.dx);
            for (; c < n; c++)
                if (ma[c] && mb[c]) H[(size_t)a[c] * L + b[c]]++;
            continue;
        }
        if (j->copies == 4) {
            uint32_t *H1 = H + CS, *H2 = H + 2 * CS, *H3 = H + 3 * CS;
            for (; c + 4 <= n; c += 4) {
                H[(size_t)a[c] * L + b[c]]++;
                H1[(size_t)a[c + 1] * L + b[c + 1]]++;
                H2[(size_t)a[c + 2] * L + b[c + 2]]++;
                H3[(size_t)a[c + 3] * L + b[c + 3]]++;
            }
        } else if (j->copies == 2) {
            uint32_t *H1 = H + CS;
            for (; c + 2 <= n; c += 2) {
                H[(size_t)a[c] * L + b[c]]++;
                H1[(size_t)a[c + 1] * L + b[c + 1]]++;
            }
        }
        for (; c < n; c++) H[(size_t)a[c] * L + b[c]]++;
    }
}

static void count_task(void *arg, size_t band, int worker)
{
    const count_job_t *j = arg;
    const size_t CS = copy_stride((size_t)j->levels * (size_t)j->levels);
    uint32_t *mine = j->priv + (size_t)worker * j->priv_per_worker;
    int r0 = (int)band * BAND_ROWS, r1 = r0 + BAND_ROWS;
    size_t o;
    if (r1 > j->h) r1 = j->h;
    for (o = 0; o < j->noff; o++)
        count_band(mine + o * (size_t)j->copies * CS, j, j->off[o], r0, r1);
}

typedef struct reduce_job {
    uint32_t *counts;        /* (noff, L, L) of this pass */
    const uint32_t *priv;
    size_t per_worker, nworkers, noff, LL;
    int copies;
} reduce_job_t;

#define REDUCE_CHUNK 4096

/* Sums the workers' copies of chunk i of the pass's (noff, L, L) output. */
static void reduce_task(void *arg, size_t i, int worker)
{
    const reduce_job_t *j = arg;
    size_t total = j->noff * j->LL, e0 = i * REDUCE_CHUNK, e1 = e0 + REDUCE_CHUNK, e;
    (void)worker;
    if (e1 > total) e1 = total;
    for (e = e0; e < e1; e++) {
        size_t o = e / j->LL, cell = e % j->LL, wk;
        uint32_t s = 0;
        for (wk = 0; wk < j->nworkers; wk++) {
            const size_t CS = copy_stride(j->LL);
            const uint32_t *base = j->priv + wk * j->per_worker + o * (size_t)j->copies * CS;
            int k;
            for (k = 0; k < j->copies; k++) s += base[(size_t)k * CS + cell];
        }
        j->counts[e] = s;
    }
}

patina_status glcm_counts_pool(patina_pool_t *pool, uint32_t *counts, const uint8_t *q, int w,
                               int h, size_t stride, const uint8_t *mask, size_t mstride,
                               int levels, const patina_glcm_offset_t *off, size_t noff,
                               int symmetric)
{
    const size_t L = (size_t)levels, LL = L * L;
    size_t nworkers, group, o0;
    int copies;
    uint32_t *priv;
    PATINA_TRY(check_args(counts, q, w, h, stride, mask, mstride, levels, off, noff, symmetric));
    if (noff == 0) return PATINA_OK;
    if (w == 0 || h == 0) {
        memset(counts, 0, noff * LL * sizeof *counts);
        return PATINA_OK;
    }
    /* Interleaved copies break the store-to-load chains of equal pairs; they
     * pay off while they stay in L1/L2. */
    copies = L <= 64 ? 4 : L <= 128 ? 2 : 1;
    if (mask) copies = 1;
    if ((uint64_t)w * (uint64_t)h * noff < PARALLEL_MIN_PAIRS) pool = NULL;
    nworkers = pool ? (size_t)patina_pool_size(pool) : 1;
    group = WORKER_BYTES / ((size_t)copies * copy_stride(LL) * sizeof(uint32_t));
    if (group < 1) group = 1;
    if (group > noff) group = noff;
    priv = malloc(nworkers * group * (size_t)copies * copy_stride(LL) * sizeof *priv);
    if (!priv) return patina__fail(PATINA_E_NOMEM, "glcm: out of memory for counts");
    for (o0 = 0; o0 < noff; o0 += group) {
        size_t g = noff - o0 < group ? noff - o0 : group;
        size_t nbands = ((size_t)h + BAND_ROWS - 1) / BAND_ROWS;
        count_job_t cj;
        reduce_job_t rj;
        cj.q = q;
        cj.mask = mask;
        cj.stride = stride;
        cj.mstride = mstride;
        cj.w = w;
        cj.h = h;
        cj.levels = levels;
        cj.copies = copies;
        cj.off = off + o0;
        cj.noff = g;
        cj.priv = priv;
        cj.priv_per_worker = g * (size_t)copies * copy_stride(LL);
        memset(priv, 0, nworkers * cj.priv_per_worker * sizeof *priv);
        rj.counts = counts + o0 * LL;
        rj.priv = priv;
        rj.per_worker = cj.priv_per_worker;
        rj.nworkers = nworkers;
        rj.noff = g;
        rj.LL = LL;
        rj.copies = copies;
        if (pool) {
            patina_pool_run(pool, nbands, count_task, &cj);
            patina_pool_run(pool, (g * LL + REDUCE_CHUNK - 1) / REDUCE_CHUNK, reduce_task, &rj);
        } else {
            size_t b;
            for (b = 0; b < nbands; b++) count_task(&cj, b, 0);
            for (b = 0; b < (g * LL + REDUCE_CHUNK - 1) / REDUCE_CHUNK; b++) reduce_task(&rj, b, 0);
        }
    }
    free(priv);
    if (symmetric) glcm_symmetrise(counts, levels, noff);
    return PATINA_OK;
}

patina_status patina_glcm_counts(uint32_t *counts, const uint8_t *q, int w, int h, size_t stride,
                                 const uint8_t *mask, size_t mstride, int levels,
                                 const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                 int threads)
{
    patina_pool_t *pool = NULL;
    patina_status s;
    if (threads < 0) return patina__fail(PATINA_E_INVALID, "glcm: negative thread count %d", threads);
    if (threads != 1 && (uint64_t)(w > 0 ? w : 0) * (uint64_t)(h > 0 ? h : 0) * noff >= PARALLEL_MIN_PAIRS)
        PATINA_TRY(patina_pool_new(&pool, threads));
    s = glcm_counts_pool(pool, counts, q, w, h, stride, mask, mstride, levels, off, noff,
                         symmetric);
    patina_pool_free(pool);
    return s;
}

/* ------------------------------------------------------------ properties */

/* Integer histograms of one count matrix and its glcm_moments_t (the
 * reductions whose last step is glcm_finish, shared with CUDA). */
typedef struct moments {
    uint64_t rows[PATINA_GLCM_MAX_LEVELS], cols[PATINA_GLCM_MAX_LEVELS];
    uint64_t diff[PATINA_GLCM_MAX_LEVELS];         /* counts with |i-j| = k */
    uint64_t sum[2 * PATINA_GLCM_MAX_LEVELS - 1];  /* counts with i+j = k */
    glcm_moments_t m;
} moments_t;

static void moments(moments_t *h, const uint32_t *P, int levels, int logs)
{
    const int L = levels;
    glcm_moments_t *m = &h->m;
    double T;
    int i, j, k;
    memset(h, 0, sizeof *h);
    for (i = 0; i < L; i++) {
        const uint32_t *row = P + (size_t)i * (size_t)L;
        for (j = 0; j < L; j++) {
            uint64_t c = row[j];
            if (!c) continue;
            h->rows[i] += c;
            h->cols[j] += c;
            h->diff[i > j ? i - j : j - i] += c;
            h->sum[i + j] += c;
            m->Sij += c * (uint64_t)i * (uint64_t)j;
            m->Q += (unsigned __int128)c * c;
        }
    }
    for (i = 0; i < L; i++) {
        uint64_t ui = (uint64_t)i;
        m->T += h->rows[i];
        m->Si += ui * h->rows[i];
        m->Sj += ui * h->cols[i];
        m->Sii += ui * ui * h->rows[i];
        m->Sjj += ui * ui * h->cols[i];
    }
    for (k = 0; k < L; k++) {
        m->d1 += (uint64_t)k * h->diff[k];
        m->d2 += (uint64_t)k * (uint64_t)k * h->diff[k];
        m->hom += (double)h->diff[k] / (1.0 + (double)k * (double)k);
    }
    for (k = 0; k < 2 * L - 1; k++) {
        m->s1 += (uint64_t)k * h->sum[k];
        m->s2 += (uint64_t)k * (uint64_t)k * h->sum[k];
    }
    if (!logs || m->T == 0) return;
    T = (double)m->T;
    for (i = 0; i < L; i++) {      /* per-row partial sums, then rows in order */
        const uint32_t *row = P + (size_t)i * (size_t)L;
        double en = 0, eb = 0, mi = 0;
        for (j = 0; j < L; j++) {
            double c = (double)row[j], p;
            if (row[j] == 0) continue;
            p = c / T;
            en -= p * log(p);
            eb -= glcm_plogp2(p);
            /* the mutual information term by term: no cancellation between
             * entropies of ~log2(L) bits (glcm_core.h) */
            mi += glcm_mi_term(row[j], m->T, h->rows[i], h->cols[j]);
        }
        m->ent_nat += en;
        m->hxy += eb;
        m->mi += mi;
    }
    for (k = 0; k < L; k++) {
        m->hx -= glcm_plogp2((double)h->rows[k] / T);
        m->hy -= glcm_plogp2((double)h->cols[k] / T);
        m->hd -= glcm_plogp2((double)h->diff[k] / T);
    }
    for (k = 0; k < 2 * L - 1; k++) m->hs -= glcm_plogp2((double)h->sum[k] / T);
}

void patina_glcm_props(double *props, const uint32_t *counts, int levels, size_t noff)
{
    moments_t *h = malloc(sizeof *h);
    size_t o;
    if (!h) { /* ~10 KiB; without it report NaN rather than guess */
        for (o = 0; o < noff * PATINA_GLCM_NPROPS; o++) props[o] = NAN;
        return;
    }
    for (o = 0; o < noff; o++) {
        moments(h, counts + o * (size_t)levels * (size_t)levels, levels, 1);
        glcm_finish(&h->m, 0.0, props + o, (long)noff, NULL);
    }
    free(h);
}


/* ---------------------------------------------------------- Haralick */

/* The eigenvalue solver and the MCC are in glcm_core.h (shared with the GPU). */
double glcm_mcc(const uint32_t *counts, int levels, const uint64_t *rows, const uint64_t *cols,
                uint64_t total)
{
    double *work = malloc((2 * (size_t)levels * (size_t)levels + 3 * (size_t)levels) * sizeof *work);
    double r;
    if (!work) return NAN; /* out of memory: no guess */
    r = glcm_mcc_core(counts, levels, rows, cols, total, work);
    free(work);
    return r;
}

void patina_haralick(double *feats, const uint32_t *counts, int levels, size_t noff)
{
    moments_t *h = malloc(sizeof *h);
    size_t o;
    if (!h) {
        for (o = 0; o < noff * PATINA_HARALICK_N; o++) feats[o] = NAN;
        return;
    }
    for (o = 0; o < noff; o++) {
        const uint32_t *P = counts + o * (size_t)levels * (size_t)levels;
        double mcc;
        moments(h, P, levels, 1);
        mcc = glcm_mcc(P, levels, h->rows, h->cols, h->m.T);
        glcm_finish(&h->m, mcc, NULL, 0, feats + o * PATINA_HARALICK_N);
    }
    free(h);
}

void patina_haralick_aggregate(double *out, const double *feats, size_t noff, size_t group)
{
    size_t g, a, k;
    if (group == 0) return;
    for (g = 0; g < noff / group; g++)
        for (k = 0; k < PATINA_HARALICK_N; k++) {
            double s = 0, lo = HUGE_VAL, hi = -HUGE_VAL;
            for (a = 0; a < group; a++) {
                double v = feats[(g * group + a) * PATINA_HARALICK_N + k];
                s += v;
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
            out[(g * 2 + 0) * PATINA_HARALICK_N + k] = s / (double)group;
            out[(g * 2 + 1) * PATINA_HARALICK_N + k] = hi - lo;
        }
}

/* ------------------------------------------------ standardised distance */

patina_status patina_feature_stats(double *mean, double *sd, const double *vecs, size_t n,
                                   size_t dim)
{
    size_t i, k;
    if (n == 0) return patina__fail(PATINA_E_INVALID, "stats: no vectors");
    if (!mean || !sd || !vecs) return patina__fail(PATINA_E_INVALID, "stats: null argument");
    for (k = 0; k < dim; k++) {
        double s = 0, ss = 0, mu;
        for (i = 0; i < n; i++) s += vecs[i * dim + k];
        mu = s / (double)n;
        for (i = 0; i < n; i++) {
            double dlt = vecs[i * dim + k] - mu;
            ss += dlt * dlt;
        }
        mean[k] = mu;
        sd[k] = ss > 0 ? sqrt(ss / (double)n) : 1.0;
    }
    return PATINA_OK;
}

double patina_std_l2(const double *a, const double *b, const double *sd, size_t dim)
{
    double s = 0;
    size_t k;
    for (k = 0; k < dim; k++) {
        double t = (a[k] - b[k]) / (sd ? sd[k] : 1.0);
        s += t * t;
    }
    return sqrt(s);
}
