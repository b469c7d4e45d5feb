/* A front end's session on one cluster collection: the connection, the
 * configuration and the scatter/gather front; and the choice of a table,
 * with the embedded rules (patina_table_open's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/conn.h"

struct clu_session {
    clu_conn_t *c;
    clu_config_t cfg;
    clu_front_t *front;
};

patina_status clu_session_open(clu_session_t **out, const char *urls, const char *coll, const clu_front_opts_t *o)
{
    clu_session_t *s = calloc(1, sizeof *s);
    patina_status st;
    *out = NULL;
    if (!s) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    if ((st = clu_connect(&s->c, urls)) != PATINA_OK || (st = clu_collection_config(s->c, coll, &s->cfg)) != PATINA_OK ||
        (st = clu_front_new(&s->front, s->c, &s->cfg, o)) != PATINA_OK) {
        clu_session_close(s);
        return st;
    }
    *out = s;
    return PATINA_OK;
}

void clu_session_close(clu_session_t *s)
{
    if (!s) return;
    clu_front_free(s->front);
    clu_disconnect(s->c);
    free(s);
}

clu_conn_t *clu_session_conn(clu_session_t *s) { return s->c; }
clu_front_t *clu_session_front(clu_session_t *s) { return s->front; }
const clu_config_t *clu_session_config(clu_session_t *s) { return &s->cfg; }

patina_status clu_session_table(clu_session_t *s, patina_context_t *ctx, const char *spec, unsigned need,
                                patina_table_t **t)
{
    const clu_config_t *cfg = &s->cfg;
    char want[CLU_SPEC_MAX + 1] = "", list[2048] = "";
    size_t i, found = SIZE_MAX, nfound = 0;
    *t = NULL;
    if (spec) {
        patina_extractor_t *ex = NULL;
        if (patina_extractor_new(&ex, spec) != PATINA_OK) return clu_fail_lib(PATINA_E_INVALID, "cluster: table '%s'", spec);
        snprintf(want, sizeof want, "%s", patina_extractor_spec(ex));
        patina_extractor_free(ex);
    }
    for (i = 0; i < cfg->ntables; i++) {
        patina_extractor_t *ex = NULL;
        unsigned caps;
        if (patina_extractor_new(&ex, cfg->tables[i]) != PATINA_OK) continue;
        caps = patina_extractor_caps(ex);
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", cfg->tables[i]);
        if (spec && !strcmp(want, cfg->tables[i])) {
            found = i;
            nfound = 1;
            patina_extractor_free(ex);
            break;
        }
        if (spec && !strchr(spec, ':') && !strcmp(spec, patina_extractor_family(ex))) {
            found = i;
            nfound++;
        } else if (!spec && (caps & need) == need &&
                   ((caps & PATINA_CAP_IDENTIFY) == 0 || (need & PATINA_CAP_IDENTIFY))) {
            found = i;
            nfound++;
        }
        patina_extractor_free(ex);
    }
    if (nfound == 0)
        return clu_fail(PATINA_E_NOTFOUND, "cluster collection %s has no table %s%s (its tables: %s)", cfg->name,
                        spec ? "" : "for this", spec ? spec : "", list[0] ? list : "none");
    if (nfound > 1)
        return clu_fail(PATINA_E_INVALID, "cluster collection %s has several tables that fit (%s): name one with -f",
                        cfg->name, list);
    {
        patina_table_opts_t to;
        patina_status st;
        patina_table_opts_init(&to);
        if ((st = patina_table_new(t, ctx, cfg->tables[found], &to)) != PATINA_OK)
            return clu_fail_lib(st, "cluster: table %s", cfg->tables[found]);
        if (need && (patina_table_caps(*t) & need) != need) {
            patina_table_free(*t);
            *t = NULL;
            return clu_fail(PATINA_E_INVALID, "cluster: table %s cannot answer this (capabilities)", cfg->tables[found]);
        }
    }
    return PATINA_OK;
}
