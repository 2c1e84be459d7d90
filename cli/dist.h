/* dist.h — the processes of `mpirun -np N mha train GPTModel` (cli/dist.c):
 * MPI when the program was built with it (-DMHA_MPI) and launched by
 * mpirun; otherwise one process, and every call below is a no-op or the
 * identity. Only mha train GPTModel uses it. */
#ifndef MHA_CLI_DIST_H
#define MHA_CLI_DIST_H

#include "mha.h"

#include <stdbool.h>
#include <stddef.h>

/* Joins the job when launched by mpirun (MPI_Init); dies when this build
 * has no MPI and mpirun started more than one process. */
void cli_dist_init(int *argc, char ***argv);
/* Whether mpirun started this process (its environment says so): then
 * stdout is mpirun's, a terminal or not. */
bool cli_dist_launched(void);
/* This process's rank and the number of processes (0 and 1 alone). */
int cli_dist_rank(void);
int cli_dist_size(void);
/* Whether this build has MPI ("Open MPI 4.1.4", or NULL). */
const char *cli_dist_library(void);
/* MPI_Finalize when joined. */
void cli_dist_finalize(void);
/* A failure of this rank ends the job: MPI_Abort when joined with others
 * (cli_die calls it), so that no rank waits on a dead one. */
void cli_dist_abort(int status);

/* The callbacks of mha_tree_sum over MPI for vectors of n floats (send:
 * MPI_Isend, recv: MPI_Recv, flush: MPI_Waitall), leaf and user given. */
void cli_dist_tree_io(mha_tree_io *io, size_t n, mha_status (*leaf)(void *user, int64_t i, const float **v),
                      void *user);
/* v (n floats) from rank root to every rank. */
void cli_dist_bcast(float *v, size_t n, int root);
/* v (n floats) = the sum over ranks, in place (MPI_Allreduce: its order of
 * adds is MPI's, so its bits depend on the number of ranks). */
void cli_dist_allreduce(float *v, size_t n);
/* v (n doubles) = the sum over ranks, in place: exact where one rank
 * holds each value and the others hold zeros. */
void cli_dist_gather_sum(double *v, size_t n);
/* The largest of every rank's v. */
int cli_dist_max(int v);

#endif
