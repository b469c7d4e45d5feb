/* Identification's library API (include/patina/identify.h): reference sets
 * loaded from a collection, query extraction at the query budget, and
 * patina_identify: matching on the context's workers (tasks = query x block
 * of references), candidate selection, RANSAC verification of the best
 * candidates (tasks = query x candidate), re-ranking and the open-set
 * decision. The matchers, scoring and RANSAC are in match.c and ransac.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "features/family.h"
#include "features/rootsift.h"
#include "identify/identify.h"

#define REF_BLOCK 32 /* references per matching task, at least */

struct patina_refset {
    size_t n;               /* references */
    size_t stride;          /* bytes per record */
    uint64_t *ids;          /* (n) increasing */
    unsigned char *recs;    /* (n, stride): the records as stored */
    patina_extractor_t *ex; /* the table's spec */
};

/* ----------------------------------------------------------- reference sets */

void patina_refset_spec_init(patina_refset_spec_t *spec)
{
    if (!spec) return;
    memset(spec, 0, sizeof *spec);
    spec->shards = 1;
}

static int is_rootsift(const char *spec)
{
    return !strncmp(spec, "rootsift", 8) && (spec[8] == '\0' || spec[8] == ':');
}

/* The collection's only rootsift table into *out (malloc'd). */
static patina_status find_table(patina_collection_t *c, char **out)
{
    char **specs = NULL, list[1024];
    size_t n = 0, k, found = 0, len = 0;
    patina_status s = patina_collection_tables(c, &specs, &n);
    *out = NULL;
    if (s != PATINA_OK) return s;
    list[0] = '\0';
    for (k = 0; k < n; k++) {
        if (is_rootsift(specs[k])) {
            if (len < sizeof list)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", found ? ", " : "", specs[k]);
            if (!found++) *out = specs[k];
            else free(specs[k]);
        } else {
            free(specs[k]);
        }
    }
    free(specs);
    if (found == 1) return PATINA_OK;
    if (found == 0)
        return patina__fail(PATINA_E_NOTFOUND, "identify: the collection has no rootsift table "
                                               "(index the references with -f rootsift)");
    free(*out);
    *out = NULL;
    return patina__fail(PATINA_E_INVALID, "identify: the collection has %zu rootsift tables (%s); name one",
                        found, list);
}

patina_status patina_refset_load(patina_refset_t **out, patina_collection_t *c, const patina_refset_spec_t *spec)
{
    patina_refset_spec_t def;
    patina_refset_t *rs = NULL;
    patina_snapshot_t *snap = NULL;
    char *table = NULL;
    uint8_t *descs = NULL;
    uint64_t *ids = NULL;
    size_t n = 0, bytes = 0, i, kept = 0;
    patina_status s;
    const rootsift_params_t *p;

    if (!out) return patina__fail(PATINA_E_INVALID, "identify: null reference set pointer");
    *out = NULL;
    if (!c) return patina__fail(PATINA_E_INVALID, "identify: null collection");
    if (!spec) {
        patina_refset_spec_init(&def);
        spec = &def;
    }
    if (spec->shards == 0 || spec->shard >= spec->shards)
        return patina__fail(PATINA_E_INVALID, "identify: shard %u of %u does not exist", (unsigned)spec->shard,
                            (unsigned)spec->shards);
    if (spec->table) {
        if (!is_rootsift(spec->table))
            return patina__fail(PATINA_E_INVALID, "identify: table '%s' is not a rootsift table", spec->table);
        if (!(table = strdup(spec->table))) return patina__fail(PATINA_E_NOMEM, "identify: out of memory");
    } else if ((s = find_table(c, &table)) != PATINA_OK) {
        return s;
    }
    if (!(rs = calloc(1, sizeof *rs))) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory");
        goto fail;
    }
    if ((s = patina_extractor_new(&rs->ex, table)) != PATINA_OK) goto fail;
    p = (const rootsift_params_t *)(const void *)rs->ex->params;
    rs->stride = patina_extractor_bytes(rs->ex);
    if (spec->snapshot) {
        s = patina_snapshot_load(spec->snapshot, table, &ids, &descs, &n, &bytes);
    } else {
        s = patina_snapshot_new(&snap, c);
        if (s == PATINA_OK) s = patina_snapshot_load(snap, table, &ids, &descs, &n, &bytes);
        patina_snapshot_free(snap);
    }
    if (s == PATINA_E_NOTFOUND) {
        s = patina__fail(PATINA_E_NOTFOUND, "identify: the collection has no table '%s'", table);
        goto fail;
    }
    if (s != PATINA_OK) goto fail;
    if (n && bytes != rs->stride) {
        s = patina__fail(PATINA_E_CORRUPT, "identify: table '%s' holds %zu-byte records; its spec gives %zu",
                         table, bytes, rs->stride);
        goto fail;
    }
    /* Check every record, keep the shard's, compacting in place. */
    for (i = 0; i < n; i++) {
        char what[64];
        const unsigned char *rec = descs + i * rs->stride;
        if (ids[i] % spec->shards != spec->shard) continue;
        snprintf(what, sizeof what, "identify: reference id %llu", (unsigned long long)ids[i]);
        if ((s = rs_record_check(rec, rs->stride, what)) != PATINA_OK) goto fail;
        if (rs_quant(rec) != (uint32_t)p->quant || rs_m(rec) != (uint32_t)p->m) {
            s = patina__fail(PATINA_E_CORRUPT, "%s: record of m = %u, quant %u in table '%s'", what,
                             (unsigned)rs_m(rec), (unsigned)rs_quant(rec), table);
            goto fail;
        }
        if (kept != i) {
            memmove(descs + kept * rs->stride, rec, rs->stride);
            ids[kept] = ids[i];
        }
        kept++;
    }
    rs->n = kept;
    rs->ids = ids;
    rs->recs = descs;
    free(table);
    *out = rs;
    return PATINA_OK;
