/* attention.c — mha used from an installed package: the book's
 * MultiHeadAttention(3, 2, 6, 0.0, num_heads=2) after torch.manual_seed(123),
 * on "Your journey starts with one step" (a batch of two), as section 3.6.2
 * prints it.
 *
 *   cc attention.c $(pkg-config --cflags --libs mha) -o attention
 *   cmake -S examples -B build-ex -DCMAKE_PREFIX_PATH=PREFIX   (find_package)
 *
 * Exits 1 when a number differs from the book's (to 4 decimals) or the
 * library linked is not the version of the header compiled against. */
#include <math.h>
#include <mha.h>
#include <stdio.h>
#include <string.h>

static const float inputs[6][3] = {
    {0.43f, 0.15f, 0.89f}, /* Your    */
    {0.55f, 0.87f, 0.66f}, /* journey */
    {0.57f, 0.85f, 0.64f}, /* starts  */
    {0.22f, 0.58f, 0.33f}, /* with    */
    {0.77f, 0.25f, 0.10f}, /* one     */
    {0.05f, 0.80f, 0.55f}, /* step    */
};

/* context_vecs[0] as the book prints it */
static const float book[6][2] = {
    {0.3190f, 0.4858f}, {0.2943f, 0.3897f}, {0.2856f, 0.3593f},
    {0.2693f, 0.3873f}, {0.2639f, 0.3928f}, {0.2575f, 0.4028f},
};

int main(void) {
    printf("mha %s (header %s)\n", mha_version(), MHA_VERSION_STRING);
    if (strcmp(mha_version(), MHA_VERSION_STRING) != 0) {
        fprintf(stderr, "library %s, header %s\n", mha_version(), MHA_VERSION_STRING);
        return 1;
    }
    mha_config c;
    mha_config_init(&c, MHA_MULTI_HEAD_ATTENTION);
    c.d_in = 3;
    c.d_out = 2;
    c.context_length = 6;
    c.num_heads = 2;
    mha_module *m = NULL;
    mha_status s = mha_module_create_seeded(&c, 123, &m);
    if (s != MHA_OK) {
        fprintf(stderr, "%s: %s\n", mha_status_name(s), mha_last_error());
        return 1;
    }
    float x[2][6][3], y[2][6][2];
    memcpy(x[0], inputs, sizeof inputs);
    memcpy(x[1], inputs, sizeof inputs);
    s = mha_module_forward(m, &y[0][0][0], &x[0][0][0], 2, 6, NULL, NULL, 0);
    mha_module_free(m);
    if (s != MHA_OK) {
        fprintf(stderr, "forward: %s: %s\n", mha_status_name(s), mha_last_error());
        return 1;
    }
    int bad = 0;
    printf("context_vecs[0] =\n");
    for (int t = 0; t < 6; t++) {
        printf("  [%.4f, %.4f]\n", (double)y[0][t][0], (double)y[0][t][1]);
        for (int k = 0; k < 2; k++)
            for (int b = 0; b < 2; b++) bad |= fabsf(y[b][t][k] - book[t][k]) > 5e-5f;
    }
    printf("%s\n", bad ? "differs from the book" : "as in the book");
    return bad;
}
