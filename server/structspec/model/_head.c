/*
 * structspec's output head: the logits of a verification pass from the final
 * hidden states, for a model whose output matrix is stored in Q8_0 or Q6_K.
 *
 * Why: on a CPU every verified row pays the output head (for Gemma 3 270M a
 * 262,144 x 640 matrix), and llama.cpp's matrix multiply streams the whole
 * matrix once per row for passes of a few rows, so each drafted token costs
 * as much as a token decoded alone (docs/MEASUREMENTS.md, section 1). Here
 * the matrix is streamed once per pass, whatever the number of rows, so a pass
 * of several rows costs about what a pass of one does.
 *
 * The arithmetic is llama.cpp's (its vec_dot for the type), only the order in
 * which the float terms are added differs:
 *
 * - Q8_0 (ggml: 34-byte blocks of 32 weights, an fp16 scale d and 32 int8 q;
 *   weight = d * q). Each row of hidden states is quantized to Q8_0 (blocks
 *   of 32, scale max|x| / 127 stored as fp16, values rounded to nearest even);
 *   a logit is the sum over blocks of d_w * d_x * dot(q_w, q_x), each block's
 *   integer dot product exact.
 * - Q6_K (ggml: 210-byte super-blocks of 256 weights: ql[128] the low 4 bits,
 *   qh[64] the high 2 bits, scales[16] one int8 scale per 16 weights, fp16 d;
 *   in each half of 128 weights, weight l (0..31) of the quarters 0..3 takes
 *   the low nibble of ql[l], of ql[l + 32], the high nibble of ql[l], of
 *   ql[l + 32], and the bit pairs 0-1, 2-3, 4-5, 6-7 of qh[l]; q = those 6
 *   bits - 32, in -32..31; weight c = d * scales[c / 16] * q_c). Each row of
 *   hidden states is quantized as llama.cpp's q8_K: per 256 values, with m the
 *   value of largest magnitude, q_x = round_half_even(x * (-127 / m)) (at most
 *   127) and d_x = 1 / (-127 / m) in float32 (not rounded to fp16); a logit
 *   is the sum over super-blocks of d_w * d_x * sum_j scales[j] * dot_j, the
 *   sixteen dots of 16 values, all in exact int32.
 *
 * Layout ("packed"): the matrix is cut into groups of 16 output rows (vocab
 * entries), and each group's blocks are laid so that one 512-bit vector holds
 * 4 consecutive weights of each of the 16 rows (lane i of vector j: row
 * 16g+i, the block's columns 4j..4j+3), the same for every instruction set:
 * a 256-bit path reads the first half of each vector (rows 0-7) and then the
 * second (rows 8-15).
 * - Q8_0, 544 bytes a group and block of 32 columns: eight vectors of the
 *   weights offset by +128 to unsigned bytes, then the 16 rows' fp16 scales.
 * - Q6_K, 4,480 bytes a group and super-block of 256 columns: 64 vectors of
 *   the weights q as signed bytes (unpacked from 6 bits to 8: 22% more bytes
 *   to stream, and no bit shuffling in the inner loop), the 16 x 16 int8
 *   sub-block scales (scale j of row i at byte 16j + i), 16 int32 corrections
 *   (below), the 16 fp16 d, and 32 bytes of padding.
 *
 * One multiply-add of unsigned by signed bytes (VPDPBUSD, or VPMADDUBSW and
 * VPMADDWD without VNNI) adds 4 products to each row's int32 sum, 4 bytes of
 * the hidden state broadcast to every lane. Its first operand is unsigned,
 * so one side is offset by +128 and the offset taken out exactly:
 * - Q8_0: the weights. sum((w + 128) * x) - 128 * sum(x) = sum(w * x), with
 *   128 * sum(x) computed once per row and block when the row is quantized.
 * - Q6_K: the activations. sum_j scales[j] * sum((x + 128) * w) - C = the
 *   super-block's integer sum, where C = 128 * sum_j scales[j] * sum(w over
 *   sub-block j) depends on the weights only and is computed when packing.
 *
 * Instruction sets, chosen by the caller at run time (ss_head_isa_supported,
 * structspec/model/head.py), never by the build's -march: AVX-512 VNNI (16
 * rows a vector, 8 hidden-state rows at a time); AVX-VNNI (256-bit, 8 rows a
 * vector, 4 hidden-state rows at a time); AVX2 (the same with VPMADDUBSW,
 * whose int16 pair sums cannot saturate here: Q8_0 takes |w| (<= 128) and x
 * with w's sign (|x| <= 127), 2 * 128 * 127 < 32768; Q6_K takes x + 128
 * (<= 255) and |w| <= 32, 2 * 255 * 32 < 32768, so that two of its sums add
 * up in int16 and go into VPMADDWD against the sub-block scales, which takes
 * the place of VNNI's VPMULLD). No other CPU gets a kernel: llama.cpp
 * computes the head there.
 *
 * The hidden states come from llama.cpp itself: ss_capture_eval is an
 * eval callback (llama_context_params.cb_eval) that copies the tensor named
 * "result_norm" (the final norm's output, the head's input) and then stops
 * the graph there, so llama.cpp never computes its own head for that pass.
 *
 * Threads: OpenMP, the runtime llama.cpp's CPU backend runs on, each taking
 * the next chunk of groups when it is done with one (see ss_head_logits).
 * Everything is called from Python through ctypes (structspec/model/head.py).
 * Nothing here allocates or keeps state between calls besides what the
 * caller passes in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SS_X86 1
#else
#define SS_X86 0
#endif

#define SS_Q8_0 8       /* ggml_type ids of the matrices taken */
#define SS_Q6_K 14

