/* patina rm: remove images (by key, or by id with --id) from a collection. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int run_rm(const cli_args_t *a);

static const cli_opt_t opts[] = {
    {.name = "id", .type = CLI_FLAG,
     .help = "the operands after COLLECTION are image ids (see 'patina ls'): "
             "decimal integers from 1 to 18446744073709551615"},
};

const cli_command_t cli_cmd_rm = {
    .name = "rm",
    .summary = "remove images from a collection",
    .operands = "COLLECTION KEY... | --id COLLECTION ID...",
    .min_operands = 2,
    .max_operands = -1,
    .about = "Removes images and all their descriptors. A KEY is an image's key (see\n"
             "'patina ls'), or the path of an indexed file in any spelling (its key is\n"
             "found as `index` makes it). Stored pivot tables (-f signature) drop the\n"
             "images' rows.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "With --id every ID is checked before anything is removed: one that is not a\n"
             "decimal integer in range is a usage error (exit status 2, nothing removed).\n"
             "Keys or ids the collection does not hold are reported; the others are removed\n"
             "(exit status 1).\n",
    .run = run_rm,
};

/* Every table of the collection as a live table (opened, not loaded: a
 * removal through them commits and leaves them to load when asked), so
 * that what is derived from them follows the removals. */
static int open_tables(patina_collection_t *coll, patina_table_t ***tables, size_t *nt)
{
    char **specs = NULL;
    size_t n = 0, k;
    int rc = 0;
    patina_status s = patina_collection_tables(coll, &specs, &n);
    *tables = NULL;
    *nt = 0;
    if (s != PATINA_OK) {
        cli_status_error("rm", s);
        return -1;
    }
    if (n && !(*tables = calloc(n, sizeof **tables))) rc = -1;
    for (k = 0; k < n; k++) {
        if (rc == 0 && (s = patina_table_open(&(*tables)[*nt], NULL, coll, specs[k], NULL)) != PATINA_OK) {
            cli_status_error("rm", s);
            rc = -1;
        } else if (rc == 0) {
            (*nt)++;
        }
        free(specs[k]);
    }
    free(specs);
    return rc;
}

static int run_rm(const cli_args_t *a)
{
    int by_id = (int)cli_get(a, "id")->i, rc = EXIT_OK;
    patina_collection_t *coll;
    patina_table_t **tables = NULL;
    size_t nt = 0;
    uint64_t *ids = NULL;
    size_t i, n = a->noperands - 1;
    patina_status s;
    if (by_id) {
        ids = malloc(n * sizeof *ids);
        if (!ids) {
            cli_error("rm", "out of memory");
            return EXIT_ERROR;
        }
        for (i = 0; i < n; i++)
            if (cli_parse_u64(a->operands[1 + i], 1, UINT64_MAX, &ids[i]) != 0) {
                cli_error("rm", "--id: '%s' is not an image id (a decimal integer from 1 to %llu)",
                          a->operands[1 + i], (unsigned long long)UINT64_MAX);
                free(ids);
                return EXIT_USAGE;
            }
    }
    if ((s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_WRITE, 0)) != PATINA_OK) {
        cli_status_error("rm", s);
        free(ids);
        return EXIT_ERROR;
    }
    if (open_tables(coll, &tables, &nt) != 0) {
        patina_collection_close(coll);
        free(ids);
        return EXIT_ERROR;
    }
    for (i = 0; i < n; i++) {
        uint64_t id;
        if (by_id) {
            id = ids[i];
        } else {
            patina_record_t rec;
            char *key = NULL;
            s = patina_collection_get_by_key(coll, a->operands[1 + i], &rec);
            if (s == PATINA_E_NOTFOUND) {
                /* not a key: a path of an indexed file, in any spelling (its key is canonical) */
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", patina_last_error());
                if (patina_collection_key(coll, a->operands[1 + i], &key) == PATINA_OK &&
                    strcmp(key, a->operands[1 + i]) != 0 && patina_collection_get_by_key(coll, key, &rec) == PATINA_OK)
                    s = PATINA_OK;
                patina_free(key);
                if (s != PATINA_OK) {
                    cli_error("rm", "%s", msg); /* what the operand's own lookup said */
                    rc = EXIT_PARTIAL;
                    continue;
                }
            }
            if (s != PATINA_OK) {
                cli_status_error("rm", s);
                rc = s == PATINA_E_NOTFOUND ? EXIT_PARTIAL : EXIT_ERROR;
                if (rc == EXIT_ERROR) break;
                continue;
            }
            id = rec.id;
            patina_record_release(&rec);
        }
        s = nt ? patina_tables_remove(tables, nt, &id, 1, NULL) : patina_collection_remove(coll, id);
        if (s != PATINA_OK) {
            cli_status_error("rm", s);
            rc = s == PATINA_E_NOTFOUND ? EXIT_PARTIAL : EXIT_ERROR;
            if (rc == EXIT_ERROR) break;
        }
    }
    /* stored pivot tables drop the rows of the removed images */
    for (i = 0; i < nt; i++) {
        if (rc != EXIT_ERROR && (s = patina_table_save(tables[i], NULL)) != PATINA_OK) {
            cli_status_error("rm", s);
            rc = EXIT_ERROR;
        }
        patina_table_free(tables[i]);
    }
    free(tables);
    patina_collection_close(coll);
    free(ids);
    return rc;
}
