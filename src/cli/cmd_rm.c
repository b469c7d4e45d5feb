/* patina rm: remove images (by key, or by id with --id) from a collection. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cmd_rm(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"id", no_argument, 0, 'i'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    patina_collection_t *coll;
    int c, by_id = 0, rc = EXIT_OK, a;
    patina_status s;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'i') by_id = 1;
        else if (c == 'h') {
            printf("usage: patina rm COLLECTION KEY... | patina rm --id COLLECTION ID...\n\n"
                   "Removes images and all their descriptors. A key is the path as it was\n"
                   "indexed (see 'patina ls'). Missing keys are reported; exit status 1.\n");
            return EXIT_OK;
        } else return EXIT_USAGE;
    }
    if (argc - optind < 2) {
        cli_error("rm", "need a collection and at least one key");
        return EXIT_USAGE;
    }
    if ((s = patina_collection_open(&coll, argv[optind], PATINA_OPEN_WRITE, 0)) != PATINA_OK) {
        cli_status_error("rm", s);
        return EXIT_ERROR;
    }
    for (a = optind + 1; a < argc; a++) {
        uint64_t id;
        if (by_id) {
            long v;
            if (cli_parse_long("rm", "ID", argv[a], 1, 0x7fffffffffffffffL, &v)) {
                rc = EXIT_PARTIAL;
                continue;
            }
            id = (uint64_t)v;
        } else {
            patina_record_t rec;
            s = patina_collection_get_by_key(coll, argv[a], &rec);
            if (s != PATINA_OK) {
                cli_status_error("rm", s);
                rc = s == PATINA_E_NOTFOUND ? EXIT_PARTIAL : EXIT_ERROR;
                if (rc == EXIT_ERROR) break;
                continue;
            }
            id = rec.id;
            patina_record_release(&rec);
        }
        s = patina_collection_remove(coll, id);
        if (s != PATINA_OK) {
            cli_status_error("rm", s);
            rc = s == PATINA_E_NOTFOUND ? EXIT_PARTIAL : EXIT_ERROR;
            if (rc == EXIT_ERROR) break;
        }
    }
    patina_collection_close(coll);
    return rc;
}