#define SS_ISA_AVX2 1   /* instruction sets, as head.py names them */
#define SS_ISA_AVXVNNI 2
#define SS_ISA_AVX512 3

#define QK 32           /* values per Q8_0 block */
#define QK_K 256        /* values per Q6_K super-block */
#define GROUP 16        /* output rows per packed group: the lanes of a 512-bit vector */
#define TILE 8          /* hidden-state rows computed together against a group (512-bit) */
#define TILE2 4         /* the same with 256-bit vectors: 16 registers, not 32 */
#define CHUNK 32        /* groups a thread takes at a time (512 output rows) */
#define Q8_BYTES (8 * 64 + GROUP * 2)
#define Q6_SCALES (64 * 64)
#define Q6_OFFSETS (Q6_SCALES + 16 * GROUP)
#define Q6_D (Q6_OFFSETS + 4 * GROUP)
#define Q6_BYTES (Q6_D + 2 * GROUP + 32)

typedef struct {
    uint16_t d;         /* fp16 scale */
    int8_t qs[QK];
} block_q8_0;           /* 34 bytes: ggml's layout */

typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;         /* fp16 */
} block_q6_K;           /* 210 bytes: ggml's layout */

_Static_assert(sizeof(block_q8_0) == 34, "ggml's block_q8_0");
_Static_assert(sizeof(block_q6_K) == 210, "ggml's block_q6_K");

/* -- packing ------------------------------------------------------------ */

static int64_t block_cols(int type) {
    return type == SS_Q8_0 ? QK : type == SS_Q6_K ? QK_K : 0;
}

static int64_t block_bytes(int type) {
    return type == SS_Q8_0 ? Q8_BYTES : type == SS_Q6_K ? Q6_BYTES : 0;
}

/* The bytes of a packed rows x cols matrix of `type`; 0 where it is not one
 * the kernel takes (another type, or cols not a whole number of blocks). */
size_t ss_head_packed_bytes(int type, int64_t rows, int64_t cols) {
    const int64_t k = block_cols(type);
    if (!k || rows <= 0 || cols <= 0 || cols % k) return 0;
    int64_t groups = (rows + GROUP - 1) / GROUP;
    return (size_t)groups * (size_t)(cols / k) * (size_t)block_bytes(type);
}

static void pack_q8_0(const block_q8_0 *src, int64_t rows, int64_t nb, uint8_t *dst) {
    static const block_q8_0 zero;  /* the rows past `rows` */
    const int64_t groups = (rows + GROUP - 1) / GROUP;
    for (int64_t g = 0; g < groups; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *p = dst + (g * nb + b) * Q8_BYTES;
            uint16_t *scales = (uint16_t *)(p + 8 * 64);
            for (int i = 0; i < GROUP; i++) {
                const int64_t row = g * GROUP + i;
                const block_q8_0 *blk = row < rows ? &src[row * nb + b] : &zero;
                for (int j = 0; j < 8; j++) {
                    /* w + 128 as an unsigned byte is w's two's complement with the top bit flipped */
                    uint32_t four;
                    memcpy(&four, blk->qs + 4 * j, 4);
                    four ^= 0x80808080u;
                    memcpy(p + j * 64 + i * 4, &four, 4);
                }
                scales[i] = blk->d;
            }
        }
    }
}

/* A Q6_K super-block's 256 weights as q in -32..31 (llama.cpp's
 * dequantize_row_q6_K without the scales). */
