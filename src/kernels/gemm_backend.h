/* gemm_backend.h — the GEMM backend of this build, seen from the tiler
 * (gemm_tiles.c) and the dispatch (dispatch.c).
 *
 * Chosen at build time (-DMHA_BLAS): oneDNN's dnnl_sgemm (linked; the
 * default, gemm_onednn.c), OpenBLAS (loaded at first use, gemm_openblas.c)
 * or none (gemm_builtin.c: the builtin packed kernels of each table run).
 * CMake compiles exactly one of the three files, and only that file gets the
 * backend's definitions (MHA_HAVE_ONEDNN, MHA_OPENBLAS_SONAME), so every
 * other object is the same whatever the backend. gemm_backend.c holds what
 * they share: the loading once, the call with its fallback, the name.
 *
 * The library sets no environment variable: a user's OPENBLAS_CORETYPE or
 * ONEDNN_MAX_CPU_ISA is the backend's business. */
#ifndef MHA_GEMM_BACKEND_H
#define MHA_GEMM_BACKEND_H

#include "kernels.h"

/* ---- what the tiler and the dispatch call (gemm_backend.c) ---- */

/* The backend on one thread, the gemm kernel's contract (the fast tables'
 * gemm in builds with a BLAS). false: out of memory. */
mha__gemm_kernel mha__sgemm_backend;
/* What mha__sgemm_backend runs, e.g. "onednn 2.6.3 (avx2)", "openblas
 * (Haswell)", "builtin". Loads the backend if needed. */
const char *mha__sgemm_backend_name(void);
/* Whether the backend is loaded (loading it if needed): false only while
 * there is no room to load it (OpenBLAS), tried again at the next call. */
bool mha__sgemm_backend_ready(void);
/* Whether `bytes` of address space can be mapped now: mapped PROT_NONE
 * (nothing touched, nothing committed) and unmapped again. For backends
 * that cannot fail cleanly themselves. */
bool mha__probe_address_space(size_t bytes);

/* ---- what each backend file defines ---- */

/* Whether this build has a BLAS: then the fast tables' gemm is
 * mha__sgemm_backend, else each ISA's builtin packed kernel. */
extern const bool mha__sgemm_backend_is_blas;
/* Called once by the dispatch before the backend's first use when the
 * kernels are capped at AVX2 (MHA_ISA=avx2): the backend then runs its
 * AVX2 code too where it can be told so (oneDNN). */
void mha__sgemm_backend_cap_avx2(void);
/* Loads the backend once (under gemm_backend.c's lock) and writes its name
 * into name; false: no room to load it now, name says so. */
bool mha__backend_load(char *name, size_t cap);
/* What one backend call did: computed the tile, failed for lack of memory
 * (C untouched or partly written: the caller fails the whole GEMM), or
 * cannot take these arguments (the reference loops then run). */
typedef enum { MHA_BACKEND_DONE, MHA_BACKEND_NOMEM, MHA_BACKEND_CANNOT } mha__backend_result;
mha__backend_result mha__backend_call(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                      float alpha, const float *A, int64_t lda, const float *B,
                                      int64_t ldb, float beta, float *C, int64_t ldc);
/* Before a GEMM whose tiles run on `callers` threads at once: 0 when the
 * backend has room for them, else the bytes of address space it could not
 * reserve (the GEMM then fails with MHA_ERR_NOMEM, naming them). */
size_t mha__backend_reserve(int callers);
/* What a failed call could not get, for the error detail. */
void mha__backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K);

#endif
