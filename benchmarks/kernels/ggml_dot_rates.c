// Batch-1 dot-product rate of ggml's CPU kernels per weight type, relative to Q8_0: the
// [type_cost] table of moeplan/profiles/backends.toml (and [ik_llama_cpp.type_cost] when built
// against ik_llama.cpp's ggml).
//
// One thread multiplies an M x K weight matrix of each type by one f32 vector (ggml_mul_mat,
// n = 1: the decode path, src1 quantized to the type's vec_dot partner, then vec_dot per row).
// M x K is small enough to stay in the core's L2, so the figure is the kernel's compute rate,
// not DRAM's. Each type runs 0.15 s per round, rounds interleave the types, and the best round
// counts (the machine is shared; the best is the least disturbed).
//
// Build against a CPU build of llama.cpp (or ik_llama.cpp), e.g.
//   cc -O2 -o ggml_dot_rates benchmarks/kernels/ggml_dot_rates.c -I$LLAMA/ggml/include
//      -L$BUILD/bin -lggml -lggml-base -lggml-cpu -Wl,-rpath,$BUILD/bin   (one line)
//   ./ggml_dot_rates 128 4096 20        # M K rounds; types default to the list below
//   ./ggml_dot_rates 128 4096 20 q8_0 iq2_s iq3_s
// ik_llama.cpp: add -DIK_GGML and link -lggml only (its ggml is one library, and its
// ggml_quantize_chunk and ggml_graph_plan take other arguments).
#include "ggml.h"
#if __has_include("ggml-cpu.h")
#include "ggml-cpu.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *DEFAULT_TYPES[] = {
    "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl",
    "iq4_xs", "iq3_s", "iq3_xxs", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_s", "iq1_m", "mxfp4",
    "tq1_0", "tq2_0", "f16", "bf16", "f32", NULL};

#define MAX_TYPES 64

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s M K ROUNDS [type ...]  (e.g. 128 4096 20)\n", argv[0]);
        return 2;
    }
    const int M = atoi(argv[1]), K = atoi(argv[2]), rounds = atoi(argv[3]);
    const char **names = argc > 4 ? (const char **) &argv[4] : DEFAULT_TYPES;
    float *src = malloc(sizeof(float) * (size_t) M * K);
    float *imat = malloc(sizeof(float) * K);
    srand(1);
    for (size_t i = 0; i < (size_t) M * K; i++) src[i] = rand() / (float) RAND_MAX - 0.5f;
    for (int i = 0; i < K; i++) imat[i] = 1.0f;

    struct ggml_cgraph *graphs[MAX_TYPES];
    struct ggml_cplan plans[MAX_TYPES];
    const char *labels[MAX_TYPES];
    double bytes_per_weight[MAX_TYPES], best[MAX_TYPES];
    int n = 0;
    for (int t = 0; names[t] && n < MAX_TYPES; t++) {
        enum ggml_type type = GGML_TYPE_COUNT;
        for (int j = 0; j < GGML_TYPE_COUNT; j++) {
            const char *tn = ggml_type_name((enum ggml_type) j);
            if (tn && strcmp(tn, names[t]) == 0) type = (enum ggml_type) j;
        }
        if (type == GGML_TYPE_COUNT) {
            fprintf(stderr, "skipping %s: not a type of this ggml\n", names[t]);
            continue;
        }
        struct ggml_init_params params = {(size_t) M * K * 4 + (size_t) K * 8 + (64u << 20), NULL, false};
        struct ggml_context *ctx = ggml_init(params);
        struct ggml_tensor *a = ggml_new_tensor_2d(ctx, type, K, M);
        struct ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, 1);
        memcpy(b->data, src, sizeof(float) * K);
        ggml_quantize_init(type);
        const float *im = ggml_quantize_requires_imatrix(type) ? imat : NULL;
#ifdef IK_GGML
        ggml_quantize_chunk(type, src, a->data, 0, M, K, im, NULL);
#else
        ggml_quantize_chunk(type, src, a->data, 0, M, K, im);
#endif
        struct ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, ggml_mul_mat(ctx, a, b));
#ifdef IK_GGML
        plans[n] = ggml_graph_plan(gf, 1);
#else
        plans[n] = ggml_graph_plan(gf, 1, NULL);
#endif
        plans[n].work_data = malloc(plans[n].work_size + 64);
        for (int w = 0; w < 20; w++) ggml_graph_compute(gf, &plans[n]);
        graphs[n] = gf;
        labels[n] = names[t];
        bytes_per_weight[n] = (double) ggml_row_size(type, K) / K;
        best[n] = 0.0;
        n++;
    }
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++) {
            int reps = 0;
            double t0 = now_s(), elapsed;
            while ((elapsed = now_s() - t0) < 0.15) {
                ggml_graph_compute(graphs[i], &plans[i]);
                reps++;
            }
            double rate = (double) M * K * reps / elapsed;
            if (rate > best[i]) best[i] = rate;
        }
    }
    printf("%-8s %12s %14s %16s\n", "type", "Gweights/s", "bytes/weight", "cost vs first");
    for (int i = 0; i < n; i++)
        printf("%-8s %12.2f %14.3f %16.2f\n", labels[i], best[i] / 1e9, bytes_per_weight[i], best[0] / best[i]);
    return 0;
}
