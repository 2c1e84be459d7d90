/* attn_tunables.h — the tile sizes of attn_fwd_body.h and attn_bwd_body.h
 * per ISA, in one place
 * so that the AVX-512 kernel and its test emulation (tests/attn_gen16.c)
 * cannot drift apart. Include a SIMD layer, define ATTN_TUNE_AVX2 or
 * ATTN_TUNE_AVX512, include this; it defines the ATTN_* tunables the body
 * reads. Each default can be
 * overridden from the command line (-DMHA_ATTN_AVX2_KB=96) for tuning runs
 * with bench_attn_core.
 *
 * AVX2 (16 ymm): panels of 16 queries (NV = 2), register tiles up to 6 keys
 * or dims x 2 vectors = 12 accumulators; NP = 4, KB = 64 measured best on
 * the project machine.
 * AVX-512 (32 zmm): panels of 32 queries (NV = 2), tiles up to 12 x 2 = 24
 * accumulators. Measured on an AVX-512 machine: KB = 128 is 7-25% faster
 * than 64 at the GPT-2 shapes (96..192 alike, 14-key or 8-key tiles alike,
 * NV = 4 alike, NV = 1 ~10% slower); copying GPT-2's stride-2304 K/V tiles
 * or not made no difference there. On an AMD Zen 5 the forward ran 5% faster
 * at (8, 1024) without the copies (48.3-50.0 ms against 51.3-55.2, 5
 * interleaved runs, bench_attn_core; alike at (1, 1024) and (8, 256)) and
 * the backward 2-3% slower: the forward copies only tiles with more than 64
 * lines in a set (a 128-key tile of GPT-2 small, large and XL has 32, 32
 * and 16 by crowded_scan's count; medium's stride 3072 puts 128 there), the
 * backward keeps AVX2's 16. (Zen 5 later took the backward's copies out
 * too, within 1-2%; a 2-core Intel Xeon with AVX-512 wants them: its
 * backward ran 5-6% faster with them at T = 1024, 156 against 165-167 ms
 * at (8, 1024), 18.9-19.1 against 20.0-20.3 at (1, 1024), alike at (8,
 * 256). The forward's in-place reads are the attention layer's business
 * at T >= 512: it copies each head's rows once, attention.c.)
 *
 * Backward (the panels and QK/PV tiles are the forward's): AVX2 key tiles
 * of 256 (128 .. 512 after edge merging) and q-blocks of 2 panels,
 * measured on the project machine in paired runs (12 GPT-2 heads, 1
 * thread): T = 1024 took 73 ms with 64-key tiles, 67-70 with 128, 64-69
 * with 192..512; 2 panels per q-block 2-4% faster than 1, 4 alike; dK/dV
 * tiles 6 keys x 2 vectors and 3 x 4 alike. AVX-512: 256-key tiles, 2
 * panels (64 queries), 12 x 2 dK/dV tiles; measured on an AMD Zen 5 (2
 * threads, bench_attn_core --backward, 3 sets of interleaved runs, min):
 * 256-key tiles took 120-127 ms at (8, 1024) against 122-135 with 128, and
 * 15.8-16.4 against 16.2-16.8 at (1, 1024); 512 keys, 2 panels, or 6 x 4
 * and 8 x 2 dK/dV tiles alike within the host's noise there. Builds of
 * the kernel side by side in one process (one thread, GPT-2 heads, min of
 * 15 interleaved rounds, Zen 5) then told 2 panels from 1: +1.5-1.9% at
 * T = 1024, +2.3-3.8% at T = 256 (the dK/dV tiles' sums reloaded half as
 * often); 3 panels alike; 6 x 4 dK/dV tiles alike again. */
#ifndef MHA_ATTN_TUNABLES_H
#define MHA_ATTN_TUNABLES_H

#if defined(ATTN_TUNE_AVX2)

