/* The keys of merged answers.
 *
 * patina_table_results_merge carries keys only when every part has them, and
 * a part without hits may come without a keys array: such a part gets an
 * empty one (clu_results_keys_empty), so that it does not drop the keys of
 * the others.
 *
 * The keys of a merged identification. The library's patina_identify_merge
 * merges parts' hits exactly but carries no keys (patina_table_results_merge
 * does carry them); a cluster's parts come with the key of every candidate,
 * and a merged hit is one of its parts' candidates, so its key is found by
 * its id among the candidates of the same query. */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"

patina_status clu_identify_keys(const patina_identify_hit_t *const *part_hits,
                                const patina_identify_result_t *const *part_results, char *const *const *part_keys,
                                size_t np, size_t nq, size_t part_k, const patina_identify_hit_t *hits,
                                const patina_identify_result_t *results, size_t k, char **keys)
{
    size_t q, i, p, j;
    memset(keys, 0, nq * k * sizeof *keys);
    for (q = 0; q < nq; q++)
        for (i = 0; i < results[q].nhits && i < k; i++) {
            const char *key = NULL;
            for (p = 0; p < np && !key; p++)
                for (j = 0; part_keys[p] && j < part_results[p][q].nhits && j < part_k && !key; j++)
                    if (part_hits[p][q * part_k + j].id == hits[q * k + i].id) key = part_keys[p][q * part_k + j];
            if (key && !(keys[q * k + i] = strdup(key))) {
                for (j = 0; j < nq * k; j++) {
                    free(keys[j]);
                    keys[j] = NULL;
                }
                return clu_fail(PATINA_E_NOMEM, "identify merge: out of memory for keys");
            }
        }
    return PATINA_OK;
}

void clu_results_keys_empty(patina_table_results_t *parts, size_t np)
{
    static char *none[1];
    size_t p;
    for (p = 0; p < np; p++)
        if (!parts[p].keys && (!parts[p].offsets || parts[p].offsets[parts[p].nq] == 0)) parts[p].keys = none;
}