static void unpack_q6_K(const block_q6_K *blk, int8_t q[QK_K]) {
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = blk->ql + 64 * half, *qh = blk->qh + 32 * half;
        int8_t *y = q + 128 * half;
        for (int l = 0; l < 32; l++) {
            y[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            y[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            y[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            y[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* Rows past `rows` stay zero: zero weights, scales, corrections and d. */
static void pack_q6_K(const block_q6_K *src, int64_t rows, int64_t nb, uint8_t *dst) {
    const int64_t groups = (rows + GROUP - 1) / GROUP;
    memset(dst, 0, (size_t)(groups * nb * Q6_BYTES));
    for (int64_t g = 0; g < groups; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *p = dst + (g * nb + b) * Q6_BYTES;
            for (int i = 0; i < GROUP && g * GROUP + i < rows; i++) {
                const block_q6_K *blk = &src[(g * GROUP + i) * nb + b];
                int8_t q[QK_K];
                unpack_q6_K(blk, q);
                for (int v = 0; v < QK_K / 4; v++) memcpy(p + 64 * v + 4 * i, q + 4 * v, 4);
                int32_t correction = 0;
                for (int j = 0; j < 16; j++) {
                    int32_t sum = 0;
                    for (int k = 0; k < 16; k++) sum += q[16 * j + k];
                    correction += blk->scales[j] * sum;
                    p[Q6_SCALES + 16 * j + i] = (uint8_t)blk->scales[j];
                }
                correction *= 128;
                memcpy(p + Q6_OFFSETS + 4 * i, &correction, 4);
                memcpy(p + Q6_D + 2 * i, &blk->d, 2);
            }
        }
    }
}

/* Repack a rows x cols matrix of `type` (ggml's row-major blocks) into `out`
 * (ss_head_packed_bytes of it). Rows past `rows` in the last group are zero
 * weights with zero scale, whose logits are 0 and are never read. */
int ss_head_pack(int type, const void *src, int64_t rows, int64_t cols, void *out) {
    if (!ss_head_packed_bytes(type, rows, cols)) return -1;
    if (type == SS_Q8_0)
        pack_q8_0((const block_q8_0 *)src, rows, cols / QK, (uint8_t *)out);
    else
        pack_q6_K((const block_q6_K *)src, rows, cols / QK_K, (uint8_t *)out);
    return 0;
}

/* -- the hidden states, quantized as llama.cpp quantizes activations ---- */

/* The scratch bytes ss_head_logits needs for n rows: the quantized values,
 * a float scale per block and (Q8_0) an int32 offset sum per block. */
size_t ss_head_scratch_bytes(int type, int64_t n, int64_t cols) {
    const int64_t k = block_cols(type);
    if (!k || n <= 0 || cols <= 0 || cols % k) return 0;
    return (size_t)(n * cols + n * (cols / k) * (type == SS_Q8_0 ? 8 : 4));
}

typedef struct {
    const void *q;      /* n x cols: Q8_0 int8 values; Q6_K values + 128 as uint8 */
    const float *d;     /* n x blocks: the block scales */
    const int32_t *s;   /* n x blocks, Q8_0 only: 128 * sum of the block's values */
} quantized_rows;

#if SS_X86
/* F16C for the fp16 rounding of Q8_0's scale: every CPU with a kernel has it */
static __attribute__((target("f16c"))) void quantize_q8_0(const float *x, int64_t cols, int8_t *q,
                                                          float *d, int32_t *s) {
    for (int64_t b = 0; b < cols / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) {
            float a = xb[i] < 0 ? -xb[i] : xb[i];
            if (a > amax) amax = a;
        }
        const float scale = amax / 127.0f;
        const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < QK; i++) {
            /* nearbyintf: round half to even, as _mm256_round_ps(_MM_ROUND_NEAREST) */
            int v = (int)__builtin_nearbyintf(xb[i] * inv);
            q[b * QK + i] = (int8_t)v;
            sum += v;
        }
        d[b] = _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT));
        s[b] = 128 * sum;
    }
}

/* llama.cpp's quantize_row_q8_K_ref, with each value stored + 128. */
static void quantize_q8_K(const float *x, int64_t cols, uint8_t *q, float *d) {
    for (int64_t b = 0; b < cols / QK_K; b++) {
        const float *xb = x + b * QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < QK_K; i++) {
            const float a = xb[i] < 0 ? -xb[i] : xb[i];
            if (a > amax) {
                amax = a;
                max = xb[i];
            }
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(q + b * QK_K, 128, QK_K);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int i = 0; i < QK_K; i++) {
            int v = (int)__builtin_nearbyintf(iscale * xb[i]);
            v = v > 127 ? 127 : v < -128 ? -128 : v;
            q[b * QK_K + i] = (uint8_t)(v + 128);
        }
        d[b] = 1.0f / iscale;
    }
}
#endif

