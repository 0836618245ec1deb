// Cycles per KV cell and query head of ggml's CPU attention for one query token (decode): the
// per-cell constants of moeplan/planner/cost/attention.py (OPS_K_*, OPS_V_*, CELL_FIXED_CYCLES,
// NOFA_CELL_FIXED_CYCLES).
//
// One thread runs ggml_flash_attn_ext (-fa 1) or mul_mat(K, Q) + soft_max_ext + mul_mat(V^T, KQ)
// (-fa 0) for n_head q heads over n_kv cells of an F16 or Q8_0 cache (GQA: n_head_kv KV heads),
// best of ROUNDS runs of 0.3 s each; the clock (GHZ, measured separately: a dependent-imul chain)
// turns seconds into cycles.
//
//   cc -O2 -o ggml_attn_cell_cost benchmarks/kernels/ggml_attn_cell_cost.c -I$LLAMA/ggml/include
//      -L$BUILD/bin -lggml -lggml-base -lggml-cpu -Wl,-rpath,$BUILD/bin   (one line)
//   ./ggml_attn_cell_cost GHZ [n_kv=6000] [d=128] [n_head=32] [n_head_kv=4] [rounds=10]
#include "ggml.h"
#include "ggml-cpu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void fill(struct ggml_tensor *t) {
    const int64_t n = ggml_nelements(t);
    float *tmp = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) tmp[i] = (rand() / (float) RAND_MAX - 0.5f) * 0.2f;
    if (t->type == GGML_TYPE_F32) memcpy(t->data, tmp, sizeof(float) * n);
    else ggml_quantize_chunk(t->type, tmp, t->data, 0, n / t->ne[0], t->ne[0], NULL);
    free(tmp);
}

static double run(int fa, enum ggml_type kv_type, int n_kv, int d, int n_head, int n_head_kv, int rounds) {
    struct ggml_init_params params = {(size_t) 2 * n_kv * d * n_head_kv * 4 + (size_t) n_head * n_kv * 8 + (256u << 20), NULL, false};
    struct ggml_context *ctx = ggml_init(params);
    struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, 1, n_head);       // [d, n_tokens, n_head]
    struct ggml_tensor *k = ggml_new_tensor_3d(ctx, kv_type, d, n_kv, n_head_kv);
    struct ggml_tensor *v = ggml_new_tensor_3d(ctx, kv_type, d, n_kv, n_head_kv);
    fill(q); fill(k); fill(v);
    struct ggml_tensor *out;
    const float scale = 1.0f / sqrtf((float) d);
    if (fa) {
        out = ggml_flash_attn_ext(ctx, q, k, v, NULL, scale, 0.0f, 0.0f);
    } else {
        struct ggml_tensor *kq = ggml_mul_mat(ctx, k, q);                 // [n_kv, 1, n_head]
        kq = ggml_soft_max_ext(ctx, kq, NULL, scale, 0.0f);
        // llama.cpp keeps V transposed in the cache without FA: [n_kv, d] rows per KV head
        struct ggml_tensor *vt16 = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, n_kv, d, n_head_kv);
        fill(vt16);
        out = ggml_mul_mat(ctx, vt16, kq);
    }
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    struct ggml_cplan plan = ggml_graph_plan(gf, 1, NULL);
    plan.work_data = malloc(plan.work_size + 64);
    ggml_graph_compute(gf, &plan);
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        int reps = 0;
        double t0 = now_s(), el;
        while ((el = now_s() - t0) < 0.3) { ggml_graph_compute(gf, &plan); reps++; }
        if (el / reps < best) best = el / reps;
    }
    free(plan.work_data);
    ggml_free(ctx);
    return best;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s GHZ [n_kv d n_head n_head_kv rounds]\n", argv[0]); return 2; }
    const double ghz = atof(argv[1]);
    const int n_kv = argc > 2 ? atoi(argv[2]) : 6000, d = argc > 3 ? atoi(argv[3]) : 128;
    const int n_head = argc > 4 ? atoi(argv[4]) : 32, n_head_kv = argc > 5 ? atoi(argv[5]) : 4;
    const int rounds = argc > 6 ? atoi(argv[6]) : 10;
    srand(1);
    printf("n_kv %d, d %d, %d q heads over %d KV heads, one thread, %.2f GHz\n", n_kv, d, n_head, n_head_kv, ghz);
    const struct { int fa; enum ggml_type t; const char *name; } cases[] = {
        {1, GGML_TYPE_F16, "fa 1, f16 cache"}, {1, GGML_TYPE_Q8_0, "fa 1, q8_0 cache"}, {0, GGML_TYPE_F16, "fa 0, f16 cache"}};
    for (int i = 0; i < 3; i++) {
        double s = run(cases[i].fa, cases[i].t, n_kv, d, n_head, n_head_kv, rounds);
        printf("%-18s %9.3f ms  %7.1f cycles per cell and q head\n", cases[i].name, s * 1e3, s * ghz * 1e9 / ((double) n_kv * n_head));
    }
    return 0;
}
