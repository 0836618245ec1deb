/* LD_PRELOAD shim: log the exact size of every ggml backend buffer llama.cpp allocates.
 *
 * llama.cpp prints its buffers in MiB with two decimals (a 5 KiB resolution); moeplan checks
 * the KV cache to the byte, so this shim wraps the two functions every buffer comes from and
 * prints one line per buffer on stderr:
 *
 *     moeplan-alloc <buffer type name> <bytes>
 *
 *   ggml_backend_buft_alloc_buffer   KV cache, compute buffers, output buffer, weights (no mmap)
 *   ggml_backend_cpu_buffer_from_ptr the CPU_Mapped weight buffers (mmap)
 *
 * Both are exported by libggml-base and reached through the PLT from libllama / libggml-cpu,
 * so symbol interposition sees every call. Zero-byte buffers (llama.cpp's op-support probes)
 * are not logged. Written for moeplan's tests; contains no llama.cpp code.
 *
 * build: cc -shared -fPIC -O1 -o llama_alloc_shim.so llama_alloc_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef void * buft_t;
typedef void * buf_t;

static const char * type_name(buft_t buft) {
    static const char * (*fn)(buft_t) = NULL;
    if (!fn) {
        fn = (const char * (*)(buft_t)) dlsym(RTLD_DEFAULT, "ggml_backend_buft_name");
    }
    return fn ? fn(buft) : "?";
}

buf_t ggml_backend_buft_alloc_buffer(buft_t buft, size_t size) {
    static buf_t (*real)(buft_t, size_t) = NULL;
    if (!real) {
        real = (buf_t (*)(buft_t, size_t)) dlsym(RTLD_NEXT, "ggml_backend_buft_alloc_buffer");
    }
    buf_t buf = real(buft, size);
    if (size > 0) {
        fprintf(stderr, "moeplan-alloc %s %zu\n", type_name(buft), size);
        fflush(stderr);
    }
    return buf;
}

buf_t ggml_backend_cpu_buffer_from_ptr(void * ptr, size_t size) {
    static buf_t (*real)(void *, size_t) = NULL;
    if (!real) {
        real = (buf_t (*)(void *, size_t)) dlsym(RTLD_NEXT, "ggml_backend_cpu_buffer_from_ptr");
    }
    buf_t buf = real(ptr, size);
    if (size > 0) {
        fprintf(stderr, "moeplan-alloc CPU_Mapped %zu\n", size);
        fflush(stderr);
    }
    return buf;
}
