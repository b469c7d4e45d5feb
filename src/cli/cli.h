/* Shared pieces of the `patina` command-line program: exit codes, the
 * subcommand list, options common to several subcommands, message printing
 * and output formats (CSV fields, JSON strings). */
#ifndef PATINA_CLI_H
#define PATINA_CLI_H

#include <stdio.h>
#include "cli/args.h"
#include "patina/patina.h"

/* Exit codes (documented in every --help, `patina --help` and README). */
enum {
    EXIT_OK = 0,       /* everything succeeded (decoder warnings alone do not change this) */
    EXIT_PARTIAL = 1,  /* the command ran, but some inputs failed or paths were skipped */
    EXIT_USAGE = 2,    /* bad command line or option value; nothing was done */
    EXIT_ERROR = 3     /* the command could not run (collection, device, I/O) */
};

/* The subcommands, each defined with its option table in its cmd_*.c. */
extern const cli_command_t cli_cmd_extract, cli_cmd_index, cli_cmd_search, cli_cmd_identify, cli_cmd_ls, cli_cmd_rm,
    cli_cmd_info, cli_cmd_serve, cli_cmd_cluster, cli_cmd_shard, cli_cmd_worker;
extern const cli_command_t *const cli_commands[];
extern const size_t cli_ncommands;

/* The subcommand called `name`, or NULL. */
const cli_command_t *cli_command_find(const char *name);

/* "unknown command 'NAME'" and the commands it may have meant (cli_suggest). */
void cli_command_unknown(char *buf, size_t size, const char *name);

/* A whole command line, argv[0] the program: finds the subcommand named by
 * argv[1] and parses the rest against its table (cli_parse). Pure, like
 * cli_parse; *cmd is NULL when argv[1] names no subcommand (an error). `a`
 * must be released whatever the result. */
int cli_parse_argv(const cli_command_t **cmd, cli_args_t *a, int argc, char *const *argv, char *err,
                   size_t errsize);

/* Options several subcommands share, declared once here. */
#define CLI_OPT_FAMILY                                                                            \
    {.name = "family", .letter = 'f', .type = CLI_TEXT, .arg = "SPEC", .def = "cedd",             \
     .help = "descriptor family and its options, e.g. cedd:compact=1, lbp:P=8,R=1 "              \
             "('patina info' lists the families and their defaults)"}
#define CLI_OPT_DEVICE(what)                                                                      \
    {.name = "device", .type = CLI_CHOICE, .arg = "D", .choices = "auto|cpu|gpu|hybrid",          \
     .def = "auto", .help = what}
#define CLI_OPT_JOBS                                                                              \
    {.name = "jobs", .letter = 'j', .type = CLI_INT, .arg = "N", .min = 1, .max = 1024,           \
     .help = "CPU threads for decoding and extraction; all CPUs when not given"}
#define CLI_OPT_GPUS                                                                              \
    {.name = "gpus", .type = CLI_TEXT, .arg = "all|LIST",                                         \
     .help = "the GPUs to use: all, or device numbers such as 0,1 (a table's rows are split "      \
             "across them and every search or identification runs on all at once; 0,0 puts two "  \
             "slices on device 0); default: device 0"}
#define CLI_OPT_MAX_PIXELS                                                                        \
    {.name = "max-pixels", .type = CLI_INT, .arg = "N", .min = 1, .max = 1e18,                         \
     .def = "100000000",                                                                          \
     .help = "refuse images that declare more pixels (width x height), checked "                 \
             "from the header before anything is decoded"}
#define CLI_OPT_STRICT                                                                            \
    {.name = "strict", .type = CLI_FLAG,                                                          \
     .help = "treat decoder warnings (damaged but decodable data, e.g. libjpeg's "               \
             "'Corrupt JPEG data: N extraneous bytes') as errors: the file fails"}
/* The folder walk's filters (patina_walk_opts_t; index and identify):
 * the two options, and cli_walk_filters fills the walk's options from them. */
#define CLI_OPT_WALK_FILTERS                                                                      \
    {.name = "include", .type = CLI_TEXT, .arg = "GLOB", .flags = CLI_REPEAT,                    \
     .help = "folder walks take only files matching GLOB (fnmatch, case-insensitive)"},             \
    {.name = "exclude", .type = CLI_TEXT, .arg = "GLOB", .flags = CLI_REPEAT,                    \
     .help = "folder walks leave out files and folders matching GLOB (wins over --include)"}
