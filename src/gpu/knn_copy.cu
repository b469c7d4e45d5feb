/* The k-NN engine's device copies (src/gpu/knn.cu says what they hold and
 * why): the search state of a device context, copies made, found, kept up
 * to date with the index (rows appended, removed rows blanked) and dropped
 * least recently used first when the budget is short; the definition
 * path's copies recorded as pinned images for chunked search. */
#include "gpu/knn_internal.cuh"

/* ---------------------------------------------------------- the state */

void copy_free(patina_gpu_t *g, knn_copy_t *c)
{
    tcache_remove(g, c);
    pgpu_free_n(g, 14, &c->descs, &c->ids, &c->aux, &c->pk, &c->t1, &c->c3, &c->ptab, &c->sd, &c->dead, &c->d_rm, &c->fx,
                &c->fxa, &c->ix, &c->ixi);
    free(c->perm);
    free(c->inv);
    memset(c, 0, sizeof *c);
}

void buffers_free(patina_gpu_t *g, knn_state_t *st)
{
    pgpu_free_n(g, 18, &st->d_qv, &st->d_dense, &st->d_thr, &st->d_dcnt, &st->d_dcand, &st->d_dist, &st->h_dist,
                &st->d_id, &st->h_id, &st->d_dflag, &st->h_dflag, &st->d_fq, &st->d_fqi, &st->d_dn, &st->h_dn,
                &st->d_iq, &st->d_iqi, &st->d_ithr);
    st->def_q = st->def_s = st->def_take = st->def_dim = 0;
}

void tc_buffers_free(patina_gpu_t *g, knn_state_t *st)
{
    pgpu_free_n(g, 7, &st->d_in, &st->h_in, &st->d_out, &st->h_out, &st->d_pilot, &st->d_cnt, &st->d_cand);
    st->tq_cap = st->tq_dense = st->tq_out = 0;
}

void tier_buffers_free(patina_gpu_t *g, knn_tier_t *t)
{
    pgpu_free_n(g, 6, &t->b_rows[0], &t->b_rows[1], &t->b_aux[0], &t->b_aux[1], &t->h_res[0], &t->h_res[1]);
    t->R = t->res_bytes = 0;
}

void tier_free(patina_gpu_t *g, knn_tier_t *t)
{
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 1));
    tier_buffers_free(g, t);
    tcache_host_free(g, &t->host);
    pgpu_free_n(g, 6, &t->t1, &t->c3, &t->ids, &t->dead, &t->ptab, &t->d_rm);
    tcache_stream_free(&t->stream);
    for (int i = 0; i < 2; i++)
        if (t->ev_res[i]) (void)cudaEventDestroy((cudaEvent_t)t->ev_res[i]);
    free(t->perm);
    free(t->inv);
    memset(t, 0, sizeof *t);
}

void image_free(patina_gpu_t *g, copy_image_t *im)
{
    for (int i = 0; i < im->nput; i++) pgpu_free(g, im->put[i].host);
    memset(im, 0, sizeof *im);
}

void images_free(patina_gpu_t *g, chunk_images_t *ci)
{
    for (size_t i = 0; i < ci->count; i++) image_free(g, &ci->img[i]);
    free(ci->img);
    memset(ci, 0, sizeof *ci);
}

static void knn_release(patina_gpu_t *g, void *state)
{
    knn_state_t *st = (knn_state_t *)state;
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
    tier_free(g, &st->tier);
    images_free(g, &st->ci);
    for (int i = 0; i < KNN_CACHE; i++)
        if (st->copy[i].serial) copy_free(g, &st->copy[i]);
    buffers_free(g, st);
    tc_buffers_free(g, st);
    pgpu_free_n(g, 5, &st->h_many[0], &st->h_many[1], &st->d_cnt2, &st->d_cand2, &st->d_out2);
    for (int i = 0; i < 2; i++) {
        if (st->prof_ev[i]) (void)cudaEventDestroy(st->prof_ev[i]);
        if (st->many_ev[i]) (void)cudaEventDestroy(st->many_ev[i]);
        if (st->many_sev[i]) (void)cudaEventDestroy(st->many_sev[i]);
    }
    (void)cudaGetLastError();
    free(st);
}