/* -- the kernels ------------------------------------------------------------ */

typedef struct head_job head_job;
/* One group of 16 output rows against all the job's hidden-state rows;
 * `last` is a TILE x GROUP scratch tile for the partial last group. */
typedef void (*group_fn)(const head_job *job, int64_t g, float *last);

struct head_job {
    const uint8_t *packed;
    int64_t nb, cols, rows, n;
    quantized_rows x;
    float *out;         /* n x rows */
    const volatile char *stop; /* a flag another thread may set; NULL: never */
    group_fn group;
};

/* Where the logits of hidden-state rows r0.. against group g go: straight
 * into `out`, or, for the partial last group, into `last` (then copied by
 * tile_done), with the row stride of either. */
static inline float *tile_out(const head_job *job, int64_t g, int64_t r0, float *last,
                              int64_t *stride) {
    const int full = (g + 1) * GROUP <= job->rows;
    *stride = full ? job->rows : GROUP;
    return full ? job->out + r0 * job->rows + g * GROUP : last;
}

static inline void tile_done(const head_job *job, int64_t g, int64_t r0, int64_t R,
                             const float *last) {
    if ((g + 1) * GROUP <= job->rows) return;
    const int64_t live = job->rows - g * GROUP;
    for (int64_t r = 0; r < R; r++)
        memcpy(job->out + (r0 + r) * job->rows + g * GROUP, last + r * GROUP,
               (size_t)live * sizeof(float));
}

/* A tile function called with its row count R as a constant 1..MAX, so that
 * its R accumulators stay in registers. */
#define SS_TILE_CASES_4(CALL) \
    case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; case 4: CALL(4); break;
#define SS_TILE_CASES_8(CALL) \
    SS_TILE_CASES_4(CALL) \
    case 5: CALL(5); break; case 6: CALL(6); break; case 7: CALL(7); break; case 8: CALL(8); break;

#if SS_X86
#define SS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
#define SS_AVX2 __attribute__((target("avx2,f16c,fma")))
#define SS_INLINE static inline __attribute__((always_inline))

/* ---- AVX-512 VNNI: 16 output rows a vector, TILE hidden-state rows at a time */

SS_INLINE SS_AVX512 void q8_0_tile_512(const uint8_t *gp, int64_t nb, int64_t cols,
                                       const int8_t *q, const float *d, const int32_t *s,
                                       const int R, float *out, int64_t out_stride) {
    __m512 acc[TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + b * Q8_BYTES;
        __m512i w[8];
        for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512((const void *)(p + 64 * j));
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 8 * 64)));
        for (int r = 0; r < R; r++) {
            const int32_t *xq = (const int32_t *)(q + r * cols + b * QK);
            /* two chains of four, so the multiply-adds do not wait on each other */
            __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
            t0 = _mm512_dpbusd_epi32(t0, w[0], _mm512_set1_epi32(xq[0]));
            t1 = _mm512_dpbusd_epi32(t1, w[1], _mm512_set1_epi32(xq[1]));
            t0 = _mm512_dpbusd_epi32(t0, w[2], _mm512_set1_epi32(xq[2]));
            t1 = _mm512_dpbusd_epi32(t1, w[3], _mm512_set1_epi32(xq[3]));
            t0 = _mm512_dpbusd_epi32(t0, w[4], _mm512_set1_epi32(xq[4]));
            t1 = _mm512_dpbusd_epi32(t1, w[5], _mm512_set1_epi32(xq[5]));
            t0 = _mm512_dpbusd_epi32(t0, w[6], _mm512_set1_epi32(xq[6]));
            t1 = _mm512_dpbusd_epi32(t1, w[7], _mm512_set1_epi32(xq[7]));
            /* sum((w + 128) * x) - 128 * sum(x) = sum(w * x), exact in int32 */
            const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(t0, t1),
                                                 _mm512_set1_epi32(s[r * nb + b]));
            const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(d[r * nb + b]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * out_stride, acc[r]);
}

