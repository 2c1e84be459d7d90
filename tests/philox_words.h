/* philox_words.h — test-only: attn_panel.h's philox_rows on one SIMD layer,
 * its words stored: w[i * VW + l] = word i of the counter {j4, row0 + l,
 * stream lo, stream hi} under key = seed (row0 + l wrapping at 2^32, as the
 * kernels' 32-bit row lanes do). Included after attn_panel.h by the files
 * named in isa_variants.h. */
void MHA__KNAME(philox_words)(uint32_t j4, uint32_t row0, uint64_t stream, uint64_t seed, uint32_t *w) {
    vi v[4];
    philox_keys pk;
    philox_keys_of(seed, &pk);
    philox_rows(vi_add(vi_set1((int32_t)row0), vi_iota()), j4, stream, &pk, v);
    for (int i = 0; i < 4; i++) vi_storeu((int32_t *)(void *)(w + i * VW), v[i]);
}
