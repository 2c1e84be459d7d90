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
/* Creates directory dir if it is not there (dies naming it when it cannot);
 * one it created is removed again by cli_die while still empty. */
void cli_make_dir(const char *dir);
/* Holds an exclusive lock on directory dir (flock on the directory itself)
 * until the process ends, however it ends; dies naming the directory when
 * another process holds it: two trainers writing one run's files would
 * leave neither run's. */
void cli_lock_dir(const char *dir);
#include <stdbool.h>

/* Strict parsers: the whole string, in range, or die naming the option
 * (with the message of the parse.c core below). */
int64_t cli_parse_int(const char *opt, const char *s, int64_t lo, int64_t hi);
/* torch.manual_seed's range: [-2^63, 2^64), negatives taken mod 2^64. */
uint64_t cli_parse_seed(const char *opt, const char *s);
/* --dtype's f32, bf16 or f16 (the weights of GPT inference), and back. */
mha_dtype cli_parse_dtype(const char *opt, const char *s);
const char *cli_dtype_name(mha_dtype d);
/* A dropout probability in [0, 1). */
double cli_parse_prob(const char *opt, const char *s);

/* "15496,11,314" -> n ids (malloc'd); digits only, no empty items. */
int32_t *cli_parse_ids(const char *opt, const char *s, int64_t *n);

/* The options every module command shares (--d-in, --d-out,
 * --context-length, --num-heads, --dropout, --seed, --qkv-bias). */
typedef struct {
    mha_config cfg;
    bool have_d_in, have_d_out, have_ctx, have_heads, have_seed;
    uint64_t seed;
} cli_module_opts;
/* Consumes one module option (and its value) at argv[*i]; false if argv[*i]
 * is not one. */
bool cli_parse_module_opt(cli_module_opts *o, int argc, char **argv, int *i);

/* parse.c: the cores of the parsers above, which never exit: false (for
 * cli_module_opt -1; 0 when argv[*i] is not a module option) with a
 * one-line message of at most CLI_ERR_CAP bytes in err. */
#define CLI_ERR_CAP 256
bool cli_int_parse(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err);
bool cli_seed_parse(const char *opt, const char *s, uint64_t *out, char *err);
bool cli_prob_parse(const char *opt, const char *s, double *out, char *err);
bool cli_ids_parse(const char *opt, const char *s, int32_t **ids, int64_t *n, char *err);
int cli_module_opt(cli_module_opts *o, int argc, char **argv, int *i, char *err);

int mha_cli_bench(int argc, char **argv);
/* Peak resident memory of this program in MiB (VmHWM), what `mha bench`
 * and `mha bench GPTModel` report. */
double cli_peak_rss_mib(void);
int mha_cli_train(int argc, char **argv);
/* mha train GPTModel (cli/train_gpt.c): chapter 5's pretraining. */
int mha_cli_train_gpt(int argc, char **argv);
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
/* The same without the newline (a value inside a JSON object). */
void cli_put_json_string(FILE *f, const unsigned char *s, size_t len);
/* The bytes as UTF-8 text, ill-formed UTF-8 as U+FFFD (as Python's
 * decode(errors="replace")), newlines as spaces when asked. */
void cli_put_text(FILE *f, const unsigned char *s, size_t len, bool newline_as_space);

/* Chapter 4 (cli/gpt.c) */
bool cli_is_gpt_name(const char *s);
/* Consumes one of `mha init GPTModel`'s cfg options (--vocab-size,
 * --context-length, --emb-dim, --n-heads, --n-layers, --drop-rate,
 * --qkv-bias) and its value at argv[*i] into c; false if argv[*i] is not
 * one (dies on a bad value). */
bool cli_parse_gpt_opt(mha_gpt_config *c, int argc, char **argv, int *i);
bool cli_st_is_gpt(const mha_st *st);
int mha_cli_init_gpt(int argc, char **argv);
int mha_cli_run_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                    uint64_t seed, mha_dtype dtype);
int mha_cli_grad_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                     uint64_t seed);
int mha_cli_generate(int argc, char **argv);
int mha_cli_convert(int argc, char **argv);
int mha_cli_bench_gpt(int argc, char **argv);

#endif
