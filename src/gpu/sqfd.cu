/* SQFD k-NN and range search on the GPU: the filter. The GPU evaluates every
 * (query, row) pair's SQFD^2 with a proven error bound and hands back, per
 * query, the rows that may belong to the answer; the caller
 * (src/search/knn.c) computes their reference doubles (sig_sqfd_self) and
 * ranks them, so answers are the CPU's exactly. Not here: the reference
 * arithmetic (the GPU's double exp is not glibc's, so no GPU kernel could
 * reproduce the CPU's doubles bit for bit), the paper's block-wise kernel
 * (lab/sqfd, the lab baseline) and the pivot filters.
 *
 * The estimate. For query q (n centroids) and row o (m centroids), with the
 * self terms Sqq and Soo the reference's own doubles (computed once on the
 * host: sig_self), the kernel computes
 *     S' = (Sqq + Soo) - 2 Sqo',   Sqo' = sum_j wo_j sum_i wq_i f'(q_i, o_j)
 * f' in float: the 7 feature differences, their squares summed with FMA,
 * then expf(-alpha d2) (gaussian), 1 / (alpha + sqrt d2) (heuristic) or
 * -sqrt d2 (minus), all correctly rounded operations except expf (at most 2
 * ulp, CUDA's documented bound); wq_i f' summed in float over runs of 4
 * query centroids, the runs and the wo_j products summed in double.
 *
 * The bound (u = 2^-24; A = |Sqo'|; Wq, Wo the total weights rounded up;
 * inputs in the domain below, so nothing overflows and underflow only adds
 * the absolute terms):
 *   f' = f (1 + r) + b with |r| <= rho, |b| <= beta:
 *     gaussian   d2' = d2 (1 + g), |g| <= 9u; the argument alpha d2' within
 *                10u relatively, and |e^-a' - e^-a| <= 10u a e^-a(1-10u)
 *                <= 3.7u (x e^-x <= 1/e): beta = 4u; expf's 2 ulp <= 4u f,
 *                taken twice: rho = 8u
 *     heuristic  sqrt, the sum and the reciprocal each correctly rounded:
 *                rho = 9u (d2' within 9u, its sqrt 4.6u, alpha + d 5.6u,
 *                1/x 6.6u, with margin)
 *     minus      rho = 6u
 *   every term w_i w_j f has one sign within a block (f >= 0, or <= 0 for
 *   minus), so the runs of 4 in float err by <= gamma_4 of their magnitude
 *   and the double sums by < 2^-40; with c1 = rho + gamma_4 (1 + rho) + 2^-40:
 *     |Sqo' - Sqo| <= (c1 A + beta (1 + gamma_4) Wq Wo) / (1 - c1) = Ec
 *   (A stands for sum |w w f| = |Sqo| since the terms have one sign).
 *   The reference itself is within (N + 16) 2^-53 sum|terms| of the exact S
 *   (N <= 2048^2 terms: < 2^-30 of sum|terms| <= |Sqq| + |Soo| + 2 A, and
 *   for gaussian its exp arguments' errors, 2^-30 (Wq + Wo)^2). So
 *     |S' - S_ref| <= E = 2 Ec + 2^-30 (|Sqq| + |Soo| + 2 A + [g] (Wq + Wo)^2)
 *                         + 2^-58 (1 + Wq) (1 + Wo)
 *   (the last term: every underflow in float, each below 2^-149 of a term).
 * The kernel's keys are lo = max(S' - E, 0) and hi = max(S' + E, 0), rounded
 * down and up to float: lo <= max(S_ref, 0) <= hi, and the reference's
 * distance is sqrt(max(S_ref, 0)) rounded.
 *
 * k-NN (the selection of src/gpu/knn.cu, on these keys). A pilot of S rows
 * (a strided sample of the device order, which is random within each
 * centroid count) gives per query U_p, the kth smallest hi: at least k rows
 * have max(S_ref, 0) <= U_p, so the kth smallest reference key is <= U_p.
 * The scan keeps every row with lo <= thr = U_p (1 + 2^-22) (a row that
 * ties the kth distance after the square root's rounding has a key within
 * 4 2^-53 of the kth key: the slack covers it). The host takes U, the kth
 * smallest hi among the candidates (the k rows of smallest hi overall are
 * candidates), and keeps lo <= U (1 + 2^-30): every row of the answer, ties
 * by id included. Candidates past PGPU_SQFD_KNN_CAND: the query runs again
 * with the whole table as its pilot (then U_p = U), then the caller answers
 * it. Range: thr = r^2 (1 + 2^-40) rounded up (d_ref <= r implies max(S_ref,
 * 0) <= r^2 (1 + 3 2^-53)).
 *
 * Domain (else the caller answers): one alpha and form for the rows and the
 * query, alpha in [2^-20, 2^20], features |x| <= 2^40, weights <= 2^40.
 *
 * Layout. The device copy holds the live rows sorted by centroid count
 * (a random order within a count, so a strided pilot is a uniform sample
 * and a warp's 32 rows have about the same count): blocks of 32 rows, per
 * block and centroid j two float4 per row, (w, x, y, L) then (a, b,
 * contrast, entropy), the 32 rows' values adjacent (a warp's loads are
 * coalesced); per row its count, Wo, Soo and host row number. The scan
 * kernel: two rows per thread (one for the gather and pilot forms), SQ_QT
 * queries per block in shared memory
 * (their centroids padded to a multiple of 4 with zero weights, which add
 * exactly nothing), each row centroid loaded once and used for every
 * query centroid of the block's queries.
 *
 * This file: the kernels, the calls and the entry points; the device
 * copies are sqfd_copy.cu's (what crosses them: sqfd_internal.cuh). */
#include "gpu/sqfd_internal.cuh"
#include "gpu/radix.cuh"

/* ------------------------------------------------------------- kernels */

template <int FORM>
__device__ __forceinline__ float sq_sim(float d2, float alpha)
{
    if (FORM == 0) return expf(__fmul_rn(d2, -alpha));
    if (FORM == 1) return __frcp_rn(__fadd_rn(alpha, __fsqrt_rn(d2)));
    return -__fsqrt_rn(d2);
}

/* The keys of one pair from its cross term (the header's bound). */
__device__ __forceinline__ void sq_keys(double sqo, double sqq, double soo, double wq, double wo, const sq_bound_t &b,
                                        double *s, double *e)
{
    const double A = fabs(sqo);
    const double ec = b.crel * A + b.beta * wq * wo;
    const double ww = wq + wo;
    *s = __dsub_rn(__dadd_rn(sqq, soo), __dmul_rn(2.0, sqo));
    *e = 2.0 * ec + 0x1p-30 * (fabs(sqq) + fabs(soo) + 2.0 * A + b.g * ww * ww) + 0x1p-58 * (1.0 + wq) * (1.0 + wo);
}

/* A scan's arguments (one struct: the kernels' parameter list). */
typedef struct sq_args {
    const float4 *rows;      /* the copy (sq_copy_t) */
    const uint16_t *cnt;
    const float *wo;
    const double *soo;
    const uint32_t *hrow;
    int kc;
    uint32_t n;              /* live rows */
    uint32_t nrows;          /* scan: rows (pilot: samples); gather: a query's list capacity */
    const uint32_t *list;    /* gather: (nq, nrows) device rows */
    const uint32_t *list_n;  /* gather: (nq) their counts */
    const float4 *qc;        /* (nq, kq4, 2) */
    const sq_qinfo_t *qi;    /* (nq) */
    int nq, kq4;
    sq_bound_t bd;
    float *klo, *khi;        /* SQ_KEYS: (nq, nrows); klo may be NULL */
    uint32_t *ccnt;          /* SQ_CAND: (nq) */
    uint4 *cand;             /* SQ_CAND: (nq, cap) */
    uint32_t cap;
    double *out_s, *out_e;   /* SQ_PAIRS: (nq, ld) */
    size_t ld;
} sq_args_t;