/* --cluster of index, search, identify and serve: the collection is a cluster's (src/cluster). */
#define CLI_OPT_CLUSTER_URL                                                                       \
    {.name = "cluster", .type = CLI_TEXT, .arg = "URL[,URL...]",                                  \
     .help = "COLLECTION is a cluster collection on these NATS servers (nats://HOST:PORT, "       \
             "comma-separated): patina cluster create makes one"}
#define CLI_OPT_EXIF_ORIENTATION                                                                  \
    {.name = "exif-orientation", .type = CLI_FLAG,                                                \
     .help = "turn each JPEG upright as its EXIF Orientation tag says before describing it "     \
             "(default: pixels as stored, as LIRE sees them, so descriptors match its)"}
#define CLI_OPT_BATCH_MEMORY(what)                                                                \
    {.name = "batch-memory", .type = CLI_BYTES, .arg = "BYTES", .min = 1,                         \
     .max = PATINA_BATCH_MEMORY_MAX, .def = "1G", .help = what} /* 1G: PATINA_DEFAULT_BATCH_MEMORY (test_cli) */

/* "s" unless n is 1: "%zu path%s", n, cli_plural(n). */
static inline const char *cli_plural(unsigned long long n) { return n == 1 ? "" : "s"; }

/* "patina <cmd>: <message>" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the library's last error for a failed status. */
void cli_status_error(const char *cmd, patina_status s);

/* A context from --jobs, --max-pixels and --gpus (0 / defaults when the
 * command has no such option). Prints the error and returns non-zero on
 * failure: EXIT_USAGE for a bad value, else EXIT_ERROR. */
int cli_context(patina_context_t **ctx, const cli_args_t *a);

/* The reason image `img` failed in patina_extract_batch with status st (the
 * batch ran on worker threads, whose messages the caller cannot read: the
 * image is extracted again alone on the CPU, which runs on this thread). */
void cli_extract_error(char *buf, size_t size, patina_context_t *ctx, const patina_extractor_t *ex,
                       const patina_image_t *img, const char *name, patina_status st);

/* Writes s as one CSV field (RFC 4180): quoted only when it contains a comma,
 * a double quote, CR or LF, inner quotes doubled. Bytes are written as they
 * are (no re-encoding). */
void cli_csv_field(FILE *f, const char *s);

/* Writes s as a JSON string literal (with quotes). Escapes '"', '\\' and
 * every control character (U+0000..U+001F, U+007F; \n, \t, ... or \u00XX),
 * and U+2028/U+2029. Valid UTF-8 is written as is; each byte that is not
 * part of valid UTF-8 (stray continuation bytes, overlong forms, encoded
 * surrogates, code points over U+10FFFF, cut sequences) becomes the lone
 * surrogate \uDC80..\uDCFF of that byte: Python's "surrogateescape"
 * convention, so no path is lost (os.fsencode(value) gives the bytes back). */
void cli_json_string(FILE *f, const char *s);

/* What part of a cluster collection an answer covers (partial when some
 * partition had no live copy); cli_json_coverage writes
 * ,"partial":BOOL,"coverage":{"partitions":P,"partitions_total":T,"references":R}
 * after a JSON answer's query (search and identify alike). */
typedef struct cli_cov {
    unsigned partitions, partitions_total;
    unsigned long long references;
    int partial;
} cli_cov_t;
void cli_json_coverage(FILE *f, const cli_cov_t *cov);

/* A hit on a video frame (a key "FILE#t=SECONDS&f=FRAME", patina_video_key):
 * cli_video_json writes ,"video":{"file":FILE,"t":SECONDS,"frame":FRAME}
 * after a JSON hit's key, cli_video_note "  (H:MM:SS.mmm)" after a table
 * row's key; both write nothing for an image's key. */
void cli_video_json(FILE *f, const char *key);
void cli_video_note(FILE *f, const char *key);

/* The element type as C and numpy name it: "u8", "u16", "u32", "f32", "f64". */
const char *cli_elem_name(patina_elem e);
/* The walk's include/exclude globs from CLI_OPT_WALK_FILTERS (borrowed from a). */
void cli_walk_filters(const cli_args_t *a, patina_walk_opts_t *w);

/* Writes one descriptor element as text (integers plain, floats %.9g / %.17g). */
void cli_print_elem(FILE *f, patina_elem e, const void *desc, size_t i);

#endif
