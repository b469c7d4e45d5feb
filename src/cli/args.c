/* The command-line parser and --help writer of `patina` (see args.h). Pure
 * functions over a subcommand's option table: nothing here prints except
 * cli_help, and nothing exits. */
#include "cli/args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errsize, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errsize, const char *fmt, ...)
{
    va_list ap;
    if (errsize) {
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return CLI_PARSE_ERROR;
}

/* ---------------------------------------------------------------- numbers */

int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s) return -1;
    for (; *s; s++) {
        unsigned d;
        if (*s < '0' || *s > '9') return -1;
        d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1; /* overflow */
        v = v * 10 + d;
    }
    if (v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* Strict signed decimal: optional '-', digits, no overflow. */
static int parse_ll(const char *s, long long *out)
{
    int neg = *s == '-';
    uint64_t v;
    if (neg) s++;
    if (cli_parse_u64(s, 0, neg ? (uint64_t)LLONG_MAX + 1 : (uint64_t)LLONG_MAX, &v) != 0) return -1;
    *out = neg ? (v == (uint64_t)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v) : (long long)v;
    return 0;
}

/* A finite decimal number: [-+]digits[.digits][e[-+]digits]; no hex, inf,
 * nan or spaces (strtod would take them). */
static int parse_number(const char *s, double *out)
{
    const char *p = s;
    char *end;
    double x;
    int digits = 0;
    if (*p == '-' || *p == '+') p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') p++, digits++;
    }
    if (!digits) return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+') p++;
        if (*p < '0' || *p > '9') return -1;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p) return -1;
    errno = 0;
    x = strtod(s, &end);
    if (*end || !isfinite(x) || (errno == ERANGE && fabs(x) > 1.0)) return -1;
    *out = x;
    return 0;
}

/* digits [K|M|G|T][i][B], case-insensitive; powers of 1024. */
static int parse_bytes(const char *s, uint64_t *out)
{
    char digits[32];
    size_t n = 0;
    uint64_t v, mult = 1;
    const char *p = s;
    while (*p >= '0' && *p <= '9') {
        if (n + 1 >= sizeof digits) return -1;
        digits[n++] = *p++;
    }
    digits[n] = '\0';
    if (!n) return -1;
    switch (*p) {
    case 'k': case 'K': mult = 1ull << 10; p++; break;
    case 'm': case 'M': mult = 1ull << 20; p++; break;
    case 'g': case 'G': mult = 1ull << 30; p++; break;
    case 't': case 'T': mult = 1ull << 40; p++; break;
    default: break;
    }
    if (mult > 1 && (*p == 'i' || *p == 'I')) p++;
    if (*p == 'b' || *p == 'B') p++;
    if (*p) return -1;
    if (cli_parse_u64(digits, 0, UINT64_MAX, &v) != 0 || v > UINT64_MAX / mult) return -1;
    *out = v * mult;
    return 0;
}

/* The index of `word` in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *word)
{
    size_t len = strlen(word);
    int i = 0;
    const char *p = choices;
    while (p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !strncmp(p, word, n)) return i;
        p = bar ? bar + 1 : NULL;
        i++;
    }
    return -1;
}

/* "a|b|c" as "a, b or c" into buf. */
static void choice_list(char *buf, size_t size, const char *choices)
{
    size_t o = 0, nw = 1;
    const char *p;
    int k = 0;
    for (p = choices; *p; p++) nw += *p == '|';
    for (p = choices; *p && o + 8 < size; p++) {
        if (*p == '|') {
            k++;
            o += (size_t)snprintf(buf + o, size - o, "%s", (size_t)k == nw - 1 ? " or " : ", ");
        } else {
            buf[o++] = *p;
        }
    }
    buf[o < size ? o : size - 1] = '\0';
}

