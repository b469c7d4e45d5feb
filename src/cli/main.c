/* `patina`: the command-line front end over the library. main() only
 * dispatches: the subcommand's table parses argv (cli_parse_argv), usage
 * errors exit 2 before anything is done, --help is generated from the table. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
    size_t i;
    fprintf(f, "usage: patina <command> [options] [operands]\n\ncommands:\n");
    for (i = 0; i < cli_ncommands; i++)
        fprintf(f, "  %-8s %s\n", cli_commands[i]->name, cli_commands[i]->summary);
    fprintf(f,
            "\n'patina <command> --help' (or 'patina help <command>') describes each command;\n"
            "docs/cli.md is the reference of them all.\n\n"
            "exit status:\n"
            "  0  success (decoder warnings alone, reported on stderr, do not change it)\n"
            "  1  the command ran but some inputs failed or some paths were skipped\n"
            "     (each is reported on stderr; the others were done)\n"
            "  2  usage error: unknown command or option, missing operand, bad option\n"
            "     value or operand, a descriptor table the collection does not have;\n"
            "     nothing was done\n"
            "  3  the command could not run: collection, device or I/O error\n");
}

int main(int argc, char **argv)
{
    const cli_command_t *cmd;
    cli_args_t args;
    char err[512];
    int r, rc;
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (argc > 2 && !strcmp(argv[1], "help")) {
            cmd = cli_command_find(argv[2]);
            if (!cmd) {
                cli_command_unknown(err, sizeof err, argv[2]);
                fprintf(stderr, "patina: %s\n\n", err);
                usage(stderr);
                return EXIT_USAGE;
            }
            cli_help(stdout, cmd);
            return EXIT_OK;
        }
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("patina %s (%s)\n", patina_version(), patina_build_info());
        return EXIT_OK;
    }
    r = cli_parse_argv(&cmd, &args, argc, argv, err, sizeof err);
    if (!cmd) {
        fprintf(stderr, "patina: %s\n\n", err);
        usage(stderr);
        cli_args_release(&args);
        return EXIT_USAGE;
    }
    if (r == CLI_PARSE_HELP) {
        cli_help(stdout, cmd);
        rc = EXIT_OK;
    } else if (r == CLI_PARSE_ERROR) {
        cli_error(cmd->name, "%s", err);
        fprintf(stderr, "(see 'patina %s --help')\n", cmd->name);
        rc = EXIT_USAGE;
    } else {
        rc = cmd->run(&args);
    }
    cli_args_release(&args);
    return rc;
}
