/* What the SQFD filter's files share (src/gpu/sqfd.cu: the kernels, the
 * calls and the entry points; sqfd_copy.cu: the state of a device
 * context's SQFD search and its device copies, resident or streamed from
 * pinned host memory): the constants, the copy's layout, the kernels'
 * domain checks and the bound's constants on the host. Internal to the
 * library's CUDA side. */
#ifndef PATINA_GPU_SQFD_INTERNAL_CUH
#define PATINA_GPU_SQFD_INTERNAL_CUH

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu/context.h"
#include "gpu/fround.h"
#include "gpu/gpu.h"
#include "gpu/tcache.h"

#define SQ_THREADS 128      /* rows per scan block (one per thread) */
#define SQ_QT 4             /* queries per scan block */
#define SQ_SEL_THREADS 1024 /* selection block (tc_radix_kth: a divisor of 2048) */
#define SQ_CACHE 4096       /* device copies kept (rows of an index, a pivot table's pivots): a shard's
                             * partitions at most, as KNN_CACHE (knn_internal.cuh) */
#define SQ_PILOT_MIN 8192   /* pilot rows at least */
#define SQ_DENSE_BYTES ((size_t)512 << 20) /* pilot values per batch at most */
#define SQ_KNN_BATCH 1024   /* queries per batch, k-NN */
#define SQ_RANGE_BATCH 256  /* queries per batch, range */
#define SQ_KMAX 1024        /* centroids per record at most (SIG_K_MAX) */
#define SQ_DOMAIN 0x1p40    /* features and weights at most */
#define SQ_AMIN 0x1p-20
#define SQ_AMAX 0x1p20
#define SQ_PERM_SEED 0x9e3779b97f4a7c15ull /* the copies' order within a count (tcache_perm) */

enum { SQ_KEYS = 0, SQ_CAND = 1, SQ_PAIRS = 2 };

/* Per query of a batch (device and pinned mirror). */
typedef struct sq_qinfo {
    double sqq;  /* Sqq, the reference's double */
    float w;     /* total weight, rounded up */
    float thr;   /* candidates: lo <= thr */
    int cnt4;    /* centroids, rounded up to 4 (padding has weight 0) */
    int pad;
} sq_qinfo_t;

/* The bound's constants for one form (the header comment). */
typedef struct sq_bound {
    float alpha;
    double crel, beta, g;
} sq_bound_t;

typedef struct sq_copy {
    uint64_t serial, gen;
    size_t src_n;            /* the index's n when made */
    size_t n;                /* live rows */
    int kc;                  /* centroid slots per row (the largest count) */
    int ok;                  /* in the kernels' domain (else no arrays) */
    float alpha;
    int form;
    float4 *rows;            /* (nb, kc, 2, 32) */
    uint16_t *cnt;           /* (nb * 32) counts, 0 past n */
    float *wo;               /* (nb * 32) */
    double *soo;             /* (nb * 32) */
    uint32_t *hrow;          /* (nb * 32) host row numbers */
    uint32_t *hinv;          /* host memory, (src_n): host row -> device row (UINT32_MAX: removed) */
    size_t np;               /* pivot table: pivots (0: none) */
    double *tab;             /* (np, nb * 32) row-to-pivot distances, device order */
    double *pp;              /* (np, np) */
    /* streamed (a copy over the device budget, no pivot table; the arrays above NULL): the
     * layout in pinned host memory (host: nb blocks, fields rows, cnt, wo, soo, hrow laid
     * out as the arrays above), two device buffers of B blocks each (b_*)
     * filled by the copy stream under the scans, and a strided sample of ps rows resident
     * (p_*: the k-NN pilot) */
    int streamed;
    size_t nb, B, ps;
    tcache_host_t host;
    float4 *b_rows[2], *p_rows;
    uint16_t *b_cnt[2], *p_cnt;
    float *b_wo[2], *p_wo;
    double *b_soo[2], *p_soo;
    uint32_t *b_hrow[2], *p_hrow;
    tcache_stream_t stream;  /* the chunk buffers' order */
} sq_copy_t;