/* Bytes as the shortest exact suffix form: 1G, 512M, 1000. */
static void bytes_text(char *buf, size_t size, double x)
{
    static const char units[] = "KMGT";
    uint64_t v = (uint64_t)x;
    int u = -1;
    while (u < 3 && v >= 1024 && v % 1024 == 0) v /= 1024, u++;
    if (u < 0) snprintf(buf, size, "%llu", (unsigned long long)v);
    else snprintf(buf, size, "%llu%c", (unsigned long long)v, units[u]);
}

/* What an option wants, for messages and the help: "an integer from 1 to 1024". */
static void wants_text(char *buf, size_t size, const cli_opt_t *o)
{
    char lo[32], hi[32], list[256];
    const char *au = (o->flags & CLI_AUTO) ? " or auto" : "";
    switch (o->type) {
    case CLI_FLAG: snprintf(buf, size, "no value"); break;
    case CLI_INT: snprintf(buf, size, "an integer from %.0f to %.0f%s", o->min, o->max, au); break;
    case CLI_NUMBER:
        if (isinf(o->max))
            snprintf(buf, size, "a number %s %.15g%s", (o->flags & CLI_OPEN_MIN) ? ">" : ">=", o->min, au);
        else
            snprintf(buf, size, "a number %s %.15g and <= %.15g%s", (o->flags & CLI_OPEN_MIN) ? ">" : ">=",
                     o->min, o->max, au);
        break;
    case CLI_BYTES:
        bytes_text(lo, sizeof lo, o->min);
        bytes_text(hi, sizeof hi, o->max);
        snprintf(buf, size, "a byte count from %s to %s (suffixes K, M, G, T: powers of 1024)%s", lo, hi, au);
        break;
    case CLI_CHOICE:
        choice_list(list, sizeof list, o->choices);
        snprintf(buf, size, "%s", list);
        break;
    case CLI_TEXT: snprintf(buf, size, "a non-empty value"); break;
    }
}

/* Parses `text` as option o's value into v; on failure writes the message
 * ("--jobs wants ..., got 'x'") naming the option as the user wrote it. */
static int parse_value(cli_value_t *v, const cli_opt_t *o, const char *shown, const char *text,
                       char *err, size_t errsize)
{
    char wants[320];
    int ok = 0;
    v->is_auto = 0;
    if ((o->flags & CLI_AUTO) && !strcmp(text, "auto")) {
        v->is_auto = 1;
        v->text = text;
        return CLI_PARSE_OK;
    }
    switch (o->type) {
    case CLI_FLAG: ok = 1; v->i = 1; break;
    case CLI_INT: {
        long long x;
        ok = parse_ll(text, &x) == 0 && (double)x >= o->min && (double)x <= o->max;
        if (ok) v->i = x;
        break;
    }
    case CLI_NUMBER: {
        double x;
        ok = parse_number(text, &x) == 0 && x <= o->max &&
             ((o->flags & CLI_OPEN_MIN) ? x > o->min : x >= o->min);
        if (ok) v->num = x;
        break;
    }
    case CLI_BYTES: {
        uint64_t x;
        ok = parse_bytes(text, &x) == 0 && (double)x >= o->min && (double)x <= o->max;
        if (ok) v->bytes = x;
        break;
    }
    case CLI_CHOICE: {
        int k = choice_index(o->choices, text);
        ok = k >= 0;
        if (ok) v->i = k, v->text = text;
        break;
    }
    case CLI_TEXT:
        ok = *text != '\0';
        if (ok) v->text = text;
        if (ok && (o->flags & CLI_REPEAT)) { /* every value, in order */
            const char **l = realloc(v->list, (v->nlist + 1) * sizeof *l);
            if (!l) return fail(err, errsize, "out of memory");
            l[v->nlist++] = text;
            v->list = l;
        }
        break;
    }
    if (ok) return CLI_PARSE_OK;
    wants_text(wants, sizeof wants, o);
    return fail(err, errsize, "%s wants %s, got '%s'", shown, wants, text);
}

static void opt_name(char *buf, size_t size, const cli_opt_t *o);