SS_INLINE SS_AVX512 void q6_K_tile_512(const uint8_t *gp, int64_t nb, int64_t cols,
                                       const uint8_t *q, const float *d, const int R,
                                       float *out, int64_t out_stride) {
    __m512 acc[TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + b * Q6_BYTES;
        __m512i sum[TILE];
        for (int r = 0; r < R; r++) sum[r] = _mm512_setzero_si512();
        for (int j = 0; j < 16; j++) {  /* sub-block j: columns 16j..16j+15, one scale */
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + Q6_SCALES + 16 * j)));
            const uint8_t *pw = p + 64 * 4 * j;
            const __m512i w0 = _mm512_loadu_si512((const void *)pw);
            const __m512i w1 = _mm512_loadu_si512((const void *)(pw + 64));
            const __m512i w2 = _mm512_loadu_si512((const void *)(pw + 128));
            const __m512i w3 = _mm512_loadu_si512((const void *)(pw + 192));
            for (int r = 0; r < R; r++) {
                const int32_t *xq = (const int32_t *)(q + r * cols + b * QK_K + 16 * j);
                __m512i t0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(xq[0]), w0);
                __m512i t1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(xq[1]), w1);
                t0 = _mm512_dpbusd_epi32(t0, _mm512_set1_epi32(xq[2]), w2);
                t1 = _mm512_dpbusd_epi32(t1, _mm512_set1_epi32(xq[3]), w3);
                sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(_mm512_add_epi32(t0, t1), sc));
            }
        }
        const __m512i correction = _mm512_loadu_si512((const void *)(p + Q6_OFFSETS));
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + Q6_D)));
        for (int r = 0; r < R; r++) {
            const __m512i dot = _mm512_sub_epi32(sum[r], correction);
            const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(d[r * nb + b]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * out_stride, acc[r]);
}

static SS_AVX512 void group_q8_0_avx512(const head_job *job, int64_t g, float *last) {
    const uint8_t *gp = job->packed + g * job->nb * Q8_BYTES;
    for (int64_t r0 = 0; r0 < job->n; r0 += TILE) {
        const int64_t R = job->n - r0 < TILE ? job->n - r0 : TILE;
        const int8_t *q = (const int8_t *)job->x.q + r0 * job->cols;
        const float *d = job->x.d + r0 * job->nb;
        const int32_t *s = job->x.s + r0 * job->nb;
        int64_t stride;
        float *out = tile_out(job, g, r0, last, &stride);
#define SS_CALL(k) q8_0_tile_512(gp, job->nb, job->cols, q, d, s, k, out, stride)
        switch (R) { SS_TILE_CASES_8(SS_CALL) }
#undef SS_CALL
        tile_done(job, g, r0, R, last);
    }
}

static SS_AVX512 void group_q6_K_avx512(const head_job *job, int64_t g, float *last) {
    const uint8_t *gp = job->packed + g * job->nb * Q6_BYTES;
    for (int64_t r0 = 0; r0 < job->n; r0 += TILE) {
        const int64_t R = job->n - r0 < TILE ? job->n - r0 : TILE;
        const uint8_t *q = (const uint8_t *)job->x.q + r0 * job->cols;
        const float *d = job->x.d + r0 * job->nb;
        int64_t stride;
        float *out = tile_out(job, g, r0, last, &stride);
#define SS_CALL(k) q6_K_tile_512(gp, job->nb, job->cols, q, d, k, out, stride)
        switch (R) { SS_TILE_CASES_8(SS_CALL) }
#undef SS_CALL
        tile_done(job, g, r0, R, last);
    }
}

/* ---- 256-bit: 8 output rows a vector (half of a packed group), TILE2 rows at a time */

/* acc + the sums of 4 products of unsigned bytes `u` and signed bytes `s` in
 * each 32-bit lane. `vnni` (a constant after inlining): VPDPBUSD in its VEX
 * encoding (AVX-VNNI), written as assembly so that the same function body
 * compiles for the AVX2 path too; else VPMADDUBSW (pairs of products into
 * int16, saturating: the callers' operands cannot reach it) and VPMADDWD. */
SS_INLINE SS_AVX2 __m256i dot4(__m256i acc, __m256i u, __m256i s, const int vnni) {
    if (vnni) {
        __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
        return acc;
    }
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

SS_INLINE SS_AVX2 void q8_0_tile_256(const uint8_t *gp, int64_t nb, int64_t cols, const int8_t *q,
                                     const float *d, const int32_t *s, const int R, int half,
                                     float *out, int64_t out_stride, const int vnni) {
    __m256 acc[TILE2];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + b * Q8_BYTES + 32 * half;
        __m256i dot[TILE2];
        for (int r = 0; r < R; r++) dot[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {  /* each vector of weights once, for all R rows */
            const __m256i w = _mm256_loadu_si256((const __m256i *)(p + 64 * j));
            /* without VNNI: |w| times x with w's sign, which is w * x, no +128 to take out */
            const __m256i ws = _mm256_xor_si256(w, flip);
            const __m256i aw = _mm256_abs_epi8(ws);
            for (int r = 0; r < R; r++) {
                const __m256i x = _mm256_set1_epi32(((const int32_t *)(q + r * cols + b * QK))[j]);
                dot[r] = vnni ? dot4(dot[r], w, x, 1) : dot4(dot[r], aw, _mm256_sign_epi8(x, ws), 0);
                /* an empty statement that says dot[r] is needed now: without it GCC
                 * computes the 32 products of a block first, spills them to the
                 * stack and adds them up after, a load and a store each */
                __asm__("" : "+x"(dot[r]));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + b * Q8_BYTES + 8 * 64 + 16 * half)));
        for (int r = 0; r < R; r++) {
            /* with VNNI: sum((w + 128) * x) - 128 * sum(x) = sum(w * x) */
            const __m256i exact = vnni ? _mm256_sub_epi32(dot[r], _mm256_set1_epi32(s[r * nb + b])) : dot[r];
            const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(d[r * nb + b]));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), scale, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out + r * out_stride + 8 * half, acc[r]);
}

