/* The SQFD filter's device copies (src/gpu/sqfd.cu says what they hold):
 * the state of a device context's SQFD search, the live rows laid out in
 * blocks sorted by centroid count, resident, or (over the device budget,
 * without a pivot table) in pinned host memory streamed through two chunk
 * buffers with a resident pilot sample; kept per index serial and
 * generation, least recently used dropped first. */
#include "gpu/sqfd_internal.cuh"

/* ---------------------------------------------------------- the state */

void copy_free(patina_gpu_t *g, sq_copy_t *c)
{
    tcache_remove(g, c);
    if (c->streamed) {
        (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
        (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 1));
    }
    pgpu_free_n(g, 7, &c->rows, &c->cnt, &c->wo, &c->soo, &c->hrow, &c->tab, &c->pp);
    tcache_host_free(g, &c->host);
    pgpu_free_n(g, 5, &c->p_rows, &c->p_cnt, &c->p_wo, &c->p_soo, &c->p_hrow);
    for (int b = 0; b < 2; b++) pgpu_free_n(g, 5, &c->b_rows[b], &c->b_cnt[b], &c->b_wo[b], &c->b_soo[b], &c->b_hrow[b]);
    tcache_stream_free(&c->stream);
    free(c->hinv);
    memset(c, 0, sizeof *c);
}

void slots_free(patina_gpu_t *g, sq_state_t *st)
{
    for (int i = 0; i < 2; i++) {
        sq_slot_t *sl = &st->slot[i];
        pgpu_free_n(g, 14, &sl->h_rows, &sl->d_rows, &sl->h_n, &sl->d_n, &sl->h_lo, &sl->h_hi, &sl->d_lo, &sl->d_hi,
                    &sl->h_q, &sl->d_q, &sl->h_qi, &sl->d_qi, &sl->h_n, &sl->d_n);
        sl->m = 0;
    }
}

void buffers_free(patina_gpu_t *g, sq_state_t *st)
{
    pgpu_free_n(g, 9, &st->d_q, &st->h_q, &st->d_qi, &st->h_qi, &st->d_dense, &st->d_cand, &st->h_cand, &st->d_cnt,
                &st->h_cnt);
    st->q_cap = st->q_elems = st->dense_cap = st->cand_cap = 0;
}

static void sq_release(patina_gpu_t *g, void *state)
{
    sq_state_t *st = (sq_state_t *)state;
    for (int i = 0; i < PGPU_STREAMS; i++) (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, i));
    for (int i = 0; i < SQ_CACHE; i++) copy_free(g, &st->copy[i]);
    buffers_free(g, st);
    slots_free(g, st);
    (void)cudaGetLastError();
    free(st);
}

patina_status sq_state(patina_gpu_t *g, sq_state_t **out)
{
    sq_state_t *st = (sq_state_t *)pgpu_state(g, PGPU_FAM_SQFD);
    *out = st;
    if (st) return PATINA_OK;
    if (!(st = (sq_state_t *)calloc(1, sizeof *st))) return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory");
    pgpu_set_state(g, PGPU_FAM_SQFD, st, sq_release);
    *out = st;
    return PATINA_OK;
}

patina_status sq_alloc(patina_gpu_t *g, void **p, size_t bytes, const char *tag)
{
    return pgpu_dev_alloc(g, p, bytes ? bytes : 1, PGPU_FAM_SQFD, tag);
}

/* A copy over the device budget made a streamed one (sq_copy_t): the host
 * layout (nb blocks, kc slots) copied into pinned memory, two chunk
 * buffers of B blocks (B halved while they do not fit), the pilot sample
 * (device rows s n / ps, s < ps) laid out and uploaded, the events. */