#ifndef MHA_ATTN_AVX2_NP
#define MHA_ATTN_AVX2_NP 4 /* panels per q-block */
#endif
#ifndef MHA_ATTN_AVX2_KB
#define MHA_ATTN_AVX2_KB 64 /* keys per tile (a multiple of 4) */
#endif
#ifndef MHA_ATTN_AVX2_CROWD
#define MHA_ATTN_AVX2_CROWD 16 /* lines of a K/V tile per cache set that trigger a copy */
#endif
#define ATTN_NV 2 /* vectors per panel row: PW = 8 * 2 = 16 queries */
#define ATTN_NP MHA_ATTN_AVX2_NP
#define ATTN_KB MHA_ATTN_AVX2_KB
#define ATTN_QK_MR 6 /* 6 x 2 accumulators + 2 loads + 1 broadcast of 16 ymm */
#define ATTN_PV_MR 6
#define ATTN_CROWD MHA_ATTN_AVX2_CROWD
#define ATTN_BWD_CROWD MHA_ATTN_AVX2_CROWD
/* backward (attn_bwd_body.h) */
#ifndef MHA_ATTN_AVX2_BWD_KB
#define MHA_ATTN_AVX2_BWD_KB 256 /* keys per tile (a multiple of 4) */
#endif
#ifndef MHA_ATTN_AVX2_BWD_NP
#define MHA_ATTN_AVX2_BWD_NP 2 /* panels per q-block */
#endif
#ifndef MHA_ATTN_AVX2_OP_MR
#define MHA_ATTN_AVX2_OP_MR 6 /* keys per dK/dV register tile */
#endif
#ifndef MHA_ATTN_AVX2_OP_NV
#define MHA_ATTN_AVX2_OP_NV 2 /* vectors of head dims per dK/dV register tile */
#endif
#define ATTN_BWD_KB MHA_ATTN_AVX2_BWD_KB
#define ATTN_BWD_NP MHA_ATTN_AVX2_BWD_NP
#define ATTN_OP_MR MHA_ATTN_AVX2_OP_MR
#define ATTN_OP_NV MHA_ATTN_AVX2_OP_NV

#elif defined(ATTN_TUNE_AVX512)

#ifndef MHA_ATTN_AVX512_NV
#define MHA_ATTN_AVX512_NV 2 /* vectors per panel row: PW = 16 * NV queries */
#endif
#ifndef MHA_ATTN_AVX512_NP
#define MHA_ATTN_AVX512_NP 2 /* panels per q-block */
#endif
#ifndef MHA_ATTN_AVX512_KB
#define MHA_ATTN_AVX512_KB 128 /* keys per tile (a multiple of 4) */
#endif
#ifndef MHA_ATTN_AVX512_QK_MR
#define MHA_ATTN_AVX512_QK_MR 12 /* max keys per QK register tile (<= 14) */
#endif
#ifndef MHA_ATTN_AVX512_PV_MR
#define MHA_ATTN_AVX512_PV_MR 12 /* max output dims per PV register tile (<= 14) */
#endif
#ifndef MHA_ATTN_AVX512_CROWD
#define MHA_ATTN_AVX512_CROWD 64 /* lines of a K/V tile per cache set that trigger a copy */
#endif
#ifndef MHA_ATTN_AVX512_BWD_CROWD
#define MHA_ATTN_AVX512_BWD_CROWD 16 /* the same, the backward's key tiles */
#endif
/* In vectors of the layer: the panel stays 16 * NV queries on a narrower
 * layer (tests/attn_avx2w32.c runs these tiles on simd_avx2.h). */
#define ATTN_NV (MHA_ATTN_AVX512_NV * 16 / VW)
#define ATTN_NP MHA_ATTN_AVX512_NP
#define ATTN_KB MHA_ATTN_AVX512_KB
#define ATTN_QK_MR MHA_ATTN_AVX512_QK_MR
#define ATTN_PV_MR MHA_ATTN_AVX512_PV_MR
#define ATTN_CROWD MHA_ATTN_AVX512_CROWD
#define ATTN_BWD_CROWD MHA_ATTN_AVX512_BWD_CROWD
/* backward (attn_bwd_body.h) */
#ifndef MHA_ATTN_AVX512_BWD_KB
#define MHA_ATTN_AVX512_BWD_KB 256 /* keys per tile (a multiple of 4) */
#endif
#ifndef MHA_ATTN_AVX512_BWD_NP
#define MHA_ATTN_AVX512_BWD_NP 2 /* panels per q-block */
#endif
#ifndef MHA_ATTN_AVX512_OP_MR
#define MHA_ATTN_AVX512_OP_MR 12 /* keys per dK/dV register tile */
#endif
#ifndef MHA_ATTN_AVX512_OP_NV
#define MHA_ATTN_AVX512_OP_NV 2 /* 16-float vectors of head dims per dK/dV register tile */
#endif
#define ATTN_BWD_KB MHA_ATTN_AVX512_BWD_KB
#define ATTN_BWD_NP MHA_ATTN_AVX512_BWD_NP
#define ATTN_OP_MR MHA_ATTN_AVX512_OP_MR
/* in vectors of the layer, as ATTN_NV */
#define ATTN_OP_NV (MHA_ATTN_AVX512_OP_NV * 16 / VW)

#else
#error "define ATTN_TUNE_AVX2 or ATTN_TUNE_AVX512 before including attn_tunables.h"
#endif

#endif
