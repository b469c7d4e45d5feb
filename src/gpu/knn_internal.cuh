/* What the k-NN engine's files share (src/gpu/knn.cu: the kernels and the
 * resident engines; knn_copy.cu: device copies and their updates;
 * knn_stream.cu: indexes larger than the device, streamed from the pinned
 * host tier or in chunks of rows, and the entry points): the state of a
 * device context's search, the tensor-core engine's call layout, the
 * filters' host-side values and the functions that cross the files. Not a
 * header of the lab: internal to the library's CUDA side. */
#ifndef PATINA_GPU_KNN_INTERNAL_CUH
#define PATINA_GPU_KNN_INTERNAL_CUH

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "algo/distance_ids.h"
#include "algo/hits.h"
#include "gpu/context.h"
#include "gpu/fround.h"
#include "gpu/gpu.h"
#include "gpu/knn_layout.cuh"
#include "gpu/tcache.h"

/* Device copies kept at most (slots; the context's memory budget drops the
 * least recently used first, tcache.h). As many as a cluster shard's
 * partitions can be (CLU_PARTITIONS_MAX): a shard searches every partition
 * it hosts in one call, and a count below them evicted and laid out again
 * each partition on every query (2.4 s a query for 32 partitions of
 * 312,500 CEDD rows with 8 slots, against 0.5 ms for the rows in one
 * table: bench_cluster knn --inproc --tables 32, docs/cluster.md). */
#define KNN_CACHE 4096
#define KNN_PERM_SEED 0x243f6a8885a308d3ull /* the copies' row order (tcache_perm) */

/* One index on the device. */
typedef struct knn_copy {
    uint64_t serial;
    size_t n, dim, bytes;
    int tc;                  /* the tensor-core Tanimoto layout (below) */
    int dp;                  /* tc: bytes per device row (144 or 256) */
    uint8_t *descs;          /* tc: (n + TC_R, dp) permuted, zero padded; else (n, bytes) */
    uint64_t *ids;           /* (n), in the rows' order */
    tc_aux_t *aux;           /* tc: (cap + TC_R) */
    uint8_t *pk;             /* tc: (cap + TC_R, TC_PK_BYTES(dp)) the rows packed (knn_layout.cuh) for
                              * the single query's kernel; NULL where the budget leaves no room */
    uint32_t *t1;            /* tc: (cap) */
    double *c3;              /* tc: (cap) */
    double *ptab;            /* tc: (ptab_rows, 8) */
    double *sd;              /* std_l2: (dim) */
    float *fx;               /* definition path: the float filter's values (dim, n) (knn_fx.cuh); NULL: none */
    fx_aux_t *fxa;           /* (n) its per-row mr, Nr */
    int8_t *ix;              /* definition path, dot-product distances: the tensor-core filter's limbs
                              * (n + IX_R, 2 ixdp) (knn_ix.cuh); NULL: none */
    ix_info_t *ixi;          /* (n + IX_R) */
    int ixdp;                /* bytes per limb (32, 64, 128 or 256) */
    ix_info_t ixmax;         /* the rows' largest A, E and N or W (y, z, w; x unused): k_ix_scan's cut */
    /* live updates (tc): device row i < nperm holds host row perm[i] (host
     * memory); rows past nperm were appended in host order; removed rows
     * are blanked and flagged in dead */
    size_t cap, nperm, src_n; /* rows allocated; permuted; host rows seen */
    uint32_t *perm, *inv;    /* device row -> host row, host row -> device row (< nperm) */
    uint32_t *d_rm;          /* (TC_RM_CHUNK) removed device rows, a chunk at a time */
    uint8_t *dead;           /* tc: (cap) device flags */
    uint64_t dead_gen;
} knn_copy_t;

/* The pinned host tier of a tensor-core index too large for the device
 * (search_tier, below): its device layout in pinned memory, the values
 * the final pass reads resident on the device, two chunk buffers. */