#define SQ_CHUNK_BYTES ((size_t)256 << 20) /* a chunk buffer at most */
#define SQ_STREAM_PILOT 65536              /* pilot sample rows */
static patina_status stream_setup(patina_gpu_t *g, sq_copy_t *c, size_t nb, const float4 *hr, const uint16_t *hc,
                                  const float *hw, const double *hs, const uint32_t *hh)
{
    const size_t kc = (size_t)c->kc, n = c->n, per = kc * 64 * sizeof(float4) + 32 * (2 + 4 + 8 + 4);
    size_t B = (g->budget / 4 < SQ_CHUNK_BYTES ? g->budget / 4 : SQ_CHUNK_BYTES) / per;
    /* the pilot: SQ_STREAM_PILOT rows at most, and no larger than a chunk */
    const size_t pmax = B * 32 < SQ_STREAM_PILOT ? (B ? B * 32 : 32) : SQ_STREAM_PILOT;
    const size_t ps = n < pmax ? n : pmax, pnb = (ps + 31) / 32;
    float4 *pr = NULL;
    uint16_t *pc = NULL;
    float *pw = NULL;
    double *psoo = NULL;
    uint32_t *ph = NULL;
    patina_status s = PATINA_OK;
    c->streamed = 1;
    c->nb = nb;
    c->ps = ps;
    {
        const size_t fper[5] = {kc * 64 * sizeof *hr, 32 * sizeof *hc, 32 * sizeof *hw, 32 * sizeof *hs,
                                32 * sizeof *hh};
        const char *const tags[5] = {"streamed rows", "streamed rows", "streamed rows", "streamed rows",
                                     "streamed rows"};
        const void *const src[5] = {hr, hc, hw, hs, hh};
        PATINA_TRY(tcache_host_reserve(g, &c->host, PGPU_FAM_SQFD, 5, fper, nb, tags));
        (void)tcache_host_append(&c->host, nb, src);
    }
    /* the pilot: a strided sample of the device rows (random within a count), laid out alike */
    pr = (float4 *)calloc(pnb * kc * 64 + 1, sizeof *pr);
    pc = (uint16_t *)calloc(pnb * 32 + 1, sizeof *pc);
    pw = (float *)calloc(pnb * 32 + 1, sizeof *pw);
    psoo = (double *)calloc(pnb * 32 + 1, sizeof *psoo);
    ph = (uint32_t *)calloc(pnb * 32 + 1, sizeof *ph);
    if (!pr || !pc || !pw || !psoo || !ph) s = patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for a pilot");
    for (size_t i = 0; s == PATINA_OK && i < ps; i++) {
        const size_t r = i * n / ps, b = r >> 5, lane = r & 31, pb = i >> 5, pl = i & 31;
        for (size_t j = 0; j < kc; j++)
            for (size_t h = 0; h < 2; h++) pr[((pb * kc + j) * 2 + h) * 32 + pl] = hr[((b * kc + j) * 2 + h) * 32 + lane];
        pc[i] = hc[r];
        pw[i] = hw[r];
        psoo[i] = hs[r];
        ph[i] = hh[r];
    }
    if (s == PATINA_OK &&
        ((s = sq_alloc(g, (void **)&c->p_rows, pnb * kc * 64 * sizeof *pr, "pilot rows")) != PATINA_OK ||
         (s = sq_alloc(g, (void **)&c->p_cnt, pnb * 32 * sizeof *pc, "pilot rows")) != PATINA_OK ||
         (s = sq_alloc(g, (void **)&c->p_wo, pnb * 32 * sizeof *pw, "pilot rows")) != PATINA_OK ||
         (s = sq_alloc(g, (void **)&c->p_soo, pnb * 32 * sizeof *psoo, "pilot rows")) != PATINA_OK ||
         (s = sq_alloc(g, (void **)&c->p_hrow, pnb * 32 * sizeof *ph, "pilot rows")) != PATINA_OK))
        ;
    if (s == PATINA_OK && (cudaMemcpy(c->p_rows, pr, pnb * kc * 64 * sizeof *pr, cudaMemcpyHostToDevice) != cudaSuccess ||
                           cudaMemcpy(c->p_cnt, pc, pnb * 32 * sizeof *pc, cudaMemcpyHostToDevice) != cudaSuccess ||
                           cudaMemcpy(c->p_wo, pw, pnb * 32 * sizeof *pw, cudaMemcpyHostToDevice) != cudaSuccess ||
                           cudaMemcpy(c->p_soo, psoo, pnb * 32 * sizeof *psoo, cudaMemcpyHostToDevice) != cudaSuccess ||
                           cudaMemcpy(c->p_hrow, ph, pnb * 32 * sizeof *ph, cudaMemcpyHostToDevice) != cudaSuccess))
        s = pgpu_fail((int)cudaGetLastError(), "gpu sqfd: uploading a pilot", __FILE__, __LINE__);
    free(pr);
    free(pc);
    free(pw);
    free(psoo);
    free(ph);
    if (B < 1) B = 1;
    if (B > nb) B = nb;
    if (s != PATINA_OK) return s;
    { /* the chunk buffers */
        const size_t fper[5] = {kc * 64 * sizeof(float4), 32 * sizeof(uint16_t), 32 * sizeof(float),
                                32 * sizeof(double), 32 * sizeof(uint32_t)};
        void **const bufs[10] = {(void **)&c->b_rows[0], (void **)&c->b_cnt[0], (void **)&c->b_wo[0],
                                 (void **)&c->b_soo[0],  (void **)&c->b_hrow[0], (void **)&c->b_rows[1],
                                 (void **)&c->b_cnt[1],  (void **)&c->b_wo[1],  (void **)&c->b_soo[1],
                                 (void **)&c->b_hrow[1]};
        PATINA_TRY(tcache_chunk_buffers(g, PGPU_FAM_SQFD, 0, 5, fper, 0, bufs, &B, 1, "streamed chunk"));
    }
    c->B = B;
    return tcache_stream_init(&c->stream);
}

