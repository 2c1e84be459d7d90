/* test_book.c — every number chapter 3 prints (docs/book-reference.md),
 * reproduced through the public API to the book's 4 decimals. */
#include "mha.h"
#include "test_util.h"

#include <string.h>

static const float inputs[18] = {0.43f, 0.15f, 0.89f, 0.55f, 0.87f, 0.66f, 0.57f, 0.85f, 0.64f,
                                 0.22f, 0.58f, 0.33f, 0.77f, 0.25f, 0.10f, 0.05f, 0.80f, 0.55f};

/* got[i * stride + off + j] for j < n against want[j], to 4 decimals. */
static void expect(const char *what, const float *got, const float *want, int n) {
    for (int j = 0; j < n; j++)
        CHECK(fabsf(got[j] - want[j]) <= 5.001e-5f, "%s[%d] = %.6f, book prints %.4f", what, j,
              (double)got[j], (double)want[j]);
}

static mha_module *make(mha_kind kind, int64_t d_out, int64_t heads, uint64_t seed) {
    mha_config c;
    mha_config_init(&c, kind);
    c.d_in = 3;
    c.d_out = d_out;
    c.context_length = 6;
    c.num_heads = heads;
    mha_module *m = NULL;
    mha_status st = mha_module_create_seeded(&c, seed, &m);
    CHECK(st == MHA_OK, "create %s: %s", mha_kind_name(kind), mha_last_error());
    return m;
}

int main(void) {
    float batch[36], ctx[18], w[36], y[48];
    memcpy(batch, inputs, sizeof inputs);
    memcpy(batch + 18, inputs, sizeof inputs);

    /* 3.3 simplified */
    CHECK(mha_simple_attention_forward(ctx, w, inputs, 6, 3) == MHA_OK, "simple");
    expect("softmax of x2's scores", w + 6, (const float[]){0.1385f, 0.2379f, 0.2333f, 0.1240f, 0.1082f, 0.1581f}, 6);
    expect("z2", ctx + 3, (const float[]){0.4419f, 0.6515f, 0.5683f}, 3);
    expect("weights row 1", w, (const float[]){0.2098f, 0.2006f, 0.1981f, 0.1242f, 0.1220f, 0.1452f}, 6);
    expect("all context vectors", ctx,
           (const float[]){.4421f, .5931f, .5790f, .4419f, .6515f, .5683f, .4431f, .6496f, .5671f,
                           .4304f, .6298f, .5510f, .4671f, .5910f, .5266f, .4177f, .6503f, .5645f}, 18);

    /* 3.4 v1 (seed 123): query_2 and the context vectors */
    mha_module *m = make(MHA_SELF_ATTENTION_V1, 2, 1, 123);
    mha_param wq;
    CHECK(mha_params_find(mha_module_params(m), "W_query", &wq) == MHA_OK && wq.shape[0] == 3 && wq.shape[1] == 2,
          "v1 W_query (3, 2)");
    float q2[2] = {0, 0};
    for (int j = 0; j < 2; j++)
        for (int d = 0; d < 3; d++) q2[j] += inputs[3 + d] * wq.data[d * 2 + j];
    expect("v1 query_2", q2, (const float[]){0.4306f, 1.4551f}, 2);
    CHECK(mha_module_forward(m, ctx, inputs, 1, 6, NULL, NULL, 0) == MHA_OK, "v1 forward");
    expect("v1", ctx, (const float[]){.2996f, .8053f, .3061f, .8210f, .3058f, .8203f, .2948f, .7939f, .2927f, .7891f, .2990f, .8040f}, 12);
    mha_module_free(m);

    /* 3.4 v2 (seed 789) */
    m = make(MHA_SELF_ATTENTION_V2, 2, 1, 789);
    CHECK(mha_module_forward(m, ctx, inputs, 1, 6, NULL, NULL, 0) == MHA_OK, "v2 forward");
    expect("v2", ctx, (const float[]){-.0739f, .0713f, -.0748f, .0703f, -.0749f, .0702f, -.0760f, .0685f, -.0763f, .0679f, -.0754f, .0693f}, 12);
    mha_module_free(m);

    /* 3.5 dropout mask (seed 123) */
    mha_generator *g = NULL;
    REQUIRE(mha_generator_create(123, &g) == MHA_OK, "generator");
    float ones[36];
    for (int i = 0; i < 36; i++) ones[i] = 1.0f;
    CHECK(mha_generator_dropout(g, ones, ones, 36, 0.5) == MHA_OK, "dropout");
    static const char mask[] = "110110000101111101011001010101011110";
    for (int i = 0; i < 36; i++)
        CHECK(ones[i] == (mask[i] == '1' ? 2.0f : 0.0f), "dropout[%d] = %g", i, (double)ones[i]);
    mha_generator_free(g);

    /* 3.5 CausalAttention (seed 123), both batch elements */
    static const float ca[12] = {-.4519f, .2216f, -.5874f, .0058f, -.6300f, -.0632f, -.5675f, -.0843f, -.5526f, -.0981f, -.5299f, -.1081f};
    m = make(MHA_CAUSAL_ATTENTION, 2, 1, 123);
    CHECK(mha_module_forward(m, y, batch, 2, 6, NULL, NULL, 0) == MHA_OK, "causal forward");
    expect("CausalAttention b0", y, ca, 12);
    expect("CausalAttention b1", y + 12, ca, 12);
    mha_module_free(m);

    /* 3.6.1 wrapper: head 1 = CausalAttention's rows, head 2 as printed */
    static const float h2[12] = {.4772f, .1063f, .5891f, .3257f, .6202f, .3860f, .5478f, .3589f, .5321f, .3428f, .5077f, .3493f};
    m = make(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 2, 2, 123);
    CHECK(mha_config_output_width(mha_module_config_of(m)) == 4, "wrapper width 4");
    CHECK(mha_module_forward(m, y, batch, 2, 6, NULL, NULL, 0) == MHA_OK, "wrapper forward");
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 6; t++) {
            expect("wrapper head 1", y + (b * 6 + t) * 4, ca + t * 2, 2);
            expect("wrapper head 2", y + (b * 6 + t) * 4 + 2, h2 + t * 2, 2);
        }
    mha_module_free(m);

    /* 3.6.2 MultiHeadAttention */
    static const float mh[12] = {.3190f, .4858f, .2943f, .3897f, .2856f, .3593f, .2693f, .3873f, .2639f, .3928f, .2575f, .4028f};
    m = make(MHA_MULTI_HEAD_ATTENTION, 2, 2, 123);
    CHECK(mha_module_forward(m, y, batch, 2, 6, NULL, NULL, 0) == MHA_OK, "mha forward");
    expect("MultiHeadAttention b0", y, mh, 12);
    expect("MultiHeadAttention b1", y + 12, mh, 12);
    mha_module_free(m);

    /* GPT-2's attention: 2,360,064 parameters */
    mha_config c;
    mha_config_init(&c, MHA_MULTI_HEAD_ATTENTION);
    c.d_in = c.d_out = 768;
    c.context_length = 1024;
    c.num_heads = 12;
    REQUIRE(mha_module_create(&c, &m) == MHA_OK, "gpt2 create");
    const int64_t n = mha_params_scalars(mha_module_params(m));
    CHECK(n == 2360064, "param count %lld", (long long)n);
    mha_module_free(m);
    return TEST_END("test_book");
}
