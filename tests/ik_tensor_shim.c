/* LD_PRELOAD shim: log the buffer every model tensor is placed in, and every buffer's bytes.
 *
 * ik_llama.cpp logs no per-layer device lines, and its "Tensor ... buffer type overridden"
 * lines show only what -ot / -ncmoe moved. To check a placement tensor by tensor, this shim
 * wraps the functions a tensor gets its memory from and prints on stderr
 *
 *     moeplan-tensor <tensor name> <buffer name>    (ggml_backend_tensor_alloc: every tensor
 *                                                    placed in a backend buffer, mmap'd or not)
 *     moeplan-alloc <buffer type name> <bytes>      (ggml_backend_buft_alloc_buffer)
 *     moeplan-alloc CPU_Mapped <bytes>              (ggml_backend_cpu_buffer_from_ptr)
 *
 * Only tensors whose name ends in .weight, .bias or .scale are logged (graph nodes and cache
 * tensors go through the same function). Written for moeplan's tests; contains no
 * ik_llama.cpp code. build: cc -shared -fPIC -O1 -o ik_tensor_shim.so ik_tensor_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef void * buft_t;
typedef void * buf_t;

static void * sym(const char * name) { return dlsym(RTLD_DEFAULT, name); }

static int ends_with(const char * s, const char * tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

void ggml_backend_tensor_alloc(buf_t buffer, void * tensor, void * addr) {
    static void (*real)(buf_t, void *, void *) = NULL;
    static const char * (*get_name)(const void *) = NULL;
    static const char * (*buf_name)(buf_t) = NULL;
    if (!real) {
        real = (void (*)(buf_t, void *, void *)) dlsym(RTLD_NEXT, "ggml_backend_tensor_alloc");
        get_name = (const char * (*)(const void *)) sym("ggml_get_name");
        buf_name = (const char * (*)(buf_t)) sym("ggml_backend_buffer_name");
    }
    real(buffer, tensor, addr);
    const char * name = get_name ? get_name(tensor) : NULL;
    if (name && (ends_with(name, ".weight") || ends_with(name, ".bias") || ends_with(name, ".scale"))) {
        fprintf(stderr, "moeplan-tensor %s %s\n", name, buf_name ? buf_name(buffer) : "?");
        fflush(stderr);
    }
}

buf_t ggml_backend_buft_alloc_buffer(buft_t buft, size_t size) {
    static buf_t (*real)(buft_t, size_t) = NULL;
    static const char * (*type_name)(buft_t) = NULL;
    if (!real) {
        real = (buf_t (*)(buft_t, size_t)) dlsym(RTLD_NEXT, "ggml_backend_buft_alloc_buffer");
        type_name = (const char * (*)(buft_t)) sym("ggml_backend_buft_name");
    }
    buf_t buf = real(buft, size);
    if (size > 0) {
        fprintf(stderr, "moeplan-alloc %s %zu\n", type_name ? type_name(buft) : "?", size);
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
