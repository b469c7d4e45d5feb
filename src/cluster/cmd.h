/* The command line's cluster commands (src/cli's cmd_cluster.c and the
 * --cluster branches of index, search and identify call these). */
#ifndef PATINA_CLUSTER_CMD_H
#define PATINA_CLUSTER_CMD_H

#include "cli/args.h"
#include "cluster/cluster.h"

int clu_cli_cluster(const cli_args_t *a); /* patina cluster create|status COLL */
int clu_cli_shard(const cli_args_t *a);   /* patina shard COLL */
int clu_cli_index(const cli_args_t *a);   /* patina index COLL --cluster URL [--distribute] PATHS... */
int clu_cli_worker(const cli_args_t *a);  /* patina worker COLL --cluster URL */

#endif
