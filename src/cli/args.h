/* Command-line parsing for `patina`: each subcommand declares its options
 * once, in a table of cli_opt_t (name, short letter, value type, bounds,
 * default, help); cli_parse checks an argv against that table and fills a
 * cli_args_t, and cli_help writes --help from the same table.
 *
 * cli_parse is pure: no I/O, no exit, no global state (not even getopt's);
 * its only allocation is the operand array, freed by cli_args_release. It
 * takes any argv (a fuzzer's included) and either succeeds, asks for help,
 * or fails with one message in the caller's buffer. Syntax:
 *   --name VALUE, --name=VALUE, -x VALUE, -xVALUE, clustered flags (-qh),
 *   options and operands in any order, "--" ends the options, "-" is an
 *   operand. Long names must be given in full (no abbreviations; an unknown
 *   one's message suggests the names it may have meant, cli_suggest). An
 *   option given twice keeps the last value, except a CLI_REPEAT option,
 *   which keeps each in order. -h/--help is accepted by every command.
 * Numbers are strict: decimal only, no spaces, no overflow, no clamping. */
#ifndef PATINA_CLI_ARGS_H
#define PATINA_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_type {
    CLI_FLAG,   /* no value */
    CLI_INT,    /* decimal integer in [min, max] */
    CLI_NUMBER, /* finite decimal number in [min, max] (CLI_OPEN_MIN: min excluded) */
    CLI_BYTES,  /* byte count: an integer with an optional K, M, G or T suffix (powers of
                   1024; "KiB", "MB" and lower case are read the same), in [min, max] */
    CLI_CHOICE, /* one of the words of `choices` ("a|b|c") */
    CLI_TEXT    /* any non-empty text */
} cli_type;

enum {
    CLI_OPEN_MIN = 1, /* NUMBER: the value must be > min */
    CLI_AUTO = 2,     /* INT, NUMBER, BYTES: the word "auto" is also accepted */
    CLI_REPEAT = 4    /* TEXT: may be given several times; every value is kept (cli_value_t.all) */
};

typedef struct cli_opt {
    const char *name;     /* long name, without "--" */
    char letter;          /* short name, 0 for none */
    cli_type type;
    const char *arg;      /* the value's name in the help ("N", "SPEC"); NULL for flags */
    double min, max;      /* bounds of INT, NUMBER, BYTES (inclusive; exact up to 2^53) */
    const char *choices;  /* CHOICE: "a|b|c" */
    const char *def;      /* default as the user would write it (parsed like a given value and
                             shown in the help); NULL: none, or described in `help` */
    int flags;            /* CLI_OPEN_MIN, CLI_AUTO, CLI_REPEAT */
    const char *conflicts;/* long name of an option this one cannot be combined with, or NULL */
    const char *help;     /* words, wrapped by cli_help at 79 columns; "\n" forces a break */
} cli_opt_t;

/* The value of one option after parsing (its default when not given). */
typedef struct cli_value {
    int given;            /* on the command line */
    int set;              /* given, or has a default */
    int is_auto;          /* CLI_AUTO and the word "auto" */
    long long i;          /* FLAG: 1 when given; INT; CHOICE: index of the word */
    uint64_t bytes;       /* BYTES */
    double num;           /* NUMBER */
    const char *text;     /* TEXT and CHOICE: the word (borrowed from argv or the table); CLI_REPEAT:
                             the last one given */
    size_t count;         /* CLI_REPEAT: how many times given (0: not given, `all` is NULL) */
    const char **all;     /* CLI_REPEAT: (count) the values in command-line order, borrowed from
                             argv; the array is freed by cli_args_release */
} cli_value_t;

typedef struct cli_args cli_args_t;

#define CLI_MAX_OPTS 48

typedef struct cli_command {
    const char *name;      /* "index" */
    const char *summary;   /* one line for `patina --help` */
    const char *operands;  /* "COLLECTION PATH..." */
    int min_operands;
    int max_operands;      /* -1: any number */
    const char *about;     /* paragraph(s) after the usage line */
    const cli_opt_t *opts; /* (nopts) entries; nopts <= CLI_MAX_OPTS */
    size_t nopts;
    const char *notes;     /* after the option list (formats, exit status details); may be NULL */
    int (*run)(const cli_args_t *a);
} cli_command_t;

struct cli_args {
    const cli_command_t *cmd;
    cli_value_t v[CLI_MAX_OPTS]; /* one per cmd->opts entry */
    int help;                    /* -h or --help was given */
    size_t noperands;
    const char **operands;       /* (noperands) borrowed from argv; malloc'd array */
};

enum { CLI_PARSE_OK = 0, CLI_PARSE_HELP = 1, CLI_PARSE_ERROR = -1 };

/* Parses argv[1 .. argc) (argv[0] is the command's name and is not read)
 * against cmd's table. Returns CLI_PARSE_OK, CLI_PARSE_HELP (-h/--help seen
 * before any error; operand counts are not checked then) or CLI_PARSE_ERROR
 * with a message in err (always NUL-terminated when errsize > 0). `a` must
 * be released with cli_args_release whatever the result. */
int cli_parse(cli_args_t *a, const cli_command_t *cmd, int argc, char *const *argv, char *err,
              size_t errsize);
void cli_args_release(cli_args_t *a);

/* The value of option `name` (a programming error aborts when the table has
 * no such option). */
const cli_value_t *cli_get(const cli_args_t *a, const char *name);

/* Strict unsigned decimal: digits only (no sign, no spaces), in [min, max].
 * Returns 0 or -1 (then *out is unchanged). */
int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Optimal string alignment distance between a[0..alen) and b (insertions,
 * deletions, substitutions and transpositions of adjacent characters, each
 * 1; ASCII letters compared without case). Words longer than 64 bytes: a
 * distance of at least the length difference, capped at 65. */
int cli_edit_distance(const char *a, size_t alen, const char *b);

/* What a misspelt word (word[0..len)) may have meant among names[0..n): the
 * names it is a prefix of, when there are 1 to 3 of them; else the names at
 * the smallest optimal string alignment distance when that distance is at
 * most 2 and at most half the name's length (so "-k" is never suggested for
 * a random letter), 3 of them at most. Writes "; did you mean --a?" or
 * "; did you mean --a or --b?" (each name after `dashes`) into buf, or ""
 * when nothing is close. Returns the number of names suggested. */
size_t cli_suggest(char *buf, size_t size, const char *word, size_t len, const char *const *names, size_t n,
                   const char *dashes);

/* Writes the command's --help: usage line, about, every option with its
 * value, bounds or choices and default, notes, exit status. */
void cli_help(FILE *f, const cli_command_t *cmd);

#endif