patina_status knn_state(patina_gpu_t *g, knn_state_t **out)
{
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    *out = st;
    if (st) return PATINA_OK;
    st = (knn_state_t *)calloc(1, sizeof *st);
    if (!st) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    st->sms = g->sm_count;
    st->cc = g->cc;
    pgpu_set_state(g, PGPU_FAM_SEARCH, st, knn_release);
    *out = st;
    return PATINA_OK;
}

/* Device memory for a copy's field *dst, filled from src; recorded in
 * st->rec (a pinned copy of src, uploaded from there) when set. */
static patina_status put(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, void **dst, const void *src,
                         size_t bytes, const char *tag)
{
    copy_image_t *im = st->rec;
    PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, dst, bytes, tag));
    if (im && bytes && !im->failed) {
        void *h = NULL;
        if (im->nput < IMAGE_PUTS && pgpu_pin_alloc(g, &h, bytes, PGPU_FAM_SEARCH, "chunk image") == PATINA_OK) {
            memcpy(h, src, bytes);
            im->put[im->nput].field = (size_t)((uint8_t *)dst - (uint8_t *)c);
            im->put[im->nput].host = h;
            im->put[im->nput].bytes = bytes;
            im->put[im->nput++].tag = tag;
            src = h;
        } else { /* no pinned memory: this chunk is laid out every time */
            patina_clear_error();
            im->failed = 1;
        }
    }
    if (bytes) PGPU_CU(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return PATINA_OK;
}

/* A definition-path copy made from its image: the recorded uploads, from
 * pinned memory, and the copy's sizes. */
static patina_status image_replay(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const copy_image_t *im)
{
    c->n = im->n;
    c->src_n = im->src_n;
    c->dead_gen = im->dead_gen;
    c->ixdp = im->ixdp;
    c->ixmax = im->ixmax;
    for (int i = 0; i < im->nput; i++) {
        void **dst = (void **)((uint8_t *)c + im->put[i].field);
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, dst, im->put[i].bytes, im->put[i].tag));
        PGPU_CU(cudaMemcpy(*dst, im->put[i].host, im->put[i].bytes, cudaMemcpyHostToDevice));
        st->replayed += im->put[i].bytes;
    }
    return PATINA_OK;
}


/* Flags removed rows of a tier (its rows are blanked in pinned memory). */
__global__ void k_tier_flag(uint8_t *__restrict__ dead, const uint32_t *__restrict__ rm, uint32_t n)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dead[rm[i]] = 1;
}

/* Blanks removed rows of a tensor-core copy (device rows rm[0 .. n)): zero
 * bytes and a zero row's sums (t = 0: they pass no filter that a live row
 * could fail), in the rows and in their packed form (pk; NULL: none), and flags them for the final pass, which skips them. */
__global__ void k_tc_blank(uint8_t *__restrict__ rows, tc_aux_t *__restrict__ aux, uint8_t *__restrict__ pk,
                           uint8_t *__restrict__ dead, const uint32_t *__restrict__ rm, uint32_t n, int dp)
{
    const int pb = TC_PK_BYTES(dp);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint32_t r = rm[i];
        for (int b = 0; b < dp; b += 4) *(uint32_t *)(rows + (size_t)r * dp + b) = 0u;
        aux[r] = make_float4(0.f, 0.f, 1.f, 1e30f);
        if (pk) {
            uint32_t *p = (uint32_t *)(pk + (size_t)r * pb);
            for (int b = 0; b < pb / 4 - 2; b++) p[b] = 0u;
            p[pb / 4 - 2] = __float_as_uint(0.f);
            p[pb / 4 - 1] = __float_as_uint(1e30f);
        }
        dead[r] = 1;
    }
}