/* Q6_K with AVX-VNNI (without: q6_K_tile_avx2) */
SS_INLINE SS_AVX2 void q6_K_tile_256(const uint8_t *gp, int64_t nb, int64_t cols, const uint8_t *q,
                                     const float *d, const int R, int half, float *out,
                                     int64_t out_stride) {
    __m256 acc[TILE2];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + b * Q6_BYTES;
        __m256i sum[TILE2];
        for (int r = 0; r < R; r++) sum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 16; j++) {
            const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + Q6_SCALES + 16 * j + 8 * half)));
            const uint8_t *pw = p + 64 * 4 * j + 32 * half;
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)pw);
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(pw + 64));
            const __m256i w2 = _mm256_loadu_si256((const __m256i *)(pw + 128));
            const __m256i w3 = _mm256_loadu_si256((const __m256i *)(pw + 192));
            for (int r = 0; r < R; r++) {
                const int32_t *xq = (const int32_t *)(q + r * cols + b * QK_K + 16 * j);
                __m256i t0 = dot4(_mm256_setzero_si256(), _mm256_set1_epi32(xq[0]), w0, 1);
                __m256i t1 = dot4(_mm256_setzero_si256(), _mm256_set1_epi32(xq[1]), w1, 1);
                t0 = dot4(t0, _mm256_set1_epi32(xq[2]), w2, 1);
                t1 = dot4(t1, _mm256_set1_epi32(xq[3]), w3, 1);
                sum[r] = _mm256_add_epi32(sum[r], _mm256_mullo_epi32(_mm256_add_epi32(t0, t1), sc));
            }
        }
        const __m256i correction = _mm256_loadu_si256((const __m256i *)(p + Q6_OFFSETS + 32 * half));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + Q6_D + 16 * half)));
        for (int r = 0; r < R; r++) {
            const __m256i dot = _mm256_sub_epi32(sum[r], correction);
            const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(d[r * nb + b]));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out + r * out_stride + 8 * half, acc[r]);
}

/* Q6_K without VNNI. VPMADDUBSW's int16 pair sums (x + 128 <= 255 times
 * |w| <= 32: at most 16,320 in magnitude, so two of them add up in int16)
 * go straight into VPMADDWD against the sub-block's scale as int16, which
 * multiplies and widens in one instruction where VNNI's int32 sums need a
 * VPMULLD: 10 instructions per sub-block and row instead of 14. */
SS_INLINE SS_AVX2 void q6_K_tile_avx2(const uint8_t *gp, int64_t nb, int64_t cols, const uint8_t *q,
                                      const float *d, const int R, int half, float *out,
                                      int64_t out_stride) {
    __m256 acc[TILE2];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + b * Q6_BYTES;
        __m256i sum[TILE2];
        for (int r = 0; r < R; r++) sum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 16; j++) {
            /* the 8 rows' scales, each twice: the int16 pair of a 32-bit lane */
            const __m128i s8 = _mm_loadl_epi64((const __m128i *)(p + Q6_SCALES + 16 * j + 8 * half));
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8));
            const uint8_t *pw = p + 64 * 4 * j + 32 * half;
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)pw);
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(pw + 64));
            const __m256i w2 = _mm256_loadu_si256((const __m256i *)(pw + 128));
            const __m256i w3 = _mm256_loadu_si256((const __m256i *)(pw + 192));
            for (int r = 0; r < R; r++) {
                const int32_t *xq = (const int32_t *)(q + r * cols + b * QK_K + 16 * j);
                const __m256i t01 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(xq[0]), w0),
                                                     _mm256_maddubs_epi16(_mm256_set1_epi32(xq[1]), w1));
                const __m256i t23 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(xq[2]), w2),
                                                     _mm256_maddubs_epi16(_mm256_set1_epi32(xq[3]), w3));
                sum[r] = _mm256_add_epi32(sum[r], _mm256_add_epi32(_mm256_madd_epi16(t01, sc),
                                                                   _mm256_madd_epi16(t23, sc)));
                __asm__("" : "+x"(sum[r])); /* as in q8_0_tile_256 */
            }
        }
        const __m256i correction = _mm256_loadu_si256((const __m256i *)(p + Q6_OFFSETS + 32 * half));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + Q6_D + 16 * half)));
        for (int r = 0; r < R; r++) {
            const __m256i dot = _mm256_sub_epi32(sum[r], correction);
            const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(d[r * nb + b]));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out + r * out_stride + 8 * half, acc[r]);
}