typedef struct knn_tier {
    uint64_t serial;          /* the index's (0: none) */
    size_t dim, n, nperm, src_n;
    int dp;
    uint64_t dead_gen;
    uint32_t *perm, *inv;     /* device row -> host row, host row -> device row (< nperm) */
    tcache_host_t host;       /* pinned, cap = host.cap rows: field 0 the rows (dp), 1 their sums (tc_aux_t) */
    uint32_t *t1;             /* device (cap) */
    double *c3;               /* device (cap) */
    uint64_t *ids;            /* device (cap) */
    uint8_t *dead;            /* device (cap) */
    double *ptab;             /* device */
    uint32_t *d_rm;           /* device (TC_RM_CHUNK) */
    size_t R;                 /* rows a chunk buffer holds (0: none yet) */
    uint8_t *b_rows[2];       /* device (R + TC_R, dp) */
    tc_aux_t *b_aux[2];       /* device (R + TC_R) */
    uint8_t *h_res[2];        /* pinned: a chunk's results (res_bytes each) */
    size_t res_bytes;
    tcache_stream_t stream;   /* the chunk buffers' order */
    void *ev_res[2];          /* cudaEvent_t: a chunk's results downloaded */
} knn_tier_t;

/* The uploads of a definition-path copy (a chunk of an index searched in
 * chunks), kept in pinned memory so that the next call uploads them again
 * without laying the rows out: what put() sent, field by field. */
#define IMAGE_PUTS 8
typedef struct copy_image {
    int valid, failed, nput;
    size_t n, src_n;
    uint64_t dead_gen;
    int ixdp;
    ix_info_t ixmax;
    struct {
        size_t field;            /* offsetof the device pointer in knn_copy_t */
        void *host;              /* pinned */
        size_t bytes;
        const char *tag;
    } put[IMAGE_PUTS];
} copy_image_t;

/* The images of one chunking (rows per chunk) of one index state (serial,
 * rows, removals): any change makes them stale. */
typedef struct chunk_images {
    uint64_t serial, dead_gen;
    size_t n, rows, count;
    copy_image_t *img;
} chunk_images_t;

typedef struct knn_state {
    knn_copy_t copy[KNN_CACHE];
    knn_tier_t tier;
    chunk_images_t ci;
    copy_image_t *rec;           /* put() records into it (NULL: no) */
    const copy_image_t *replay;  /* copy_of uploads it instead of laying out (NULL: no) */
    size_t replayed;             /* bytes uploaded from images (added to, by image_replay) */
    /* per-call buffers of the definition path, for def_q queries, def_s
     * pilot rows, def_take answers and def_dim elements (grown as needed) */
    size_t def_q, def_s, def_take, def_dim;
    double *d_qv;            /* (def_q, def_dim) queries as doubles */
    double *d_dense;         /* (def_q, def_s) pilot distances */
    uint32_t *d_thr, *d_dcnt, *d_dcand; /* (def_q), (def_q), (def_q, TC_CAND) */
    double *d_dist, *h_dist; /* (def_q, def_take) answers; pinned mirror */
    uint64_t *d_id, *h_id;
    uint8_t *d_dflag, *h_dflag;
    float *d_fq;             /* (def_q, def_dim) queries as the float filter's values */
    fx_qinfo_t *d_fqi;       /* (def_q) */
    uint32_t *d_dn, *h_dn;   /* (def_q) range hits */
    int8_t *d_iq;            /* (def_q, 2 IX_MAXDIM) queries as the tensor-core filter's limbs */
    ix_info_t *d_iqi;        /* (def_q) */
    float *d_ithr;           /* (def_q) its thresholds */
    int sms;                 /* the device's multiprocessors */
    int cc;                  /* its compute capability (patina_gpu_t.cc) */
    /* per-call buffers of the tensor-core engine, for tq_cap queries: the
     * inputs (query rows, qinfo, prepared queries) and the outputs
     * (counts, flags, distances, ids) each packed into one region, so that
     * a call makes one upload and one download (tc_io) */
    size_t tq_cap, tq_dense, tq_out; /* queries; pilot floats; output entries */
    uint8_t *d_in, *h_in, *d_out, *h_out;
    float *d_pilot;          /* (tq_dense) */
    uint32_t *d_cnt, *d_cand;
    int one_bps[2];          /* k_tc_one's blocks per SM (dp 144, 256); 0: not asked yet; -1: no cooperative launch */
    uint8_t *h_out_of, *h_out_dev; /* h_out_dev: the device's address of h_out when it was h_out_of (k_tc_one's answer) */
    cudaEvent_t prof_ev[2];  /* around k_tc_one when measured (patina_gpu__knn_prof); NULL: not made yet */
    /* several copies searched as one (patina_gpu_knn_many): a second set
     * of counts, candidates and outputs beside the call's (copy j uses set
     * j & 1: its final pass runs beside the next copy's scan), and two pinned
     * result buffers of many_bytes each, a copy's answers downloaded into one
     * while the host merges the other's (events NULL: not made yet) */
    uint8_t *h_many[2];
    size_t many_bytes, many_q;
    cudaEvent_t many_ev[2];  /* a buffer set's final pass and download done */
    cudaEvent_t many_sev[2]; /* a buffer set's scan done */
    uint32_t *d_cnt2, *d_cand2; /* the second set: (many_q), (many_q, TC_CAND) */
    uint8_t *d_out2;         /* (many_bytes) */
} knn_state_t;