fail:
    free(ids);
    free(descs);
    free(table);
    if (rs) patina_extractor_free(rs->ex);
    free(rs);
    return s;
}

void patina_refset_free(patina_refset_t *rs)
{
    if (!rs) return;
    free(rs->ids);
    free(rs->recs);
    patina_extractor_free(rs->ex);
    free(rs);
}

size_t patina_refset_size(const patina_refset_t *rs) { return rs ? rs->n : 0; }
const char *patina_refset_table(const patina_refset_t *rs) { return rs ? patina_extractor_spec(rs->ex) : NULL; }
const uint64_t *patina_refset_ids(const patina_refset_t *rs) { return rs ? rs->ids : NULL; }

const void *patina_refset_records(const patina_refset_t *rs, size_t *stride)
{
    if (stride) *stride = rs ? rs->stride : 0;
    return rs ? rs->recs : NULL;
}

static const rootsift_params_t *params_of(const patina_refset_t *rs)
{
    return (const rootsift_params_t *)(const void *)rs->ex->params;
}

size_t patina_identify_query_bytes(const patina_refset_t *rs)
{
    return rs ? rs_record_bytes((size_t)params_of(rs)->n, RS_QUANT_U8) : 0;
}

/* ------------------------------------------------------------------ queries */

typedef struct extract_job {
    const rootsift_params_t *p;
    unsigned char *out;
    size_t bytes;
    const patina_image_t *images;
    patina_status *st;
} extract_job_t;

static void extract_one(void *arg, size_t i, int worker)
{
    extract_job_t *jb = arg;
    unsigned char *rec = jb->out + i * jb->bytes;
    patina_status s;
    (void)worker;
    s = rs_extract(jb->p, (size_t)jb->p->n, rec, &jb->images[i]);
    if (s != PATINA_OK) { /* a valid record with no features */
        rootsift_params_t p0 = *jb->p;
        patina_image_t empty;
        memset(&empty, 0, sizeof empty);
        if (rs_extract(&p0, (size_t)p0.n, rec, &empty) != PATINA_OK) memset(rec, 0, jb->bytes);
    }
    if (jb->st) jb->st[i] = s;
}

/* Runs fn over [0, n) on ctx's workers (their turn), or on a pool of all
 * CPUs made for the call when ctx is NULL. */
static patina_status run_tasks(patina_context_t *ctx, size_t n, patina_task_fn fn, void *arg)
{
    patina_pool_t *pool = NULL;
    if (ctx) {
        pool = patina__context_workers_acquire(ctx);
        patina_pool_run(pool, n, fn, arg);
        patina__context_workers_release(ctx);
        return PATINA_OK;
    }
    PATINA_TRY(patina_pool_new(&pool, 0));
    patina_pool_run(pool, n, fn, arg);
    patina_pool_free(pool);
    return PATINA_OK;
}

