/* Exact merges of answers over disjoint row sets (partitions): a row's
 * distance or score depends only on the query and that row, so the global
 * top-K lies in the union of the parts' top-K, and ordering the union by the
 * engines' own rules gives the unpartitioned answer bit for bit.
 *
 * These follow the contract of the library's patina_table_results_merge,
 * patina_identify_part_k and patina_identify_merge (the shared plan, issue
 * 28); the cluster calls them through the clu_ names. */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"

/* (distance, id) order of k-NN and range answers. */
static int hit_before(const patina_hit_t *a, const patina_hit_t *b)
{
    if (a->distance != b->distance) return a->distance < b->distance;
    return a->id < b->id;
}

patina_status clu_results_merge(const patina_table_results_t *parts, size_t np, const patina_table_query_t *q,
                                patina_table_results_t *out)
{
    size_t nq = 0, p, qi = 0, total = 0, cap, *pos = NULL;
    int keys = 0;
    memset(out, 0, sizeof *out);
    for (p = 0; p < np; p++) {
        if (p && parts[p].nq != nq) return clu_fail(PATINA_E_INVALID, "merge: parts answer %zu and %zu queries", nq, parts[p].nq);
        nq = parts[p].nq;
        total += parts[p].offsets ? parts[p].offsets[parts[p].nq] : 0;
        out->rows += parts[p].rows;
        if (parts[p].version > out->version) out->version = parts[p].version;
        keys |= parts[p].keys != NULL;
    }
    cap = q->kind == PATINA_QUERY_KNN ? (q->k < total ? q->k : total) * nq : total;
    out->nq = nq;
    out->offsets = calloc(nq + 1, sizeof *out->offsets);
    out->hits = malloc((cap ? cap : 1) * sizeof *out->hits);
    out->keys = keys ? calloc(cap ? cap : 1, sizeof *out->keys) : NULL;
    pos = calloc(np ? np : 1, sizeof *pos);
    if (!out->offsets || !out->hits || (keys && !out->keys) || !pos) goto nomem;
    for (qi = 0; qi < nq; qi++) {
        size_t limit = q->kind == PATINA_QUERY_KNN ? q->k : SIZE_MAX, n = 0;
        if (q->kind == PATINA_QUERY_RANGE && q->max_hits) limit = q->max_hits;
        for (p = 0; p < np; p++) pos[p] = parts[p].offsets[qi];
        while (n < limit) {
            size_t best = SIZE_MAX;
            for (p = 0; p < np; p++)
                if (pos[p] < parts[p].offsets[qi + 1] &&
                    (best == SIZE_MAX || hit_before(&parts[p].hits[pos[p]], &parts[best].hits[pos[best]])))
                    best = p;
            if (best == SIZE_MAX) break;
            {
                size_t at = out->offsets[qi] + n;
                out->hits[at] = parts[best].hits[pos[best]];
                if (keys) {
                    const char *k = parts[best].keys ? parts[best].keys[pos[best]] : NULL;
                    if (k && !(out->keys[at] = strdup(k))) goto nomem;
                }
            }
            pos[best]++;
            n++;
        }
        out->offsets[qi + 1] = out->offsets[qi] + n;
    }
    free(pos);
    return PATINA_OK;
nomem:
    free(pos);
    if (out->keys) { /* calloc'd: the slots not filled are NULL */
        for (qi = 0; qi < cap; qi++) free(out->keys[qi]);
        free(out->keys);
        out->keys = NULL;
    }
    patina_table_results_release(out);
    return clu_fail(PATINA_E_NOMEM, "merge: out of memory for %zu hits", cap);
}

size_t clu_identify_part_k(const patina_identify_opts_t *opts)
{
    size_t v = opts->verify ? opts->verify_top : 0;
    return opts->k > v ? opts->k : v;
}

typedef struct cand {
    patina_identify_hit_t h;
    const char *key;
} cand_t;

/* Before verification: matches descending, then id (identify.c's order). */
static int cmp_matches(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->h.matches != y->h.matches) return x->h.matches > y->h.matches ? -1 : 1;
    return x->h.id < y->h.id ? -1 : x->h.id > y->h.id;
}

/* The answer's order: verified first by inliers, then matches, then id. */
static int cmp_final(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->h.verified != y->h.verified) return x->h.verified ? -1 : 1;
    if (x->h.verified && x->h.inliers != y->h.inliers) return x->h.inliers > y->h.inliers ? -1 : 1;
    return cmp_matches(a, b);
}

patina_status clu_identify_merge(const patina_identify_hit_t *const *part_hits,
                                 const patina_identify_result_t *const *part_results, char *const *const *part_keys,
                                 size_t np, size_t nq, const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                 patina_identify_result_t *results, char **keys)
{
    const size_t pk = clu_identify_part_k(opts), k = opts->k;
    const size_t nverify = opts->verify ? opts->verify_top : 0;
    cand_t *c = malloc((np * pk > 0 ? np * pk : 1) * sizeof *c);
    size_t q, p, i;
    if (!c) return clu_fail(PATINA_E_NOMEM, "identify merge: out of memory");
    memset(hits, 0, nq * k * sizeof *hits);
    if (keys) memset(keys, 0, nq * k * sizeof *keys);
    for (q = 0; q < nq; q++) {
        size_t nc = 0, nh;
        results[q].decision = PATINA_DECISION_UNKNOWN;
        results[q].nhits = 0;
        results[q].query_features = np ? part_results[0][q].query_features : 0;
        for (p = 0; p < np; p++)
            for (i = 0; i < part_results[p][q].nhits && i < pk; i++) {
                c[nc].h = part_hits[p][q * pk + i];
                c[nc].key = part_keys && part_keys[p] ? part_keys[p][q * pk + i] : NULL;
                nc++;
            }
        /* the global candidates: the best by matches; the first nverify of them are the verified
         * ones (each was among its part's first nverify, so its part verified it) */
        qsort(c, nc, sizeof *c, cmp_matches);
        for (i = 0; i < nc; i++) {
            if (i < nverify) {
                if (!c[i].h.verified) {
                    free(c);
                    return clu_fail(PATINA_E_INTERNAL, "identify merge: candidate %llu was not verified by its part",
                                    (unsigned long long)c[i].h.id);
                }
            } else {
                c[i].h.verified = 0;
                c[i].h.inliers = 0;
            }
            c[i].h.score = c[i].h.verified ? (double)c[i].h.inliers : (double)c[i].h.matches;
        }
        if (nc > (pk > nverify ? pk : nverify)) nc = pk > nverify ? pk : nverify;
        qsort(c, nc, sizeof *c, cmp_final);
        nh = nc < k ? nc : k;
        for (i = 0; i < nh; i++) {
            hits[q * k + i] = c[i].h;
            if (keys && c[i].key && !(keys[q * k + i] = strdup(c[i].key))) {
                free(c);
                return clu_fail(PATINA_E_NOMEM, "identify merge: out of memory");
            }
        }
        results[q].nhits = nh;
        if (nh && hits[q * k].score >= opts->threshold) results[q].decision = PATINA_DECISION_MATCH;
    }
    free(c);
    return PATINA_OK;
}
