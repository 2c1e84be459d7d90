/* bench.c — mha bench (issue 3 brings the full benchmark). */
#include "mha.h"

#include <stdio.h>

int mha_cli_bench(int argc, char **argv);
int mha_cli_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mha: error: bench is not implemented yet\n");
    return 1;
}
