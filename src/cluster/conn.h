/* The connection's handles, for the cluster's own files (conn.c owns them). */
#ifndef PATINA_CLUSTER_CONN_H
#define PATINA_CLUSTER_CONN_H

#include <nats/nats.h>

#include "cluster/cluster.h"

struct clu_conn {
    natsConnection *nc;
    jsCtx *js;
};

/* A NATS failure as a patina_status, the message "<what>: <NATS's text>"
 * (the NATS library's last error detail when it has one): not found ->
 * PATINA_E_NOTFOUND; timeouts, no responders, no server, closed
 * connections -> PATINA_E_UNAVAILABLE; memory -> PATINA_E_NOMEM; invalid
 * arguments -> PATINA_E_INVALID; a wrong last revision -> PATINA_E_BUSY;
 * anything else -> PATINA_E_STORE. */
patina_status clu_nats_fail(natsStatus ns, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The status clu_nats_fail maps ns to (no message). */
patina_status clu_nats_status(natsStatus ns);

/* The KV bucket `bucket` (PATINA_E_NOTFOUND when it does not exist). */
patina_status clu_kv_open(kvStore **kv, clu_conn_t *c, const char *bucket);

#endif
