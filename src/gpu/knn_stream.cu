/* The k-NN engine on indexes larger than the device (src/gpu/knn.cu):
 * a tensor-core index streamed from its pinned host tier, any other in
 * chunks of rows; and the entry points, which choose between them and the
 * resident engines. */
#include "gpu/knn_internal.cuh"

/* ---- indexes larger than the device: streamed in chunks of rows ----
 * When an index's device copy (or a call's buffers) does not fit the
 * context's device budget, the rows are searched a chunk at a time: each
 * chunk a sub-index of its own (its rows, ids, sums and removed flags at an
 * offset; a copy made, searched by the engines above and dropped), the
 * per-query answers merged by (distance, id) -- the k best of a union are
 * among the k best of its parts, and a range answer is the union. A chunk
 * that still does not fit halves the chunk size (down to CHUNK_MIN rows).
 * A query any chunk leaves to the CPU is the CPU's as a whole. */


static uint64_t chunk_serial(void)
{
    static uint64_t next = 0;
    return (UINT64_C(3) << 62) | __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

/* Drops g's copy of the index with this serial (a chunk's, after use). */
static void drop_copy(patina_gpu_t *g, uint64_t serial)
{
    knn_copy_t *c = (knn_copy_t *)tcache_find(g, PGPU_FAM_SEARCH, serial);
    if (c) copy_free(g, c);
}

/* The sub-index of rows [a, b): rm (b - a) its removal log (local rows). */
static void chunk_view(const pgpu_knn_index_t *idx, size_t a, size_t b, uint32_t *rm, pgpu_knn_index_t *v)
{
    *v = *idx;
    v->serial = chunk_serial();
    v->n = b - a;
    v->ids = idx->ids + a;
    v->descs = idx->descs + a * idx->bytes;
    if (idx->t1) {
        v->t1 = idx->t1 + a;
        v->c3 = idx->c3 + a;
    }
    v->dead = idx->dead ? idx->dead + a : NULL;
    v->live = 0;
    v->dead_gen = 0;
    v->rm_log = rm;
    for (size_t r = a; r < b; r++) {
        if (idx->dead && idx->dead[r]) rm[v->dead_gen++] = (uint32_t)(r - a);
        else v->live++;
    }
}

static int hit_before(const patina_hit_t *x, const patina_hit_t *y)
{
    return x->distance < y->distance || (x->distance == y->distance && x->id < y->id);
}

static int by_hit(const void *x, const void *y)
{
    const patina_hit_t *a = (const patina_hit_t *)x, *b = (const patina_hit_t *)y;
    return hit_before(a, b) ? -1 : hit_before(b, a);
}

static void free_lists(patina_hit_t **hits, size_t nq)
{
    for (size_t q = 0; q < nq; q++) {
        free(hits[q]);
        hits[q] = NULL;
    }
}

/* One chunked search: k-NN (lists NULL: hits (nq, k)) or range (lists:
 * hits[q] malloc'd, at most max_hits); a chunk's answers in ch / chl, cc,
 * ccpu (per-call scratch). */
typedef struct chunk_call {
    pgpu_req_t rq;
    patina_hit_t *hits, **lists;
    size_t *counts;
    patina_hit_t *ch, **chl, *mg;
    size_t *cc;
    uint8_t *ccpu;
} chunk_call_t;

/* The chunk's answer for query q merged into the call's. */
static patina_status chunk_merge(chunk_call_t *cl, size_t q)
{
    if (!cl->lists) { /* the k best of the two sorted lists */
        const size_t k = cl->rq.k;
        patina_hit_t *dst = cl->hits + q * k, *src = cl->ch + q * k;
        size_t i = 0, j = 0, m = 0;
        while (m < k && (i < cl->counts[q] || j < cl->cc[q]))
            cl->mg[m++] = j >= cl->cc[q] || (i < cl->counts[q] && !hit_before(&src[j], &dst[i])) ? dst[i++] : src[j++];
        memcpy(dst, cl->mg, m * sizeof *cl->mg);
        cl->counts[q] = m;
        return PATINA_OK;
    }
    if (cl->cc[q]) { /* the union, sorted, cut at max_hits */
        patina_hit_t *u = (patina_hit_t *)realloc(cl->lists[q], (cl->counts[q] + cl->cc[q]) * sizeof *u);
        size_t m = cl->counts[q] + cl->cc[q];
        if (!u) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for hits");
        memcpy(u + cl->counts[q], cl->chl[q], cl->cc[q] * sizeof *u);
        qsort(u, m, sizeof *u, by_hit);
        if (cl->rq.max_hits && m > cl->rq.max_hits) m = cl->rq.max_hits;
        cl->lists[q] = u;
        cl->counts[q] = m;
    }
    return PATINA_OK;
}

/* ---- indexes larger than the device: a pinned host tier, streamed ----
 * A tensor-core (CEDD) index whose device copy does not fit the budget
 * keeps its device layout -- the rows in the fixed random permutation,
 * padded to dp bytes, with their sums (dp + 16 bytes a row) -- in pinned
 * host memory, built once and then kept up to date like a device copy
 * (appended rows laid out, removed rows blanked). Only the values the
 * final pass reads per candidate stay on the device: T1, C3, the id and
 * the removed flag (21 bytes a row). A call streams the rows through two
 * device buffers of R rows: the copy stream uploads chunk j + 1 while the
 * compute stream scans chunk j, so for small batches the PCIe link never
 * waits for the scan and for large ones the scan never waits for the link.
 *
 * The pilot threshold comes from the first rows of chunk 0, a uniform
 * sample of the whole table (the permutation), so it is the whole table's
 * threshold and holds for every chunk: the candidates of all chunks
 * together include the k best. Each chunk's candidates are ranked by the
 * final pass on the chunk (its best min(k, live candidates) by (distance,
 * id), exact as in the resident engine), and the host merges the chunks'
 * lists by (distance, id) while the next chunk runs: the k best of a union
 * are among the k best of its parts. Range search: the radius' threshold,
 * the chunks' hits united. A query some chunk cannot settle (its
 * candidates overflow) is tried once more with all of chunk 0 as its
 * pilot, then left to the CPU. */



/* Host rows [h0, h0 + m) into the tier's rows [d0, d0 + m) (map as for
 * tc_lay_rows): rows and sums into pinned memory, the final pass's values
 * uploaded, through pieces of at most 65536 rows. */
static patina_status tier_put_rows(knn_tier_t *t, const pgpu_knn_index_t *idx, const uint32_t *map, size_t h0,
                                   size_t m, size_t d0)
{
    const size_t piece = 65536, dp = (size_t)t->dp;
    const size_t pm = m < piece ? m : piece;
    uint32_t *t1 = (uint32_t *)malloc(pm * sizeof *t1 + 1);
    double *c3 = (double *)malloc(pm * sizeof *c3 + 1);
    uint64_t *ids = (uint64_t *)malloc(pm * sizeof *ids + 1);
    patina_status s = PATINA_OK;
    if (!t1 || !c3 || !ids) s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory laying out %zu rows", m);
    for (size_t i = 0; s == PATINA_OK && i < m; i += piece) {
        const size_t b = m - i < piece ? m - i : piece, d = d0 + i;
        tc_lay_rows(idx, map ? map + i : NULL, h0 + i, b, dp, (uint8_t *)tcache_host_at(&t->host, 0, d),
                    (tc_aux_t *)tcache_host_at(&t->host, 1, d), t1, c3, ids, NULL);
        if (cudaMemcpy(t->t1 + d, t1, b * sizeof *t1, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(t->c3 + d, c3, b * sizeof *c3, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(t->ids + d, ids, b * sizeof *ids, cudaMemcpyHostToDevice) != cudaSuccess)
            s = pgpu_fail((int)cudaGetLastError(), "gpu search: uploading a tier's values", __FILE__, __LINE__);
    }
    free(t1);
    free(c3);
    free(ids);
    return s;
}

/* The rows removed since the tier last looked: blanked in pinned memory
 * (zero bytes, a zero row's sums), flagged on the device. */
static patina_status tier_sync_dead(patina_gpu_t *g, knn_tier_t *t, const pgpu_knn_index_t *idx)
{
    return sync_removed(g, idx, &t->dead_gen, t->inv, t->nperm, t->d_rm, t, NULL, NULL, NULL, t->dead, t->dp);
}

/* The tier of idx: made now (room for a quarter more rows), or brought up
 * to the index (rows appended, a tier without room for them remade;
 * removed rows blanked). */
static patina_status tier_of(patina_gpu_t *g, knn_state_t *st, const pgpu_knn_index_t *idx, knn_tier_t **out)
{
    knn_tier_t *t = &st->tier;
    patina_status s = PATINA_OK;
    *out = NULL;
    if (t->serial == idx->serial && idx->n > t->src_n && t->n + (idx->n - t->src_n) > t->host.cap) tier_free(g, t);
    if (t->serial != idx->serial) {
        const size_t n = idx->n, cap = n + n / 4 + 1024;
        tier_free(g, t);
        t->serial = idx->serial;
        t->dim = idx->dim;
        t->dp = tc_dp(idx->dim);
        t->perm = (uint32_t *)malloc(n * sizeof *t->perm + 1);
        t->inv = (uint32_t *)malloc(n * sizeof *t->inv + 1);
        if (!t->perm || !t->inv) s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for a tier of %zu rows", n);
#define TDEV(p, m, tag) \
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, NULL, (void **)&t->p, (m) * sizeof *t->p, tag)
        TDEV(t1, cap, "tier row sums");
        TDEV(c3, cap, "tier row squares");
        TDEV(ids, cap, "tier ids");
        TDEV(dead, cap, "tier removed rows");
        TDEV(d_rm, TC_RM_CHUNK, "tier removed rows");
        TDEV(ptab, idx->ptab_rows * 8, "value table");
        if (s == PATINA_OK) {
            const size_t per[2] = {(size_t)t->dp, sizeof(tc_aux_t)};
            const char *const tags[2] = {"tier rows", "tier row sums"};
            s = tcache_host_reserve(g, &t->host, PGPU_FAM_SEARCH, 2, per, cap, tags);
        }
#undef TDEV
        if (s == PATINA_OK) s = tcache_stream_init(&t->stream);
        for (int i = 0; s == PATINA_OK && i < 2; i++) {
            cudaEvent_t ev;
            if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
                s = pgpu_fail((int)cudaGetLastError(), "gpu search: events", __FILE__, __LINE__);
            else t->ev_res[i] = ev;
        }
        if (s == PATINA_OK && (cudaMemset(t->dead, 0, cap) != cudaSuccess ||
                               cudaMemcpy(t->ptab, idx->ptab, idx->ptab_rows * 8 * sizeof(double),
                                          cudaMemcpyHostToDevice) != cudaSuccess))
            s = pgpu_fail((int)cudaGetLastError(), "gpu search: a tier", __FILE__, __LINE__);
        if (s == PATINA_OK) {
            tcache_perm(t->perm, n, KNN_PERM_SEED);
            for (size_t i = 0; i < n; i++) t->inv[t->perm[i]] = (uint32_t)i;
            (void)tcache_host_append(&t->host, n, NULL); /* fits: cap > n */
            s = tier_put_rows(t, idx, t->perm, 0, n, 0);
        }
        t->n = t->nperm = t->src_n = n;
    } else if (idx->n > t->src_n) {
        const size_t m = idx->n - t->src_n;
        const size_t d0 = tcache_host_append(&t->host, m, NULL); /* t->n: the room was checked above */
        s = tier_put_rows(t, idx, NULL, t->src_n, m, d0);
        if (s == PATINA_OK &&
            cudaMemset(t->dead + t->n, 0, m) != cudaSuccess)
            s = pgpu_fail((int)cudaGetLastError(), "gpu search: a tier", __FILE__, __LINE__);
        t->n += m;
        t->src_n = idx->n;
    }
    if (s == PATINA_OK) s = tier_sync_dead(g, t, idx);
    if (s != PATINA_OK) {
        tier_free(g, t);
        return s;
    }
    *out = t;
    return PATINA_OK;
}

/* The chunk buffers (rows for R rows; halved while they do not fit, down
 * to CHUNK_MIN) and the pinned result buffers for res bytes each. */
static patina_status tier_buffers(patina_gpu_t *g, knn_tier_t *t, size_t res)
{
    const size_t row = (size_t)t->dp + sizeof(tc_aux_t);
    size_t want = TIER_BUF_BYTES / row;
    if (want > t->n) want = (t->n + TC_R - 1) / TC_R * TC_R;
    if (want < CHUNK_MIN) want = CHUNK_MIN;
    if (!t->R) { /* kept for the tier's life (an earlier call may have settled on less) */
        const size_t per[2] = {(size_t)t->dp, sizeof(tc_aux_t)};
        void **const bufs[4] = {(void **)&t->b_rows[0], (void **)&t->b_aux[0], (void **)&t->b_rows[1],
                                (void **)&t->b_aux[1]};
        pgpu_free_n(g, 4, &t->b_rows[0], &t->b_rows[1], &t->b_aux[0], &t->b_aux[1]);
        t->R = 0;
        PATINA_TRY(tcache_chunk_buffers(g, PGPU_FAM_SEARCH, 1, 2, per, TC_R, bufs, &want, CHUNK_MIN, "tier chunk"));
        t->R = want;
        /* the padding after a chunk's rows: read by whole stages, never used */
        for (int b = 0; b < 2; b++)
            if (cudaMemset(t->b_rows[b], 0, (want + TC_R) * (size_t)t->dp) != cudaSuccess ||
                cudaMemset(t->b_aux[b], 0, (want + TC_R) * sizeof(tc_aux_t)) != cudaSuccess)
                return pgpu_fail((int)cudaGetLastError(), "gpu search: tier chunks", __FILE__, __LINE__);
    }
    if (t->res_bytes < res) {
        pgpu_free_n(g, 2, &t->h_res[0], &t->h_res[1]);
        t->res_bytes = 0;
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&t->h_res[0], res, PGPU_FAM_SEARCH, "tier results"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&t->h_res[1], res, PGPU_FAM_SEARCH, "tier results"));
        t->res_bytes = res;
    }
    return PATINA_OK;
}

