/* Shared pieces of `patina` (see cli.h): the subcommand list, the whole-argv
 * parser, messages, the execution context from common options, and the CSV
 * and JSON writers. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

_Static_assert(PATINA_DEFAULT_MAX_PIXELS == 100000000ull, "CLI_OPT_MAX_PIXELS shows this default");
_Static_assert(PATINA_DEFAULT_BATCH_MEMORY == 1ull << 30, "CLI_OPT_BATCH_MEMORY shows this default");

const cli_command_t *const cli_commands[] = {
    &cli_cmd_extract, &cli_cmd_index, &cli_cmd_search, &cli_cmd_identify, &cli_cmd_ls, &cli_cmd_rm, &cli_cmd_info,
    &cli_cmd_serve, &cli_cmd_cluster, &cli_cmd_shard, &cli_cmd_worker,
};
const size_t cli_ncommands = sizeof cli_commands / sizeof cli_commands[0];

const cli_command_t *cli_command_find(const char *name)
{
    size_t i;
    for (i = 0; name && i < cli_ncommands; i++)
        if (!strcmp(name, cli_commands[i]->name)) return cli_commands[i];
    return NULL;
}

void cli_command_unknown(char *buf, size_t size, const char *name)
{
    const char *names[sizeof cli_commands / sizeof cli_commands[0]];
    char hint[200];
    size_t i;
    for (i = 0; i < cli_ncommands; i++) names[i] = cli_commands[i]->name;
    cli_suggest(hint, sizeof hint, name, strlen(name), names, cli_ncommands, "");
    if (size) snprintf(buf, size, "unknown command '%.200s'%s", name, hint);
}

int cli_parse_argv(const cli_command_t **cmd, cli_args_t *a, int argc, char *const *argv, char *err,
                   size_t errsize)
{
    memset(a, 0, sizeof *a);
    *cmd = NULL;
    if (argc < 2 || !argv[1]) {
        if (errsize) snprintf(err, errsize, "no command given");
        return CLI_PARSE_ERROR;
    }
    *cmd = cli_command_find(argv[1]);
    if (!*cmd) {
        cli_command_unknown(err, errsize, argv[1]);
        return CLI_PARSE_ERROR;
    }
    return cli_parse(a, *cmd, argc - 1, argv + 1, err, errsize);
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "patina %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void cli_status_error(const char *cmd, patina_status s)
{
    const char *m = patina_last_error();
    cli_error(cmd, "%s", *m ? m : patina_status_str(s));
}

/* The option's value if the command has that option and it is set. */
static const cli_value_t *opt_if(const cli_args_t *a, const char *name)
{
    size_t i;
    for (i = 0; i < a->cmd->nopts; i++)
        if (!strcmp(a->cmd->opts[i].name, name)) return a->v[i].set ? &a->v[i] : NULL;
    return NULL;
}

int cli_context(patina_context_t **ctx, const cli_args_t *a)
{
    patina_context_opts_t copts;
    const cli_value_t *v;
    patina_status s;
    memset(&copts, 0, sizeof copts);
    if ((v = opt_if(a, "jobs"))) copts.threads = (int)v->i;
    if ((v = opt_if(a, "max-pixels"))) copts.limits.max_pixels = (uint64_t)v->i;
    if ((v = opt_if(a, "gpus"))) copts.gpus = v->text;
    s = patina_context_new(ctx, &copts);
    if (s != PATINA_OK) {
        cli_status_error(a->cmd->name, s);
        return s == PATINA_E_INVALID ? EXIT_USAGE : EXIT_ERROR; /* a malformed --gpus list: usage */
    }
    return 0;
}

void cli_extract_error(char *buf, size_t size, patina_context_t *ctx, const patina_extractor_t *ex,
                       const patina_image_t *img, const char *name, patina_status st)
{
    unsigned char *tmp = malloc(patina_extractor_bytes(ex) + 1);
    patina_status one = PATINA_OK;
    patina_clear_error();
    if (tmp && patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, tmp, img, 1, &one) == PATINA_OK &&
        one != PATINA_OK && *patina_last_error())
        snprintf(buf, size, "'%s': %s failed: %s", name, patina_extractor_family(ex), patina_last_error());
    else
        snprintf(buf, size, "'%s': %s failed (%s)", name, patina_extractor_family(ex), patina_status_str(st));
    free(tmp);
}