static int worker_count(patina_context_t *ctx)
{
    return ctx ? patina_context_threads(ctx) : patina_cpu_count();
}

patina_status patina_identify_extract(patina_context_t *ctx, const patina_refset_t *rs, void *out,
                                      const patina_image_t *images, size_t nq, patina_status *st)
{
    extract_job_t jb;
    if (!rs || (nq && (!out || !images))) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (nq == 0) return PATINA_OK;
    jb.p = params_of(rs);
    jb.out = out;
    jb.bytes = patina_identify_query_bytes(rs);
    jb.images = images;
    jb.st = st;
    return run_tasks(ctx, nq, extract_one, &jb);
}

/* ------------------------------------------------------------------ identify */

void patina_identify_opts_init(patina_identify_opts_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->k = 5;
    o->ratio = 0.8;
    o->scoring = PATINA_SCORE_ONE2ONE;
    o->verify = 1;
    o->verify_top = 10;
    o->model = PATINA_MODEL_SIMILARITY;
    o->ransac_threshold = 0.01;
    o->iterations = 1000;
    o->seed = 0;
    o->threshold = 12;
    o->device = PATINA_DEVICE_AUTO;
}

/* Per-worker scratch for one (query, reference) pair. */
typedef struct scratch {
    int16_t *qw;        /* (n, 128) widened query (u8 rows at scale 512) */
    float *qf, *rf;     /* (n, 128), (m, 128) dequantised rows (any other record) */
    int32_t *ibuf;      /* best (n), qbest (m), int32 scratch (m) */
    float *fbuf;        /* s1, s2 (n each), qs (m) */
    int32_t *claim;     /* (m) */
    idf_match_t *mt;    /* (n) */
    double *qp, *rp;    /* (n, 2) each */
    unsigned char *inl; /* (n) */
} scratch_t;

typedef struct cand {
    uint32_t ref;     /* index into the refset */
    uint32_t matches;
    uint32_t inliers;
    int verified;
} cand_t;

typedef struct job {
    const patina_refset_t *rs;
    const unsigned char *queries;
    size_t qbytes, nq;
    size_t block, nblocks; /* references per matching task; tasks per query */
    const patina_identify_opts_t *o;
    scratch_t *sc;      /* one per worker */
    cand_t *tcands;     /* (nq, nblocks, ncap): each task's best candidates */
    size_t *ntcands;    /* (nq, nblocks) */
    cand_t *cands;      /* (nq, ncap) candidates */
    size_t ncap;        /* candidates kept per query */
    size_t *ncands;     /* (nq) */
    size_t nverify;     /* candidates verified per query, at most */
} job_t;

static void scratch_free(scratch_t *sc)
{
    free(sc->qw);
    free(sc->qf);
    free(sc->rf);
    free(sc->ibuf);
    free(sc->fbuf);
    free(sc->claim);
    free(sc->mt);
    free(sc->qp);
    free(sc->rp);
    free(sc->inl);
}

static int scratch_new(scratch_t *sc, size_t n, size_t m)
{
    memset(sc, 0, sizeof *sc);
    sc->qw = malloc((n ? n : 1) * IDF_DIM * sizeof *sc->qw);
    sc->qf = malloc((n ? n : 1) * IDF_DIM * sizeof *sc->qf);
    sc->rf = malloc((m ? m : 1) * IDF_DIM * sizeof *sc->rf);
    sc->ibuf = malloc((n + 2 * m + 1) * sizeof *sc->ibuf);
    sc->fbuf = malloc((2 * n + m + 1) * sizeof *sc->fbuf);
    sc->claim = malloc((m + 1) * sizeof *sc->claim);
    sc->mt = malloc((n + 1) * sizeof *sc->mt);
    sc->qp = malloc((2 * n + 2) * sizeof *sc->qp);
    sc->rp = malloc((2 * n + 2) * sizeof *sc->rp);
    sc->inl = malloc(n + 1);
    return sc->qw && sc->qf && sc->rf && sc->ibuf && sc->fbuf && sc->claim && sc->mt && sc->qp && sc->rp &&
           sc->inl;
}

/* Prepares query record q in the worker's scratch: widened when it is u8 at
 * scale 512, dequantised always (for references that are not). */