/* Chunk j of the tier as a copy the engine's kernels read: the rows and
 * sums in buffer b, the final pass's values at the chunk's offset. */
void tier_view(const knn_tier_t *t, size_t j, int b, knn_copy_t *v)
{
    const size_t a = j * t->R;
    memset(v, 0, sizeof *v);
    v->tc = 1;
    v->dp = t->dp;
    v->dim = t->dim;
    v->n = t->n - a < t->R ? t->n - a : t->R;
    v->descs = t->b_rows[b];
    v->aux = t->b_aux[b];
    v->t1 = t->t1 + a;
    v->c3 = t->c3 + a;
    v->ids = t->ids + a;
    v->dead = t->dead + a;
    v->ptab = t->ptab;
}

/* The request rq (k-NN: hits (nq, k); range: lists[q] malloc'd, at most
 * max_hits) of nq queries through the tier of idx. */
static patina_status search_tier(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries, size_t nq,
                                 const pgpu_req_t *rq, patina_hit_t *hits, patina_hit_t **lists, size_t *counts,
                                 uint8_t *cpu, size_t *paths)
{
    const int range = rq->k == 0;
    const size_t k = rq->k, max_hits = rq->max_hits;
    const double radius = rq->radius;
    const size_t take = range ? 0 : k < idx->live ? k : idx->live, bytes = idx->bytes;
    const size_t call_bytes = g->budget / 8, pilot_bytes = call_bytes < TC_PILOT_BYTES ? call_bytes : TC_PILOT_BYTES;
    knn_state_t *st;
    knn_tier_t *t;
    size_t qb, S = 0, qp = 1, chunks[2] = {0, 0}, nfl = 0;
    uint8_t *fl = NULL;
    uint32_t *which = NULL;
    patina_hit_t *tmp = NULL;
    patina_status s;
    tc_io_t io;

    memset(cpu, 0, nq);
    memset(counts, 0, nq * sizeof *counts);
    if (idx->live == 0 || nq == 0) return PATINA_OK;
    if (idx->dim > PGPU_KNN_MAXDIM)
        return patina__fail(PATINA_E_INVALID, "gpu search: fast path over %d elements", PGPU_KNN_MAXDIM);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(knn_state(g, &st));
    PATINA_TRY(tier_of(g, st, idx, &t));
    /* queries a pass: their outputs and candidate lists within an eighth
     * of the budget (each pass reads the whole table) */
    qb = call_bytes / ((range ? TC_CAND : take) * (sizeof(double) + sizeof(uint64_t)) + TC_CAND * sizeof(uint32_t) +
                       256 + sizeof(tc_qinfo_t));
    if (qb > (range ? TIER_RANGE_BATCH : TC_KNN_BATCH)) qb = range ? TIER_RANGE_BATCH : TC_KNN_BATCH;
    if (qb > nq) qb = nq;
    if (qb < 1) qb = 1;
    tc_layout(&io, qb, 256, range ? TC_CAND : take);
    /* the per-call buffers first (their pilot within an eighth of the
     * budget), then the chunk buffers from what is left */
    if (!range) {
        S = tc_pilot_rows(t->n, take);
        if (S > TIER_BUF_BYTES / ((size_t)t->dp + sizeof(tc_aux_t))) S = TIER_BUF_BYTES / ((size_t)t->dp + sizeof(tc_aux_t));
        qp = pilot_bytes / (S * sizeof(float));
        if (qp < 1) qp = 1;
        if (qp > qb) qp = qb;
    }
    s = tc_buffers(g, st, NULL, qb, qp * S, range ? TC_CAND : take);
    if (too_big(s) && t->R) { /* the chunk buffers give way (remade below, maybe smaller) */
        patina_clear_error();
        tier_buffers_free(g, t);
        s = tc_buffers(g, st, NULL, qb, qp * S, range ? TC_CAND : take);
    }
    PATINA_TRY(s);
    PATINA_TRY(tier_buffers(g, t, io.out_bytes));
    if (S > t->R) S = t->R;
    if (S > t->n) S = t->n;
    fl = (uint8_t *)calloc(nq + 1, 1);
    tmp = (patina_hit_t *)malloc((k ? k : 1) * sizeof *tmp);
    if (!fl || !tmp) {
        free(fl);
        free(tmp);
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    }
    s = PATINA_OK;
    for (size_t q0 = 0; q0 < nq && s == PATINA_OK; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        s = tier_pass(g, st, t, queries + q0 * bytes, bytes, m, take, S, qp, range, radius, NULL, q0, k, hits,
                      lists, counts, fl, tmp, chunks);
    }
    for (size_t q = 0; s == PATINA_OK && q < nq; q++) nfl += fl[q];
    /* k-NN: the unsettled queries once more, all of chunk 0 as their pilot */
    if (s == PATINA_OK && nfl && !range && S < (t->n < t->R ? t->n : t->R) &&
        (which = (uint32_t *)malloc(nfl * sizeof *which)) != NULL) {
        uint8_t *gather = (uint8_t *)malloc(qb * bytes + 1), *fl2 = (uint8_t *)calloc(nfl + 1, 1);
        const size_t S2 = t->n < t->R ? t->n : t->R;
        size_t j = 0, qp2 = pilot_bytes / (S2 * sizeof(float));
        if (qp2 < 1) qp2 = 1;
        for (size_t q = 0; q < nq; q++)
            if (fl[q]) {
                which[j++] = (uint32_t)q;
                counts[q] = 0;
            }
        s = gather && fl2 ? tc_buffers(g, st, NULL, qb, (qp2 < qb ? qp2 : qb) * S2, take) : PATINA_E_NOMEM;
        if (s == PATINA_OK)
            for (size_t q0 = 0; q0 < nfl && s == PATINA_OK; q0 += qb) {
                const size_t m = nfl - q0 < qb ? nfl - q0 : qb;
                for (size_t i = 0; i < m; i++) memcpy(gather + i * bytes, queries + (size_t)which[q0 + i] * bytes, bytes);
                s = tier_pass(g, st, t, gather, bytes, m, take, S2, qp2 < m ? qp2 : m, 0, 0.0, which, q0, k, hits,
                              NULL, counts, fl2, tmp, chunks);
            }
        if (s == PATINA_OK)
            for (j = 0; j < nfl; j++) fl[which[j]] = fl2[j];
        if (too_big(s)) { /* no room for the retry: they stay the CPU's */
            patina_clear_error();
            s = PATINA_OK;
        }
        free(gather);
        free(fl2);
        free(which);
    }
    for (size_t q = 0; s == PATINA_OK && q < nq; q++) {
        if (fl[q] || counts[q] < take) { /* the CPU's */
            cpu[q] = 1;
            counts[q] = 0;
            if (range) {
                free(lists[q]);
                lists[q] = NULL;
            }
            continue;
        }
        if (paths) paths[0]++;
        if (range && counts[q]) {
            qsort(lists[q], counts[q], sizeof **lists, by_hit);
            if (max_hits && counts[q] > max_hits) counts[q] = max_hits;
        }
    }
    if (s == PATINA_OK && paths) {
        paths[3] += chunks[0];
        paths[4] += chunks[1];
    }
    if (s != PATINA_OK && range) free_lists(lists, nq);
    free(fl);
    free(tmp);
    return s;
}

