/* Products of few rows of x with ggml weights in 8-bit integers, as llama.cpp's CPU kernels compute them (AVX2).
 *
 * x is quantized per 256 values (as llama.cpp's Q8_K) to int8 codes (round to nearest even, |code| <= 127) and
 * one fp32 scale, with the sum of its codes per 16 values. Each weight row is decoded once into 8-bit codes, and its
 * sub-block scales stay integers, so a 256-value block is one exact integer sum:
 *   Q4_K / Q5_K  sum_j sc_j * (q . x)_j, times d * dx;      minus dmin * dx * sum_j m_j * (sum of x's codes)_j
 *   Q6_K         sum_g sc_g * (q . x)_g, times d * dx;      minus 32 * d * dx * sum_g sc_g * (sum of x's codes)_g
 * (Q8_0's own scales are floats per 32 values: there the fp32 product of dequant.c was as fast, so it has none.)
 * The error this adds is x's 8-bit rounding (bench.cpu_quant reports it against F32 and against the exact path);
 * engine/quant/native/dequant.c keeps the weights' exact fp32 values. Without AVX2 the library reports that it has
 * no such product (dg_int8_available() == 0) and engine.quant.cpu_matmul keeps the fp32 one. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_blocks.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DG_INT8 1
#else
#define DG_INT8 0
#endif

int dg_int8_available(void) { return DG_INT8; }

#if DG_INT8

/* A decoded weight row: codes u (k bytes, unsigned), per 32 values 16 int16 multipliers sv (lanes 0-7 for its first
 * 16 values, 8-15 for the next), per 256-value block the float factors dw (of the sum) and dm (of the offset), per 16
 * values the int16 offset multipliers mo. */
typedef struct {
    uint8_t *u;
    int16_t *sv;
    float *dw, *dm;
    int16_t *mo;
} Row;

static void decode(int qtype, const uint8_t *b, int64_t k, Row r) {
    const int size = qtype == Q4_K ? 144 : qtype == Q5_K ? 176 : 210;
    for (int64_t i = 0; i < k / 256; i++, b += size) {
        uint8_t *o = r.u + 256 * i;
        int16_t *sv = r.sv + 128 * i, *mo = r.mo + 16 * i;
        if (qtype == Q6_K) {
            const int8_t *scales = (const int8_t *)(b + 192);
            const float d = half(b + 208);
            q6k_codes(b, o);
            for (int g = 0; g < 16; g++) {
                for (int l = 0; l < 8; l++) sv[8 * g + l] = scales[g];
                mo[g] = scales[g];
            }
            r.dw[i] = d;
            r.dm[i] = 32.0f * d;
        } else {
            uint8_t sc[8], mn[8];
            scale_min_k4(b + 4, sc, mn);
            qk_codes(b, qtype == Q5_K, o);
            for (int j = 0; j < 8; j++) {
                for (int l = 0; l < 16; l++) sv[16 * j + l] = sc[j];
                mo[2 * j] = mo[2 * j + 1] = mn[j];
            }
            r.dw[i] = half(b);
            r.dm[i] = half(b + 2);
        }
    }
}

/* One row of x (k values) -> codes q, a scale per `block` values d, and the sum of the codes per 16 values s. */
static void quantize_x(const float *x, int64_t k, int64_t block, int8_t *q, float *d, int16_t *s) {
    for (int64_t b = 0; b < k / block; b++) {
        const float *xb = x + block * b;
        float amax = 0.0f;
        for (int j = 0; j < block; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        for (int j = 0; j < block; j++) {
            const float c = nearbyintf(xb[j] * inv);
            q[block * b + j] = (int8_t)(c > 127.0f ? 127 : c < -127.0f ? -127 : (int)c);
        }
        d[b] = scale;
    }
    for (int64_t g = 0; g < k / 16; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += q[16 * g + j];
        s[g] = (int16_t)sum;
    }
}

static inline float hsum(__m256 v) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

/* x row (q, d per 256, s) . one decoded K-quant row */
static float dot_k(const int8_t *q, const float *d, const int16_t *s, Row r, int64_t k) {
    __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / 256; b++) {
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(r.u + 256 * b + 32 * c));
            const __m256i x = _mm256_loadu_si256((const __m256i *)(q + 256 * b + 32 * c));
            const __m256i sv = _mm256_loadu_si256((const __m256i *)(r.sv + 128 * b + 16 * c));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), sv));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(r.dw[b] * d[b]), acc);
        const __m256i mo = _mm256_loadu_si256((const __m256i *)(r.mo + 16 * b));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(s + 16 * b));
        off = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mo, bs)), _mm256_set1_ps(r.dm[b] * d[b]), off);
    }
    return hsum(_mm256_sub_ps(acc, off));
}

#endif

/* y[i, j] = x[i] . W[j] for j < rows, i < m, in 8-bit integers (see the top); rows in parallel under OpenMP.
 * Types Q4_K, Q5_K, Q6_K (-1 otherwise, or without AVX2); k a multiple of 256 (-2 otherwise);
 * -3 when the buffers cannot be allocated. */
int dg_qmatmul_int8(int qtype, const uint8_t *src, int64_t src_stride, int64_t rows, int64_t k, const float *x,
                    int64_t m, int64_t ldx, float *y, int64_t ldy, int threads) {
#if DG_INT8
    if (qtype != Q4_K && qtype != Q5_K && qtype != Q6_K) return -1;
    const int64_t block = 256;
    if (k % block) return -2;
    int8_t *qx = malloc((size_t)(m * k));
    float *dx = malloc((size_t)(m * (k / block)) * sizeof(float));
    int16_t *sx = malloc((size_t)(m * (k / 16)) * sizeof(int16_t));
    if (!qx || !dx || !sx) {
        free(qx), free(dx), free(sx);
        return -3;
    }
    for (int64_t i = 0; i < m; i++) quantize_x(x + i * ldx, k, block, qx + i * k, dx + i * (k / block), sx + i * (k / 16));
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1 && rows > 1)
#endif
    {
        uint8_t *u = malloc((size_t)k);
        int16_t *sv = malloc((size_t)(k / 2) * sizeof(int16_t)), *mo = malloc((size_t)(k / 16) * sizeof(int16_t));
        float *dw = malloc((size_t)(k / 256) * sizeof(float)), *dm = malloc((size_t)(k / 256) * sizeof(float));
        const int ok = u && sv && mo && dw && dm;
        if (!ok) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            failed = 1;
        }
        const Row r = {u, sv, dw, dm, mo};
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t j = 0; j < rows; j++) {
            if (!ok) continue;
            decode(qtype, src + j * src_stride, k, r);
            for (int64_t i = 0; i < m; i++)
                y[i * ldy + j] = dot_k(qx + i * k, dx + i * (k / 256), sx + i * (k / 16), r, k);
        }
        free(u), free(sv), free(mo), free(dw), free(dm);
    }
    free(qx), free(dx), free(sx);
    (void)threads;
    return failed ? -3 : 0;
#else
    (void)qtype, (void)src, (void)src_stride, (void)rows, (void)k, (void)x, (void)m, (void)ldx, (void)y, (void)ldy;
    (void)threads;
    return -1;
#endif
}