/* Host rows [h0, h0 + m) laid out as device rows: row i (dp bytes, zero
 * padded), its sums, T1, C3 and id from host row map ? map[i] : h0 + i. */
void tc_lay_rows(const pgpu_knn_index_t *idx, const uint32_t *map, size_t h0, size_t m, size_t dp,
                 uint8_t *rows, tc_aux_t *aux, uint32_t *t1, double *c3, uint64_t *ids, uint8_t *pk)
{
    const size_t pb = TC_PK_BYTES(dp);
    for (size_t i = 0; i < m; i++) {
        const size_t h = map ? map[i] : h0 + i;
        const uint8_t *b = idx->descs + h * idx->bytes;
        uint32_t s1 = 0, tt = idx->t1[h];
        for (size_t e = 0; e < idx->dim; e++) s1 += (uint32_t)b[e] * b[e];
        memcpy(rows + i * dp, b, idx->dim);
        memset(rows + i * dp + idx->dim, 0, dp - idx->dim);
        aux[i] = tt ? make_float4((float)tt, (float)tt * (float)tt, (float)s1, (float)s1 / (float)tt)
                    : make_float4(0.f, 0.f, 1.f, 1e30f);
        t1[i] = tt;
        c3[i] = idx->c3[h];
        ids[i] = idx->ids[h];
        if (pk) { /* knn_layout.cuh's packed row (elements <= 7: the fast path's) */
            uint8_t *p = pk + i * pb;
            memset(p, 0, pb - 8);
            for (size_t e = 0; e < idx->dim; e++) p[e / 2] |= (uint8_t)((b[e] & 15u) << (e % 2 ? 4 : 0));
            memcpy(p + pb - 8, &aux[i].x, sizeof(float));
            memcpy(p + pb - 4, &aux[i].w, sizeof(float));
        }
    }
}

/* Host rows [h0, h0 + m) laid out as device rows (tc_lay_rows), copied to
 * the copy's rows [d0, d0 + m). */
static patina_status tc_put_rows(patina_gpu_t *g, knn_copy_t *c, const pgpu_knn_index_t *idx, const uint32_t *map,
                                 size_t h0, size_t m, size_t d0)
{
    const size_t dp = (size_t)c->dp, pb = TC_PK_BYTES(dp);
    uint8_t *rows = (uint8_t *)malloc(m * dp + 1), *pk = c->pk ? (uint8_t *)malloc(m * pb + 1) : NULL;
    tc_aux_t *aux = (tc_aux_t *)malloc(m * sizeof *aux + 1);
    uint32_t *t1 = (uint32_t *)malloc(m * sizeof *t1 + 1);
    double *c3 = (double *)malloc(m * sizeof *c3 + 1);
    uint64_t *ids = (uint64_t *)malloc(m * sizeof *ids + 1);
    patina_status s = PATINA_OK;
    (void)g;
    if (!rows || (c->pk && !pk) || !aux || !t1 || !c3 || !ids) {
        s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory laying out %zu rows", m);
        goto done;
    }
    tc_lay_rows(idx, map, h0, m, dp, rows, aux, t1, c3, ids, pk);
    if (cudaMemcpy(c->descs + d0 * dp, rows, m * dp, cudaMemcpyHostToDevice) != cudaSuccess ||
        (c->pk && cudaMemcpy(c->pk + d0 * pb, pk, m * pb, cudaMemcpyHostToDevice) != cudaSuccess) ||
        cudaMemcpy(c->aux + d0, aux, m * sizeof *aux, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->t1 + d0, t1, m * sizeof *t1, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->c3 + d0, c3, m * sizeof *c3, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->ids + d0, ids, m * sizeof *ids, cudaMemcpyHostToDevice) != cudaSuccess)
        s = pgpu_fail((int)cudaGetLastError(), "gpu search: uploading rows", __FILE__, __LINE__);
done:
    free(rows);
    free(pk);
    free(aux);
    free(t1);
    free(c3);
    free(ids);
    return s;
}