/* Whether g streams idx through a tier (it did last time). */
static int tiered(patina_gpu_t *g, const pgpu_knn_index_t *idx)
{
    const knn_state_t *st = (const knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    return idx->t1 && st && st->tier.serial == idx->serial;
}

static void tier_drop(patina_gpu_t *g)
{
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    if (st) tier_free(g, &st->tier);
}

/* The chunks of rows, each a sub-index searched by the resident engines
 * and dropped, the answers merged; the chunk size halves while a chunk
 * does not fit (down to CHUNK_MIN rows). */
static patina_status search_chunked(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                                    const double *qv, size_t nq, chunk_call_t *cl, uint8_t *cpu, size_t *paths)
{
    const size_t n = idx->n;
    size_t rows = n / 2 + 1;
    uint32_t *rm = NULL;
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    chunk_images_t *ci;
    patina_status s = PATINA_OK;
    if (st && st->ci.serial == idx->serial && st->ci.rows && st->ci.rows < rows)
        rows = st->ci.rows; /* where the last call of this index settled */
    for (;;) {
        size_t a, chunks = 0, p[3] = {0, 0, 0};
        free(rm);
        if (!(rm = (uint32_t *)malloc(rows * sizeof *rm + 1))) {
            s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
            break;
        }
        memset(cpu, 0, nq);
        memset(cl->counts, 0, nq * sizeof *cl->counts);
        if (cl->lists) free_lists(cl->lists, nq);
        if ((s = knn_state(g, &st)) != PATINA_OK) break;
        st->replayed = 0;
        ci = &st->ci;
        if (!idx->t1 && (ci->serial != idx->serial || ci->n != n || ci->dead_gen != idx->dead_gen || ci->rows != rows)) {
            /* the chunks' images (made by the first call, replayed by the next) */
            images_free(g, ci);
            ci->img = (copy_image_t *)calloc((n + rows - 1) / rows, sizeof *ci->img);
            if (ci->img) {
                ci->serial = idx->serial;
                ci->n = n;
                ci->dead_gen = idx->dead_gen;
                ci->rows = rows;
                ci->count = (n + rows - 1) / rows;
            }
        }
        for (a = 0; a < n && s == PATINA_OK; a += rows) {
            const size_t b = n - a < rows ? n : a + rows, ic = a / rows;
            copy_image_t *im = !idx->t1 && ci->count > ic ? &ci->img[ic] : NULL;
            pgpu_knn_index_t v;
            chunk_view(idx, a, b, rm, &v);
            chunks++;
            if (v.live == 0) continue;
            memset(cl->cc, 0, nq * sizeof *cl->cc);
            if (im && im->valid) st->replay = im;
            else if (im) {
                image_free(g, im);
                st->rec = im;
            }
            s = search_resident(g, &v, queries, qv, nq, &cl->rq, cl->ch, cl->chl, cl->cc, cl->ccpu, a == 0 ? p : NULL);
            st->rec = NULL;
            st->replay = NULL;
            if (im && !im->valid) image_free(g, im); /* a failed or partial recording */
            drop_copy(g, v.serial);
            for (size_t q = 0; s == PATINA_OK && q < nq; q++) {
                if (cl->ccpu[q]) cpu[q] = 1;
                if (!cpu[q]) s = chunk_merge(cl, q);
            }
            if (cl->lists) free_lists(cl->chl, nq);
        }
        if (s == PATINA_OK) {
            for (size_t q = 0; cl->lists && q < nq; q++)
                if (cpu[q]) { /* the CPU's as a whole */
                    free(cl->lists[q]);
                    cl->lists[q] = NULL;
                    cl->counts[q] = 0;
                }
            if (paths) {
                paths[0] += p[0];
                paths[1] += p[1];
                paths[2] += p[2];
                paths[3] += chunks;
                paths[4] += st->replayed;
            }
            break;
        }
        if (!too_big(s) || rows / 2 < CHUNK_MIN) break;
        patina_clear_error();
        s = PATINA_OK;
        rows /= 2;
    }
    if (s != PATINA_OK && cl->lists) free_lists(cl->lists, nq);
    free(rm);
    return s;
}

patina_status patina_gpu_knn(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                             const double *qv, size_t nq, const pgpu_req_t *rq, patina_hit_t *hits,
                             patina_hit_t **lists, size_t *counts, uint8_t *cpu, size_t *paths)
{
    const int range = rq && rq->k == 0;
    const size_t k = range ? 0 : rq ? rq->k : 0, max_hits = range ? rq->max_hits : 0;
    const double radius = range ? rq->radius : 0.0;
    const pgpu_req_t r = {k, radius, max_hits}; /* k-NN: no radius */
    patina_status s;
    if (!g || !idx || !rq || (range ? !lists : !hits) || !counts || !cpu || (idx->t1 ? !queries : !qv) ||
        (range && isnan(radius)))
        return patina__fail(PATINA_E_INVALID, "gpu search: bad argument");
    if (k > TC_KMAX)
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu search: k = %zu is over the GPU's %d", k, TC_KMAX);
    if (tiered(g, idx)) { /* streamed before: streamed again */
        s = search_tier(g, idx, queries, nq, &r, range ? NULL : hits, range ? lists : NULL, counts, cpu, paths);
        if (!too_big(s)) return s;
        patina_clear_error();
        tier_drop(g);
    }
    s = search_resident(g, idx, queries, qv, nq, &r, hits, lists, counts, cpu, paths);
    if (!too_big(s) || idx->n < 2 * CHUNK_MIN) return s;
    patina_clear_error();
    if (range) free_lists(lists, nq);
    drop_copy(g, idx->serial);
    if (idx->t1) {
        s = search_tier(g, idx, queries, nq, &r, range ? NULL : hits, range ? lists : NULL, counts, cpu, paths);
        if (!too_big(s)) return s;
        patina_clear_error();
        tier_drop(g);
    }
    {
        chunk_call_t cl;
        int ok;
        memset(&cl, 0, sizeof cl);
        cl.rq = r;
        cl.counts = counts;
        cl.cc = (size_t *)malloc(nq * sizeof *cl.cc + 1);
        cl.ccpu = (uint8_t *)malloc(nq + 1);
        if (range) {
            cl.lists = lists;
            cl.chl = (patina_hit_t **)calloc(nq + 1, sizeof *cl.chl);
            ok = cl.chl != NULL;
        } else {
            cl.hits = hits;
            cl.ch = (patina_hit_t *)malloc(nq * k * sizeof *cl.ch + 1);
            cl.mg = (patina_hit_t *)malloc(k * sizeof *cl.mg);
            ok = cl.ch && cl.mg;
        }
        s = ok && cl.cc && cl.ccpu ? search_chunked(g, idx, queries, qv, nq, &cl, cpu, paths)
                                   : patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        free(cl.ch);
        free(cl.mg);
        free(cl.chl);
        free(cl.cc);
        free(cl.ccpu);
    }
    return s;
}
