/*
 * structspec's output head: the logits of a verification pass from the final
 * hidden states, for a model whose output matrix is stored in Q8_0.
 *
 * Why: on a CPU every verified row pays the output head (for Gemma 3 270M a
 * 262,144 x 640 matrix), and llama.cpp's Q8_0 matrix multiply streams the
 * whole matrix once per row for passes of 2-7 rows, so each drafted token
 * costs as much as a token decoded alone (docs/MEASUREMENTS.md, section 1).
 * Here the matrix is streamed once per pass, whatever the number of rows, so a
 * pass of several rows costs about what a pass of one does.
 *
 * The arithmetic is llama.cpp's for Q8_0 x Q8_0: each row of hidden states is
 * quantized to Q8_0 (blocks of 32, scale max|x| / 127 stored as fp16, values
 * rounded to nearest even), each block's integer dot product is exact, and
 * the logit is the sum over blocks of d_w * d_x * dot(q_w, q_x). Only the
 * order in which the float block terms are added differs.
 *
 * Layout ("packed"): the matrix is cut into groups of 16 output rows (vocab
 * entries); for each group and each block of 32 columns, eight 64-byte
 * vectors hold 4 consecutive weights of each of the 16 rows (lane i of
 * vector j: row 16g+i, columns 32b+4j..32b+4j+3), each weight offset by +128
 * to an unsigned byte, then the 16 rows' fp16 scales: 544 bytes. One
 * VPDPBUSD then adds 4 products to each of 16 rows' sums, with 4 bytes of the
 * hidden state broadcast to every lane; the +128 offset is taken out once a
 * block: sum((w + 128) * x) - 128 * sum(x) = sum(w * x).
 *
 * The hidden states come from llama.cpp itself: ss_capture_eval is an
 * eval callback (llama_context_params.cb_eval) that copies the tensor named
 * "result_norm" (the final norm's output, the head's input) and then stops
 * the graph there, so llama.cpp never computes its own head for that pass.
 *
 * Threads: OpenMP, the runtime llama.cpp's CPU backend runs on (see
 * ss_head_logits). Everything is called from Python through ctypes
 * (structspec/model/head.py). Nothing here allocates or keeps state between
 * calls besides what the caller passes in.
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

#define QK 32           /* values per Q8_0 block */
#define GROUP 16        /* output rows per packed group: the lanes of a 512-bit vector */
#define TILE 8          /* hidden-state rows computed together against a group */
#define BLOCK_BYTES (8 * 64 + GROUP * 2)

typedef struct {
    uint16_t d;         /* fp16 scale */
    int8_t qs[QK];
} block_q8_0;           /* 34 bytes: ggml's layout */

/* -- packing ------------------------------------------------------------ */

size_t ss_head_packed_bytes(int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0 || cols % QK) return 0;
    int64_t groups = (rows + GROUP - 1) / GROUP;
    return (size_t)groups * (size_t)(cols / QK) * BLOCK_BYTES;
}

/* Repack a rows x cols Q8_0 matrix (ggml's row-major blocks) into `out`
 * (ss_head_packed_bytes of it). Rows past `rows` in the last group are zero
 * weights with zero scale, whose logits are 0 and are never read. */
