/* patina ls: the image records of a collection. */
#include <getopt.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

int cmd_ls(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"format", required_argument, 0, 'F'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *format = "table";
    patina_collection_t *coll;
    patina_record_t rec;
    uint64_t cursor = 0;
    patina_status s;
    int c, fmt;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'F') format = optarg;
        else if (c == 'h') {
            printf("usage: patina ls COLLECTION [--format table|csv|json]\n\n"
                   "Lists the images of a collection in id order: id, key, file size,\n"
                   "width x height, SHA-256, time indexed (UTC).\n"
                   "csv: ID,KEY,SIZE,WIDTH,HEIGHT,SHA256,ADDED (no header).\n");
            return EXIT_OK;
        } else return EXIT_USAGE;
    }
    fmt = !strcmp(format, "table") ? 0 : !strcmp(format, "csv") ? 1 : !strcmp(format, "json") ? 2 : -1;
    if (fmt < 0) {
        cli_error("ls", "--format must be table, csv or json, got '%s'", format);
        return EXIT_USAGE;
    }
    if (optind >= argc) {
        cli_error("ls", "need a collection");
        return EXIT_USAGE;
    }
    if ((s = patina_collection_open(&coll, argv[optind], PATINA_OPEN_READONLY, 0)) != PATINA_OK) {
        cli_status_error("ls", s);
        return EXIT_ERROR;
    }
    while ((s = patina_collection_next(coll, &cursor, &rec)) == PATINA_OK) {
        char sha[65], when[32];
        time_t t = (time_t)rec.added;
        struct tm tm;
        int i;
        for (i = 0; i < 32; i++) snprintf(sha + 2 * i, 3, "%02x", rec.sha256[i]);
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (fmt == 1) {
            printf("%llu,%s,%llu,%d,%d,%s,%s\n", (unsigned long long)rec.id, rec.key,
                   (unsigned long long)rec.size, rec.width, rec.height, sha, when);
        } else if (fmt == 2) {
            printf("{\"id\":%llu,\"key\":", (unsigned long long)rec.id);
            cli_json_string(stdout, rec.key);
            printf(",\"size\":%llu,\"width\":%d,\"height\":%d,\"sha256\":\"%s\",\"added\":\"%s\"}\n",
                   (unsigned long long)rec.size, rec.width, rec.height, sha, when);
        } else {
            printf("%6llu  %-50s %10llu  %5dx%-5d %.12s  %s\n", (unsigned long long)rec.id,
                   rec.key, (unsigned long long)rec.size, rec.width, rec.height, sha, when);
        }
        patina_record_release(&rec);
    }
    patina_collection_close(coll);
    if (s != PATINA_DONE) {
        cli_status_error("ls", s);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}