static void prepare_query(scratch_t *sc, const unsigned char *q)
{
    if (idf_exact_u8(q)) idf_widen(sc->qw, rs_row(q, 0), rs_count(q));
    idf_dequantise(sc->qf, q);
}

/* Matches prepared query q against reference r, fills sc->mt; returns the
 * score. Both u8 at scale 512: the fast integer matcher; otherwise the float
 * definition on dequantised rows (the same answer where both apply). */
static size_t match_pair(scratch_t *sc, const unsigned char *q, const unsigned char *r,
                         const patina_identify_opts_t *o)
{
    size_t nr = rs_count(r), n = rs_count(q);
    idf_nn_t nn;
    if (n == 0 || nr == 0) return 0;
    nn.best = sc->ibuf;
    nn.qbest = sc->ibuf + n;
    nn.s1 = sc->fbuf;
    nn.s2 = sc->fbuf + n;
    nn.qs = sc->fbuf + 2 * n;
    if (idf_exact_u8(q) && idf_exact_u8(r)) {
        idf_match_fast(&nn, sc->ibuf + n + nr, sc->qw, n, rs_row(r, 0), nr, IDF_INV_SCALE2);
    } else {
        idf_dequantise(sc->rf, r);
        idf_match_ref(&nn, sc->qf, n, sc->rf, nr);
    }
    return idf_score(sc->mt, sc->claim, &nn, n, nr, o->ratio, o->scoring);
}

/* Candidates before verification: matches descending, then index (= id). */
static int cmp_matches(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->matches != y->matches) return x->matches > y->matches ? -1 : 1;
    return x->ref < y->ref ? -1 : x->ref > y->ref;
}

/* Inserts x into the sorted list c of *nc <= cap entries when it belongs to
 * the best cap (cap is small: k and verify_top). */
static void top_insert(cand_t *c, size_t *nc, size_t cap, cand_t x)
{
    size_t pos;
    if (*nc == cap && cmp_matches(&x, &c[*nc - 1]) >= 0) return;
    pos = *nc < cap ? (*nc)++ : *nc - 1;
    while (pos > 0 && cmp_matches(&x, &c[pos - 1]) < 0) {
        c[pos] = c[pos - 1];
        pos--;
    }
    c[pos] = x;
}

/* Task (query q, block b): scores references [b block, (b+1) block) and
 * keeps their best ncap (0 matches excluded). The best ncap of a query are
 * the best ncap of its blocks' lists (cmp_matches is a total order), so the
 * memory is (queries x blocks x ncap), not (queries x references). */
static void match_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    size_t q = t / jb->nblocks, b = t % jb->nblocks, i, end;
    const unsigned char *qr = jb->queries + q * jb->qbytes;
    scratch_t *sc = &jb->sc[worker];
    cand_t *c = jb->tcands + t * jb->ncap;
    size_t *nc = &jb->ntcands[t];
    *nc = 0;
    if (rs_count(qr) == 0) return;
    prepare_query(sc, qr);
    end = (b + 1) * jb->block < jb->rs->n ? (b + 1) * jb->block : jb->rs->n;
    for (i = b * jb->block; i < end; i++) {
        size_t sco = match_pair(sc, qr, jb->rs->recs + i * jb->rs->stride, jb->o);
        if (sco) top_insert(c, nc, jb->ncap, (cand_t){(uint32_t)i, (uint32_t)sco, 0, 0});
    }
}

static void verify_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    size_t q = t / jb->nverify, c = t % jb->nverify, nm, i;
    const unsigned char *qr = jb->queries + q * jb->qbytes, *r;
    scratch_t *sc = &jb->sc[worker];
    cand_t *cd;
    double thr, side;
    uint64_t id;
    if (c >= jb->ncands[q]) return;
    cd = &jb->cands[q * jb->ncap + c];
    r = jb->rs->recs + (size_t)cd->ref * jb->rs->stride;
    id = jb->rs->ids[cd->ref];
    prepare_query(sc, qr);
    nm = match_pair(sc, qr, r, jb->o);
    for (i = 0; i < nm; i++) {
        float gq[4], gr[4];
        rs_geom_get(qr, (size_t)sc->mt[i].q, gq);
        rs_geom_get(r, (size_t)sc->mt[i].r, gr);
        sc->qp[2 * i] = gq[0];
        sc->qp[2 * i + 1] = gq[1];
        sc->rp[2 * i] = gr[0];
        sc->rp[2 * i + 1] = gr[1];
    }
    /* The inlier distance scales with the reference image (its original
     * pixels, where keypoints are): ransac_threshold x its longer side. */
    side = (double)(rs_size(r, 2) > rs_size(r, 3) ? rs_size(r, 2) : rs_size(r, 3));
    if (side <= 0) side = 1024;
    thr = jb->o->ransac_threshold * side;
    cd->inliers = (uint32_t)idf_ransac(NULL, sc->inl, sc->qp, sc->rp, nm, jb->o->model, thr, jb->o->iterations,
                                       jb->o->seed ^ (id * 0x9E3779B97F4A7C15ull));
    cd->verified = 1;
}