/* The two halves of group g one after the other: the second reads the
 * group's bytes from the cache the first brought them into. */
SS_INLINE SS_AVX2 void group_256(const head_job *job, int64_t g, float *last, int type, int vnni) {
    const int64_t bytes = type == SS_Q8_0 ? Q8_BYTES : Q6_BYTES;
    const uint8_t *gp = job->packed + g * job->nb * bytes;
    for (int64_t r0 = 0; r0 < job->n; r0 += TILE2) {
        const int64_t R = job->n - r0 < TILE2 ? job->n - r0 : TILE2;
        const float *d = job->x.d + r0 * job->nb;
        int64_t stride;
        float *out = tile_out(job, g, r0, last, &stride);
        for (int half = 0; half < 2; half++) {
            if (type == SS_Q8_0) {
                const int8_t *q = (const int8_t *)job->x.q + r0 * job->cols;
                const int32_t *s = job->x.s + r0 * job->nb;
#define SS_CALL(k) q8_0_tile_256(gp, job->nb, job->cols, q, d, s, k, half, out, stride, vnni)
                switch (R) { SS_TILE_CASES_4(SS_CALL) }
#undef SS_CALL
            } else {
                const uint8_t *q = (const uint8_t *)job->x.q + r0 * job->cols;
                if (vnni) {
#define SS_CALL(k) q6_K_tile_256(gp, job->nb, job->cols, q, d, k, half, out, stride)
                    switch (R) { SS_TILE_CASES_4(SS_CALL) }
#undef SS_CALL
                } else {
#define SS_CALL(k) q6_K_tile_avx2(gp, job->nb, job->cols, q, d, k, half, out, stride)
                    switch (R) { SS_TILE_CASES_4(SS_CALL) }
#undef SS_CALL
                }
            }
        }
        tile_done(job, g, r0, R, last);
    }
}

static SS_AVX2 void group_q8_0_avx2(const head_job *job, int64_t g, float *last) {
    group_256(job, g, last, SS_Q8_0, 0);
}
static SS_AVX2 void group_q8_0_avxvnni(const head_job *job, int64_t g, float *last) {
    group_256(job, g, last, SS_Q8_0, 1);
}
static SS_AVX2 void group_q6_K_avx2(const head_job *job, int64_t g, float *last) {
    group_256(job, g, last, SS_Q6_K, 0);
}
static SS_AVX2 void group_q6_K_avxvnni(const head_job *job, int64_t g, float *last) {
    group_256(job, g, last, SS_Q6_K, 1);
}

static void run_groups(const head_job *job, int64_t begin, int64_t end, float *last) {
    for (int64_t g = begin; g < end; g++) {
        if (job->stop && *job->stop) return; /* one byte read per 16 vocabulary rows */
        job->group(job, g, last);
    }
}
#endif

/* Whether this CPU (and its OS, which must save the wider registers) runs
 * the kernel of instruction set `isa` (SS_ISA_*). */