/* A copy dropped by the table cache (another table needed the memory). */
static void copy_drop(patina_gpu_t *g, void *obj) { copy_free(g, (sq_copy_t *)obj); }

/* The device copy of idx's live rows (c->ok = 0, no arrays, when a row is
 * outside the domain or the rows mix alphas or forms). */
static patina_status copy_make(patina_gpu_t *g, sq_copy_t *c, const pgpu_sqfd_index_t *idx)
{
    const size_t dim = idx->dim;
    size_t n = 0, i, nb, kc = 1;
    uint32_t *live = NULL, *order = NULL;
    size_t *start = NULL;
    float4 *hr = NULL;
    uint16_t *hc = NULL;
    float *hw = NULL;
    double *hs = NULL;
    uint32_t *hh = NULL;
    patina_status s = PATINA_OK;
    PATINA_TRY(tcache_add(g, PGPU_FAM_SQFD, TCACHE_SQFD, idx->serial, c, copy_drop));
    c->serial = idx->serial;
    c->gen = idx->gen;
    c->src_n = idx->n;
    c->ok = 0;
    if (dim < 16 || (dim - 8) % 8 != 0) return PATINA_OK;
    if (!(live = (uint32_t *)malloc(idx->n * sizeof *live + 1)))
        return patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for %zu rows", idx->n);
    for (i = 0; i < idx->n; i++) {
        const float *rec = idx->recs + i * dim;
        if (idx->dead && idx->dead[i]) continue;
        if (!rec_in_domain(rec, dim)) goto out; /* not ok */
        if (n == 0) {
            c->alpha = rec[2];
            c->form = (int)rec[3];
        } else if (rec[2] != c->alpha || (int)rec[3] != c->form) {
            goto out;
        }
        if ((size_t)rec[0] > kc) kc = (size_t)rec[0];
        live[n++] = (uint32_t)i;
    }
    c->n = n;
    c->kc = (int)kc;
    c->ok = 1;
    c->np = idx->np;
    nb = (n + 31) / 32;
    if (!(c->hinv = (uint32_t *)malloc(idx->n * sizeof *c->hinv + 1))) {
        s = patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for %zu rows", idx->n);
        goto out;
    }
    for (i = 0; i < idx->n; i++) c->hinv[i] = UINT32_MAX;
    /* random order, then a stable counting sort by count */
    order = (uint32_t *)malloc(n * sizeof *order + 1);
    start = (size_t *)calloc(kc + 2, sizeof *start);
    hr = (float4 *)calloc(nb * kc * 64 + 1, sizeof *hr);
    hc = (uint16_t *)calloc(nb * 32 + 1, sizeof *hc);
    hw = (float *)calloc(nb * 32 + 1, sizeof *hw);
    hs = (double *)calloc(nb * 32 + 1, sizeof *hs);
    hh = (uint32_t *)calloc(nb * 32 + 1, sizeof *hh);
    if (!order || !start || !hr || !hc || !hw || !hs || !hh) {
        s = patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory laying out %zu rows", n);
        goto out;
    }
    tcache_perm(order, n, SQ_PERM_SEED);
    for (i = 0; i < n; i++) start[(size_t)idx->recs[(size_t)live[order[i]] * dim] + 1]++;
    for (i = 1; i <= kc + 1; i++) start[i] += start[i - 1];
    {
        uint32_t *sorted = (uint32_t *)malloc(n * sizeof *sorted + 1);
        if (!sorted) {
            s = patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory laying out %zu rows", n);
            goto out;
        }
        for (i = 0; i < n; i++) {
            const uint32_t h = live[order[i]];
            sorted[start[(size_t)idx->recs[(size_t)h * dim]]++] = h;
        }
        free(order);
        order = sorted;
    }
    for (i = 0; i < n; i++) { /* device row i holds host row order[i] */
        const uint32_t h = order[i];
        const float *rec = idx->recs + (size_t)h * dim;
        const size_t cnt = (size_t)rec[0], b = i >> 5, lane = i & 31;
        for (size_t j = 0; j < cnt; j++) {
            const float *cr = rec + 8 + 8 * j;
            hr[((b * kc + j) * 2) * 32 + lane] = make_float4(cr[0], cr[1], cr[2], cr[3]);
            hr[((b * kc + j) * 2 + 1) * 32 + lane] = make_float4(cr[4], cr[5], cr[6], cr[7]);
        }
        hc[i] = (uint16_t)cnt;
        hw[i] = weight_up(rec);
        hs[i] = idx->self[h];
        hh[i] = h;
        c->hinv[h] = (uint32_t)i;
    }
    if ((s = sq_alloc(g, (void **)&c->rows, nb * kc * 64 * sizeof *hr, "signature rows")) != PATINA_OK ||
        (s = sq_alloc(g, (void **)&c->cnt, nb * 32 * sizeof *hc, "row counts")) != PATINA_OK ||
        (s = sq_alloc(g, (void **)&c->wo, nb * 32 * sizeof *hw, "row weights")) != PATINA_OK ||
        (s = sq_alloc(g, (void **)&c->soo, nb * 32 * sizeof *hs, "self terms")) != PATINA_OK ||
        (s = sq_alloc(g, (void **)&c->hrow, nb * 32 * sizeof *hh, "row numbers")) != PATINA_OK) {
        if ((s == PATINA_E_LIMIT || s == PATINA_E_NOMEM) && !idx->np) { /* over the budget: streamed */
            patina_clear_error();
            pgpu_free_n(g, 5, &c->rows, &c->cnt, &c->wo, &c->soo, &c->hrow);
            s = stream_setup(g, c, nb, hr, hc, hw, hs, hh);
        }
        goto out;
    }
    if (cudaMemcpy(c->rows, hr, nb * kc * 64 * sizeof *hr, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->cnt, hc, nb * 32 * sizeof *hc, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->wo, hw, nb * 32 * sizeof *hw, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->soo, hs, nb * 32 * sizeof *hs, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->hrow, hh, nb * 32 * sizeof *hh, cudaMemcpyHostToDevice) != cudaSuccess) {
        s = pgpu_fail((int)cudaGetLastError(), "gpu sqfd: uploading rows", __FILE__, __LINE__);
        goto out;
    }
    if (c->np) { /* the pivot table, (np, nb * 32) in device order, and the pivots' distances */
        const size_t ld = nb * 32, np = c->np;
        double *t = (double *)calloc(np * ld + 1, sizeof *t);
        if (!t) {
            s = patina__fail(PATINA_E_NOMEM, "gpu sqfd: out of memory for the pivot table");
            goto out;
        }
        for (i = 0; i < n; i++)
            for (size_t p = 0; p < np; p++) t[p * ld + i] = idx->tab[(size_t)order[i] * np + p];
        if ((s = sq_alloc(g, (void **)&c->tab, np * ld * sizeof *t, "pivot table")) == PATINA_OK &&
            (s = sq_alloc(g, (void **)&c->pp, np * np * sizeof *c->pp, "pivot table")) == PATINA_OK &&
            (cudaMemcpy(c->tab, t, np * ld * sizeof *t, cudaMemcpyHostToDevice) != cudaSuccess ||
             cudaMemcpy(c->pp, idx->pp, np * np * sizeof *c->pp, cudaMemcpyHostToDevice) != cudaSuccess))
            s = pgpu_fail((int)cudaGetLastError(), "gpu sqfd: uploading the pivot table", __FILE__, __LINE__);
        free(t);
    }
out:
    free(live);
    free(order);
    free(start);
    free(hr);
    free(hc);
    free(hw);
    free(hs);
    free(hh);
    if (s != PATINA_OK) {
        copy_free(g, c);
        return s;
    }
    return PATINA_OK;
}