/* ------------------------------------------------------------------ parse */

static int find_long(const cli_command_t *cmd, const char *name, size_t len)
{
    size_t i;
    for (i = 0; i < cmd->nopts; i++)
        if (strlen(cmd->opts[i].name) == len && !strncmp(cmd->opts[i].name, name, len)) return (int)i;
    return -1;
}

static int find_short(const cli_command_t *cmd, char c)
{
    size_t i;
    for (i = 0; i < cmd->nopts; i++)
        if (cmd->opts[i].letter && cmd->opts[i].letter == c) return (int)i;
    return -1;
}

/* A byte of argv for a message: printable as is, else \xNN. */
static const char *shown_char(char *buf, size_t size, char c)
{
    unsigned char u = (unsigned char)c;
    if (u >= 0x21 && u < 0x7F) snprintf(buf, size, "-%c", c);
    else snprintf(buf, size, "-\\x%02x", u);
    return buf;
}

int cli_parse(cli_args_t *a, const cli_command_t *cmd, int argc, char *const *argv, char *err,
              size_t errsize)
{
    size_t i;
    int k, only_operands = 0;
    if (errsize) err[0] = '\0';
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    if (!cmd || cmd->nopts > CLI_MAX_OPTS) return fail(err, errsize, "internal: bad option table");
    if (argc < 1) argc = 1;
    a->operands = malloc(sizeof *a->operands * (size_t)argc);
    if (!a->operands) return fail(err, errsize, "out of memory");

    /* Defaults first: parsed like given values. */
    for (i = 0; i < cmd->nopts; i++) {
        const cli_opt_t *o = &cmd->opts[i];
        if (o->def && o->type != CLI_FLAG) {
            if (parse_value(&a->v[i], o, o->name, o->def, err, errsize) != CLI_PARSE_OK)
                return fail(err, errsize, "internal: bad default '%s' for --%s", o->def, o->name);
            a->v[i].set = 1;
        }
    }

    for (k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!arg) return fail(err, errsize, "internal: NULL argument %d", k);
        if (only_operands || arg[0] != '-' || arg[1] == '\0') { /* operand (also "-") */
            a->operands[a->noperands++] = arg;
            continue;
        }
        if (arg[1] == '-') {
            const char *name = arg + 2, *eq;
            size_t len;
            int idx;
            char shown[300];
            if (!*name) { /* "--" */
                only_operands = 1;
                continue;
            }
            eq = strchr(name, '=');
            len = eq ? (size_t)(eq - name) : strlen(name);
            if (len == 4 && !strncmp(name, "help", 4)) {
                if (eq) return fail(err, errsize, "--help takes no value");
                a->help = 1;
                return CLI_PARSE_HELP;
            }
            idx = find_long(cmd, name, len);
            snprintf(shown, sizeof shown, "--%.*s", (int)(len < 200 ? len : 200), name);
            if (idx < 0) return fail(err, errsize, "unknown option '%s'", shown);
            if (cmd->opts[idx].type == CLI_FLAG) {
                if (eq) return fail(err, errsize, "%s takes no value", shown);
                a->v[idx].i = 1;
            } else {
                const char *val = eq ? eq + 1 : NULL;
                if (!val) {
                    if (k + 1 >= argc || !argv[k + 1]) return fail(err, errsize, "%s needs a value", shown);
                    val = argv[++k];
                }
                if (parse_value(&a->v[idx], &cmd->opts[idx], shown, val, err, errsize) != CLI_PARSE_OK)
                    return CLI_PARSE_ERROR;
            }
            a->v[idx].given = a->v[idx].set = 1;
            continue;
        }
        /* One or more short options: -q, -qh, -j4, -j 4. */
        for (const char *p = arg + 1; *p; p++) {
            char shown[16];
            int idx;
            if (*p == 'h') {
                a->help = 1;
                return CLI_PARSE_HELP;
            }
            idx = find_short(cmd, *p);
            shown_char(shown, sizeof shown, *p);
            if (idx < 0) return fail(err, errsize, "unknown option '%s'", shown);
            a->v[idx].given = a->v[idx].set = 1;
            if (cmd->opts[idx].type == CLI_FLAG) {
                a->v[idx].i = 1;
                continue;
            }
            if (p[1]) {
                if (parse_value(&a->v[idx], &cmd->opts[idx], shown, p + 1, err, errsize) != CLI_PARSE_OK)
                    return CLI_PARSE_ERROR;
            } else {
                if (k + 1 >= argc || !argv[k + 1]) return fail(err, errsize, "%s needs a value", shown);
                if (parse_value(&a->v[idx], &cmd->opts[idx], shown, argv[++k], err, errsize) != CLI_PARSE_OK)
                    return CLI_PARSE_ERROR;
            }
            break; /* the rest of the word was the value */
        }
    }

    for (i = 0; i < cmd->nopts; i++) {
        const cli_opt_t *o = &cmd->opts[i];
        int other;
        if (!a->v[i].given || !o->conflicts) continue;
        other = find_long(cmd, o->conflicts, strlen(o->conflicts));
        if (other >= 0 && a->v[other].given) {
            char n1[64], n2[64];
            opt_name(n1, sizeof n1, o);
            opt_name(n2, sizeof n2, &cmd->opts[other]);
            return fail(err, errsize, "%s and %s cannot be combined", n1, n2);
        }
    }
    if (a->noperands < (size_t)cmd->min_operands)
        return fail(err, errsize, "missing operand%s: usage: patina %s [options] %s",
                    cmd->min_operands - (int)a->noperands > 1 ? "s" : "", cmd->name, cmd->operands);
    if (cmd->max_operands >= 0 && a->noperands > (size_t)cmd->max_operands)
        return fail(err, errsize, "unexpected operand '%.200s': usage: patina %s [options] %s",
                    a->operands[cmd->max_operands], cmd->name, cmd->operands);
    return CLI_PARSE_OK;
}

