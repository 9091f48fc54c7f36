/* ggml rows -> fp32, read straight from the stored blocks (no repacked copy): the CPU tiles of
 * engine/quant/cpu_matmul.py. Built at first use by engine/quant/native/build.py with -ffp-contract=off, so each
 * value is the same fp32 operations in the same order as engine/formats/gguf_quants.py (and gguf.quants):
 *   Q8_0 q*d   Q5_0 d*(q-16)   Q5_1 d*q + m   Q4_K/Q5_K (d*sc)*q - dmin*m   Q6_K (d*sc)*(q-32)
 * Layouts: engine/formats/gguf_quants.py's docstring (ggml-common.h). Rows run in parallel under OpenMP when the
 * library was built with it. */
#include <stdint.h>
#include <string.h>

#include "ggml_blocks.h"

static void row_q8_0(const uint8_t *b, int64_t k, float *y) {
    for (int64_t i = 0; i < k / 32; i++, b += 34, y += 32) {
        const float d = half(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
    }
}

static void row_q5(const uint8_t *b, int64_t k, float *y, int has_min) {
    const int size = has_min ? 24 : 22, at = has_min ? 4 : 2;
    for (int64_t i = 0; i < k / 32; i++, b += size, y += 32) {
        const float d = half(b), m = has_min ? half(b + 2) : 0.0f;
        uint32_t qh;
        memcpy(&qh, b + at, 4);
        const uint8_t *qs = b + at + 4;
        int8_t q[32];
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
            q[j + 16] = (int8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
        }
        if (has_min)
            for (int j = 0; j < 32; j++) y[j] = d * (float)q[j] + m;
        else
            for (int j = 0; j < 32; j++) y[j] = d * (float)(q[j] - 16);
    }
}

static void row_qk(const uint8_t *b, int64_t k, float *y, int five) {
    const int size = five ? 176 : 144;
    for (int64_t i = 0; i < k / 256; i++, b += size) {
        const float d = half(b), dmin = half(b + 2);
        uint8_t sc[8], mn[8], q[256];
        scale_min_k4(b + 4, sc, mn);
        qk_codes(b, five, q);
        for (int j = 0; j < 8; j++, y += 32) {
            const float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
            for (int l = 0; l < 32; l++) {
                const float v = ds * (float)q[32 * j + l];
                y[l] = v - dm;
            }
        }
    }
}

static void row_q6_k(const uint8_t *b, int64_t k, float *y) {
    for (int64_t i = 0; i < k / 256; i++, b += 210, y += 256) {
        const int8_t *scales = (const int8_t *)(b + 192);
        const float d = half(b + 208);
        uint8_t q[256];
        q6k_codes(b, q);
        for (int g = 0; g < 16; g++) {
            const float ds = d * (float)scales[g];
            for (int t = 0; t < 16; t++) y[16 * g + t] = ds * (float)((int)q[16 * g + t] - 32);
        }
    }
}

__attribute__((noinline)) static int row(int qtype, const uint8_t *b, int64_t k, float *y) {
    switch (qtype) {
    case F32: memcpy(y, b, (size_t)k * 4); return 0;
    case F16: for (int64_t j = 0; j < k; j++) y[j] = half(b + 2 * j); return 0;
    case BF16:
        for (int64_t j = 0; j < k; j++) y[j] = f32_bits(((uint32_t)b[2 * j] | ((uint32_t)b[2 * j + 1] << 8)) << 16);
        return 0;
    case Q8_0: row_q8_0(b, k, y); return 0;
    case Q5_0: row_q5(b, k, y, 0); return 0;
    case Q5_1: row_q5(b, k, y, 1); return 0;
    case Q4_K: row_qk(b, k, y, 0); return 0;
    case Q5_K: row_qk(b, k, y, 1); return 0;
    case Q6_K: row_q6_k(b, k, y); return 0;
    default: return -1;
    }
}

/* rows `rows` of k values, row r at src + r * src_stride bytes -> dst + r * dst_stride floats. Returns 0, or -1 for
 * an unknown type. */
int dg_dequant_rows(int qtype, const uint8_t *src, int64_t src_stride, int64_t rows, int64_t k, float *dst,
                    int64_t dst_stride, int threads) {
    if (qtype < F32 || qtype > Q6_K) return -1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && rows > 1)
#endif
    for (int64_t r = 0; r < rows; r++) row(qtype, src + r * src_stride, k, dst + r * dst_stride);
    (void)threads;
    return 0;
}