int ss_head_pack(const void *q8_0, int64_t rows, int64_t cols, void *out) {
    if (!ss_head_packed_bytes(rows, cols)) return -1;
    const block_q8_0 *src = (const block_q8_0 *)q8_0;
    const int64_t nb = cols / QK;
    const int64_t groups = (rows + GROUP - 1) / GROUP;
    static const block_q8_0 zero;  /* the rows past `rows` */
    uint8_t *dst = (uint8_t *)out;
    for (int64_t g = 0; g < groups; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *p = dst + (g * nb + b) * BLOCK_BYTES;
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
    return 0;
}

/* -- the hidden states, quantized as llama.cpp quantizes activations ---- */

typedef struct {
    const int8_t *q;    /* n x cols */
    const float *d;     /* n x nb: fp16-rounded block scales */
    const int32_t *s;   /* n x nb: 128 * sum of the block's values */
} quantized_rows;

/* -- the kernel ----------------------------------------------------------- */

typedef struct {
    const uint8_t *packed;
    int64_t group_begin, group_end, nb, cols, rows, n;
    quantized_rows x;
    float *out;         /* n x rows */
    const volatile char *stop; /* a flag another thread may set; NULL: never */
} head_job;

int ss_head_simd(void) {
#if SS_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

#if SS_X86
#define SS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

static SS_TARGET void quantize_row(const float *x, int64_t cols, int8_t *q, float *d, int32_t *s) {
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


/* One group of 16 output rows against R hidden-state rows (R <= TILE, a
 * constant after inlining, so the R accumulators stay in registers). */
static inline __attribute__((always_inline)) SS_TARGET void group_tile(
    const uint8_t *gp, int64_t nb, int64_t cols, const int8_t *q, const float *d,
    const int32_t *s, const int R, float *out, int64_t out_stride) {
    __m512 acc[TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + b * BLOCK_BYTES;
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

static SS_TARGET void group_rows(const head_job *job, int64_t g, float *last) {
    const uint8_t *gp = job->packed + g * job->nb * BLOCK_BYTES;
    const int64_t full = (g + 1) * GROUP <= job->rows;
    for (int64_t r0 = 0; r0 < job->n; r0 += TILE) {
        const int64_t R = job->n - r0 < TILE ? job->n - r0 : TILE;
        const int8_t *q = job->x.q + r0 * job->cols;
        const float *d = job->x.d + r0 * job->nb;
        const int32_t *s = job->x.s + r0 * job->nb;
        /* the last, partial group is written to a scratch tile and copied */
        float *out = full ? job->out + r0 * job->rows + g * GROUP : last;
        const int64_t stride = full ? job->rows : GROUP;
        switch (R) {
#define SS_CASE(k) \
    case k: group_tile(gp, job->nb, job->cols, q, d, s, k, out, stride); break;
            SS_CASE(1) SS_CASE(2) SS_CASE(3) SS_CASE(4)
            SS_CASE(5) SS_CASE(6) SS_CASE(7) SS_CASE(8)
#undef SS_CASE
        }
        if (!full) {
            const int64_t live = job->rows - g * GROUP;
            for (int64_t r = 0; r < R; r++)
                memcpy(job->out + (r0 + r) * job->rows + g * GROUP, last + r * GROUP,
                       (size_t)live * sizeof(float));
        }
    }
}

static void run_groups(const head_job *job) {
    float last[TILE * GROUP];
    for (int64_t g = job->group_begin; g < job->group_end; g++) {
        if (job->stop && *job->stop) return; /* one byte read per 16 vocabulary rows */
        group_rows(job, g, last);
    }
}
#endif

/* logits (n x rows, row-major) = the n hidden-state rows x (n x cols) times
 * the packed matrix, on `threads` threads (the calling one included).
 * `scratch` holds n * (cols + 8 * cols / 32) bytes for the quantized rows.
 * `stop` (NULL: never) is a flag byte another thread may set: the threads then
 * leave their groups unfinished, so that abandoned work ends within one group.
 * Returns 0; 1 when `stop` was set (the logits are incomplete); -1 when the
 * arguments are invalid or the CPU lacks the kernel. */
int ss_head_logits(const void *packed, int64_t rows, int64_t cols, const float *x, int64_t n,
                   float *out, void *scratch, int threads, const char *stop) {
#if SS_X86
    if (!ss_head_simd() || !ss_head_packed_bytes(rows, cols) || n <= 0) return -1;
    const int64_t nb = cols / QK;
    int8_t *q = (int8_t *)scratch;
    float *d = (float *)(q + n * cols);
    int32_t *s = (int32_t *)(d + n * nb);
    for (int64_t r = 0; r < n; r++)
        quantize_row(x + r * cols, cols, q + r * cols, d + r * nb, s + r * nb);
    const int64_t groups = (rows + GROUP - 1) / GROUP;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (threads > groups) threads = (int)groups;
    head_job jobs[64];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (head_job){
            .packed = (const uint8_t *)packed,
            .group_begin = groups * t / threads,
            .group_end = groups * (t + 1) / threads,
            .nb = nb, .cols = cols, .rows = rows, .n = n,
            .x = {q, d, s}, .out = out, .stop = stop,
        };
    }
    /* OpenMP, as llama.cpp's CPU backend: its worker threads wait spinning for
     * a while after each decode, and a team of our own would have to share
     * the cores with them; the same runtime hands this loop to those threads. */
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) run_groups(&jobs[t]);
    return stop && *(const volatile char *)stop ? 1 : 0;
#else
    (void)packed; (void)rows; (void)cols; (void)x; (void)n; (void)out; (void)scratch;
    (void)threads; (void)stop;
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