/* Verified first, by inliers, then matches, then id. */
static int cmp_verified(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->verified != y->verified) return x->verified ? -1 : 1;
    if (x->verified && x->inliers != y->inliers) return x->inliers > y->inliers ? -1 : 1;
    return cmp_matches(a, b);
}

static patina_status check_opts(const patina_identify_opts_t *o)
{
    if (o->k == 0) return patina__fail(PATINA_E_INVALID, "identify: k = 0 (ask for at least one candidate)");
    if (!(o->ratio > 0 && o->ratio <= 1))
        return patina__fail(PATINA_E_INVALID, "identify: ratio %g is outside (0, 1]", o->ratio);
    if ((unsigned)o->scoring > PATINA_SCORE_MUTUAL)
        return patina__fail(PATINA_E_INVALID, "identify: unknown scoring %d", (int)o->scoring);
    if ((unsigned)o->model > PATINA_MODEL_HOMOGRAPHY)
        return patina__fail(PATINA_E_INVALID, "identify: unknown model %d", (int)o->model);
    if (!(o->ransac_threshold > 0 && o->ransac_threshold <= 1))
        return patina__fail(PATINA_E_INVALID, "identify: ransac threshold %g is outside (0, 1]",
                            o->ransac_threshold);
    if (o->iterations < 1 || o->iterations > 1000000)
        return patina__fail(PATINA_E_INVALID, "identify: %d RANSAC iterations is outside [1, 1000000]",
                            o->iterations);
    if (!(o->threshold >= 0) || o->threshold > 1e9)
        return patina__fail(PATINA_E_INVALID, "identify: acceptance threshold %g is outside [0, 1e9]",
                            o->threshold);
    if (o->device == PATINA_DEVICE_GPU)
        return patina__fail(PATINA_E_UNAVAILABLE, "identify: no gpu implementation yet (use device cpu)");
    if (o->device != PATINA_DEVICE_CPU && o->device != PATINA_DEVICE_AUTO)
        return patina__fail(PATINA_E_INVALID, "identify: device %s is not an identification device",
                            patina_device_name(o->device));
    return PATINA_OK;
}

