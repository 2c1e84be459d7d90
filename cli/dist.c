/* dist.c — MPI for mha train GPTModel's data parallelism (cli/dist.h).
 *
 * Launched by mpirun (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in the
 * environment) the program calls MPI_Init; run as a plain program it never
 * touches MPI, as before. Only mha-mpi links MPI; mha, started by mpirun,
 * runs mha-mpi from its own directory in its place. Messages of any size go in pieces of at most
 * 2^28 elements (MPI counts are ints). A rank that fails calls MPI_Abort,
 * which makes mpirun end every other rank: none waits on a dead peer, and
 * a rank killed from outside ends the job the same way (mpirun sees its
 * exit). */
#include "dist.h"

#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(MHA_HAVE_MPI)
#include <mpi.h>
#endif

static int d_rank = 0, d_size = 1;
#if defined(MHA_HAVE_MPI)
static bool d_joined = false;
#endif

enum { PIECE = 1 << 28 };

bool cli_dist_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

const char *cli_dist_library(void) {
#if defined(MHA_HAVE_MPI)
#if defined(OMPI_MAJOR_VERSION)
#define STR2(x) #x
#define STR(x) STR2(x)
    return "Open MPI " STR(OMPI_MAJOR_VERSION) "." STR(OMPI_MINOR_VERSION) "." STR(OMPI_RELEASE_VERSION);
#else
    return "MPI";
#endif
#else
    return NULL;
#endif
}

void cli_dist_init(int *argc, char ***argv) {
    if (!cli_dist_launched()) return;
#if defined(MHA_HAVE_MPI)
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        cli_die("MPI_Init failed: this process was started by mpirun but cannot join its job");
    d_joined = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &d_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d_size);
#else
    /* mha itself has no MPI: mha-mpi beside it (the same program with MPI)
     * takes its place, with the same arguments */
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 16);
    if (len > 0) {
        self[len] = 0;
        char *slash = strrchr(self, '/');
        if (slash && strcmp(slash + 1, "mha-mpi") != 0) {
            strcpy(slash + 1, "mha-mpi");
            if (access(self, X_OK) == 0) {
                execv(self, *argv);
                cli_die("%s: cannot run it: %s", self, strerror(errno));
            }
        }
    }
    (void)argc;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (n && atoi(n) > 1)
        cli_die("mpirun started %s processes, but this mha was built without MPI (no mha-mpi beside it): each "
                "would train alone (install libopenmpi-dev and rebuild; cmake -DMHA_MPI=ON insists)", n);
#endif
}

int cli_dist_rank(void) { return d_rank; }
int cli_dist_size(void) { return d_size; }

void cli_dist_finalize(void) {
#if defined(MHA_HAVE_MPI)
    if (d_joined) MPI_Finalize();
    d_joined = false;
#endif
}

void cli_dist_abort(int status) {
#if defined(MHA_HAVE_MPI)
    if (d_joined && d_size > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status);
    }
#endif
    (void)status;
}

#if defined(MHA_HAVE_MPI)
static void ok(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    cli_die("%s: %s", what, msg);
}

/* The tree's messages: a node's tag is its first leaf (mod 2^15, MPI's
 * least tag bound: between two ranks both sides go in increasing order,
 * and MPI keeps the order of messages with the same tag). */
static size_t d_tree_n; /* floats per node */
static MPI_Request *d_req;
static int d_nreq, d_capreq;

static int tag_of(int64_t first) { return (int)(first % 32768); }

static mha_status tree_send(void *user, int to, int64_t first, int64_t count, const float *v) {
    (void)user, (void)count;
    for (size_t at = 0; at < d_tree_n; at += PIECE) {
        if (d_nreq == d_capreq) {
            d_capreq = d_capreq ? 2 * d_capreq : 16;
            d_req = realloc(d_req, (size_t)d_capreq * sizeof *d_req);
            if (!d_req) cli_die("out of memory");
        }
        const int c = (int)(d_tree_n - at < PIECE ? d_tree_n - at : PIECE);
        ok(MPI_Isend(v + at, c, MPI_FLOAT, to, tag_of(first), MPI_COMM_WORLD, &d_req[d_nreq++]), "MPI_Isend");
    }
    return MHA_OK;
}

static mha_status tree_recv(void *user, int from, int64_t first, int64_t count, float *v) {
    (void)user, (void)count;
    for (size_t at = 0; at < d_tree_n; at += PIECE) {
        const int c = (int)(d_tree_n - at < PIECE ? d_tree_n - at : PIECE);
        ok(MPI_Recv(v + at, c, MPI_FLOAT, from, tag_of(first), MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
    }
    return MHA_OK;
}

static mha_status tree_flush(void *user) {
    (void)user;
    if (d_nreq) ok(MPI_Waitall(d_nreq, d_req, MPI_STATUSES_IGNORE), "MPI_Waitall");
    d_nreq = 0;
    return MHA_OK;
}
#endif

void cli_dist_tree_io(mha_tree_io *io, size_t n, mha_status (*leaf)(void *user, int64_t i, const float **v),
                      void *user) {
    *io = (mha_tree_io){.user = user, .leaf = leaf};
#if defined(MHA_HAVE_MPI)
    d_tree_n = n;
    if (d_size > 1) io->send = tree_send, io->recv = tree_recv, io->flush = tree_flush;
#else
    (void)n;
#endif
}

void cli_dist_bcast(float *v, size_t n, int root) {
#if defined(MHA_HAVE_MPI)
    if (d_size < 2) return;
    for (size_t at = 0; at < n; at += PIECE)
        ok(MPI_Bcast(v + at, (int)(n - at < PIECE ? n - at : PIECE), MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
#else
    (void)v, (void)n, (void)root;
#endif
}

void cli_dist_allreduce(float *v, size_t n) {
#if defined(MHA_HAVE_MPI)
    if (d_size < 2) return;
    for (size_t at = 0; at < n; at += PIECE)
        ok(MPI_Allreduce(MPI_IN_PLACE, v + at, (int)(n - at < PIECE ? n - at : PIECE), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD),
           "MPI_Allreduce");
#else
    (void)v, (void)n;
#endif
}

void cli_dist_gather_sum(double *v, size_t n) {
#if defined(MHA_HAVE_MPI)
    if (d_size < 2 || n == 0) return;
    ok(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
#else
    (void)v, (void)n;
#endif
}

int cli_dist_max(int v) {
#if defined(MHA_HAVE_MPI)
    if (d_size < 2) return v;
    int r = v;
    ok(MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return r;
#else
    return v;
#endif
}
