/* Test harness for firmware/dut/core/asc_model.c (built by tests/firmware/test_asc_model.py).
 *
 *   asc_model_harness < inputs      one block per 16,000-byte input on stdin (features from
 *                                   a copy at an odd address):
 *                                     F <features...>
 *                                     L <logits...>
 *                                     S <scores, %.9g...>
 *   asc_model_harness --lengths     asc_model_infer's return code for a few wrong lengths, and
 *                                   whether it left the scores untouched
 *   asc_model_harness --bench N     ns per asc_model_infer over N runs on the first input */
#define _POSIX_C_SOURCE 199309L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "asc_model.h"

static uint8_t input[ASC_MODEL_INPUT_BYTES];
/* The same input at an odd address: the model must not assume int16 alignment. */
static uint8_t shifted[ASC_MODEL_INPUT_BYTES + 1];

static int print_one(void)
{
    int32_t features[ASC_MODEL_FEATURES];
    int32_t logits[ASC_MODEL_CLASSES];
    float scores[ASC_MODEL_CLASSES];
    int i;
    memcpy(shifted + 1, input, ASC_MODEL_INPUT_BYTES);
    asc_model_features(shifted + 1, features);
    asc_model_logits(features, logits);
    if (asc_model_infer(input, ASC_MODEL_INPUT_BYTES, scores) != 0) {
        return 1;
    }
    printf("F");
    for (i = 0; i < ASC_MODEL_FEATURES; i++) {
        printf(" %ld", (long)features[i]);
    }
    printf("\nL");
    for (i = 0; i < ASC_MODEL_CLASSES; i++) {
        printf(" %ld", (long)logits[i]);
    }
    printf("\nS");
    for (i = 0; i < ASC_MODEL_CLASSES; i++) {
        printf(" %.9g", (double)scores[i]);
    }
    printf("\n");
    return 0;
}

static int lengths(void)
{
    const size_t bad[] = {0, 1, ASC_MODEL_INPUT_BYTES - 1, ASC_MODEL_INPUT_BYTES + 1};
    size_t k;
    for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float scores[ASC_MODEL_CLASSES] = {-7.0f, -7.0f, -7.0f, -7.0f};
        int rc = asc_model_infer(input, bad[k], scores);
        int untouched = scores[0] == -7.0f && scores[1] == -7.0f && scores[2] == -7.0f
                        && scores[3] == -7.0f;
        printf("len %lu rc %d untouched %d\n", (unsigned long)bad[k], rc, untouched);
    }
    return 0;
}

static int bench(long runs)
{
    float scores[ASC_MODEL_CLASSES];
    float sink = 0.0f;
    struct timespec t0;
    struct timespec t1;
    long i;
    if (fread(input, 1, ASC_MODEL_INPUT_BYTES, stdin) != ASC_MODEL_INPUT_BYTES || runs <= 0) {
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < runs; i++) {
        input[0] = (uint8_t)i; /* a different input each time: nothing to hoist */
        asc_model_infer(input, ASC_MODEL_INPUT_BYTES, scores);
        sink += scores[0];
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ns_per_inference %.0f (checksum %g)\n",
           ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / runs,
           (double)sink);
    return 0;
}

int main(int argc, char **argv)
{
    size_t got;
    if (argc == 2 && strcmp(argv[1], "--lengths") == 0) {
        return lengths();
    }
    if (argc == 3 && strcmp(argv[1], "--bench") == 0) {
        return bench(strtol(argv[2], NULL, 10));
    }
    while ((got = fread(input, 1, ASC_MODEL_INPUT_BYTES, stdin)) == ASC_MODEL_INPUT_BYTES) {
        if (print_one() != 0) {
            return 1;
        }
    }
    return got == 0 ? 0 : 2; /* a partial record is a harness misuse */
}