/* Brings the copy's removed rows up to the index's: the rows removed since
 * it last looked (the index's removal log), mapped to device rows, blanked
 * and flagged -- work in proportion to the changes. */
/* The rows removed since *dead_gen (the index's removal log), mapped to
 * device rows (inv below nperm; appended rows keep their host row) and
 * sent to d_rm a chunk at a time; each chunk then either blanked in the
 * pinned rows of `tier` and flagged in dead, or (tier NULL) blanked in the
 * device rows and flagged by k_tc_blank. */
patina_status sync_removed(patina_gpu_t *g, const pgpu_knn_index_t *idx, uint64_t *dead_gen,
                           const uint32_t *inv, size_t nperm, uint32_t *d_rm, knn_tier_t *tier, uint8_t *rows,
                           tc_aux_t *aux, uint8_t *pk, uint8_t *dead, int dp)
{
    cudaStream_t st = (cudaStream_t)pgpu_stream(g, 0);
    uint32_t buf[1024];
    cudaError_t e = cudaSuccess;
    while (*dead_gen < idx->dead_gen && e == cudaSuccess) {
        size_t m = idx->dead_gen - *dead_gen, done = 0;
        if (m > TC_RM_CHUNK) m = TC_RM_CHUNK;
        while (done < m && e == cudaSuccess) { /* through a small host buffer */
            const size_t b = m - done < 1024 ? m - done : 1024;
            for (size_t i = 0; i < b; i++) {
                const uint32_t h = idx->rm_log[*dead_gen + done + i];
                buf[i] = h < nperm ? inv[h] : h;
                if (tier) {
                    memset(tcache_host_at(&tier->host, 0, buf[i]), 0, (size_t)dp);
                    *(tc_aux_t *)tcache_host_at(&tier->host, 1, buf[i]) = make_float4(0.f, 0.f, 1.f, 1e30f);
                }
            }
            e = cudaMemcpy(d_rm + done, buf, b * sizeof *buf, cudaMemcpyHostToDevice);
            done += b;
        }
        if (e == cudaSuccess) {
            const unsigned grid = (unsigned)((m + 255) / 256);
            if (tier) k_tier_flag<<<grid, 256, 0, st>>>(dead, d_rm, (uint32_t)m);
            else k_tc_blank<<<grid, 256, 0, st>>>(rows, aux, pk, dead, d_rm, (uint32_t)m, dp);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        *dead_gen += m;
    }
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: removed rows", __FILE__, __LINE__);
    return PATINA_OK;
}

static patina_status tc_sync_dead(patina_gpu_t *g, knn_copy_t *c, const pgpu_knn_index_t *idx)
{
    return sync_removed(g, idx, &c->dead_gen, c->inv, c->nperm, c->d_rm, NULL, c->descs, c->aux, c->pk, c->dead, c->dp);
}

/* ---- the float filter's values (knn_fx.cuh) ---- */

/* The float filter's copy of a definition-path copy whose rows (elem
 * typed, element-major (dim, n)) are `rows`: c->fx / c->fxa, or none when
 * a row is outside the filter's domain (the definition kernels alone). */
static patina_status fx_upload(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                               const uint8_t *rows)
{
    const size_t n = c->n, dim = c->dim, es = idx->bytes / idx->dim;
    float *x;
    fx_aux_t *a;
    patina_status s;
    if (!fx_has(idx->dist) || n == 0 || dim > ((size_t)1 << 20)) return PATINA_OK;
    x = (float *)malloc(n * dim * sizeof *x + 1);
    a = (fx_aux_t *)malloc(n * sizeof *a + 1);
    if (!x || !a) {
        free(x);
        free(a);
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    }
    for (size_t r = 0; r < n; r++) {
        const int elem = (int)idx->elem;
        if (!fx_vector(idx->dist, [&](size_t i) { return host_elem(elem, rows + (i * n + r) * es, 0); }, dim, idx->sd,
                       x + r, n, &a[r].x, &a[r].y)) {
            free(x);
            free(a);
            return PATINA_OK; /* the definition kernels alone */
        }
    }
    s = put(g, st, c, (void **)&c->fx, x, n * dim * sizeof *x, "filter values");
    if (s == PATINA_OK) s = put(g, st, c, (void **)&c->fxa, a, n * sizeof *a, "filter norms");
    free(x);
    free(a);
    if (s != PATINA_OK) pgpu_free_n(g, 2, &c->fx, &c->fxa);
    return s;
}

/* The tensor-core filter's copy (c->ix / c->ixi) of a definition-path copy
 * whose rows (elem typed, element-major (dim, n)) are `rows`; 0 in *made
 * when a row is outside its domain. */
static patina_status ix_upload(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                               const uint8_t *rows, int *made)
{
    const size_t n = c->n, dim = c->dim, es = idx->bytes / idx->dim;
    const int dp = ix_dp(dim);
    int8_t *q;
    ix_info_t *in;
    patina_status s;
    *made = 0;
    if (!ix_has(idx->dist, dim) || n == 0) return PATINA_OK;
    q = (int8_t *)calloc((n + IX_R) * 2 * (size_t)dp, 1);
    in = (ix_info_t *)calloc(n + IX_R, sizeof *in);
    if (!q || !in) {
        free(q);
        free(in);
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    }
    ix_info_t mx = make_float4(0.f, 0.f, 0.f, 0.f);
    for (size_t r = 0; r < n; r++) {
        const int elem = (int)idx->elem;
        if (!ix_vector(idx->dist, [&](size_t i) { return host_elem(elem, rows + (i * n + r) * es, 0); }, dim, idx->sd,
                       dp, q + r * 2 * dp, &in[r])) {
            free(q);
            free(in);
            return PATINA_OK;
        }
        mx.y = fmaxf(mx.y, in[r].y);
        mx.z = fmaxf(mx.z, in[r].z);
        mx.w = fmaxf(mx.w, in[r].w);
    }
    s = put(g, st, c, (void **)&c->ix, q, (n + IX_R) * 2 * (size_t)dp, "filter limbs");
    if (s == PATINA_OK) s = put(g, st, c, (void **)&c->ixi, in, (n + IX_R) * sizeof *in, "filter norms");
    free(q);
    free(in);
    if (s != PATINA_OK) {
        pgpu_free_n(g, 2, &c->ix, &c->ixi);
        return s;
    }
    c->ixdp = dp;
    c->ixmax = mx;
    *made = 1;
    return PATINA_OK;
}

/* The tensor-core layout of a Tanimoto fast-path index: rows in a fixed
 * random permutation (xorshift, Fisher-Yates; the pilot samples the first
 * rows), padded to dp bytes, room for a quarter more rows (appended by
 * later puts) and TC_R zero rows after them (stages read whole chunks). */
static patina_status tc_upload(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                               int packed)
{
    const size_t n = idx->n, dp = (size_t)c->dp, pb = TC_PK_BYTES(dp), cap = n + n / 4 + 1024;
    patina_status s;
    size_t i;
    c->perm = (uint32_t *)malloc(n * sizeof *c->perm + 1);
    c->inv = (uint32_t *)malloc(n * sizeof *c->inv + 1);
    if (!c->perm || !c->inv) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory laying out %zu rows", n);
    tcache_perm(c->perm, n, KNN_PERM_SEED);
    for (i = 0; i < n; i++) c->inv[c->perm[i]] = (uint32_t)i;
    c->cap = cap;
    c->nperm = n;
    c->dead_gen = 0;
    s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->descs, (cap + TC_R) * dp, "descriptors");
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->aux, (cap + TC_R) * sizeof *c->aux, "row sums");
    if (s == PATINA_OK && packed)
        s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->pk, (cap + TC_R) * pb, "packed rows");
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->t1, cap * sizeof *c->t1, "row sums");
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->c3, cap * sizeof *c->c3, "row squares");
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->ids, cap * sizeof *c->ids, "ids");
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->dead, cap, "removed rows");
    if (s == PATINA_OK) s = tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&c->d_rm, TC_RM_CHUNK * sizeof *c->d_rm, "removed rows");
    if (s == PATINA_OK &&
        (cudaMemset(c->descs, 0, (cap + TC_R) * dp) != cudaSuccess ||
         cudaMemset(c->aux, 0, (cap + TC_R) * sizeof *c->aux) != cudaSuccess ||
         (c->pk && cudaMemset(c->pk, 0, (cap + TC_R) * pb) != cudaSuccess) ||
         cudaMemset(c->dead, 0, cap) != cudaSuccess))
        s = pgpu_fail((int)cudaGetLastError(), "gpu search: clearing a copy", __FILE__, __LINE__);
    if (s == PATINA_OK && n) s = tc_put_rows(g, c, idx, c->perm, 0, n, 0);
    if (s == PATINA_OK)
        s = put(g, st, c, (void **)&c->ptab, idx->ptab, idx->ptab_rows * 8 * sizeof(double), "value table");
    c->n = c->src_n = n;
    if (s == PATINA_OK) s = tc_sync_dead(g, c, idx);
    return s;
}

