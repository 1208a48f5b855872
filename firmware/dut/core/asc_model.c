/* The ASC model: fixed-point log-mel features and an integer linear classifier (asc_model.h).
 *
 * Pipeline (every step integer, mirrored bit for bit by firmware/dut/asc_model.py):
 *   1. 31 frames of 256 samples (no overlap), Hann window in Q15, keeping 8 fraction bits;
 *   2. radix-2 decimation-in-time FFT, Q15 twiddles, halving every stage (output = DFT / 256),
 *      so values stay below 2^24 and fit int32;
 *   3. power |X|^2 (uint64) through a triangular mel filterbank (Q8 weights, 20 bands);
 *   4. log2 in Q6: leading-bit position plus a 64-entry fraction table; mean over frames;
 *   5. logits = W f + b; scores = softmax(logits * ASC_LOGIT_SCALE) in float.
 *
 * Right shifts of negative values go through asr32/asr64, which floor by construction (C leaves
 * `>>` of a negative value implementation-defined), exactly as numpy's `>>` does. */
#include "asc_model.h"

#include <math.h>

#include "asc_model_weights.h"

#if ASC_NBANDS != ASC_MODEL_FEATURES
#error "asc_model_weights.h does not match asc_model.h: regenerate it (rig model train c-shim)"
#endif
#if ASC_NFRAMES * ASC_NFFT * 2 > ASC_MODEL_INPUT_BYTES || ASC_NFFT > 256
#error "asc_model_weights.h: frames do not fit the input, or the FFT outgrows its uint8 tables"
#endif

/* One frame's spectrum, in place; static so an MCU's small stack is not needed for it. */
static int32_t fft_re[ASC_NFFT];
static int32_t fft_im[ASC_NFFT];
static uint64_t power[ASC_NBINS];

/* floor(v / 2^s) for any sign, without relying on implementation-defined `>>`. */
static int32_t asr32(int32_t v, unsigned s)
{
    return v >= 0 ? (v >> s) : ~((~v) >> s);
}

static int64_t asr64(int64_t v, unsigned s)
{
    return v >= 0 ? (v >> s) : ~((~v) >> s);
}

/* Sample n of the input: little-endian int16 read byte by byte (any alignment, any host). */
static int32_t sample_at(const uint8_t *input, size_t n)
{
    int32_t v = (int32_t)input[2 * n] | ((int32_t)input[2 * n + 1] << 8);
    return v >= 32768 ? v - 65536 : v;
}

/* log2(v) in Q(ASC_LOG2_FRAC_BITS); 0 for v = 0 (and v = 1). */
static uint32_t log2_q(uint64_t v)
{
    unsigned msb = 0;
    unsigned s;
    uint64_t frac;
    if (v == 0) {
        return 0;
    }
    for (s = 32; s > 0; s >>= 1) { /* binary search for the leading one */
        if ((v >> (msb + s)) != 0) {
            msb += s;
        }
    }
    frac = msb >= ASC_LOG2_FRAC_BITS ? v >> (msb - ASC_LOG2_FRAC_BITS)
                                     : v << (ASC_LOG2_FRAC_BITS - msb);
    return ((uint32_t)msb << ASC_LOG2_FRAC_BITS)
           + asc_log2_frac[frac & ((1u << ASC_LOG2_FRAC_BITS) - 1u)];
}