#define TC_RM_CHUNK 8192 /* removed rows applied per launch */

#define TC_PILOT_MIN 8192                 /* rows of the pilot sample at least */
#define TC_PILOT_BYTES ((size_t)512 << 20) /* pilot values per launch at most */
#define TC_KNN_BATCH 4096                 /* queries per launch, k-NN */
#define TC_RANGE_BATCH 256                /* queries per launch, range */
#define TC_ONE_KMAX 64                    /* k of a single query answered by one launch (k_tc_one) at most */
#define TC_ONE_PILOT_ROWS 512             /* k_tc_one: pilot rows a block at least (8 warps x 2 groups of 32) */

/* Rows of the pilot sample: enough that the kth best of the sample ranks
 * about `want`th in the table (candidates ~ take n / S), at least
 * TC_PILOT_MIN, at most the table. The rank of a sample's kth best spreads
 * like a Gamma(k) variable: for k = 1 it is geometric (P(rank > 8 x mean)
 * ~ e^-8), so small k aims lower; from k = 10 on the spread is narrow.
 * A query whose candidates still overflow is retried with the whole table
 * as its pilot (tc_retry). */
static inline size_t tc_pilot_rows(size_t n, size_t take)
{
    const size_t want = take < 10 ? TC_CAND / 8 : take < 100 ? TC_CAND / 4 : TC_CAND / 2;
    size_t s = (take * n + want - 1) / want;
    if (s < TC_PILOT_MIN) s = TC_PILOT_MIN;
    return s < n ? s : n;
}

/* The pilot of a single query's one launch (k_tc_one): a tighter theta
 * than a batch's (rank about 128 / 256 / 1024 for k < 10 / < 32 / more):
 * its final ranking's gather and select scale with the candidates, while
 * the larger pilot is a few MB read once, spread over the blocks. */
static inline size_t tc_one_pilot_rows(size_t n, size_t take)
{
    const size_t want = take < 10 ? TC_CAND / 32 : take < 32 ? TC_CAND / 16 : TC_CAND / 4;
    size_t s = (take * n + want - 1) / want;
    if (s < TC_PILOT_MIN) s = TC_PILOT_MIN;
    return s < n ? s : n;
}

/* Where one call's inputs and outputs lie in the packed regions, for m
 * queries and `per` output entries per query. */
typedef struct tc_io {
    size_t in_bytes, out_bytes;
    size_t o_qinfo;                   /* in: query rows at 0 */
    size_t o_flag, o_outd, o_outid;   /* out: counts at 0 */
} tc_io_t;

static inline size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

static inline void tc_layout(tc_io_t *io, size_t m, size_t dp, size_t per)
{
    io->o_qinfo = al256(m * dp);
    io->in_bytes = io->o_qinfo + m * sizeof(tc_qinfo_t);
    io->o_flag = al256(m * sizeof(uint32_t));
    io->o_outd = al256(io->o_flag + m);
    io->o_outid = al256(io->o_outd + m * per * sizeof(double));
    io->out_bytes = io->o_outid + m * per * sizeof(uint64_t);
}

static inline int too_big(patina_status s) { return s == PATINA_E_LIMIT || s == PATINA_E_NOMEM; }

#define CHUNK_MIN 4096
#define TIER_BUF_BYTES ((size_t)256 << 20) /* a chunk buffer's rows and sums at most */
#define TIER_RANGE_BATCH 1024               /* range queries a pass at most (each pass reads the table) */

/* ---- the filters' values on the host (knn_fx.cuh, knn_ix.cuh) ---- */

static inline double host_elem(int elem, const uint8_t *row, size_t i)
{
    switch (elem) {
    case PATINA_ELEM_U8: return (double)row[i];
    case PATINA_ELEM_U16: { uint16_t v; memcpy(&v, row + 2 * i, 2); return (double)v; }
    case PATINA_ELEM_U32: { uint32_t v; memcpy(&v, row + 4 * i, 4); return (double)v; }
    case PATINA_ELEM_F32: { float v; memcpy(&v, row + 4 * i, 4); return (double)v; }
    default: { double v; memcpy(&v, row + 8 * i, 8); return v; }
    }
}