/* One stream's block of the pipeline (patina_gpu_sqfd_block_*). */
typedef struct sq_slot {
    uint32_t *h_rows, *d_rows, *h_n, *d_n; /* (PGPU_SQFD_BLOCK) device rows; their count */
    float *h_lo, *h_hi, *d_lo, *d_hi;      /* (PGPU_SQFD_BLOCK) keys */
    float4 *h_q, *d_q;                     /* (SQ_KMAX, 2) the query */
    sq_qinfo_t *h_qi, *d_qi;
    size_t m;                              /* rows of the pending block (0: none) */
} sq_slot_t;

typedef struct sq_state {
    sq_copy_t copy[SQ_CACHE];
    size_t q_cap, q_elems;   /* queries; float4 per batch */
    float4 *d_q, *h_q;       /* (q_cap, kq4, 2) */
    sq_qinfo_t *d_qi, *h_qi; /* (q_cap) */
    size_t dense_cap;        /* floats */
    float *d_dense;
    size_t cand_cap;         /* uint4 entries */
    uint4 *d_cand, *h_cand;
    uint32_t *d_cnt, *h_cnt; /* (q_cap) */
    sq_slot_t slot[2];       /* the pipeline's blocks, one per stream */
    size_t chunks, hbytes;   /* streamed copies: chunks and bytes uploaded by the current call */
} sq_state_t;

/* ---- the domain and the bound on the host ---- */

/* 1 when a record's header and centroids are in the kernels' domain. */
static inline int rec_in_domain(const float *rec, size_t dim)
{
    const size_t c = (size_t)rec[0];
    if (c < 1 || c > SQ_KMAX || 8 + 8 * c > dim) return 0;
    if (!(rec[2] >= (float)SQ_AMIN && rec[2] <= (float)SQ_AMAX) || rec[3] < 0.0f || rec[3] > 2.0f) return 0;
    for (size_t i = 0; i < 8 * c; i++) {
        const float v = rec[8 + i];
        if (!(fabsf(v) <= (float)SQ_DOMAIN)) return 0;
        if (i % 8 == 0 && v < 0.0f) return 0;
    }
    return 1;
}

static inline double rec_weight(const float *rec)
{
    double w = 0.0;
    for (size_t i = 0; i < (size_t)rec[0]; i++) w += (double)rec[8 + 8 * i];
    return w;
}

static inline float weight_up(const float *rec) { return pgpu_f_up(rec_weight(rec) * (1.0 + 0x1p-40)); }

static inline sq_bound_t bound_of(int form, float alpha)
{
    const double u = 0x1p-24, g4 = 4.0 * u / (1.0 - 4.0 * u);
    const double rho = form == 0 ? 8.0 * u : form == 1 ? 9.0 * u : 6.0 * u, beta = form == 0 ? 4.0 * u : 0.0;
    const double c1 = rho + g4 * (1.0 + rho) + 0x1p-40;
    sq_bound_t b;
    b.alpha = alpha;
    b.crel = c1 / (1.0 - c1) * (1.0 + 0x1p-20);
    b.beta = beta * (1.0 + g4) / (1.0 - c1) * (1.0 + 0x1p-20);
    b.g = form == 0 ? 1.0 : 0.0;
    return b;
}

/* ---- sqfd_copy.cu ---- */

void copy_free(patina_gpu_t *g, sq_copy_t *c);
void slots_free(patina_gpu_t *g, sq_state_t *st);
void buffers_free(patina_gpu_t *g, sq_state_t *st);
/* g's SQFD state, made on first use */
patina_status sq_state(patina_gpu_t *g, sq_state_t **out);
/* Device memory of the SQFD family (at least one byte). */
patina_status sq_alloc(patina_gpu_t *g, void **p, size_t bytes, const char *tag);
/* The copy of idx, made now if g holds none (or an outdated one). */
patina_status copy_of(patina_gpu_t *g, sq_state_t *st, const pgpu_sqfd_index_t *idx, sq_copy_t **out);

#endif
