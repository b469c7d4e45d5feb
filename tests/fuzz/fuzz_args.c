/* Fuzz target: the `patina` command line (src/cli/args.c, cli_parse_argv).
 *
 * An input is a command line: its words separated by NUL bytes, the first
 * word the subcommand (any bytes; the seeds use the real names). The target
 * parses it with cli_parse_argv exactly as main() does, without running the
 * command, and checks what a caller relies on:
 *   - the result is OK, HELP or ERROR; ERROR leaves a non-empty message, and
 *     an unknown subcommand is an error with no command;
 *   - on OK the operand count is within the command's bounds, every operand
 *     is one of the input's words, and every option value is within its
 *     table entry's bounds (integers, byte counts, numbers, choice indexes)
 *     and borrowed from the input or the table;
 *   - a value given on the command line is marked set; parsing the same words
 *     again gives the same result (the parser keeps no state).
 * It also feeds each word to cli_parse_u64 and checks that an accepted word
 * is plain decimal whose value prints back to the word without its leading
 * zeros. The help of every command is written once per process (to a memory
 * stream), so the table's help text is covered too. */
#define _GNU_SOURCE /* open_memstream */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "fuzz.h"

#define MAX_WORDS 64
#define MAX_INPUT 4096

static int from_input(const char *p, const char *buf, size_t n) { return p >= buf && p < buf + n; }

static int choice_count(const char *choices)
{
    int n = 1;
    for (; *choices; choices++) n += *choices == '|';
    return n;
}

static int in_table(const char *p, const cli_opt_t *o)
{
    const char *c;
    if (o->def && p >= o->def && p <= o->def + strlen(o->def)) return 1;
    if (!o->choices) return 0;
    c = o->choices;
    return p >= c && p <= c + strlen(c);
}

static void check_value(const cli_opt_t *o, const cli_value_t *v, const char *buf, size_t n)
{
    if (v->given) FUZZ_CHECK(v->set, "--%s given but not set", o->name);
    if (!v->set) return;
    switch (o->type) {
    case CLI_FLAG:
        FUZZ_CHECK(v->i == 0 || v->i == 1, "--%s flag value %lld", o->name, v->i);
        break;
    case CLI_INT:
        if (!v->is_auto)
            FUZZ_CHECK((double)v->i >= o->min && (double)v->i <= o->max, "--%s %lld outside [%g, %g]",
                       o->name, v->i, o->min, o->max);
        break;
    case CLI_BYTES:
        if (!v->is_auto)
            FUZZ_CHECK((double)v->bytes >= o->min && (double)v->bytes <= o->max,
                       "--%s %llu bytes outside [%g, %g]", o->name, (unsigned long long)v->bytes, o->min,
                       o->max);
        break;
    case CLI_NUMBER:
        if (!v->is_auto) {
            FUZZ_CHECK(isfinite(v->num), "--%s is not finite", o->name);
            FUZZ_CHECK(v->num <= o->max && (o->flags & CLI_OPEN_MIN ? v->num > o->min : v->num >= o->min),
                       "--%s %g outside its bounds [%g, %g]", o->name, v->num, o->min, o->max);
        }
        break;
    case CLI_CHOICE:
        FUZZ_CHECK(v->i >= 0 && v->i < choice_count(o->choices), "--%s choice index %lld of '%s'", o->name,
                   v->i, o->choices);
        FUZZ_CHECK(v->text && (from_input(v->text, buf, n) || in_table(v->text, o)),
                   "--%s: the chosen word is neither the input's nor the table's", o->name);
        break;
    case CLI_TEXT:
        FUZZ_CHECK(v->text && *v->text, "--%s: empty text", o->name);
        FUZZ_CHECK(from_input(v->text, buf, n) || in_table(v->text, o),
                   "--%s: the text is neither the input's nor the table's", o->name);
        break;
    }
}

static void check_u64(const char *w)
{
    uint64_t v = 7;
    char back[32];
    const char *digits = w;
    if (cli_parse_u64(w, 0, UINT64_MAX, &v) != 0) {
        FUZZ_CHECK(v == 7, "a refused number changed the output");
        return;
    }
    for (const char *p = w; *p; p++) FUZZ_CHECK(*p >= '0' && *p <= '9', "accepted non-digit in '%.40s'", w);
    while (digits[0] == '0' && digits[1]) digits++;
    snprintf(back, sizeof back, "%llu", (unsigned long long)v);
    FUZZ_CHECK(strcmp(back, digits) == 0, "'%.40s' read as %s", w, back);
}

