/* `patina`: the command-line front end over the library. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
    const char *name;
    cli_cmd_fn fn;
    const char *summary;
} commands[] = {
    {"extract", cmd_extract, "compute descriptors of images and print them"},
    {"index", cmd_index, "add images (files or folders) to a collection"},
    {"search", cmd_search, "find the nearest images in a collection"},
    {"ls", cmd_ls, "list the images of a collection"},
    {"rm", cmd_rm, "remove images from a collection"},
    {"info", cmd_info, "show build features, GPUs and descriptor families"},
};
#define NCMDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    size_t i;
    fprintf(f, "usage: patina <command> [options] [args]\n\ncommands:\n");
    for (i = 0; i < NCMDS; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n'patina <command> --help' describes each command.\n\n"
            "exit status:\n"
            "  0  success\n"
            "  1  the command ran but some inputs failed (each is reported on stderr)\n"
            "  2  usage error: unknown command or option, bad option value\n"
            "  3  the command could not run: collection, device or I/O error\n");
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

int cli_parse_long(const char *cmd, const char *opt, const char *v, long min, long max, long *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < min || x > max) {
        cli_error(cmd, "%s wants an integer in [%ld, %ld], got '%s'", opt, min, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

int cli_parse_double(const char *cmd, const char *opt, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || x != x) {
        cli_error(cmd, "%s wants a number, got '%s'", opt, v);
        return -1;
    }
    *out = x;
    return 0;
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
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

int main(int argc, char **argv)
{
    size_t i;
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("patina %s (%s)\n", patina_version(), patina_build_info());
        return EXIT_OK;
    }
    for (i = 0; i < NCMDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "patina: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