void cli_args_release(cli_args_t *a)
{
    if (!a) return;
    for (size_t i = 0; i < CLI_MAX_OPTS; i++) {
        free(a->v[i].list);
        a->v[i].list = NULL;
        a->v[i].nlist = 0;
    }
    free(a->operands);
    a->operands = NULL;
    a->noperands = 0;
}

const cli_value_t *cli_get(const cli_args_t *a, const char *name)
{
    int idx = find_long(a->cmd, name, strlen(name));
    if (idx < 0) abort(); /* the command's code asks for an option its table lacks */
    return &a->v[idx];
}

/* ------------------------------------------------------------------- help */

#define HELP_COL 24   /* where option descriptions start */
#define HELP_WIDTH 79 /* and where lines end */

/* The option as the help and messages name it: "-k" for a one-letter
 * option whose long name is that letter, else "--name". */
static void opt_name(char *buf, size_t size, const cli_opt_t *o)
{
    if (o->letter && o->name[0] == o->letter && !o->name[1]) snprintf(buf, size, "-%c", o->letter);
    else snprintf(buf, size, "--%s", o->name);
}

/* Writes text from column `col` (the cursor is there), words wrapped at
 * HELP_WIDTH, '\n' a forced break; continuation lines start at col. */
static void wrap(FILE *f, const char *text, int col)
{
    int x = col;
    const char *p = text;
    while (*p) {
        size_t len;
        if (*p == '\n') {
            fprintf(f, "\n%*s", col, "");
            x = col;
            p++;
            continue;
        }
        if (*p == ' ') {
            p++;
            continue;
        }
        len = strcspn(p, " \n");
        if (x > col && x + 1 + (int)len > HELP_WIDTH) {
            fprintf(f, "\n%*s", col, "");
            x = col;
        } else if (x > col) {
            fputc(' ', f);
            x++;
        }
        fwrite(p, 1, len, f);
        x += (int)len;
        p += len;
    }
}

