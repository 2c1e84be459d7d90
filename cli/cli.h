/* cli.h — helpers shared by the mha commands. The CLI is the only code that
 * prints or exits: an error is one line on stderr and exit status 1. */
#ifndef MHA_CLI_H
#define MHA_CLI_H

#include "mha.h"

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* "mha: error: <message>" on stderr, exit(1). */
_Noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Dies with the library's detail when st is not MHA_OK. */
void cli_check(mha_status st, const char *what);
void *cli_malloc(size_t n);
/* Strict parsers: the whole string, in range, or die naming the option. */
int64_t cli_parse_int(const char *opt, const char *s, int64_t lo, int64_t hi);
/* torch.manual_seed's range: [-2^63, 2^64), negatives taken mod 2^64. */
uint64_t cli_parse_seed(const char *opt, const char *s);
/* A dropout probability in [0, 1). */
double cli_parse_prob(const char *opt, const char *s);

int mha_cli_bench(int argc, char **argv);
int mha_cli_train(int argc, char **argv);
int mha_cli_tokenize(int argc, char **argv);

/* GPT-2's tokenizer from vocab_dir (--vocab) when not NULL, else from
 * $MHA_TOKENIZER_DIR when set, else the first of the source tree's data/gpt2
 * and the install prefix's share/mha/gpt2 that holds encoder.json; dies
 * naming what it tried, or why the files did not load. */
mha_tokenizer *cli_load_tokenizer(const char *vocab_dir);
/* The same search, NULL (no error) when the files are not found. */
mha_tokenizer *cli_try_tokenizer(const char *vocab_dir);
/* The bytes as a JSON string (ill-formed UTF-8 as U+FFFD, as TextDecoder
 * reads it), then a newline. */
void cli_put_json_text(FILE *f, const unsigned char *s, size_t len);

/* Chapter 4 (cli/gpt.c) */
#include <stdbool.h>
bool cli_is_gpt_name(const char *s);
bool cli_st_is_gpt(const mha_st *st);
int32_t *cli_parse_ids(const char *opt, const char *s, int64_t *n);
int mha_cli_init_gpt(int argc, char **argv);
int mha_cli_run_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                    uint64_t seed);
int mha_cli_grad_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                     uint64_t seed);
int mha_cli_generate(int argc, char **argv);
int mha_cli_bench_gpt(int argc, char **argv);

#endif