static inline int fx_has(int dist) { return dist != PDIST_TANIMOTO && dist >= 0 && dist < PDIST_ROOTSIFT_RATIO; }

/* The filter's values of one row or query of dim elements (element i of
 * the source at get(i)): x[i * xs] (floats), its margin share m and norm N
 * (knn_fx.cuh's table). 0 when the vector is outside the filter's domain
 * (a value out of [2^-60, 2^40] in magnitude, a negative element where the
 * distance needs none, a non-finite value). */
template <typename Get>
static inline int fx_vector(int dist, Get get, size_t dim, const double *sd, float *x, size_t xs, float *m, float *nrm)
{
    const double c = (double)(dim + 16) * 0x1p-24 * (1.0 + 0x1p-10), tiny = (double)dim * 0x1p-120;
    double nn = 0.0; /* the norm's sum */
    for (size_t i = 0; i < dim; i++) {
        const double v = get(i);
        double t = v, a;
        float f;
        if (!isfinite(v)) return 0;
        if (v < 0.0 && (dist == PDIST_CHI2 || dist == PDIST_INTERSECTION || dist == PDIST_HELLINGER)) return 0;
        if (dist == PDIST_STD_L2) t = v / (sd ? sd[i] : 1.0);
        if (dist == PDIST_HELLINGER) t = sqrt(v);
        a = fabs(t);
        if (!isfinite(t) || (a != 0.0 && (a < 0x1p-60 || a > 0x1p40))) return 0;
        f = (float)t;
        x[i * xs] = f;
        switch (dist) {
        case PDIST_L1: nn += fabs((double)f); break;
        case PDIST_L2: case PDIST_STD_L2: case PDIST_COSINE: nn += (double)f * (double)f; break;
        default: nn += v; break; /* chi2, intersection, hellinger: the sum */
        }
    }
    switch (dist) {
    case PDIST_INTERSECTION: *nrm = (float)nn; *m = pgpu_f_up(c + tiny); break;
    case PDIST_HELLINGER: case PDIST_COSINE: *nrm = (float)sqrt(nn); *m = pgpu_f_up(c + tiny); break;
    default: *nrm = (float)nn; *m = pgpu_f_up(c * nn + tiny); break;
    }
    return 1;
}

static inline int ix_has(int dist, size_t dim)
{
    return (dist == PDIST_L2 || dist == PDIST_STD_L2 || dist == PDIST_COSINE || dist == PDIST_HELLINGER) && dim >= 1 &&
           dim <= IX_MAXDIM;
}

static inline int ix_dp(size_t dim) { return dim <= 32 ? 32 : dim <= 64 ? 64 : dim <= 128 ? 128 : 256; }

/* The tensor-core filter's limbs of one row or query (element i at
 * get(i)): out (2 dp bytes: Q1 then Q2, zero padded) and its s, A, E, N or
 * W (knn_ix.cuh). 0 when the vector is outside the filter's domain (a
 * non-finite value, a negative element for hellinger, a value above 2^60). */
template <typename Get>
static inline int ix_vector(int dist, Get get, size_t dim, const double *sd, int dp, int8_t *out, ix_info_t *info)
{
    double x[IX_MAXDIM], mx = 0.0, n2 = 0.0, sum = 0.0, e2 = 0.0, q1n = 0.0, q2n = 0.0;
    float s;
    memset(out, 0, 2 * (size_t)dp);
    for (size_t i = 0; i < dim; i++) {
        const double v = get(i);
        double t = v;
        if (!isfinite(v)) return 0;
        if (dist == PDIST_HELLINGER) {
            if (v < 0.0) return 0;
            t = sqrt(v);
        }
        if (dist == PDIST_STD_L2) t = v / (sd ? sd[i] : 1.0);
        if (!isfinite(t) || fabs(t) > 0x1p60) return 0;
        x[i] = t;
        if (fabs(t) > mx) mx = fabs(t);
        n2 += t * t;
        sum += v;
    }
    s = (float)(mx / 127.0);
    if (mx > 0.0 && s == 0.0f) return 0; /* below float's range */
    /* Any Q1, Q2 in range will do (E is the residual they leave, computed
     * here): x / s by its inverse, rounding to the nearest integer by the
     * 1.5 * 2^52 addition (|y| < 2^51; libm's nearbyint is a call), a
     * fraction of the queries' preparation time. */
    const double inv = s > 0.0f ? 1.0 / (double)s : 0.0, big = 0x1.8p52;
    for (size_t i = 0; i < dim && s > 0.0f; i++) {
        const double y = x[i] * inv, a = (y + big) - big, b = ((y - a) * 254.0 + big) - big;
        const double e = x[i] - (double)s * (a + b / 254.0);
        if (fabs(a) > 127.0 || fabs(b) > 127.0) return 0;
        out[i] = (int8_t)a;
        out[dp + i] = (int8_t)b;
        e2 += e * e;
        q1n += a * a;
        q2n += b * b;
    }
    info->x = s;
    info->y = pgpu_f_up((double)s * (sqrt(q1n) + sqrt(q2n) / 254.0) * (1.0 + 0x1p-40));
    info->z = pgpu_f_up(sqrt(e2) * (1.0 + 0x1p-40));
    if (dist == PDIST_L2 || dist == PDIST_STD_L2) {
        info->w = (float)n2;
    } else { /* 1 / |x| rounded up; 0 for a zero vector */
        const double nn = dist == PDIST_HELLINGER ? sqrt(sum) : sqrt(n2);
        info->w = nn > 0.0 ? pgpu_f_up(1.0 / nn * (1.0 + 0x1p-50)) : 0.0f;
        if (nn > 0.0 && !(info->w > 0.0f && isfinite(info->w))) return 0;
    }
    return 1;
}