patina_status patina_identify(patina_context_t *ctx, const patina_refset_t *rs, const void *queries, size_t nq,
                              const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                              patina_identify_result_t *results)
{
    patina_identify_opts_t o;
    job_t jb;
    size_t q, i, qbytes, kk, nworkers = 0, w, n, m;
    patina_status s = PATINA_OK;

    if (!rs || (nq && (!queries || !hits || !results)))
        return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (opts) o = *opts;
    else patina_identify_opts_init(&o);
    PATINA_TRY(check_opts(&o));
    if (nq == 0) return PATINA_OK;
    qbytes = patina_identify_query_bytes(rs);
    for (q = 0; q < nq; q++) {
        char what[48];
        const unsigned char *qr = (const unsigned char *)queries + q * qbytes;
        snprintf(what, sizeof what, "identify: query %zu", q);
        PATINA_TRY(rs_record_check(qr, qbytes, what));
    }
    if (o.k > SIZE_MAX / nq / sizeof *hits)
        return patina__fail(PATINA_E_LIMIT, "identify: k = %zu is too large for %zu queries", o.k, nq);
    kk = o.k < rs->n ? o.k : rs->n; /* k beyond the references is clamped */
    memset(hits, 0, nq * o.k * sizeof *hits);
    for (q = 0; q < nq; q++) {
        results[q].decision = PATINA_DECISION_UNKNOWN;
        results[q].nhits = 0;
        results[q].query_features = rs_count((const unsigned char *)queries + q * qbytes);
    }
    if (rs->n == 0) return PATINA_OK;
    if (rs->n > UINT32_MAX)
        return patina__fail(PATINA_E_LIMIT, "identify: %zu references is too many for one set (shard it)", rs->n);

    memset(&jb, 0, sizeof jb);
    jb.rs = rs;
    jb.queries = queries;
    jb.qbytes = qbytes;
    jb.nq = nq;
    jb.o = &o;
    jb.nverify = o.verify ? (o.verify_top < rs->n ? o.verify_top : rs->n) : 0;
    jb.ncap = kk > jb.nverify ? kk : jb.nverify;
    n = (size_t)params_of(rs)->n;
    m = (size_t)params_of(rs)->m;
    nworkers = (size_t)worker_count(ctx);
    /* Blocks of at least REF_BLOCK references, at most 4 per worker and
     * query: enough tasks to balance one query over every worker, and the
     * per-task candidate lists stay (queries x 4 workers x ncap). */
    jb.block = (rs->n + 4 * nworkers - 1) / (4 * nworkers);
    if (jb.block < REF_BLOCK) jb.block = REF_BLOCK;
    jb.nblocks = (rs->n + jb.block - 1) / jb.block;
    if (nq > SIZE_MAX / jb.nblocks / (jb.ncap * sizeof *jb.tcands + sizeof *jb.ntcands)) {
        s = patina__fail(PATINA_E_LIMIT, "identify: %zu queries x k = %zu is too many for one call", nq, o.k);
        return s;
    }
    jb.sc = calloc(nworkers, sizeof *jb.sc);
    jb.tcands = malloc(nq * jb.nblocks * jb.ncap * sizeof *jb.tcands);
    jb.ntcands = calloc(nq * jb.nblocks, sizeof *jb.ntcands);
    jb.cands = malloc(nq * jb.ncap * sizeof *jb.cands);
    jb.ncands = calloc(nq, sizeof *jb.ncands);
    if (!jb.sc || !jb.tcands || !jb.ntcands || !jb.cands || !jb.ncands) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries x %zu candidates", nq, jb.ncap);
        goto out;
    }
    for (w = 0; w < nworkers; w++)
        if (!scratch_new(&jb.sc[w], n, m)) {
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for worker scratch");
            goto out;
        }

    /* 1. Every (query, reference) scored; each task keeps its best ncap. */
    if ((s = run_tasks(ctx, nq * jb.nblocks, match_task, &jb)) != PATINA_OK) goto out;

    /* 2. A query's candidates: the best ncap of its tasks' lists. */
    for (q = 0; q < nq; q++) {
        cand_t *c = jb.cands + q * jb.ncap;
        size_t b, j, nc = 0;
        for (b = 0; b < jb.nblocks; b++) {
            size_t t = q * jb.nblocks + b;
            for (j = 0; j < jb.ntcands[t]; j++) top_insert(c, &nc, jb.ncap, jb.tcands[t * jb.ncap + j]);
        }
        jb.ncands[q] = nc;
    }

    /* 3. RANSAC on the top nverify of each query. */
    if (jb.nverify && (s = run_tasks(ctx, nq * jb.nverify, verify_task, &jb)) != PATINA_OK) goto out;

    /* 4. Re-rank, write hits, decide. */
    for (q = 0; q < nq; q++) {
        cand_t *c = jb.cands + q * jb.ncap;
        size_t nc = jb.ncands[q], nh = nc < kk ? nc : kk;
        qsort(c, nc, sizeof *c, cmp_verified);
        for (i = 0; i < nh; i++) {
            patina_identify_hit_t *h = &hits[q * o.k + i];
            h->id = rs->ids[c[i].ref];
            h->matches = c[i].matches;
            h->inliers = c[i].inliers;
            h->verified = c[i].verified;
            h->score = c[i].verified ? (double)c[i].inliers : (double)c[i].matches;
        }
        results[q].nhits = nh;
        if (nh && hits[q * o.k].score >= o.threshold) results[q].decision = PATINA_DECISION_MATCH;
    }
out:
    if (jb.sc)
        for (w = 0; w < nworkers; w++) scratch_free(&jb.sc[w]);
    free(jb.sc);
    free(jb.tcands);
    free(jb.ntcands);
    free(jb.cands);
    free(jb.ncands);
    return s;
}