int ss_head_isa_supported(int isa) {
#if SS_X86
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c");
    switch (isa) {
    case SS_ISA_AVX2: return avx2;
    case SS_ISA_AVXVNNI: return avx2 && __builtin_cpu_supports("avxvnni");
    case SS_ISA_AVX512:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
#else
    (void)isa;
#endif
    return 0;
}

/* logits (n x rows, row-major) = the n hidden-state rows x (n x cols) times
 * the packed matrix of `type`, with the kernel of `isa`, on `threads` threads
 * (the calling one included). `scratch` holds ss_head_scratch_bytes for the
 * quantized rows. `stop` (NULL: never) is a flag byte another thread may set:
 * the threads then leave their groups unfinished, so that abandoned work ends
 * within one group. Returns 0; 1 when `stop` was set (the logits are
 * incomplete); -1 when the arguments are invalid or the CPU lacks `isa`. */
int ss_head_logits(int type, int isa, const void *packed, int64_t rows, int64_t cols,
                   const float *x, int64_t n, float *out, void *scratch, int threads,
                   const char *stop) {
#if SS_X86
    if (!ss_head_isa_supported(isa) || !ss_head_packed_bytes(type, rows, cols) || n <= 0)
        return -1;
    static const group_fn kernels[2][4] = {
        {NULL, group_q8_0_avx2, group_q8_0_avxvnni, group_q8_0_avx512},
        {NULL, group_q6_K_avx2, group_q6_K_avxvnni, group_q6_K_avx512},
    };
    const int64_t nb = cols / block_cols(type);
    uint8_t *q = (uint8_t *)scratch;
    float *d = (float *)(q + n * cols);
    int32_t *s = (int32_t *)(d + n * nb);
    for (int64_t r = 0; r < n; r++) {
        if (type == SS_Q8_0)
            quantize_q8_0(x + r * cols, cols, (int8_t *)q + r * cols, d + r * nb, s + r * nb);
        else
            quantize_q8_K(x + r * cols, cols, q + r * cols, d + r * nb);
    }
    const int64_t groups = (rows + GROUP - 1) / GROUP;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    const head_job job = {
        .packed = (const uint8_t *)packed,
        .nb = nb, .cols = cols, .rows = rows, .n = n,
        .x = {q, d, s}, .out = out, .stop = stop,
        .group = kernels[type == SS_Q6_K][isa],
    };
    /* OpenMP, as llama.cpp's CPU backend: its worker threads wait spinning for
     * a while after each decode, and a team of our own would have to share
     * the cores with them; the same runtime hands this loop to those threads.
     * The groups are dealt in chunks, each to whichever thread is free: a
     * thread the OS has preempted (another program, a laptop's slower core)
     * leaves its share to the others instead of holding the pass up. */
    const int64_t chunks = (groups + CHUNK - 1) / CHUNK;
    if (threads > chunks) threads = (int)chunks;
#pragma omp parallel num_threads(threads)
    {
        float last[TILE * GROUP];
        /* nowait: the end of the parallel region is the one barrier (two cost
         * a pass of one row a quarter more on this busy machine) */
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t c = 0; c < chunks; c++)
            run_groups(&job, c * CHUNK, (c + 1) * CHUNK < groups ? (c + 1) * CHUNK : groups, last);
    }
    return stop && *(const volatile char *)stop ? 1 : 0;
#else
    (void)type; (void)isa; (void)packed; (void)rows; (void)cols; (void)x; (void)n; (void)out;
    (void)scratch; (void)threads; (void)stop;
    return -1;
#endif
}

/* -- the eval callback that takes the head's input from llama.cpp ---------- */

typedef struct {
    /* ggml's accessors, resolved by the caller from the loaded libggml-base */
    const char *(*get_name)(const void *tensor);
    size_t (*nbytes)(const void *tensor);
    void (*tensor_get)(const void *tensor, void *data, size_t offset, size_t size);
    int32_t active;     /* set by the caller for a decode whose hidden states it wants */
    int32_t done;       /* set here once they are copied */
    float *dst;         /* where they go */
    size_t capacity;    /* bytes expected: rows x n_embd floats */
} ss_capture;

/* sizeof(ss_capture): head.py's ctypes mirror of it must be the same size */
size_t ss_capture_size(void) { return sizeof(ss_capture); }

/* ggml_backend_sched_eval_callback: with `ask` it says whether it wants the
 * tensor (only "result_norm", only while active); once that tensor is
 * computed it copies it and returns false, which ends the graph's computation
 * there: the output head, the last node, is never run. The KV cache rows of
 * the pass were written by the layers before it. A tensor of another size
 * than expected is left alone (llama.cpp then runs its head as usual). */
bool ss_capture_eval(void *tensor, bool ask, void *user_data) {
    ss_capture *c = (ss_capture *)user_data;
    if (!c->active || c->done) return ask ? false : true;
    const char *name = c->get_name(tensor);
    const bool wanted = name && strcmp(name, "result_norm") == 0;
    if (ask) return wanted;
    if (!wanted) return true;
    const size_t size = c->nbytes(tensor);
    if (size != c->capacity) {
        /* not the rows the caller expects: let the graph run on, so llama.cpp
         * computes the head itself and its logits stand */
        c->active = 0;
        return true;
    }
    c->tensor_get(tensor, c->dst, 0, size);
    c->done = 1;
    return false;
}

/* A module to import, so the build names the file as an extension; its
 * functions are reached through ctypes. */
static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_head", .m_doc = NULL, .m_size = -1,
};

PyMODINIT_FUNC PyInit__head(void) { return PyModule_Create(&module); }