/* Windowed frame starting at sample `first`, loaded in bit-reversed order, then the FFT. */
static void frame_spectrum(const uint8_t *input, size_t first)
{
    size_t i;
    size_t half;
    size_t step;
    for (i = 0; i < ASC_NFFT; i++) {
        size_t n = asc_bitrev[i];
        /* |sample * window| < 2^30: fits int32. */
        fft_re[i] = asr32(sample_at(input, first + n) * (int32_t)asc_window[n], ASC_WINDOW_SHIFT);
        fft_im[i] = 0;
    }
    for (half = 1, step = ASC_NFFT / 2; half < ASC_NFFT; half <<= 1, step >>= 1) {
        size_t group;
        for (group = 0; group < ASC_NFFT; group += 2 * half) {
            size_t j;
            for (j = 0; j < half; j++) {
                const int64_t c = asc_twiddle_cos[j * step];
                const int64_t s = asc_twiddle_sin[j * step];
                const size_t a = group + j;
                const size_t b = a + half;
                const int32_t ar = fft_re[a];
                const int32_t ai = fft_im[a];
                /* b * exp(-j theta), rounded in Q15; the products need 64 bits. */
                const int32_t tr = (int32_t)asr64(fft_re[b] * c + fft_im[b] * s + (1 << 14), 15);
                const int32_t ti = (int32_t)asr64(fft_im[b] * c - fft_re[b] * s + (1 << 14), 15);
                fft_re[a] = asr32(ar + tr, 1);
                fft_im[a] = asr32(ai + ti, 1);
                fft_re[b] = asr32(ar - tr, 1);
                fft_im[b] = asr32(ai - ti, 1);
            }
        }
    }
}

void asc_model_features(const uint8_t *input, int32_t *features)
{
    uint32_t sums[ASC_NBANDS] = {0};
    size_t frame;
    size_t k;
    size_t band;
    for (frame = 0; frame < ASC_NFRAMES; frame++) {
        frame_spectrum(input, frame * ASC_NFFT);
        for (k = 0; k < ASC_NBINS; k++) {
            power[k] = (uint64_t)((int64_t)fft_re[k] * fft_re[k] + (int64_t)fft_im[k] * fft_im[k]);
        }
        for (band = 0; band < ASC_NBANDS; band++) {
            const uint16_t *w = &asc_mel_weight[asc_mel_offset[band]];
            const uint64_t *p = &power[asc_mel_start[band]];
            uint64_t energy = 0; /* < 2^47 * 2^8 * 2^5: fits */
            for (k = 0; k < asc_mel_count[band]; k++) {
                energy += (uint64_t)w[k] * p[k];
            }
            sums[band] += log2_q(energy);
        }
    }
    for (band = 0; band < ASC_NBANDS; band++) {
        features[band] = (int32_t)((sums[band] + ASC_NFRAMES / 2) / ASC_NFRAMES);
    }
}

void asc_model_logits(const int32_t *features, int32_t *logits)
{
    size_t c;
    size_t j;
    for (c = 0; c < ASC_MODEL_CLASSES; c++) {
        /* Cannot overflow for real features (the trainer bounds W and b); 64 bits and a clamp
         * keep the function defined for any input anyway. */
        int64_t acc = asc_bias[c];
        for (j = 0; j < ASC_MODEL_FEATURES; j++) {
            acc += (int64_t)asc_weights[c][j] * features[j];
        }
        logits[c] = acc > INT32_MAX ? INT32_MAX : acc < INT32_MIN ? INT32_MIN : (int32_t)acc;
    }
}

int asc_model_infer(const uint8_t *input, size_t len, float scores[ASC_MODEL_CLASSES])
{
    int32_t features[ASC_MODEL_FEATURES];
    int32_t logits[ASC_MODEL_CLASSES];
    float e[ASC_MODEL_CLASSES];
    float sum = 0.0f;
    int32_t top;
    size_t c;
    if (input == NULL || len != ASC_MODEL_INPUT_BYTES) {
        return -1;
    }
    asc_model_features(input, features);
    asc_model_logits(features, logits);
    top = logits[0];
    for (c = 1; c < ASC_MODEL_CLASSES; c++) {
        top = logits[c] > top ? logits[c] : top;
    }
    for (c = 0; c < ASC_MODEL_CLASSES; c++) {
        /* The difference is <= 0 and may exceed int32: take it in 64 bits. */
        e[c] = expf((float)((int64_t)logits[c] - top) * ASC_LOGIT_SCALE);
        sum += e[c];
    }
    for (c = 0; c < ASC_MODEL_CLASSES; c++) {
        scores[c] = e[c] / sum;
    }
    return 0;
}
