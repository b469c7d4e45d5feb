/* Weighted rendezvous hashing (highest random weight): which shards hold a
 * partition. Each (member, partition) pair gets a score -w / ln(U) with U
 * uniform in (0, 1) from a hash of the pair; the r highest scores hold the
 * partition, the first of them the active copy. A member's expected share
 * is proportional to its weight, and a member joining or leaving moves only
 * the partitions it gains or loses (every other pair's score is unchanged).
 * Pure: the shards and the front ends compute it alike from the members. */
#include <math.h>
#include <stdio.h>
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