/* A found tensor-core copy brought up to its index: rows added since are
 * appended (a copy without room for them is remade: returns 1 in *remake),
 * removed rows blanked. */
static patina_status tc_follow(patina_gpu_t *g, knn_copy_t *c, const pgpu_knn_index_t *idx, int *remake)
{
    *remake = 0;
    if (idx->n > c->src_n) {
        const size_t m = idx->n - c->src_n;
        if (c->n + m > c->cap) {
            *remake = 1;
            return PATINA_OK;
        }
        PATINA_TRY(tc_put_rows(g, c, idx, NULL, c->src_n, m, c->n));
        c->n += m;
        c->src_n = idx->n;
    }
    return tc_sync_dead(g, c, idx);
}

/* A copy dropped by the table cache (another table needed the memory). */
static void copy_drop(patina_gpu_t *g, void *obj) { copy_free(g, (knn_copy_t *)obj); }

/* The device copy of idx, made now if g has none. */
patina_status copy_of(patina_gpu_t *g, knn_state_t *st, const pgpu_knn_index_t *idx, knn_copy_t **out)
{
    knn_copy_t *c = (knn_copy_t *)tcache_find(g, PGPU_FAM_SEARCH, idx->serial);
    patina_status s;
    int i, packed;
    *out = NULL;
    if (c) {
        int remake = 0;
        tcache_touch(g, c);
        if (c->tc) {
            if ((s = tc_follow(g, c, idx, &remake)) != PATINA_OK) {
                copy_free(g, c);
                return s;
            }
        } else {
            remake = c->src_n != idx->n || c->dead_gen != idx->dead_gen;
        }
        if (!remake) {
            *out = c;
            return PATINA_OK;
        }
        copy_free(g, c); /* remade below */
    }
    { /* a copy that cannot fit the budget is refused before its layout (seconds for 10M rows) */
        const double rows = (double)(idx->n + idx->n / 4 + 1024 + TC_R);
        const double need = idx->t1 ? rows * (double)(tc_dp(idx->dim) + sizeof(tc_aux_t) + 21)
                                    : (double)idx->live * (double)(idx->bytes + sizeof(uint64_t));
        /* the single query's packed rows where they fit too (else its
         * calls take the multi-launch kernels) */
        packed = idx->t1 && need + rows * TC_PK_BYTES(tc_dp(idx->dim)) <= (double)g->budget;
        if (need > (double)g->budget)
            return patina__fail(PATINA_E_LIMIT, "gpu search: a copy of %zu rows needs %.0f MiB, over the budget (%.0f MiB)",
                                idx->n, need / 1048576.0, (double)g->budget / 1048576.0);
    }
    c = NULL;
    for (i = 0; i < KNN_CACHE && !c; i++)
        if (!st->copy[i].serial) c = &st->copy[i];
    if (!c) {
        c = (knn_copy_t *)tcache_lru(g, PGPU_FAM_SEARCH, NULL);
        copy_free(g, c);
    }
    PATINA_TRY(tcache_add(g, PGPU_FAM_SEARCH, idx->t1 ? TCACHE_KNN_TC : TCACHE_KNN_DEF, idx->serial, c, copy_drop));
    c->serial = idx->serial;
    c->n = idx->n;
    c->dim = idx->dim;
    c->bytes = idx->bytes;
    if (idx->t1) {
        c->tc = 1;
        c->dp = tc_dp(idx->dim);
        s = tc_upload(g, st, c, idx, packed);
    } else if (st->replay) { /* a chunk laid out by an earlier call */
        s = image_replay(g, st, c, st->replay);
    } else {
        /* the definition kernels: the live rows, permuted (the pilot's
         * sample is the first rows) */
        uint8_t *rows;
        uint64_t *ids;
        uint32_t *perm;
        size_t r, w = 0;
        c->src_n = idx->n;
        c->dead_gen = idx->dead_gen;
        c->n = idx->live;
        rows = (uint8_t *)malloc(idx->live * idx->bytes + 1);
        ids = (uint64_t *)malloc(idx->live * sizeof *ids + 1);
        perm = (uint32_t *)malloc(idx->n * sizeof *perm + 1);
        if (!rows || !ids || !perm) {
            free(rows);
            free(ids);
            free(perm);
            copy_free(g, c);
            return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        }
        tcache_perm(perm, idx->n, KNN_PERM_SEED);
        {
            const size_t es = idx->bytes / idx->dim, live = idx->live; /* element-major: (dim, live) */
            for (r = 0; r < idx->n; r++)
                if (!idx->dead || !idx->dead[perm[r]]) {
                    const uint8_t *src = idx->descs + (size_t)perm[r] * idx->bytes;
                    for (size_t e = 0; e < idx->dim; e++) memcpy(rows + (e * live + w) * es, src + e * es, es);
                    ids[w++] = idx->ids[perm[r]];
                }
        }
        free(perm);
        s = put(g, st, c, (void **)&c->descs, rows, c->n * idx->bytes, "descriptors");
        if (s == PATINA_OK && idx->sd)
            s = put(g, st, c, (void **)&c->sd, idx->sd, idx->dim * sizeof(double), "sigma");
        if (s == PATINA_OK) s = put(g, st, c, (void **)&c->ids, ids, c->n * sizeof *ids, "ids");
        if (s == PATINA_OK) {
            int made = 0;
            s = ix_upload(g, st, c, idx, rows, &made);
            if (s == PATINA_OK && !made) s = fx_upload(g, st, c, idx, rows);
        }
        free(rows);
        free(ids);
        if (st->rec && s == PATINA_OK && !st->rec->failed) {
            st->rec->n = c->n;
            st->rec->src_n = c->src_n;
            st->rec->dead_gen = c->dead_gen;
            st->rec->ixdp = c->ixdp;
            st->rec->ixmax = c->ixmax;
            st->rec->valid = 1;
        }
    }
    if (s != PATINA_OK) {
        copy_free(g, c);
        return s;
    }
    *out = c;
    return PATINA_OK;
}

size_t patina_gpu__knn_cached(patina_gpu_t *g)
{
    return tcache_count(g, PGPU_FAM_SEARCH);
}