/* rows idx[0..n) (each < the table's rows) -> dst row i: an embedding lookup of a quantized table. */
int dg_dequant_gather(int qtype, const uint8_t *src, int64_t src_stride, const int64_t *idx, int64_t n, int64_t k,
                      float *dst, int64_t dst_stride) {
    if (qtype < F32 || qtype > Q6_K) return -1;
    for (int64_t i = 0; i < n; i++) row(qtype, src + idx[i] * src_stride, k, dst + i * dst_stride);
    return 0;
}

typedef float v8 __attribute__((vector_size(32)));

static inline v8 load8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float sum8(v8 v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* 2 rows of x (x, x + ldx) against 4 weight rows (w, w + k, w + 2k, w + 3k; k a multiple of 8): 8 dot products,
 * 8 independent accumulators (enough to hide the multiply-add latency). Multiply-adds may fuse here: only the
 * summation differs from a GEMM's; the weights are dequantized exactly, in row(). */
__attribute__((optimize("fp-contract=fast"))) static void dot2x4(const float *x, int64_t ldx, const float *w,
                                                                    int64_t k, float *out) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    const float *x1 = x + ldx;
    for (int64_t i = 0; i < k; i += 8) {
        const v8 u = load8(x + i), v = load8(x1 + i);
        const v8 w0 = load8(w + i), w1 = load8(w + k + i), w2 = load8(w + 2 * k + i), w3 = load8(w + 3 * k + i);
        a0 += u * w0;
        a1 += u * w1;
        a2 += u * w2;
        a3 += u * w3;
        b0 += v * w0;
        b1 += v * w1;
        b2 += v * w2;
        b3 += v * w3;
    }
    out[0] = sum8(a0), out[1] = sum8(a1), out[2] = sum8(a2), out[3] = sum8(a3);
    out[4] = sum8(b0), out[5] = sum8(b1), out[6] = sum8(b2), out[7] = sum8(b3);
}

/* 1 row of x against 4 weight rows (the odd last row of x) */
__attribute__((optimize("fp-contract=fast"))) static void dot1x4(const float *x, const float *w, int64_t k,
                                                                    float *out) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int64_t i = 0; i < k; i += 8) {
        const v8 u = load8(x + i);
        a0 += u * load8(w + i);
        a1 += u * load8(w + k + i);
        a2 += u * load8(w + 2 * k + i);
        a3 += u * load8(w + 3 * k + i);
    }
    out[0] = sum8(a0), out[1] = sum8(a1), out[2] = sum8(a2), out[3] = sum8(a3);
}

/* y[i, j] (y + i * ldy + j) = sum_c x[i, c] * W[j, c] for j < rows, i < m: the weight's rows dequantized 4 at a time
 * into a buffer that stays in L1, each multiplied with every row of x (for few rows of x: a GEMM would read a
 * dequantized tile back from memory for each handful of rows). k a multiple of 8 (returns -2 otherwise). */
int dg_qmatmul(int qtype, const uint8_t *src, int64_t src_stride, int64_t rows, int64_t k, const float *x, int64_t m,
               int64_t ldx, float *y, int64_t ldy, int threads) {
    if (qtype < F32 || qtype > Q6_K) return -1;
    if (k % 8) return -2;
    const int64_t blocks = (rows + 3) / 4;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && blocks > 1)
#endif
    for (int64_t b = 0; b < blocks; b++) {
        float w[4 * k], d[8];
        const int64_t j0 = 4 * b, nr = rows - j0 < 4 ? rows - j0 : 4;
        for (int64_t r = 0; r < 4; r++) {
            if (r < nr) row(qtype, src + (j0 + r) * src_stride, k, w + r * k);
            else memset(w + r * k, 0, (size_t)k * sizeof(float));
        }
        int64_t i = 0;
        for (; i + 1 < m; i += 2) {
            dot2x4(x + i * ldx, ldx, w, k, d);
            for (int64_t r = 0; r < nr; r++) y[i * ldy + j0 + r] = d[r], y[(i + 1) * ldy + j0 + r] = d[4 + r];
        }
        if (i < m) {
            dot1x4(x + i * ldx, w, k, d);
            for (int64_t r = 0; r < nr; r++) y[i * ldy + j0 + r] = d[r];
        }
    }
    (void)threads;
    return 0;
}

/* 1 when built with OpenMP (rows in parallel), else 0. */
int dg_native_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}
