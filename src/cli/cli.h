/* Shared pieces of the `patina` command-line program: exit codes, option
 * helpers, message printing and output formats. */
#ifndef PATINA_CLI_H
#define PATINA_CLI_H

#include <stdio.h>
#include "patina/patina.h"

/* Exit codes (documented in `patina --help` and README). */
enum {
    EXIT_OK = 0,       /* everything succeeded */
    EXIT_PARTIAL = 1,  /* the command ran, but some inputs failed */
    EXIT_USAGE = 2,    /* bad command line or option value */
    EXIT_ERROR = 3     /* the command could not run (store, device, I/O) */
};

typedef int (*cli_cmd_fn)(int argc, char **argv);

int cmd_extract(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_rm(int argc, char **argv);

/* "patina <cmd>: <message>" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the library's last error for a failed status. */
void cli_status_error(const char *cmd, patina_status s);

/* Parses a positive integer / double option value; prints a usage error. */
int cli_parse_long(const char *cmd, const char *opt, const char *v, long min, long max, long *out);
int cli_parse_double(const char *cmd, const char *opt, const char *v, double *out);

/* Writes s as a JSON string literal (with quotes). */
void cli_json_string(FILE *f, const char *s);

/* Writes one descriptor element as text (integers plain, floats %.17g). */
void cli_print_elem(FILE *f, patina_elem e, const void *desc, size_t i);

#endif