/* RT rows per thread (1 or 2: a query centroid read from shared memory
 * then serves both rows; gather and pilot scans take 1) against the
 * block's queries (SQ_QT; gather: one, blockIdx.y, over its list). MODE
 * SQ_KEYS: lo and hi into klo / khi[q * nrows + s] (scan: the pilot, device
 * row s * n / nrows of a strided sample); SQ_CAND: a row with lo <= thr
 * appended to the query's list (hrow, lo, hi; counting past cap); SQ_PAIRS:
 * s and e into out_s / out_e[q * ld + hrow]. Two rows of one thread may
 * have different counts: the shorter one's slots past its count hold
 * weight 0 and features 0 in the layout, and add exactly nothing. */
template <int FORM, int MODE, int GATHER, int RT>
__global__ void __launch_bounds__(SQ_THREADS) k_sq_scan(const sq_args_t a)
{
    extern __shared__ float4 sq_smem[]; /* (SQ_QT, kq4, 2) */
    static_assert(RT == 1 || (RT == 2 && !GATHER && MODE != SQ_KEYS), "two rows per thread: plain scans only");
    const int q0 = GATHER ? (int)blockIdx.y : (int)blockIdx.y * SQ_QT;
    const int nt = GATHER ? 1 : (a.nq - q0 < SQ_QT ? a.nq - q0 : SQ_QT);
    for (int i = threadIdx.x; i < nt * a.kq4 * 2; i += blockDim.x) sq_smem[i] = a.qc[(size_t)q0 * a.kq4 * 2 + i];
    __syncthreads();
    const uint32_t s = blockIdx.x * SQ_THREADS + threadIdx.x;
    if (RT * s >= (GATHER ? min(a.list_n[q0], a.nrows) : a.nrows)) return;
    uint32_t r[RT];
    bool has[RT];
    const float4 *rp[RT];
    int m = 0;
#pragma unroll
    for (int u = 0; u < RT; u++) {
        has[u] = u == 0 || RT * s + u < a.nrows;
        r[u] = GATHER ? a.list[(size_t)q0 * a.nrows + s]
                      : MODE == SQ_KEYS ? (uint32_t)(((uint64_t)s * a.n) / a.nrows) : (has[u] ? RT * s + u : RT * s);
        rp[u] = a.rows + (size_t)(r[u] >> 5) * a.kc * 64 + (r[u] & 31);
        const int mu = a.cnt[r[u]];
        if (mu > m) m = mu;
    }
    const float alpha = a.bd.alpha;
    int qn[SQ_QT];
    double sqo[RT][SQ_QT];
#pragma unroll
    for (int t = 0; t < SQ_QT; t++) {
        qn[t] = t < nt ? a.qi[q0 + t].cnt4 : 0;
#pragma unroll
        for (int u = 0; u < RT; u++) sqo[u][t] = 0.0;
    }
    for (int j = 0; j < m; j++) {
        float4 o[RT], b[RT];
#pragma unroll
        for (int u = 0; u < RT; u++) {
            o[u] = rp[u][(size_t)j * 64];
            b[u] = rp[u][(size_t)j * 64 + 32];
        }
#pragma unroll
        for (int t = 0; t < SQ_QT; t++) {
            const float4 *qp = sq_smem + t * a.kq4 * 2;
            double run[RT];
#pragma unroll
            for (int u = 0; u < RT; u++) run[u] = 0.0;
            for (int i = 0; i < qn[t]; i += 4) {
                float acc[RT];
#pragma unroll
                for (int u = 0; u < RT; u++) acc[u] = 0.0f;
#pragma unroll
                for (int v = 0; v < 4; v++) {
                    const float4 p = qp[2 * (i + v)], p2 = qp[2 * (i + v) + 1];
#pragma unroll
                    for (int u = 0; u < RT; u++) {
                        float x = __fsub_rn(p.y, o[u].y), d2 = __fmul_rn(x, x);
                        x = __fsub_rn(p.z, o[u].z);
                        d2 = __fmaf_rn(x, x, d2);
                        x = __fsub_rn(p.w, o[u].w);
                        d2 = __fmaf_rn(x, x, d2);
                        x = __fsub_rn(p2.x, b[u].x);
                        d2 = __fmaf_rn(x, x, d2);
                        x = __fsub_rn(p2.y, b[u].y);
                        d2 = __fmaf_rn(x, x, d2);
                        x = __fsub_rn(p2.z, b[u].z);
                        d2 = __fmaf_rn(x, x, d2);
                        x = __fsub_rn(p2.w, b[u].w);
                        d2 = __fmaf_rn(x, x, d2);
                        acc[u] = __fmaf_rn(p.x, sq_sim<FORM>(d2, alpha), acc[u]);
                    }
                }
#pragma unroll
                for (int u = 0; u < RT; u++) run[u] = __dadd_rn(run[u], (double)acc[u]);
            }
#pragma unroll
            for (int u = 0; u < RT; u++) sqo[u][t] = __fma_rn((double)o[u].x, run[u], sqo[u][t]);
        }
    }
#pragma unroll
    for (int u = 0; u < RT; u++) {
        if (!has[u]) break;
        const double so = a.soo[r[u]], w = (double)a.wo[r[u]];
#pragma unroll
        for (int t = 0; t < SQ_QT; t++) {
            if (t >= nt) break;
            const sq_qinfo_t q = a.qi[q0 + t];
            double sv, ev;
            sq_keys(sqo[u][t], q.sqq, so, (double)q.w, w, a.bd, &sv, &ev);
            if (MODE == SQ_PAIRS) {
                a.out_s[(size_t)(q0 + t) * a.ld + a.hrow[r[u]]] = sv;
                a.out_e[(size_t)(q0 + t) * a.ld + a.hrow[r[u]]] = ev;
                continue;
            }
            const double lo = __dsub_rd(sv, ev), hi = __dadd_ru(sv, ev);
            const float hf = hi > 0.0 ? __double2float_ru(hi) : 0.0f, lf = lo > 0.0 ? __double2float_rd(lo) : 0.0f;
            if (MODE == SQ_KEYS) {
                a.khi[(size_t)(q0 + t) * a.nrows + s] = hf;
                if (a.klo) a.klo[(size_t)(q0 + t) * a.nrows + s] = lf;
            } else if (lf <= q.thr) {
                const uint32_t pos = atomicAdd(&a.ccnt[q0 + t], 1u);
                if (pos < a.cap)
                    a.cand[(size_t)(q0 + t) * a.cap + pos] =
                        make_uint4(a.hrow[r[u]], __float_as_uint(lf), __float_as_uint(hf), 0u);
            }
        }
    }
}

/* Per query (one block each): U_p, the kth smallest of its S pilot keys
 * (non-negative floats order like their bits; the kth largest of the
 * complemented bits), thr = U_p (1 + 2^-22) rounded up; zeroes its
 * candidate count. */
__global__ void __launch_bounds__(SQ_SEL_THREADS)
k_sq_select(const float *__restrict__ dense, uint32_t S, uint32_t kth, sq_qinfo_t *__restrict__ qi,
            uint32_t *__restrict__ ccnt)
{
    __shared__ uint32_t sh[TC_RADIX_WORDS];
    const float *v = dense + (size_t)blockIdx.x * S;
    const uint32_t b = tc_radix_kth([v](uint32_t i) { return ~__float_as_uint(v[i]); }, S, kth, sh);
    if (threadIdx.x == 0) {
        qi[blockIdx.x].thr = __fmul_ru(__uint_as_float(~b), 1.0f + 0x1p-22f);
        ccnt[blockIdx.x] = 0;
    }
}

/* Per query (one block each): out[q] = the kth smallest of its count
 * non-negative floats v[q * ld ..] (count: min(cnt[q], cap), or nfix when
 * cnt is NULL); +inf when there are fewer than kth. */
