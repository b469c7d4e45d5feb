/* patina ls: the image records of a collection. */
#include <string.h>
#include <time.h>

#include "cli/cli.h"

static int run_ls(const cli_args_t *a);

static const cli_opt_t opts[] = {
    {.name = "format", .type = CLI_CHOICE, .choices = "table|csv|json", .def = "table",
     .help = "output format (see below)"},
};

const cli_command_t cli_cmd_ls = {
    .name = "ls",
    .summary = "list the images of a collection",
    .operands = "COLLECTION",
    .min_operands = 1,
    .max_operands = 1,
    .about = "Lists the images of a collection in id order: id, key, file size,\n"
             "width x height, SHA-256, time indexed (UTC).\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "output:\n"
             "  table  a header line (id, key, bytes, width x height, the SHA-256's first\n"
             "         12 hex digits, added), then aligned columns (keys as stored)\n"
             "  csv    ID,KEY,SIZE,WIDTH,HEIGHT,SHA256,ADDED per image, no header; a KEY\n"
             "         holding a comma, a double quote, CR or LF is quoted as RFC 4180\n"
             "         says (quotes doubled); lines end with LF.\n"
             "  json   one object per line; strings escape every control character,\n"
             "         bytes that are not UTF-8 become \\udc80..\\udcff (Python's\n"
             "         surrogateescape).\n",
    .run = run_ls,
};

static int run_ls(const cli_args_t *a)
{
    int fmt = (int)cli_get(a, "format")->i; /* 0 table, 1 csv, 2 json */
    patina_collection_t *coll;
    patina_record_t rec;
    uint64_t cursor = 0, rows = 0;
    patina_status s;
    if ((s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_READONLY, 0)) != PATINA_OK) {
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
            printf("%llu,", (unsigned long long)rec.id);
            cli_csv_field(stdout, rec.key);
            printf(",%llu,%d,%d,%s,%s\n", (unsigned long long)rec.size, rec.width, rec.height, sha, when);
        } else if (fmt == 2) {
            printf("{\"id\":%llu,\"key\":", (unsigned long long)rec.id);
            cli_json_string(stdout, rec.key);
            printf(",\"size\":%llu,\"width\":%d,\"height\":%d,\"sha256\":\"%s\",\"added\":\"%s\"}\n",
                   (unsigned long long)rec.size, rec.width, rec.height, sha, when);
        } else {
            if (rows++ == 0)
                printf("%6s  %-50s %10s  %6s x %-6s %-12s  %s\n", "id", "key", "bytes", "width", "height", "sha256",
                       "added (UTC)");
            printf("%6llu  %-50s %10llu  %6d x %-6d %.12s  %s\n", (unsigned long long)rec.id, rec.key,
                   (unsigned long long)rec.size, rec.width, rec.height, sha, when);
        }
        patina_record_release(&rec);
    }
    patina_collection_close(coll);
    if (s != PATINA_DONE) {
        cli_status_error("ls", s);
        return EXIT_ERROR;
    }
    if (fflush(stdout) != 0) return EXIT_ERROR;
    return EXIT_OK;
}