static void write_help_once(void)
{
    static int done;
    char *text = NULL;
    size_t len = 0;
    FILE *f;
    if (done) return;
    done = 1;
    f = open_memstream(&text, &len);
    FUZZ_CHECK(f != NULL, "open_memstream");
    for (size_t i = 0; i < cli_ncommands; i++) cli_help(f, cli_commands[i]);
    fclose(f);
    FUZZ_CHECK(len > 0, "no help written");
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[MAX_INPUT + 1];
    char *argv[MAX_WORDS + 2];
    char err[256], err2[256];
    const cli_command_t *cmd = NULL, *cmd2 = NULL;
    cli_args_t a, a2;
    size_t n = size < MAX_INPUT ? size : MAX_INPUT;
    int argc = 1, r, r2;

    write_help_once();
    memcpy(buf, data, n);
    buf[n] = '\0';
    argv[0] = "patina";
    for (size_t i = 0; i <= n && argc <= MAX_WORDS; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++) check_u64(argv[i]);

    memset(err, 'x', sizeof err);
    r = cli_parse_argv(&cmd, &a, argc, argv, err, sizeof err);
    FUZZ_CHECK(r == CLI_PARSE_OK || r == CLI_PARSE_HELP || r == CLI_PARSE_ERROR, "result %d", r);
    FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL, "message not terminated");
    if (r == CLI_PARSE_ERROR) FUZZ_CHECK(err[0] != '\0', "an error without a message");
    if (!cmd) FUZZ_CHECK(r == CLI_PARSE_ERROR, "no command, result %d", r);
    if (cmd) {
        FUZZ_CHECK(cli_command_find(argv[1]) == cmd, "'%.40s' parsed as '%s'", argv[1], cmd->name);
        FUZZ_CHECK(a.cmd == cmd, "the arguments name another command");
    }
    if (r == CLI_PARSE_OK) {
        FUZZ_CHECK(a.noperands >= (size_t)cmd->min_operands, "%zu operands, '%s' needs %d", a.noperands,
                   cmd->name, cmd->min_operands);
        FUZZ_CHECK(cmd->max_operands < 0 || a.noperands <= (size_t)cmd->max_operands,
                   "%zu operands, '%s' takes %d", a.noperands, cmd->name, cmd->max_operands);
        for (size_t i = 0; i < a.noperands; i++)
            FUZZ_CHECK(from_input(a.operands[i], buf, n + 1), "operand %zu is not the input's", i);
        for (size_t i = 0; i < cmd->nopts; i++) check_value(&cmd->opts[i], &a.v[i], buf, n + 1);
    }

    /* No state: the same words parse the same way. */
    r2 = cli_parse_argv(&cmd2, &a2, argc, argv, err2, sizeof err2);
    FUZZ_CHECK(r2 == r && cmd2 == cmd, "second parse: result %d vs %d", r2, r);
    if (r == CLI_PARSE_ERROR) FUZZ_CHECK(strcmp(err, err2) == 0, "second parse: '%s' vs '%s'", err2, err);
    if (r == CLI_PARSE_OK) {
        FUZZ_CHECK(a2.noperands == a.noperands, "second parse: operand count");
        for (size_t i = 0; i < cmd->nopts; i++)
            FUZZ_CHECK(a2.v[i].given == a.v[i].given && a2.v[i].i == a.v[i].i &&
                           a2.v[i].bytes == a.v[i].bytes && a2.v[i].text == a.v[i].text,
                       "second parse: --%s differs", cmd->opts[i].name);
    }
    cli_args_release(&a2);
    cli_args_release(&a);
    return 0;
}

static void seed_words(fuzz_seeds_t *w, const char *name, const char *const *words)
{
    char out[1024];
    size_t len = 0;
    for (; *words; words++) {
        size_t k = strlen(*words) + 1;
        if (len + k > sizeof out) break;
        memcpy(out + len, *words, k);
        len += k;
    }
    fuzz_seed(w, name, out, len ? len - 1 : 0); /* no NUL after the last word */
}

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    static const char *const lines[][12] = {
        {"index", "coll", "photos", NULL},
        {"index", "-f", "lbp:P=8,R=1", "--gpu", "-j", "4", "--batch-memory", "512M", "coll", "a", "b", NULL},
        {"index", "--max-pixels=1000000", "--strict", "coll", "--", "-dash", NULL},
        {"extract", "-j8", "-f", "glcm", "--format", "json", "img.png", NULL},
        {"search", "-k", "10", "coll", "q.jpg", NULL},
        {"search", "--range", "0.5", "--format=csv", "coll", "q.jpg", NULL},
        {"rm", "--id", "18446744073709551615", "coll", NULL},
        {"rm", "--id", "-1", "coll", NULL},
        {"ls", "-qh", NULL},
        {"info", "--help", NULL},
        {"nosuch", "x", NULL},
        {"search", "-k", "0", "coll", "q", NULL},
    };
    char name[32];
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        snprintf(name, sizeof name, "line-%02zu", i);
        seed_words(w, name, lines[i]);
    }
    /* Every command's every option, in both spellings, from the tables. */
    for (size_t c = 0; c < cli_ncommands; c++) {
        const cli_command_t *cmd = cli_commands[c];
        fuzz_dict_str(w, cmd->name);
        for (size_t i = 0; i < cmd->nopts; i++) {
            const cli_opt_t *o = &cmd->opts[i];
            char opt[64];
            const char *words[6] = {cmd->name, opt, o->def ? o->def : "1", "coll", "x", NULL};
            snprintf(opt, sizeof opt, "--%s", o->name);
            fuzz_dict_str(w, opt);
            snprintf(name, sizeof name, "opt-%zu-%zu", c, i);
            if (o->type == CLI_FLAG) words[2] = "coll", words[3] = "x", words[4] = NULL;
            seed_words(w, name, words);
        }
    }
    fuzz_dict_str(w, "auto");
    fuzz_dict_str(w, "--");
    fuzz_dict_str(w, "KiB");
    fuzz_dict_str(w, "G");
    fuzz_dict_str(w, "18446744073709551616");
}
