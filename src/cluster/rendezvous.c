/* Weighted rendezvous hashing (highest random weight): which shards hold a
 * partition. Each (member, partition) pair gets a score -w / ln(U) with U
 * uniform in (0, 1) from a hash of the pair; the r highest scores hold the
 * partition, the first of them the active copy. A member's expected share
 * is proportional to its weight, and a member joining or leaving moves only
 * the partitions it gains or loses (every other pair's score is unchanged).
 * Pure: the shards and the front ends compute it alike from the members. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"

/* U in (0, 1): the first 8 bytes of SHA-256("name/p"), 53 bits, +0.5 so that
 * neither 0 nor 1 occurs. */
static double pair_uniform(const char *name, uint32_t p)
{
    char buf[CLU_NAME_MAX + 16];
    uint8_t h[32];
    uint64_t v = 0;
    int i, n = snprintf(buf, sizeof buf, "%s/%u", name, p);
    patina_sha256(h, buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
    for (i = 0; i < 8; i++) v = (v << 8) | h[i];
    return ((double)(v >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* 1 when (sa, na) ranks before (sb, nb): higher score, ties by name. */
static int before(double sa, const char *na, double sb, const char *nb)
{
    if (sa != sb) return sa > sb;
    return strcmp(na, nb) < 0;
}

size_t clu_rendezvous(const clu_member_w_t *m, size_t n, uint32_t p, size_t r, size_t *out)
{
    double score[CLU_REPLICAS_MAX * 4];
    size_t nout = 0, i, j;
    if (r > sizeof score / sizeof score[0]) r = sizeof score / sizeof score[0];
    for (i = 0; i < n; i++) {
        double s;
        if (!(m[i].weight > 0)) continue;
        s = -m[i].weight / log(pair_uniform(m[i].name, p));
        /* insertion into the best r, kept sorted */
        for (j = nout; j > 0 && before(s, m[i].name, score[j - 1], m[out[j - 1]].name); j--) {
            if (j < r) {
                score[j] = score[j - 1];
                out[j] = out[j - 1];
            }
        }
        if (j < r) {
            score[j] = s;
            out[j] = i;
            if (nout < r) nout++;
        }
    }
    return nout;
}

/* ------------------------------------------------------- bounded load
 * Plain rendezvous spreads P partitions over N members only on average
 * (64 over 3: +-4 is common), so the assignment the shards use bounds each
 * member's load: copy rank k (0 = active) of every partition is given in
 * one pass over the (member, partition) pairs by descending score, a pair
 * taken while its member is under its quota for rank k and does not hold
 * the partition yet. Quotas are P x w / W rounded by largest remainder,
 * the remainders' ties broken by name rotated with k, so that with equal
 * weights every member holds floor or ceil of P / N copies of each rank
 * and of P x r / N in all. A member that joins takes its quota mostly
 * from the pairs it scores highest, so partitions move mostly to it. */

typedef struct pair {
    double score;
    uint32_t p;
    uint32_t name_rank; /* the member's place in name order: ties */
    uint32_t m;
} pair_t;

static int cmp_pair(const void *a, const void *b)
{
    const pair_t *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return x->name_rank < y->name_rank ? -1 : x->name_rank > y->name_rank;
}

/* quotas q[0 .. n) of P for rank k: P x w / W rounded down, the rest one
 * each by largest remainder; equal remainders (the ties) in name order
 * rotated rank by rank, so that the extras fall on other members at each rank */
static void quotas(const clu_member_w_t *m, size_t n, uint32_t P, size_t k, const uint32_t *by_name, size_t *q,
                   double *rem, size_t *ord)
{
    double W = 0;
    size_t i, j, given = 0, need, start = 0;
    for (i = 0; i < n; i++) W += m[i].weight > 0 ? m[i].weight : 0;
    for (i = 0; i < n; i++) {
        double share = W > 0 && m[i].weight > 0 ? (double)P * m[i].weight / W : 0;
        q[i] = (size_t)floor(share);
        rem[i] = share - (double)q[i];
        given += q[i];
        ord[i] = by_name[i]; /* name order */
    }
    /* stable insertion sort by remainder, descending (name order kept among equals) */
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && rem[ord[j]] > rem[ord[j - 1]]; j--) {
            size_t t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    need = P > given ? P - given : 0;
    while (need > 0 && start < n && m[ord[start]].weight > 0) {
        size_t end = start, t, len, shift;
        while (end < n && rem[ord[end]] == rem[ord[start]]) end++;
        len = end - start;
        /* rank k continues where rank k - 1's extras stopped */
        shift = (k * (need < len ? need : len)) % len;
        for (t = 0; t < len && need > 0; t++, need--) q[ord[start + (t + shift) % len]]++;
        start = end;
    }
}

patina_status clu_assign(const clu_member_w_t *m, size_t n, uint32_t P, size_t r, size_t *out)
{
    pair_t *pairs;
    size_t *q, *cnt, *ord, *names, np = 0, i, k, j, copies = r < n ? r : n;
    uint32_t *by_name, *rank_of, p;
    double *rem;
    unsigned char *holds;
    for (i = 0; i < (size_t)P * r; i++) out[i] = SIZE_MAX;
    if (n == 0 || P == 0 || r == 0) return PATINA_OK;
    pairs = malloc((size_t)P * n * sizeof *pairs);
    q = calloc(n, sizeof *q);
    cnt = calloc(n, sizeof *cnt);
    ord = calloc(n, sizeof *ord);
    names = calloc(n, sizeof *names);
    by_name = calloc(n, sizeof *by_name);
    rank_of = calloc(n, sizeof *rank_of);
    rem = calloc(n, sizeof *rem);
    holds = calloc((size_t)P * n, 1);
    if (!pairs || !q || !cnt || !ord || !names || !by_name || !rank_of || !rem || !holds) {
        free(pairs), free(q), free(cnt), free(ord), free(names), free(by_name), free(rank_of), free(rem), free(holds);
        return clu_fail(PATINA_E_NOMEM, "assignment: out of memory for %u partitions x %zu members", P, n);
    }
    for (i = 0; i < n; i++) /* name order (insertion: members are few) */
        for (names[i] = i, j = i; j > 0 && strcmp(m[names[j]].name, m[names[j - 1]].name) < 0; j--) {
            size_t t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (i = 0; i < n; i++) {
        by_name[i] = (uint32_t)names[i];
        rank_of[names[i]] = (uint32_t)i;
    }
    for (i = 0; i < n; i++) {
        if (!(m[i].weight > 0)) continue;
        for (p = 0; p < P; p++)
            pairs[np++] = (pair_t){-m[i].weight / log(pair_uniform(m[i].name, p)), p, rank_of[i], (uint32_t)i};
    }
    qsort(pairs, np, sizeof *pairs, cmp_pair);
    for (k = 0; k < copies; k++) {
        quotas(m, n, P, k, by_name, q, rem, ord);
        memset(cnt, 0, n * sizeof *cnt);
        for (j = 0; j < np; j++) {
            const pair_t *x = &pairs[j];
            size_t *slot = &out[(size_t)x->p * r + k];
            if (*slot != SIZE_MAX || holds[(size_t)x->p * n + x->m] || cnt[x->m] >= q[x->m]) continue;
            *slot = x->m;
            holds[(size_t)x->p * n + x->m] = 1;
            cnt[x->m]++;
        }
        /* a partition left over: every member with room holds it already
         * (copies of one partition must differ). One swap frees a place: a
         * member b that does not hold it gives its rank-k copy of another
         * partition p2 to a member a with room that does not hold p2. */
        for (p = 0; p < P; p++) {
            size_t *slot = &out[(size_t)p * r + k], a, p2;
            if (*slot != SIZE_MAX) continue;
            for (a = 0; a < n && *slot == SIZE_MAX; a++) {
                const size_t aa = by_name[a];
                if (!(m[aa].weight > 0) || cnt[aa] >= q[aa]) continue;
                for (p2 = 0; p2 < P; p2++) {
                    size_t *s2 = &out[p2 * r + k], b = *s2;
                    if (p2 == p || b == SIZE_MAX || holds[p2 * n + aa] || holds[(size_t)p * n + b]) continue;
                    holds[p2 * n + b] = 0;
                    *s2 = aa;
                    holds[p2 * n + aa] = 1;
                    cnt[aa]++;
                    *slot = b;
                    holds[(size_t)p * n + b] = 1;
                    break;
                }
            }
        }
        /* none possible: its best member not holding it, over quota */
        for (j = 0; j < np; j++) {
            const pair_t *x = &pairs[j];
            size_t *slot = &out[(size_t)x->p * r + k];
            if (*slot != SIZE_MAX || holds[(size_t)x->p * n + x->m]) continue;
            *slot = x->m;
            holds[(size_t)x->p * n + x->m] = 1;
        }
    }
    free(pairs), free(q), free(cnt), free(ord), free(names), free(by_name), free(rank_of), free(rem), free(holds);
    return PATINA_OK;
}
