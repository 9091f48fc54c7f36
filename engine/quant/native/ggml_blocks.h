/* What the native kernels share: the ggml type codes (engine/quant/native/build.py's QTYPES), the exact fp16 ->
 * fp32 conversion, the K-quants' packed 6-bit scales and their codes. Layouts: engine/formats/gguf_quants.py's docstring. */
#ifndef DG_GGML_BLOCKS_H
#define DG_GGML_BLOCKS_H
#include <stdint.h>
#include <string.h>

enum { F32 = 0, F16 = 1, BF16 = 2, Q8_0 = 3, Q5_0 = 4, Q5_1 = 5, Q4_K = 6, Q5_K = 7, Q6_K = 8 };

static inline float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half -> float, exact (normals, subnormals, zero, inf, nan). */
static inline float half(const uint8_t *p) {
    uint32_t h = (uint32_t)p[0] | ((uint32_t)p[1] << 8);
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0) {
        if (man == 0) return f32_bits(sign);
        exp = 113; /* 2^-14 with the leading bit at 10, renormalized below */
        while (!(man & 0x400u)) { man <<= 1; exp--; }
        return f32_bits(sign | (exp << 23) | ((man & 0x3FFu) << 13));
    }
    if (exp == 31) return f32_bits(sign | 0x7F800000u | (man << 13));
    return f32_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* get_scale_min_k4: the 8 6-bit scales and mins packed in 12 bytes */
static inline void scale_min_k4(const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* A Q4_K / Q5_K block's 256 codes (0..15 / 0..31) in element order: 32 bytes of qs hold sub-block 2c in their low
 * nibbles, 2c+1 in their high ones; Q5_K's 5th bit of sub-block j's element l is bit j of qh[l]. */
static inline void qk_codes(const uint8_t *b, int five, uint8_t *q) {
    const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = qs[32 * c + l] & 0x0F;
            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    if (five)
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) q[32 * j + l] |= (uint8_t)(((qh[l] >> j) & 1) << 4);
}

/* A Q6_K block's 256 codes (0..63, the value's q + 32) in element order: element h*128 + 32t + l is ql's nibble and
 * qh's 2-bit field t. */
static inline void q6k_codes(const uint8_t *b, uint8_t *q) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        uint8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
            o[l + 32] = (uint8_t)((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

#endif