/* Bounds and default for the help: "1..1024, default 256". */
static void meta_text(char *buf, size_t size, const cli_command_t *cmd, const cli_opt_t *o)
{
    char lo[32], hi[32], other[64];
    size_t n = 0;
    buf[0] = '\0';
    switch (o->type) {
    case CLI_INT: n = (size_t)snprintf(buf, size, "%.0f..%.0f", o->min, o->max); break;
    case CLI_NUMBER:
        if (isinf(o->max)) n = (size_t)snprintf(buf, size, "%s %.15g", (o->flags & CLI_OPEN_MIN) ? ">" : ">=", o->min);
        else n = (size_t)snprintf(buf, size, "%s %.15g and <= %.15g", (o->flags & CLI_OPEN_MIN) ? ">" : ">=", o->min, o->max);
        break;
    case CLI_BYTES:
        bytes_text(lo, sizeof lo, o->min);
        bytes_text(hi, sizeof hi, o->max);
        n = (size_t)snprintf(buf, size, "%s..%s bytes; suffixes K, M, G, T are powers of 1024", lo, hi);
        break;
    default: break;
    }
    if (n < size && (o->flags & CLI_AUTO)) n += (size_t)snprintf(buf + n, size - n, ", or auto");
    if (n < size && o->def) n += (size_t)snprintf(buf + n, size - n, "%sdefault %s", n ? "; " : "", o->def);
    if (n < size && o->conflicts) {
        int k = find_long(cmd, o->conflicts, strlen(o->conflicts));
        if (k >= 0) opt_name(other, sizeof other, &cmd->opts[k]);
        else snprintf(other, sizeof other, "--%s", o->conflicts);
        snprintf(buf + n, size - n, "%snot with %s", n ? "; " : "", other);
    }
}

void cli_help(FILE *f, const cli_command_t *cmd)
{
    static const cli_opt_t help_opt = {.name = "help", .letter = 'h', .type = CLI_FLAG, .help = "this help"};
    size_t i;
    fprintf(f, "usage: patina %s [options] %s\n", cmd->name, cmd->operands);
    if (cmd->about) fprintf(f, "\n%s", cmd->about);
    fprintf(f, "\noptions:\n");
    for (i = 0; i <= cmd->nopts; i++) {
        const cli_opt_t *o = i < cmd->nopts ? &cmd->opts[i] : &help_opt;
        char left[160], name[64], meta[400], text[1400];
        const char *arg = o->arg ? o->arg : o->type == CLI_CHOICE ? o->choices : NULL;
        int n;
        opt_name(name, sizeof name, o);
        if (o->letter && name[1] != '-')
            n = snprintf(left, sizeof left, "  %s%s%s", name, arg ? " " : "", arg ? arg : "");
        else if (o->letter)
            n = snprintf(left, sizeof left, "  -%c, %s%s%s", o->letter, name, arg ? " " : "", arg ? arg : "");
        else
            n = snprintf(left, sizeof left, "      %s%s%s", name, arg ? " " : "", arg ? arg : "");
        if (n >= HELP_COL - 1) fprintf(f, "%s\n%*s", left, HELP_COL, "");
        else fprintf(f, "%-*s", HELP_COL, left);
        meta_text(meta, sizeof meta, cmd, o);
        snprintf(text, sizeof text, "%s%s%s%s", o->help, meta[0] ? " (" : "", meta, meta[0] ? ")" : "");
        wrap(f, text, HELP_COL);
        fputc('\n', f);
    }
    if (cmd->notes) fprintf(f, "\n%s", cmd->notes);
    fprintf(f, "\nexit status: 0 success (decoder warnings alone do not change it); 1 some\n"
               "inputs failed or were skipped (each reported on stderr, the others done);\n"
               "2 usage error (nothing done); 3 the command could not run (collection,\n"
               "device or I/O error).\n");
}