__global__ void __launch_bounds__(SQ_SEL_THREADS)
k_sq_kth(const float *__restrict__ v0, size_t ld, const uint32_t *__restrict__ cnt, uint32_t nfix, uint32_t cap,
         uint32_t kth, float *__restrict__ out)
{
    __shared__ uint32_t sh[TC_RADIX_WORDS];
    const float *v = v0 + (size_t)blockIdx.x * ld;
    const uint32_t n = cnt ? min(cnt[blockIdx.x], cap) : nfix;
    if (n < kth || kth == 0) {
        if (threadIdx.x == 0) out[blockIdx.x] = INFINITY;
        return;
    }
    const uint32_t b = tc_radix_kth([v](uint32_t i) { return ~__float_as_uint(v[i]); }, n, kth, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = __uint_as_float(~b);
}

#define PIV_REL 1e-10 /* pivots.c's REL: the bounds' own roundings */

/* The pivot bounds of pivots.c with the query's pivot distances as
 * intervals [alo, ahi] (q's (np) rows of alo, ahi): per (device row r,
 * query blockIdx.y), metric = max_i max(alo_i - b_i, b_i - ahi_i) (1 - REL)
 * - 2 eps. MODE 0: metric, rounded down, into dense[q * n + r]; MODE 1: r
 * appended to the query's list when metric <= R[q] and (ptol) no Ptolemy
 * bound excludes it; MODE 2: r appended when dense[q * n + r] <= lambda[q]
 * (lists of cap entries, counting past cap). */
template <int MODE>
__global__ void __launch_bounds__(256)
k_piv_lb(const double *__restrict__ tab, size_t ld, uint32_t n, int np, const double *__restrict__ alo,
         const double *__restrict__ ahi, const double *__restrict__ eps, const double *__restrict__ R,
         const double *__restrict__ pp, int ptol, float *__restrict__ dense, const float *__restrict__ lambda,
         uint32_t *__restrict__ list, uint32_t *__restrict__ list_n, uint32_t cap)
{
    const uint32_t r = blockIdx.x * 256 + threadIdx.x;
    const int q = blockIdx.y;
    if (r >= n) return;
    if (MODE == 2) {
        if (dense[(size_t)q * n + r] <= lambda[q]) {
            const uint32_t pos = atomicAdd(&list_n[q], 1u);
            if (pos < cap) list[(size_t)q * cap + pos] = r;
        }
        return;
    }
    const double *lo = alo + (size_t)q * np, *hi = ahi + (size_t)q * np, e = eps[q];
    double m = 0.0;
    for (int i = 0; i < np; i++) {
        const double b = tab[(size_t)i * ld + r], t = fmax(__dsub_rn(lo[i], b), __dsub_rn(b, hi[i]));
        if (t > m) m = t;
    }
    const double lb = __dsub_rn(__dmul_rn(m, 1.0 - PIV_REL), 2.0 * e);
    if (MODE == 0) {
        dense[(size_t)q * n + r] = lb > 0.0 ? __double2float_rd(lb) : 0.0f;
        return;
    }
    const double Rq = R[q];
    if (lb > Rq) return;
    if (ptol && !isinf(Rq))
        for (int i = 0; i < np; i++) {
            const double bi = tab[(size_t)i * ld + r];
            for (int j = i + 1; j < np; j++) {
                const double bj = tab[(size_t)j * ld + r];
                const double x = __dsub_rn(__dmul_rn(lo[i], bj), __dmul_rn(hi[j], bi));
                const double y = __dsub_rn(__dmul_rn(lo[j], bi), __dmul_rn(hi[i], bj));
                const double num = fmax(x, y) - e * (hi[i] + hi[j] + bi + bj + 2.0 * e) -
                                   PIV_REL * (hi[i] * bj + hi[j] * bi);
                if (num > Rq * (pp[i * np + j] + e) * (1.0 + PIV_REL)) return;
            }
        }
    const uint32_t pos = atomicAdd(&list_n[q], 1u);
    if (pos < cap) list[(size_t)q * cap + pos] = r;
}

/* The per-call buffers: qb queries of kq4 centroids, dense pilot floats,
 * cand candidate entries (grown, never shrunk). */
static patina_status buffers(patina_gpu_t *g, sq_state_t *st, size_t qb, size_t kq4, size_t dense, size_t cand)
{
    const size_t qe = qb * kq4 * 2;
    if (st->q_cap < qb || st->q_elems < qe) {
        pgpu_free_n(g, 6, &st->d_q, &st->h_q, &st->d_qi, &st->h_qi, &st->d_cnt, &st->h_cnt);
        st->q_cap = st->q_elems = 0;
        PATINA_TRY(sq_alloc(g, (void **)&st->d_q, qe * sizeof *st->d_q, "queries"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_q, qe * sizeof *st->h_q, PGPU_FAM_SQFD, "queries"));
        PATINA_TRY(sq_alloc(g, (void **)&st->d_qi, qb * sizeof *st->d_qi, "queries"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_qi, qb * sizeof *st->h_qi, PGPU_FAM_SQFD, "queries"));
        PATINA_TRY(sq_alloc(g, (void **)&st->d_cnt, qb * sizeof *st->d_cnt, "candidates"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_cnt, qb * sizeof *st->h_cnt, PGPU_FAM_SQFD, "candidates"));
        st->q_cap = qb;
        st->q_elems = qe;
    }
    if (st->dense_cap < dense) {
        pgpu_free_n(g, 1, &st->d_dense);
        st->dense_cap = 0;
        PATINA_TRY(sq_alloc(g, (void **)&st->d_dense, dense * sizeof *st->d_dense, "pilot"));
        st->dense_cap = dense;
    }
    if (st->cand_cap < cand) {
        pgpu_free_n(g, 2, &st->d_cand, &st->h_cand);
        st->cand_cap = 0;
        PATINA_TRY(sq_alloc(g, (void **)&st->d_cand, cand * sizeof *st->d_cand, "candidates"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_cand, cand * sizeof *st->h_cand, PGPU_FAM_SQFD, "candidates"));
        st->cand_cap = cand;
    }
    return PATINA_OK;
}

static size_t round4(size_t x) { return (x + 3) & ~(size_t)3; }

/* The largest count among m queries (which[] indexes into queries). */
static size_t batch_kq4(const float *queries, size_t dim, const uint32_t *which, size_t m)
{
    size_t kq = 4;
    for (size_t t = 0; t < m; t++) {
        const size_t c = round4((size_t)queries[(size_t)which[t] * dim]);
        if (c > kq) kq = c;
    }
    return kq;
}

/* Packs m queries into the pinned buffers (thr: each query's threshold). */
static void pack_queries(sq_state_t *st, const float *queries, const double *sqq, size_t dim, const uint32_t *which,
                         size_t m, size_t kq4, float thr)
{
    memset(st->h_q, 0, m * kq4 * 2 * sizeof *st->h_q);
    for (size_t t = 0; t < m; t++) {
        const float *rec = queries + (size_t)which[t] * dim;
        const size_t c = (size_t)rec[0];
        float4 *q = st->h_q + t * kq4 * 2;
        for (size_t i = 0; i < c; i++) {
            const float *cr = rec + 8 + 8 * i;
            q[2 * i] = make_float4(cr[0], cr[1], cr[2], cr[3]);
            q[2 * i + 1] = make_float4(cr[4], cr[5], cr[6], cr[7]);
        }
        st->h_qi[t].sqq = sqq[which[t]];
        st->h_qi[t].w = weight_up(rec);
        st->h_qi[t].thr = thr;
        st->h_qi[t].cnt4 = (int)round4(c);
        st->h_qi[t].pad = 0;
    }
}

static size_t scan_smem(size_t kq4) { return SQ_QT * kq4 * 2 * sizeof(float4); }

/* The arguments of a scan of copy c with the state's query buffers. */
static sq_args_t args_of(const sq_copy_t *c, const sq_state_t *st, uint32_t nrows, int m, int kq4)
{
    sq_args_t a;
    memset(&a, 0, sizeof a);
    a.rows = c->rows;
    a.cnt = c->cnt;
    a.wo = c->wo;
    a.soo = c->soo;
    a.hrow = c->hrow;
    a.kc = c->kc;
    a.n = (uint32_t)c->n;
    a.nrows = nrows;
    a.qc = st->d_q;
    a.qi = st->d_qi;
    a.nq = m;
    a.kq4 = kq4;
    a.bd = bound_of(c->form, c->alpha);
    a.ccnt = st->d_cnt;
    a.cand = st->d_cand;
    return a;
}

/* Launches the scan (MODE, GATHER, the copy's form) with a on stream s:
 * grid.x over a.nrows rows (2 per thread for plain scans: SQ_RT), grid.y
 * over the queries (gather: one each). */
#define SQ_RT 2 /* rows per thread of the plain scans (lab_sqfd times 1 against 2) */
template <int MODE, int GATHER, int RT = (GATHER || MODE == SQ_KEYS) ? 1 : SQ_RT>
static cudaError_t scan_launch(const patina_gpu_t *g, int form, const sq_args_t &a, cudaStream_t s)
{
    const unsigned per = SQ_THREADS * RT;
    const dim3 grid((a.nrows + per - 1) / per, GATHER ? (unsigned)a.nq : (unsigned)((a.nq + SQ_QT - 1) / SQ_QT));
    const size_t smem = scan_smem((size_t)a.kq4);
    cudaError_t e;
    if (grid.x == 0) return cudaSuccess;
    if (smem > (size_t)g->smem_optin || grid.y > 65535u) return cudaErrorInvalidValue;
#define SQ_LAUNCH(F)                                                                                              \
    do {                                                                                                          \
        e = cudaFuncSetAttribute(k_sq_scan<F, MODE, GATHER, RT>, cudaFuncAttributeMaxDynamicSharedMemorySize,     \
                                 (int)smem);                                                                      \
        if (e != cudaSuccess) return e;                                                                           \
        k_sq_scan<F, MODE, GATHER, RT><<<grid, SQ_THREADS, smem, s>>>(a);                                         \
    } while (0)
    switch (form) {
    case 0: SQ_LAUNCH(0); break;
    case 1: SQ_LAUNCH(1); break;
    default: SQ_LAUNCH(2); break;
    }
#undef SQ_LAUNCH
    return cudaGetLastError();
}

/* Rows of the pilot (as src/gpu/knn.cu's tc_pilot_rows): enough that about
 * a quarter of the candidate list is used for k near 10. */
static size_t pilot_rows(size_t n, size_t take)
{
    const size_t cap = PGPU_SQFD_KNN_CAND;
    const size_t want = take < 10 ? cap / 8 : take < 100 ? cap / 4 : cap / 2;
    size_t s = (take * n + want - 1) / want;
    if (s < SQ_PILOT_MIN) s = SQ_PILOT_MIN;
    return s < n ? s : n;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static patina_status take_candidates(sq_state_t *st, cudaStream_t s, size_t m, const uint32_t *which, size_t take,
                                     uint32_t cap, uint32_t **cand, size_t *ncand, uint8_t *again);

/* One batch of m queries (which[]): k-NN (take > 0, pilot of S rows) or
 * range (take = 0, thr). Each query's candidates go to cand[which[t]] /
 * ncand; a query whose list overflows gets again[t] = 1. */
/* A streamed copy's pilot sample (pilot != 0) or its chunk j in buffer b,
 * as a copy the kernels read. */
static void stream_view(const sq_copy_t *c, int pilot, size_t j, int b, sq_copy_t *v)
{
    memset(v, 0, sizeof *v);
    v->ok = 1;
    v->kc = c->kc;
    v->alpha = c->alpha;
    v->form = c->form;
    if (pilot) {
        v->rows = c->p_rows;
        v->cnt = c->p_cnt;
        v->wo = c->p_wo;
        v->soo = c->p_soo;
        v->hrow = c->p_hrow;
        v->n = c->ps;
    } else {
        const size_t r0 = j * c->B * 32;
        v->rows = c->b_rows[b];
        v->cnt = c->b_cnt[b];
        v->wo = c->b_wo[b];
        v->soo = c->b_soo[b];
        v->hrow = c->b_hrow[b];
        v->n = c->n - r0 < c->B * 32 ? c->n - r0 : c->B * 32;
    }
}

/* The candidate scan of a streamed copy: chunk j + 1 uploaded on the copy
 * stream while chunk j is scanned on cs (a buffer is refilled once the
 * scan of the chunk before has left it); the candidates of every chunk
 * append to the queries' lists (host row numbers: no remapping). */
static cudaError_t stream_scan(patina_gpu_t *g, sq_state_t *st, const sq_copy_t *c, size_t m, size_t kq4,
                               uint32_t cap, cudaStream_t cs)
{
    const size_t kc = (size_t)c->kc, nch = (c->nb + c->B - 1) / c->B;
    cudaError_t e = cudaSuccess;
    for (size_t j = 0; j < nch && e == cudaSuccess; j++) {
        const int b = (int)(j & 1);
        const size_t b0 = j * c->B, blocks = c->nb - b0 < c->B ? c->nb - b0 : c->B;
        sq_copy_t v;
        stream_view(c, 0, j, b, &v);
        {
            void *const dst[5] = {c->b_rows[b], c->b_cnt[b], c->b_wo[b], c->b_soo[b], c->b_hrow[b]};
            const void *const src[5] = {tcache_host_at(&c->host, 0, b0), tcache_host_at(&c->host, 1, b0),
                                        tcache_host_at(&c->host, 2, b0), tcache_host_at(&c->host, 3, b0),
                                        tcache_host_at(&c->host, 4, b0)};
            const size_t bytes[5] = {blocks * kc * 64 * sizeof(float4), blocks * 32 * sizeof(uint16_t),
                                     blocks * 32 * sizeof(float), blocks * 32 * sizeof(double),
                                     blocks * 32 * sizeof(uint32_t)};
            e = (cudaError_t)tcache_chunk_send(g, &c->stream, j, cs, 5, dst, src, bytes);
        }
        if (e == cudaSuccess) {
            sq_args_t a = args_of(&v, st, (uint32_t)v.n, (int)m, (int)kq4);
            a.cap = cap;
            e = scan_launch<SQ_CAND, 0>(g, c->form, a, cs);
        }
        if (e == cudaSuccess) e = (cudaError_t)tcache_chunk_done(&c->stream, j, cs);
        st->chunks++;
        st->hbytes += blocks * (kc * 64 * sizeof(float4) + 32 * (sizeof(uint16_t) + sizeof(float) + sizeof(double) +
                                                               sizeof(uint32_t)));
    }
    return e;
}

static patina_status run_batch(patina_gpu_t *g, sq_state_t *st, const sq_copy_t *c, const float *queries,
                               const double *sqq, size_t dim, const uint32_t *which, size_t m, size_t take, size_t S,
                               float thr, uint32_t **cand, size_t *ncand, uint8_t *again, size_t *pairs)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    const uint32_t cap = take ? PGPU_SQFD_KNN_CAND : PGPU_SQFD_RANGE_CAND;
    const size_t kq4 = batch_kq4(queries, dim, which, m);
    cudaError_t e;
    PATINA_TRY(buffers(g, st, m, kq4, take ? m * S : 1, m * cap));
    pack_queries(st, queries, sqq, dim, which, m, kq4, thr);
    e = cudaMemcpyAsync(st->d_q, st->h_q, m * kq4 * 2 * sizeof *st->h_q, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(st->d_qi, st->h_qi, m * sizeof *st->h_qi, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && take) {
        sq_copy_t pv;
        if (c->streamed) stream_view(c, 1, 0, 0, &pv); /* the pilot: the resident sample */
        sq_args_t a = args_of(c->streamed ? &pv : c, st, (uint32_t)S, (int)m, (int)kq4);
        a.khi = st->d_dense;
        e = scan_launch<SQ_KEYS, 0>(g, c->form, a, s);
        if (e == cudaSuccess) {
            k_sq_select<<<(unsigned)m, SQ_SEL_THREADS, 0, s>>>(st->d_dense, (uint32_t)S, (uint32_t)take, st->d_qi,
                                                               st->d_cnt);
            e = cudaGetLastError();
        }
        *pairs += m * S;
    } else if (e == cudaSuccess) {
        e = cudaMemsetAsync(st->d_cnt, 0, m * sizeof *st->d_cnt, s);
    }
    if (e == cudaSuccess && c->streamed) {
        e = stream_scan(g, st, c, m, kq4, cap, s);
    } else if (e == cudaSuccess) {
        sq_args_t a = args_of(c, st, (uint32_t)c->n, (int)m, (int)kq4);
        a.cap = cap;
        e = scan_launch<SQ_CAND, 0>(g, c->form, a, s);
    }
    *pairs += m * c->n;
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu sqfd: scan", __FILE__, __LINE__);
    return take_candidates(st, s, m, which, take, cap, cand, ncand, again);
}

/* The candidates of the m queries of a batch (which[]) from the state's
 * device lists (d_cnt, d_cand of cap entries each): downloaded, refined
 * (k-NN, take > 0: U the take-th smallest hi, kept lo <= U (1 + 2^-30))
 * into cand[which[t]] / ncand; again[t] = 1 for a list that overflowed. */
static patina_status take_candidates(sq_state_t *st, cudaStream_t s, size_t m, const uint32_t *which, size_t take,
                                     uint32_t cap, uint32_t **cand, size_t *ncand, uint8_t *again)
{
    float *hi = NULL;
    size_t mx = 0, t;
    cudaError_t e = cudaMemcpyAsync(st->h_cnt, st->d_cnt, m * sizeof *st->h_cnt, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    for (t = 0; e == cudaSuccess && t < m; t++)
        if (st->h_cnt[t] <= cap && st->h_cnt[t] > mx) mx = st->h_cnt[t];
    if (e == cudaSuccess && mx)
        e = cudaMemcpy2DAsync(st->h_cand, mx * sizeof *st->h_cand, st->d_cand, cap * sizeof *st->d_cand,
                              mx * sizeof *st->h_cand, m, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu sqfd: candidates", __FILE__, __LINE__);
    if (take && !(hi = (float *)malloc(PGPU_SQFD_KNN_CAND * sizeof *hi)))
        return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory");
    for (t = 0; t < m; t++) {
        const uint32_t nc = st->h_cnt[t], q = which[t];
        const uint4 *l = st->h_cand + t * mx;
        double keep = INFINITY;
        size_t i, w = 0;
        again[t] = 0;
        if (nc > cap || (take && nc < take)) { /* overflow (or, defensively, too few) */
            again[t] = 1;
            continue;
        }
        if (take) { /* U: the take-th smallest hi among the candidates */
            for (i = 0; i < nc; i++) hi[i] = bits_float(l[i].z);
            qsort(hi, nc, sizeof *hi, cmp_float);
            keep = (double)hi[take - 1] * (1.0 + 0x1p-30);
        }
        cand[q] = nc ? (uint32_t *)malloc(nc * sizeof **cand) : NULL;
        if (nc && !cand[q]) {
            free(hi);
            return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for %u candidates", nc);
        }
        for (i = 0; i < nc; i++)
            if ((double)bits_float(l[i].y) <= keep) cand[q][w++] = l[i].x;
        ncand[q] = w;
        if (w == 0) {
            free(cand[q]);
            cand[q] = NULL;
        }
    }
    free(hi);
    return PATINA_OK;
}

/* 1 when query rec can run against copy c. */
static int query_ok(const sq_copy_t *c, const float *rec, size_t dim)
{
    return c->ok && rec_in_domain(rec, dim) && rec[2] == c->alpha && (int)rec[3] == c->form &&
           scan_smem(round4((size_t)rec[0])) <= 48 * 1024 * 4;
}

/* The end of a candidates call (patina_gpu_sqfd, _filter): after a failure s
 * no candidates are left (freed); else the stats get the call's counts. */
static patina_status call_end(patina_status s, size_t nq, size_t pairs, uint32_t **cand, size_t *ncand,
                              const uint8_t *cpu, pgpu_sqfd_stats_t *stats)
{
    if (s != PATINA_OK) {
        for (size_t q = 0; q < nq; q++) {
            free(cand[q]);
            cand[q] = NULL;
            ncand[q] = 0;
        }
        return s;
    }
    if (stats) {
        stats->pairs += pairs;
        for (size_t q = 0; q < nq; q++) {
            stats->cpu += cpu[q];
            stats->queries += !cpu[q];
            stats->candidates += ncand[q];
        }
    }
    return PATINA_OK;
}

patina_status patina_gpu_sqfd(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                              const double *sqq, size_t nq, const pgpu_req_t *rq, uint32_t **cand,
                              size_t *ncand, uint8_t *cpu, pgpu_sqfd_stats_t *stats)
{
    const size_t k = rq ? rq->k : 0;
    const double radius = rq ? rq->radius : 0.0;
    sq_state_t *st;
    sq_copy_t *c;
    uint32_t *which = NULL;
    uint8_t *again = NULL;
    size_t q, nw = 0, pairs = 0;
    patina_status s = PATINA_OK;
    if (!g || !idx || !rq || (nq && (!queries || !sqq || !cand || !ncand || !cpu)) || (!k && !(radius >= 0.0)))
        return patina__fail(PATINA_E_INVALID, "gpu sqfd: bad argument");
    for (q = 0; q < nq; q++) {
        cand[q] = NULL;
        ncand[q] = 0;
        cpu[q] = 0;
    }
    if (nq == 0 || idx->n == 0) return PATINA_OK;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(sq_state(g, &st));
    PATINA_TRY(copy_of(g, st, idx, &c));
    st->chunks = st->hbytes = 0;
    if (!c->ok || c->n == 0) {
        for (q = 0; q < nq; q++) cpu[q] = c->ok ? 0 : 1;
        if (stats) stats->cpu += c->ok ? 0 : nq;
        return PATINA_OK;
    }
    which = (uint32_t *)malloc(nq * sizeof *which);
    again = (uint8_t *)malloc(nq);
    if (!which || !again) {
        free(which);
        free(again);
        return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for %zu queries", nq);
    }
    for (q = 0; q < nq; q++) {
        if (query_ok(c, queries + q * idx->dim, idx->dim)) which[nw++] = (uint32_t)q;
        else cpu[q] = 1;
    }
    if (k) {
        const size_t take = k < c->n ? k : c->n;
        for (int pass = 0; pass < 2 && nw && s == PATINA_OK; pass++) {
            /* a streamed copy's pilot is its resident sample (no retry with the whole table) */
            const size_t S = pass ? c->n : c->streamed && pilot_rows(c->n, take) > c->ps ? c->ps : pilot_rows(c->n, take);
            size_t qb = SQ_DENSE_BYTES / (S * sizeof(float)), nr = 0;
            if (qb < 1) qb = 1;
            if (qb > SQ_KNN_BATCH) qb = SQ_KNN_BATCH;
            for (size_t q0 = 0; q0 < nw && s == PATINA_OK; q0 += qb) {
                const size_t m = nw - q0 < qb ? nw - q0 : qb;
                s = run_batch(g, st, c, queries, sqq, idx->dim, which + q0, m, take, S, 0.0f, cand, ncand,
                              again + q0, &pairs);
            }
            /* the overflowing queries again with the whole table as pilot, then the caller's */
            for (size_t t = 0; s == PATINA_OK && t < nw; t++)
                if (again[t]) {
                    if (pass == 0 && S < c->n && !c->streamed) which[nr++] = which[t];
                    else cpu[which[t]] = 1;
                }
            nw = nr;
        }
    } else {
        const double r2 = radius * radius * (1.0 + 0x1p-40);
        const float thr = r2 < 3.0e38 ? pgpu_f_up(r2) : INFINITY;
        for (size_t q0 = 0; q0 < nw && s == PATINA_OK; q0 += SQ_RANGE_BATCH) {
            const size_t m = nw - q0 < SQ_RANGE_BATCH ? nw - q0 : SQ_RANGE_BATCH;
            s = run_batch(g, st, c, queries, sqq, idx->dim, which + q0, m, 0, 0, thr, cand, ncand, again + q0, &pairs);
        }
        for (size_t t = 0; s == PATINA_OK && t < nw; t++)
            if (again[t]) cpu[which[t]] = 1;
    }
    free(which);
    free(again);
    if (stats && s == PATINA_OK) {
        stats->chunks += st->chunks;
        stats->host_bytes += st->hbytes;
    }
    return call_end(s, nq, pairs, cand, ncand, cpu, stats);
}

/* ------------------------------------------------- pivot tables on the GPU */

/* pivots.c's R for a radius r: (r + eps)(1 + REL). */
static double prune_radius(double r, double eps) { return (r + eps) * (1.0 + PIV_REL); }

patina_status patina_gpu_sqfd_filter(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                     const double *sqq, size_t nq, const double *alo, const double *ahi,
                                     const double *eps, int ptolemaic, const pgpu_req_t *rq, uint32_t **cand,
                                     size_t *ncand, uint8_t *cpu, pgpu_sqfd_stats_t *stats)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    const size_t k = rq ? rq->k : 0;
    const double radius = rq ? rq->radius : 0.0;
    const uint32_t cap = k ? PGPU_SQFD_KNN_CAND : PGPU_SQFD_RANGE_CAND;
    sq_state_t *st;
    sq_copy_t *c;
    uint32_t *which = NULL, *d_list = NULL, *d_ln = NULL, *d_plist = NULL, *d_pn = NULL, *h_ln = NULL, *h_pn = NULL;
    uint8_t *again = NULL;
    double *d_alo = NULL, *d_ahi = NULL, *d_eps = NULL, *d_R = NULL, *h_R = NULL;
    float *d_khi = NULL, *d_lam = NULL, *d_U = NULL, *h_U = NULL;
    size_t q, nw = 0, qb, np, n, pcap = 0, pairs = 0;
    patina_status ret = PATINA_OK;
    cudaError_t e = cudaSuccess;
    if (!g || !idx || !rq || (nq && (!queries || !sqq || !alo || !ahi || !eps || !cand || !ncand || !cpu)) ||
        (!k && !(radius >= 0.0)))
        return patina__fail(PATINA_E_INVALID, "gpu sqfd: bad argument");
    for (q = 0; q < nq; q++) {
        cand[q] = NULL;
        ncand[q] = 0;
        cpu[q] = 0;
    }
    if (nq == 0 || idx->n == 0) return PATINA_OK;
    if (idx->np == 0 || !idx->tab || !idx->pp) return patina__fail(PATINA_E_INVALID, "gpu sqfd: no pivot table");
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(sq_state(g, &st));
    PATINA_TRY(copy_of(g, st, idx, &c));
    if (c->streamed)
        return patina__fail(PATINA_E_LIMIT, "gpu sqfd: %zu rows are over the device budget (streamed: the scan only)", c->n);
    st->chunks = st->hbytes = 0;
    if (!c->ok || c->n == 0) {
        for (q = 0; q < nq; q++) cpu[q] = c->ok ? 0 : 1;
        if (stats) stats->cpu += c->ok ? 0 : nq;
        return PATINA_OK;
    }
    n = c->n;
    np = c->np;
    if (k) pcap = 4 * (k > 64 ? k : 64); /* the pilot: the rows of the max(k, 64) smallest bounds, ties to 4x */
    /* per query: lower bounds (n floats), the survivors (n), the pilot's rows and keys, the candidates */
    qb = ((size_t)768 << 20) / (8 * n + 8 * pcap + (size_t)cap * 16 + 64);
    if (qb < 1) qb = 1;
    if (qb > 256) qb = 256;
    if (qb > nq) qb = nq;
    which = (uint32_t *)malloc(nq * sizeof *which);
    again = (uint8_t *)malloc(nq);
    h_R = (double *)malloc(qb * sizeof *h_R);
    h_U = (float *)malloc(qb * sizeof *h_U);
    h_ln = (uint32_t *)malloc(qb * sizeof *h_ln);
    h_pn = (uint32_t *)malloc(qb * sizeof *h_pn);
    if (!which || !again || !h_R || !h_U || !h_ln || !h_pn) {
        ret = patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for %zu queries", nq);
        goto done;
    }
    for (q = 0; q < nq; q++) {
        if (query_ok(c, queries + q * idx->dim, idx->dim)) which[nw++] = (uint32_t)q;
        else cpu[q] = 1;
    }
    if ((ret = sq_alloc(g, (void **)&d_alo, qb * np * sizeof *d_alo, "pivot distances")) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&d_ahi, qb * np * sizeof *d_ahi, "pivot distances")) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&d_eps, qb * sizeof *d_eps, "pivot distances")) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&d_R, qb * sizeof *d_R, "pivot radii")) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&d_list, qb * n * sizeof *d_list, "survivors")) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&d_ln, qb * sizeof *d_ln, "survivors")) != PATINA_OK)
        goto done;
    if (k && ((ret = sq_alloc(g, (void **)&d_plist, qb * pcap * sizeof *d_plist, "pilot")) != PATINA_OK ||
              (ret = sq_alloc(g, (void **)&d_pn, qb * sizeof *d_pn, "pilot")) != PATINA_OK ||
              (ret = sq_alloc(g, (void **)&d_khi, qb * pcap * sizeof *d_khi, "pilot")) != PATINA_OK ||
              (ret = sq_alloc(g, (void **)&d_lam, qb * sizeof *d_lam, "pilot")) != PATINA_OK ||
              (ret = sq_alloc(g, (void **)&d_U, qb * sizeof *d_U, "pilot")) != PATINA_OK))
        goto done;
    for (size_t q0 = 0; q0 < nw && ret == PATINA_OK; q0 += qb) {
        const size_t m = nw - q0 < qb ? nw - q0 : qb, take = k < n ? k : n;
        const size_t kq4 = batch_kq4(queries, idx->dim, which + q0, m);
        const dim3 grid((unsigned)((n + 255) / 256), (unsigned)m);
        sq_args_t a;
        size_t t;
        if ((ret = buffers(g, st, m, kq4, k ? m * n : 1, m * cap)) != PATINA_OK) break;
        pack_queries(st, queries, sqq, idx->dim, which + q0, m, kq4, 0.0f);
        for (t = 0; t < m; t++) { /* the queries' intervals and slacks, in batch order (via h_R as staging) */
            const uint32_t w = which[q0 + t];
            if (e == cudaSuccess) e = cudaMemcpyAsync(d_alo + t * np, alo + (size_t)w * np, np * sizeof *alo,
                                                      cudaMemcpyHostToDevice, s);
            if (e == cudaSuccess) e = cudaMemcpyAsync(d_ahi + t * np, ahi + (size_t)w * np, np * sizeof *ahi,
                                                      cudaMemcpyHostToDevice, s);
            h_R[t] = eps[w];
        }
        if (e == cudaSuccess) e = cudaMemcpyAsync(d_eps, h_R, m * sizeof *h_R, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaMemcpyAsync(st->d_q, st->h_q, m * kq4 * 2 * sizeof *st->h_q, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* h_R is reused below */
        if (e == cudaSuccess && k) {
            /* the pilot: the rows of the pcap / 4 smallest metric bounds (at most pcap), their keys, U_p */
            k_piv_lb<0><<<grid, 256, 0, s>>>(c->tab, ((n + 31) / 32) * 32, (uint32_t)n, (int)np, d_alo, d_ahi, d_eps,
                                             NULL, c->pp, 0, st->d_dense, NULL, NULL, NULL, 0);
            e = cudaGetLastError();
            if (e == cudaSuccess) {
                const uint32_t mp = (uint32_t)(pcap / 4 < n ? pcap / 4 : n);
                k_sq_kth<<<(unsigned)m, SQ_SEL_THREADS, 0, s>>>(st->d_dense, n, NULL, (uint32_t)n, (uint32_t)n, mp,
                                                                 d_lam);
                e = cudaGetLastError();
            }
            if (e == cudaSuccess) e = cudaMemsetAsync(d_pn, 0, m * sizeof *d_pn, s);
            if (e == cudaSuccess) {
                k_piv_lb<2><<<grid, 256, 0, s>>>(c->tab, 0, (uint32_t)n, (int)np, NULL, NULL, NULL, NULL, NULL, 0,
                                                 st->d_dense, d_lam, d_plist, d_pn, (uint32_t)pcap);
                e = cudaGetLastError();
            }
            if (e == cudaSuccess) e = cudaMemcpyAsync(st->d_qi, st->h_qi, m * sizeof *st->h_qi, cudaMemcpyHostToDevice, s);
            if (e == cudaSuccess) {
                a = args_of(c, st, (uint32_t)pcap, (int)m, (int)kq4);
                a.list = d_plist;
                a.list_n = d_pn;
                a.khi = d_khi;
                e = scan_launch<SQ_KEYS, 1>(g, c->form, a, s);
            }
            if (e == cudaSuccess) {
                k_sq_kth<<<(unsigned)m, SQ_SEL_THREADS, 0, s>>>(d_khi, pcap, d_pn, 0, (uint32_t)pcap, (uint32_t)take, d_U);
                e = cudaGetLastError();
            }
            if (e == cudaSuccess) e = cudaMemcpyAsync(h_U, d_U, m * sizeof *h_U, cudaMemcpyDeviceToHost, s);
            if (e == cudaSuccess) e = cudaMemcpyAsync(h_pn, d_pn, m * sizeof *h_pn, cudaMemcpyDeviceToHost, s);
            if (e == cudaSuccess) e = cudaStreamSynchronize(s);
            for (t = 0; e == cudaSuccess && t < m; t++) {
                const double U = (double)h_U[t], eq = eps[which[q0 + t]];
                h_R[t] = isinf(U) ? INFINITY : prune_radius(sqrt(U) * (1.0 + 0x1p-40), eq);
                st->h_qi[t].thr = isinf(U) ? INFINITY : pgpu_f_up(U * (1.0 + 0x1p-22));
                pairs += h_pn[t] < pcap ? h_pn[t] : pcap;
            }
        } else if (e == cudaSuccess) {
            for (t = 0; t < m; t++) {
                const double r2 = radius * radius * (1.0 + 0x1p-40);
                h_R[t] = prune_radius(radius, eps[which[q0 + t]]);
                st->h_qi[t].thr = r2 < 3.0e38 ? pgpu_f_up(r2) : INFINITY;
            }
        }
        /* the survivors of the bounds, then their SQFD's candidates */
        if (e == cudaSuccess) e = cudaMemcpyAsync(d_R, h_R, m * sizeof *h_R, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaMemcpyAsync(st->d_qi, st->h_qi, m * sizeof *st->h_qi, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaMemsetAsync(d_ln, 0, m * sizeof *d_ln, s);
        if (e == cudaSuccess) e = cudaMemsetAsync(st->d_cnt, 0, m * sizeof *st->d_cnt, s);
        if (e == cudaSuccess) {
            k_piv_lb<1><<<grid, 256, 0, s>>>(c->tab, ((n + 31) / 32) * 32, (uint32_t)n, (int)np, d_alo, d_ahi, d_eps, d_R,
                                             c->pp, ptolemaic, NULL, NULL, d_list, d_ln, (uint32_t)n);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess) {
            a = args_of(c, st, (uint32_t)n, (int)m, (int)kq4);
            a.list = d_list;
            a.list_n = d_ln;
            a.cap = cap;
            e = scan_launch<SQ_CAND, 1>(g, c->form, a, s);
        }
        if (e == cudaSuccess) e = cudaMemcpyAsync(h_ln, d_ln, m * sizeof *h_ln, cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess) {
            ret = pgpu_fail((int)e, "gpu sqfd: the GPU filter", __FILE__, __LINE__);
            break;
        }
        if ((ret = take_candidates(st, s, m, which + q0, take, cap, cand, ncand, again + q0)) != PATINA_OK) break;
        for (t = 0; t < m; t++) {
            pairs += h_ln[t];
            if (again[q0 + t]) cpu[which[q0 + t]] = 1; /* too many candidates: the caller's */
        }
    }
done:
    pgpu_free_n(g, 11, &d_alo, &d_ahi, &d_eps, &d_R, &d_list, &d_ln, &d_plist, &d_pn, &d_khi, &d_lam, &d_U);
    free(which);
    free(again);
    free(h_R);
    free(h_U);
    free(h_ln);
    free(h_pn);
    return call_end(ret, nq, pairs, cand, ncand, cpu, stats);
}

static patina_status slot_buffers(patina_gpu_t *g, sq_slot_t *sl)
{
    const size_t B = PGPU_SQFD_BLOCK;
    if (sl->h_rows) return PATINA_OK;
#define PIN(p, n) PATINA_TRY(pgpu_pin_alloc(g, (void **)&sl->p, (n) * sizeof *sl->p, PGPU_FAM_SQFD, "pipeline block"))
#define DEV(p, n) PATINA_TRY(sq_alloc(g, (void **)&sl->p, (n) * sizeof *sl->p, "pipeline block"))
    PIN(h_rows, B);
    DEV(d_rows, B);
    PIN(h_n, 1);
    DEV(d_n, 1);
    PIN(h_lo, B);
    PIN(h_hi, B);
    DEV(d_lo, B);
    DEV(d_hi, B);
    PIN(h_q, SQ_KMAX * 2);
    DEV(d_q, SQ_KMAX * 2);
    PIN(h_qi, 1);
    DEV(d_qi, 1);
#undef PIN
#undef DEV
    return PATINA_OK;
}

patina_status patina_gpu_sqfd_block_submit(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, int slot,
                                           const float *query, double sqq, const uint32_t *rows, size_t m)
{
    sq_state_t *st;
    sq_copy_t *c;
    sq_slot_t *sl;
    cudaStream_t s;
    cudaError_t e;
    sq_args_t a;
    size_t kq4, cn, i;
    patina_status ret;
    if (!g || !idx || !query || (m && !rows) || slot < 0 || slot > 1 || m > PGPU_SQFD_BLOCK)
        return patina__fail(PATINA_E_INVALID, "gpu sqfd: bad argument");
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(sq_state(g, &st));
    PATINA_TRY(copy_of(g, st, idx, &c));
    if (c->streamed)
        return patina__fail(PATINA_E_LIMIT, "gpu sqfd: %zu rows are over the device budget (streamed: the scan only)", c->n);
    if (!query_ok(c, query, idx->dim))
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu sqfd: the query or the rows are outside the kernels' domain");
    sl = &st->slot[slot];
    if (sl->m) return patina__fail(PATINA_E_INVALID, "gpu sqfd: block slot %d has a block pending", slot);
    if ((ret = slot_buffers(g, sl)) != PATINA_OK) {
        slots_free(g, st);
        return ret;
    }
    for (i = 0; i < m; i++) {
        if (rows[i] >= c->src_n || c->hinv[rows[i]] == UINT32_MAX)
            return patina__fail(PATINA_E_INVALID, "gpu sqfd: row %u is not in the copy", rows[i]);
        sl->h_rows[i] = c->hinv[rows[i]];
    }
    *sl->h_n = (uint32_t)m;
    cn = (size_t)query[0];
    kq4 = round4(cn);
    memset(sl->h_q, 0, kq4 * 2 * sizeof *sl->h_q);
    for (i = 0; i < cn; i++) {
        const float *cr = query + 8 + 8 * i;
        sl->h_q[2 * i] = make_float4(cr[0], cr[1], cr[2], cr[3]);
        sl->h_q[2 * i + 1] = make_float4(cr[4], cr[5], cr[6], cr[7]);
    }
    sl->h_qi->sqq = sqq;
    sl->h_qi->w = weight_up(query);
    sl->h_qi->thr = 0.0f;
    sl->h_qi->cnt4 = (int)kq4;
    sl->h_qi->pad = 0;
    s = (cudaStream_t)pgpu_stream(g, 1 + slot);
    a = args_of(c, st, (uint32_t)PGPU_SQFD_BLOCK, 1, (int)kq4);
    a.qc = sl->d_q;
    a.qi = sl->d_qi;
    a.list = sl->d_rows;
    a.list_n = sl->d_n;
    a.klo = sl->d_lo;
    a.khi = sl->d_hi;
    a.nrows = (uint32_t)(m ? m : 1);
    e = cudaMemcpyAsync(sl->d_rows, sl->h_rows, m * sizeof *sl->h_rows, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sl->d_n, sl->h_n, sizeof *sl->h_n, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sl->d_q, sl->h_q, kq4 * 2 * sizeof *sl->h_q, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sl->d_qi, sl->h_qi, sizeof *sl->h_qi, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && m) e = scan_launch<SQ_KEYS, 1>(g, c->form, a, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sl->h_lo, sl->d_lo, m * sizeof *sl->h_lo, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sl->h_hi, sl->d_hi, m * sizeof *sl->h_hi, cudaMemcpyDeviceToHost, s);
    if (e != cudaSuccess) {
        (void)cudaStreamSynchronize(s);
        return pgpu_fail((int)e, "gpu sqfd: pipeline block", __FILE__, __LINE__);
    }
    sl->m = m ? m : SIZE_MAX; /* pending (an empty block too) */
    return PATINA_OK;
}

patina_status patina_gpu_sqfd_block_wait(patina_gpu_t *g, int slot, float *lo, float *hi)
{
    sq_state_t *st;
    sq_slot_t *sl;
    size_t m;
    if (!g || slot < 0 || slot > 1) return patina__fail(PATINA_E_INVALID, "gpu sqfd: bad argument");
    st = (sq_state_t *)pgpu_state(g, PGPU_FAM_SQFD);
    if (!st || !st->slot[slot].m) return patina__fail(PATINA_E_INVALID, "gpu sqfd: no block pending on slot %d", slot);
    sl = &st->slot[slot];
    m = sl->m == SIZE_MAX ? 0 : sl->m;
    sl->m = 0;
    PGPU_CU(cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 1 + slot)));
    if (m && (!lo || !hi)) return patina__fail(PATINA_E_INVALID, "gpu sqfd: null keys");
    memcpy(lo, sl->h_lo, m * sizeof *lo);
    memcpy(hi, sl->h_hi, m * sizeof *hi);
    return PATINA_OK;
}

/* ------------------------------------------------------------ hooks */

patina_status patina_gpu_sqfd_pairs(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                     const double *sqq, size_t nq, double *out_s, double *out_e)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    sq_state_t *st;
    sq_copy_t *c;
    uint32_t *which;
    double *ds = NULL, *de = NULL;
    patina_status ret = PATINA_OK;
    cudaError_t e;
    size_t kq4;
    if (!g || !idx || !out_s || !out_e || (nq && (!queries || !sqq)))
        return patina__fail(PATINA_E_INVALID, "gpu sqfd: bad argument");
    if (nq == 0 || idx->n == 0) return PATINA_OK;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(sq_state(g, &st));
    PATINA_TRY(copy_of(g, st, idx, &c));
    if (c->streamed)
        return patina__fail(PATINA_E_LIMIT, "gpu sqfd: %zu rows are over the device budget (streamed: the scan only)", c->n);
    if (!(which = (uint32_t *)malloc(nq * sizeof *which)))
        return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory");
    for (size_t q = 0; q < nq; q++) {
        which[q] = (uint32_t)q;
        if (!query_ok(c, queries + q * idx->dim, idx->dim)) ret = PATINA_E_UNAVAILABLE;
    }
    if (ret != PATINA_OK) {
        free(which);
        return patina__fail(ret, "gpu sqfd: rows or queries outside the kernels' domain");
    }
    kq4 = batch_kq4(queries, idx->dim, which, nq);
    if ((ret = buffers(g, st, nq, kq4, 1, 1)) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&ds, nq * idx->n * sizeof *ds, "pairs")) != PATINA_OK ||
        (ret = sq_alloc(g, (void **)&de, nq * idx->n * sizeof *de, "pairs")) != PATINA_OK)
        goto done;
    pack_queries(st, queries, sqq, idx->dim, which, nq, kq4, 0.0f);
    e = cudaMemcpyAsync(st->d_q, st->h_q, nq * kq4 * 2 * sizeof *st->h_q, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(st->d_qi, st->h_qi, nq * sizeof *st->h_qi, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemsetAsync(ds, 0xff, nq * idx->n * sizeof *ds, s); /* NaN: removed rows */
    if (e == cudaSuccess) e = cudaMemsetAsync(de, 0xff, nq * idx->n * sizeof *de, s);
    if (e == cudaSuccess && nq > (size_t)65535 * SQ_QT) e = cudaErrorInvalidValue; /* grid.y */
    if (e == cudaSuccess) {
        sq_args_t a = args_of(c, st, (uint32_t)c->n, (int)nq, (int)kq4);
        a.out_s = ds;
        a.out_e = de;
        a.ld = idx->n;
        e = scan_launch<SQ_PAIRS, 0>(g, c->form, a, s);
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(out_s, ds, nq * idx->n * sizeof *ds, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(out_e, de, nq * idx->n * sizeof *de, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) ret = pgpu_fail((int)e, "gpu sqfd: pairs", __FILE__, __LINE__);
done:
    pgpu_free_n(g, 2, &ds, &de);
    free(which);
    return ret;
}

patina_status patina_gpu__sqfd_scan_ms(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                       const double *sqq, size_t nq, int rows_per_thread, int reps, double *ms)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    cudaEvent_t e0 = NULL, e1 = NULL;
    sq_args_t a;
    sq_state_t *st;
    sq_copy_t *c;
    uint32_t *which;
    double *times;
    patina_status ret = PATINA_OK;
    cudaError_t e = cudaSuccess;
    size_t kq4;
    if (!g || !idx || !ms || !queries || !sqq || nq == 0 || nq > SQ_KNN_BATCH || reps < 1)
        return patina__fail(PATINA_E_INVALID, "gpu sqfd: bad argument (1..%d queries)", SQ_KNN_BATCH);
    *ms = 0.0;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(sq_state(g, &st));
    PATINA_TRY(copy_of(g, st, idx, &c));
    if (c->streamed)
        return patina__fail(PATINA_E_LIMIT, "gpu sqfd: %zu rows are over the device budget (streamed: the scan only)", c->n);
    if (!c->ok) return patina__fail(PATINA_E_UNAVAILABLE, "gpu sqfd: rows outside the kernels' domain");
    which = (uint32_t *)malloc(nq * sizeof *which);
    times = (double *)malloc((size_t)reps * sizeof *times);
    if (!which || !times) {
        free(which);
        free(times);
        return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory");
    }
    for (size_t q = 0; q < nq; q++) which[q] = (uint32_t)q;
    kq4 = batch_kq4(queries, idx->dim, which, nq);
    if ((ret = buffers(g, st, nq, kq4, 1, 1)) != PATINA_OK) goto done;
    pack_queries(st, queries, sqq, idx->dim, which, nq, kq4, -1.0f); /* no key passes: nothing written */
    e = cudaMemcpyAsync(st->d_q, st->h_q, nq * kq4 * 2 * sizeof *st->h_q, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(st->d_qi, st->h_qi, nq * sizeof *st->h_qi, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    if (e == cudaSuccess) {
        a = args_of(c, st, (uint32_t)c->n, (int)nq, (int)kq4);
        a.cap = 1;
        e = rows_per_thread == 1 ? scan_launch<SQ_CAND, 0, 1>(g, c->form, a, s)
                                 : scan_launch<SQ_CAND, 0, 2>(g, c->form, a, s);
    }
    for (int r = 0; e == cudaSuccess && r < reps; r++) {
        float t = 0.f;
        e = cudaEventRecord(e0, s);
        if (e == cudaSuccess)
            e = rows_per_thread == 1 ? scan_launch<SQ_CAND, 0, 1>(g, c->form, a, s)
                                     : scan_launch<SQ_CAND, 0, 2>(g, c->form, a, s);
        if (e == cudaSuccess) e = cudaEventRecord(e1, s);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&t, e0, e1);
        times[r] = t;
    }
    if (e != cudaSuccess) ret = pgpu_fail((int)e, "gpu sqfd: timing the scan", __FILE__, __LINE__);
    else {
        pgpu_sort_doubles(times, (size_t)reps);
        *ms = times[reps / 2];
    }
done:
    if (e0) (void)cudaEventDestroy(e0);
    if (e1) (void)cudaEventDestroy(e1);
    free(which);
    free(times);
    return ret;
}
