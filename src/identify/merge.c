/* Exact merge of identification answers over disjoint parts of the
 * references (include/patina/identify.h). A candidate's matches depend only
 * on the query and that reference, and RANSAC's seed only on the options
 * and the reference's id, so: asked for patina_identify_part_k candidates,
 * each part returns its best max(k, verify_top) by (matches, id), verified
 * where they are among its best verify_top. The union's best verify_top by
 * (matches, id) are each among their part's best verify_top -- verified
 * there, with the inliers one call over the union would find -- and the
 * union's best k are among the parts' best k. Candidates a part verified
 * that are not among the union's best verify_top are unverified again, as
 * one call would have left them. Also here: the half-size query's fusion
 * of two answers of one query (patina_identify_fuse_half). */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "identify/identify.h"

size_t patina_identify_part_k(const patina_identify_opts_t *opts)
{
    patina_identify_opts_t o;
    if (opts) o = *opts;
    else patina_identify_opts_init(&o);
    return o.verify && o.verify_top > o.k ? o.verify_top : o.k;
}

static int cmp_matches(const patina_identify_hit_t *x, const patina_identify_hit_t *y)
{
    if (x->matches != y->matches) return x->matches > y->matches ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_by_matches(const void *a, const void *b)
{
    return cmp_matches(a, b);
}

/* one call's final order: verified first, by inliers, then matches, then id */
static int cmp_by_verified(const void *a, const void *b)
{
    const patina_identify_hit_t *x = a, *y = b;
    if (x->verified != y->verified) return x->verified ? -1 : 1;
    if (x->verified && x->inliers != y->inliers) return x->inliers > y->inliers ? -1 : 1;
    return cmp_matches(x, y);
}

/* idf_distinct's question for query q of a merge, passed on to the caller's callback. */
typedef struct {
    patina_sibling_fn fn;
    void *user;
    size_t q;
    uint64_t a, b;
} merge_ask_t;

static patina_status merge_ask(void *user, size_t *inliers)
{
    merge_ask_t *m = user;
    return m->fn(m->user, m->q, m->a, m->b, inliers);
}

patina_status patina_identify_merge(const patina_identify_hit_t *const *part_hits,
                                    const patina_identify_result_t *const *part_results, size_t np, size_t nq,
                                    const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                    patina_identify_result_t *results)
{
    return patina_identify_merge_siblings(part_hits, part_results, np, nq, opts, NULL, NULL, hits, results);
}

patina_status patina_identify_merge_siblings(const patina_identify_hit_t *const *part_hits,
                                             const patina_identify_result_t *const *part_results, size_t np,
                                             size_t nq, const patina_identify_opts_t *opts, patina_sibling_fn sibling,
                                             void *user, patina_identify_hit_t *hits,
                                             patina_identify_result_t *results)
{
    patina_identify_opts_t o;
    size_t pk, p, q, i, nverify;
    patina_identify_hit_t *buf;
    if (opts) o = *opts;
    else patina_identify_opts_init(&o);
    if (nq == 0) return PATINA_OK;
    if (!hits || !results || (np && (!part_hits || !part_results)))
        return patina__fail(PATINA_E_INVALID, "identify merge: null argument");
    if (o.k == 0) return patina__fail(PATINA_E_INVALID, "identify merge: k = 0");
    if (o.k > PATINA_K_MAX || o.verify_top > PATINA_K_MAX)
        return patina__fail(PATINA_E_LIMIT, "identify merge: k or verify_top over %d", PATINA_K_MAX);
    if (!(o.ambiguity >= 0 && o.ambiguity <= 1)) /* the decision's margin (the parts' options are the library's) */
        return patina__fail(PATINA_E_INVALID, "identify merge: ambiguity %g is not in [0, 1]", o.ambiguity);
    /* the decision's options, bounded by the options table (the parts' are the library's) */
    PATINA_TRY(patina_options_check(PATINA_OPTIONS_IDENTIFY, "distinct", o.distinct));
    PATINA_TRY(patina_options_check(PATINA_OPTIONS_IDENTIFY, "sibling_inliers", o.sibling_inliers));
    if (o.distinct != 0 && !sibling)
        return patina__fail(PATINA_E_INVALID,
                            "identify merge: distinct %g: the sibling check needs both references' rows, which "
                            "the parts' answers do not carry (patina_identify_merge_siblings with a callback that "
                            "fetches them, or distinct 0)",
                            o.distinct);
    if (!(o.threshold >= 0))
        return patina__fail(PATINA_E_INVALID,
                            "identify merge: threshold %g: the default (the calibrated one) depends on the parts' "
                            "table, which the merge does not know; give that table's threshold "
                            "(patina_identify_far_threshold_table)",
                            o.threshold);
    pk = patina_identify_part_k(&o);
    nverify = o.verify ? o.verify_top : 0;
    for (p = 0; p < np; p++) {
        if (!part_hits[p] || !part_results[p]) return patina__fail(PATINA_E_INVALID, "identify merge: part %zu is null", p);
        for (q = 0; q < nq; q++)
            if (part_results[p][q].nhits > pk)
                return patina__fail(PATINA_E_INVALID,
                                    "identify merge: part %zu has %zu candidates for query %zu, more than %zu", p,
                                    part_results[p][q].nhits, q, pk);
    }
    if (np > SIZE_MAX / pk / sizeof *buf) return patina__fail(PATINA_E_LIMIT, "identify merge: %zu parts is too many", np);
    buf = malloc((np && pk ? np * pk : 1) * sizeof *buf);
    if (!buf) return patina__fail(PATINA_E_NOMEM, "identify merge: out of memory for %zu candidates", np * pk);
    memset(hits, 0, nq * o.k * sizeof *hits);
    for (q = 0; q < nq; q++) {
        size_t n = 0, nh;
        results[q].decision = PATINA_DECISION_UNKNOWN;
        results[q].nhits = 0;
        results[q].query_features = np ? part_results[0][q].query_features : 0;
        for (p = 0; p < np; p++)
            for (i = 0; i < part_results[p][q].nhits; i++) buf[n++] = part_hits[p][q * pk + i];
        qsort(buf, n, sizeof *buf, cmp_by_matches);
        for (i = 0; i < n; i++) {
            if (i < nverify) {
                if (!buf[i].verified) {
                    const unsigned long long id = (unsigned long long)buf[i].id;
                    free(buf);
                    return patina__fail(PATINA_E_INVALID,
                                        "identify merge: candidate %llu of query %zu was not verified by its part "
                                        "(parts must be asked with the same options and k = patina_identify_part_k)",
                                        id, q);
                }
            } else {
                buf[i].verified = 0;
                buf[i].inliers = 0;
            }
            if (!buf[i].verified) buf[i].score = (double)buf[i].matches; /* a verified score is the pair's */
        }
        if (n > (pk > nverify ? pk : nverify)) n = pk > nverify ? pk : nverify;
        qsort(buf, n, sizeof *buf, cmp_by_verified);
        nh = n < o.k ? n : o.k;
        memcpy(hits + q * o.k, buf, nh * sizeof *buf);
        results[q].nhits = nh;
        results[q].threshold = o.threshold;
        results[q].decision = idf_decide(nh ? buf[0].score : 0, n > 1 && buf[1].verified ? buf[1].score : -1, nh, &o);
        if (o.distinct > 0 && nh) {
            merge_ask_t ask = {sibling, user, q, buf[0].id, n > 1 ? buf[1].id : 0};
            patina_status s = idf_distinct(&results[q].decision,
                                           buf[0].verified ? (double)buf[0].inliers : (double)buf[0].matches,
                                           n > 1 && buf[1].verified ? (double)buf[1].inliers : 0, &o, merge_ask, &ask);
            if (s != PATINA_OK) {
                free(buf);
                return s;
            }
        }
    }
    free(buf);
    return PATINA_OK;
}

/* ------------------------------------------------------ the half-size query */

static double less_margin(double score, double margin) { return score - margin > 0 ? score - margin : 0; }

patina_status patina_identify_half_opts(const patina_identify_opts_t *opts, size_t features,
                                        patina_identify_opts_t *out)
{
    if (!out) return patina__fail(PATINA_E_INVALID, "identify: null options");
    if (opts)
        *out = *opts;
    else
        patina_identify_opts_init(out);
    if (features) out->first_features = features;
    out->half_view_features = 0; /* the references' half-size views: a half of a half */
    return PATINA_OK;
}

patina_status patina_identify_fuse_half(size_t nq, size_t k, double margin, const patina_identify_opts_t *opts,
                                        patina_identify_hit_t *hits, patina_identify_result_t *results,
                                        const patina_identify_hit_t *half_hits,
                                        const patina_identify_result_t *half_results, unsigned char *taken)
{
    patina_identify_opts_t o;
    size_t q, i;
    if (nq && (!hits || !results || !half_hits || !half_results))
        return patina__fail(PATINA_E_INVALID, "identify half: null argument");
    if (k == 0) return patina__fail(PATINA_E_INVALID, "identify half: k = 0");
    if (!(margin >= 0)) return patina__fail(PATINA_E_INVALID, "identify half: margin %g (>= 0)", margin);
    if (opts)
        o = *opts;
    else
        patina_identify_opts_init(&o);
    for (q = 0; q < nq; q++) {
        const patina_identify_result_t *hr = &half_results[q];
        const patina_identify_hit_t *hh = half_hits + q * k;
        patina_identify_hit_t *h = hits + q * k;
        const double sa = results[q].nhits ? h[0].score : -1;
        double sb = -1;
        size_t nh = hr->nhits < k ? hr->nhits : k;
        if (taken) taken[q] = 0;
        if (nh) sb = less_margin(hh[0].score, margin);
        if (!(sb > sa)) continue;
        memset(h, 0, k * sizeof *h);
        for (i = 0; i < nh; i++) {
            h[i] = hh[i];
            h[i].score = less_margin(hh[i].score, margin);
        }
        results[q].nhits = nh;
        o.threshold = results[q].threshold; /* the query's, resolved by its call */
        results[q].decision = hr->decision == PATINA_DECISION_UNKNOWN
                                  ? PATINA_DECISION_UNKNOWN
                                  : idf_decide(h[0].score, nh > 1 && h[1].verified ? h[1].score : -1, nh, &o);
        if (taken) taken[q] = 1;
    }
    return PATINA_OK;
}

void idf_keys_take(size_t nq, size_t k, const unsigned char *taken, char **keys, char **half_keys)
{
    size_t q, i;
    if (!keys || !half_keys) return;
    for (q = 0; q < nq; q++) {
        if (!taken[q]) continue;
        for (i = 0; i < k; i++) {
            free(keys[q * k + i]);
            keys[q * k + i] = half_keys[q * k + i];
            half_keys[q * k + i] = NULL;
        }
    }
}
