/* Exact merge of partial search answers (include/patina/table.h): the parts
 * answered the same queries over disjoint rows (GPU slices, partitions,
 * cluster shards). A hit's distance depends only on the query and its row,
 * so the k nearest of the union are the k nearest of the union of each
 * part's k nearest, and every range hit of the union is a range hit of its
 * part. Ordering by (distance, id) makes the answer independent of how the
 * rows were split. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "patina/table.h"

typedef struct slot {
    patina_hit_t hit;
    char *key; /* borrowed from a part */
} slot_t;

static int cmp_slot(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    const int xn = isnan(x->hit.distance), yn = isnan(y->hit.distance);
    if (xn != yn) return xn ? 1 : -1; /* NaN last, as the engines sort it */
    if (!xn && x->hit.distance != y->hit.distance) return x->hit.distance < y->hit.distance ? -1 : 1;
    return x->hit.id < y->hit.id ? -1 : x->hit.id > y->hit.id;
}

static char *dup_key(const char *k)
{
    size_t n = strlen(k) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, k, n);
    return d;
}

patina_status patina_table_results_merge(const patina_table_results_t *parts, size_t np,
                                         const patina_table_query_t *q, patina_table_results_t *out)
{
    size_t nq, p, i, j, total = 0, most = 0, cap, at = 0;
    int keys = 1;
    slot_t *buf = NULL;
    patina_status s = PATINA_OK;
    if (!out) return patina__fail(PATINA_E_INVALID, "merge: null result");
    memset(out, 0, sizeof *out);
    if (!q || (np && !parts)) return patina__fail(PATINA_E_INVALID, "merge: null argument");
    if (q->kind != PATINA_QUERY_KNN && q->kind != PATINA_QUERY_RANGE)
        return patina__fail(PATINA_E_INVALID, "merge: unknown query kind %d", (int)q->kind);
    if (q->kind == PATINA_QUERY_KNN && q->k == 0) return patina__fail(PATINA_E_INVALID, "merge: k = 0");
    nq = np ? parts[0].nq : 0;
    for (p = 0; p < np; p++) {
        const patina_table_results_t *r = &parts[p];
        if (r->nq != nq) return patina__fail(PATINA_E_INVALID, "merge: part %zu answers %zu queries, part 0 %zu", p, r->nq, nq);
        if (nq && !r->offsets) return patina__fail(PATINA_E_INVALID, "merge: part %zu has no offsets", p);
        if (nq && r->offsets[nq] && !r->hits) return patina__fail(PATINA_E_INVALID, "merge: part %zu has no hits", p);
        for (i = 0; i < nq; i++) {
            if (r->offsets[i + 1] < r->offsets[i])
                return patina__fail(PATINA_E_INVALID, "merge: part %zu: offsets decrease at query %zu", p, i);
        }
        if (!r->keys) keys = 0;
        for (j = 0; r->keys && j < r->offsets[nq]; j++)
            if (!r->keys[j]) return patina__fail(PATINA_E_INVALID, "merge: part %zu: hit %zu has no key", p, j);
        total += nq ? r->offsets[nq] : 0;
        out->rows += r->rows;
        out->version = p == 0 || r->version < out->version ? r->version : out->version;
    }
    out->nq = nq;
    out->offsets = calloc(nq + 1, sizeof *out->offsets);
    cap = q->kind == PATINA_QUERY_KNN ? q->k : q->max_hits ? q->max_hits : SIZE_MAX;
    /* hits kept: per query at most cap, in all at most total */
    out->hits = malloc((total ? total : 1) * sizeof *out->hits);
    if (keys && np) out->keys = calloc(total ? total : 1, sizeof *out->keys);
    for (i = 0; i < nq; i++) {
        size_t n = 0;
        for (p = 0; p < np; p++) n += parts[p].offsets[i + 1] - parts[p].offsets[i];
        if (n > most) most = n;
    }
    buf = malloc((most ? most : 1) * sizeof *buf);
    if (!out->offsets || !out->hits || (keys && np && !out->keys) || !buf) {
        s = patina__fail(PATINA_E_NOMEM, "merge: out of memory for %zu hits", total);
        goto fail;
    }
    for (i = 0; i < nq; i++) {
        size_t n = 0, keep;
        for (p = 0; p < np; p++)
            for (j = parts[p].offsets[i]; j < parts[p].offsets[i + 1]; j++) {
                buf[n].hit = parts[p].hits[j];
                buf[n++].key = keys ? parts[p].keys[j] : NULL;
            }
        qsort(buf, n, sizeof *buf, cmp_slot);
        keep = n < cap ? n : cap;
        out->offsets[i] = at;
        for (j = 0; j < keep; j++, at++) {
            out->hits[at] = buf[j].hit;
            if (keys && !(out->keys[at] = dup_key(buf[j].key))) {
                out->offsets[i + 1] = at;
                for (p = i + 1; p <= nq; p++) out->offsets[p] = at;
                s = patina__fail(PATINA_E_NOMEM, "merge: out of memory for keys");
                goto fail;
            }
        }
    }
    out->offsets[nq] = at;
    free(buf);
    return PATINA_OK;
fail:
    free(buf);
    patina_table_results_release(out);
    return s;
}