/* ---- knn_copy.cu: the state and the device copies ---- */

void copy_free(patina_gpu_t *g, knn_copy_t *c);
void buffers_free(patina_gpu_t *g, knn_state_t *st);
void tc_buffers_free(patina_gpu_t *g, knn_state_t *st);
void tier_buffers_free(patina_gpu_t *g, knn_tier_t *t);
void tier_free(patina_gpu_t *g, knn_tier_t *t);
void image_free(patina_gpu_t *g, copy_image_t *im);
void images_free(patina_gpu_t *g, chunk_images_t *ci);
/* g's search state, made on first use */
patina_status knn_state(patina_gpu_t *g, knn_state_t **out);
/* The device copy of idx, made now if g has none. */
patina_status copy_of(patina_gpu_t *g, knn_state_t *st, const pgpu_knn_index_t *idx, knn_copy_t **out);
/* Host rows [h0, h0 + m) laid out as tensor-core device rows (map: host
 * rows, or NULL for h0 + i), and packed into pk (TC_PK_BYTES(dp) a row)
 * unless pk is NULL. */
void tc_lay_rows(const pgpu_knn_index_t *idx, const uint32_t *map, size_t h0, size_t m, size_t dp,
                 uint8_t *rows, tc_aux_t *aux, uint32_t *t1, double *c3, uint64_t *ids, uint8_t *pk);
/* The rows removed since *dead_gen applied to a copy's rows or (tier set)
 * to a tier's pinned rows. */
patina_status sync_removed(patina_gpu_t *g, const pgpu_knn_index_t *idx, uint64_t *dead_gen,
                           const uint32_t *inv, size_t nperm, uint32_t *d_rm, knn_tier_t *tier, uint8_t *rows,
                           tc_aux_t *aux, uint8_t *pk, uint8_t *dead, int dp);

/* ---- knn.cu: the engines ---- */

/* The tensor-core engine's per-call buffers (grown, never shrunk). */
patina_status tc_buffers(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c, size_t qb, size_t dense,
                         size_t per);
/* The request rq on the index's device copy (made if needed): k-NN into
 * hits (nq, k), range into lists (patina_gpu_knn's contract). */
patina_status search_resident(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                              const double *qv, size_t nq, const pgpu_req_t *rq, patina_hit_t *hits,
                              patina_hit_t **lists, size_t *counts, uint8_t *cpu, size_t *paths);
/* One pass of m queries over a whole tier, its chunks streamed through
 * the two chunk buffers. */
patina_status tier_pass(patina_gpu_t *g, knn_state_t *st, knn_tier_t *t, const uint8_t *q, size_t qbytes,
                        size_t m, size_t take, size_t S, size_t qp, int range, double radius,
                        const uint32_t *which, size_t q0, size_t k, patina_hit_t *hits, patina_hit_t **lists,
                        size_t *counts, uint8_t *fl, patina_hit_t *tmp, size_t chunks[2]);

/* ---- knn_stream.cu: the streamed paths ---- */

/* Chunk j of a tier as a copy the engine's kernels read (buffer b). */
void tier_view(const knn_tier_t *t, size_t j, int b, knn_copy_t *v);

#endif