/* ------------------------------------------------------------------ output */

void cli_csv_field(FILE *f, const char *s)
{
    const char *p;
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (p = s; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when the byte at p
 * does not start one (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF). */
static int utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

void cli_json_coverage(FILE *f, const cli_cov_t *cov)
{
    fprintf(f, ",\"partial\":%s,\"coverage\":{\"partitions\":%u,\"partitions_total\":%u,\"references\":%llu}",
            cov->partial ? "true" : "false", cov->partitions, cov->partitions_total, cov->references);
}

void cli_json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        int n;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            p++;
            continue;
        }
        if (c < 0x20 || c == 0x7F) {
            switch (c) {
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            default: fprintf(f, "\\u%04x", c);
            }
            p++;
            continue;
        }
        n = utf8_len(p); /* reads at most up to the first byte that fails, never past the NUL */
        if (n == 0) {
            fprintf(f, "\\udc%02x", c); /* surrogateescape: byte c as U+DC00 + c */
            p++;
        } else if (n == 3 && c == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) {
            fprintf(f, "\\u%04x", 0x2000u + p[2] - 0x80u); /* U+2028, U+2029 */
            p += 3;
        } else {
            fwrite(p, 1, (size_t)n, f);
            p += n;
        }
    }
    fputc('"', f);
}

const char *cli_elem_name(patina_elem e)
{
    switch (e) {
    case PATINA_ELEM_U8: return "u8";
    case PATINA_ELEM_U16: return "u16";
    case PATINA_ELEM_U32: return "u32";
    case PATINA_ELEM_F32: return "f32";
    case PATINA_ELEM_F64: return "f64";
    }
    return "?";
}

void cli_walk_filters(const cli_args_t *a, patina_walk_opts_t *w)
{
    w->include = cli_get(a, "include")->all;
    w->ninclude = cli_get(a, "include")->count;
    w->exclude = cli_get(a, "exclude")->all;
    w->nexclude = cli_get(a, "exclude")->count;
}

void cli_print_elem(FILE *f, patina_elem e, const void *desc, size_t i)
{
    switch (e) {
    case PATINA_ELEM_U8: fprintf(f, "%u", ((const unsigned char *)desc)[i]); break;
    case PATINA_ELEM_U16: fprintf(f, "%u", ((const unsigned short *)desc)[i]); break;
    case PATINA_ELEM_U32: fprintf(f, "%u", ((const unsigned int *)desc)[i]); break;
    case PATINA_ELEM_F32: fprintf(f, "%.9g", (double)((const float *)desc)[i]); break;
    case PATINA_ELEM_F64: fprintf(f, "%.17g", ((const double *)desc)[i]); break;
    }
}

void cli_video_json(FILE *f, const char *key)
{
    int64_t t, frame;
    size_t len;
    char *file;
    if (!key || !patina_video_key_parse(key, &t, &frame, &len) || !(file = strndup(key, len))) return;
    fputs(",\"video\":{\"file\":", f);
    cli_json_string(f, file);
    fprintf(f, ",\"t\":%s%lld.%03lld,\"frame\":%lld}", t < 0 ? "-" : "", (long long)(t < 0 ? -t : t) / 1000,
            (long long)(t < 0 ? -t : t) % 1000, (long long)frame);
    free(file);
}

void cli_video_note(FILE *f, const char *key)
{
    int64_t t, frame;
    long long a;
    if (!key || !patina_video_key_parse(key, &t, &frame, NULL)) return;
    a = (long long)(t < 0 ? -t : t);
    fprintf(f, "  (%s%lld:%02lld:%02lld.%03lld)", t < 0 ? "-" : "", a / 3600000, a / 60000 % 60, a / 1000 % 60,
            a % 1000);
}