/* The copy of idx, made now if g holds none (or an outdated one). */
patina_status copy_of(patina_gpu_t *g, sq_state_t *st, const pgpu_sqfd_index_t *idx, sq_copy_t **out)
{
    sq_copy_t *c = idx->serial ? (sq_copy_t *)tcache_find(g, PGPU_FAM_SQFD, idx->serial) : NULL;
    int i;
    *out = NULL;
    if (c) {
        if (c->gen == idx->gen && c->src_n == idx->n && c->np == idx->np) {
            tcache_touch(g, c);
            *out = c;
            return PATINA_OK;
        }
        copy_free(g, c);
        c = NULL;
    }
    for (i = 0; i < SQ_CACHE && !c; i++)
        if (!st->copy[i].serial) c = &st->copy[i];
    if (!c) {
        c = (sq_copy_t *)tcache_lru(g, PGPU_FAM_SQFD, NULL);
        copy_free(g, c);
    }
    {
        patina_status s = copy_make(g, c, idx);
        if (s == PATINA_E_LIMIT || s == PATINA_E_NOMEM) { /* short of memory: the other copies go first */
            patina_clear_error();
            for (sq_copy_t *v; (v = (sq_copy_t *)tcache_lru(g, PGPU_FAM_SQFD, c)) != NULL;) copy_free(g, v);
            s = copy_make(g, c, idx);
        }
        if (s != PATINA_OK) return s;
    }
    tcache_touch(g, c);
    *out = c;
    return PATINA_OK;
}
