/* The preload's second half (with nccl.c, emulate/driver/build.py: nccl_path): marks where the
 * real CUDA runtime is entered and left, so the emulated driver's host gaps end where the script called the
 * runtime, not where the runtime called the driver. The simulator adds the whole calibrated cost of each runtime
 * call (emulate/host_call_costs.json: runtime and driver together, from real profiles) to every captured gap; on
 * the emulated driver the real libcudart runs, and its own host time would otherwise be counted twice (in the gap,
 * and in the added cost). Each wrapper below calls stepcast_runtime_mark(1) on entry and (0) on return (the driver's
 * capture.c), then the runtime's own entry point (dlsym RTLD_NEXT). Calls that bypass libcudart (Triton's
 * launcher, cuBLAS's and cuDNN's statically linked runtimes) keep the driver-entry gap. */
#define _GNU_SOURCE

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*mark_fn)(int entering);
static __thread int depth;

static mark_fn runtime_mark(void) {
    static mark_fn fn;
    static int looked;
    if (!looked) {
        fn = (mark_fn)dlsym(RTLD_DEFAULT, "stepcast_runtime_mark");
        if (!fn) {
            void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            if (lib) fn = (mark_fn)dlsym(lib, "stepcast_runtime_mark");
        }
        looked = fn != NULL;  /* the driver may not be loaded yet: look again next time */
    }
    return fn;
}

static void enter(void) {
    if (depth++ == 0) {
        mark_fn m = runtime_mark();
        if (m) m(1);
    }
}
static void leave(void) {
    if (--depth == 0) {
        mark_fn m = runtime_mark();
        if (m) m(0);
    }
}

#define WRAP(name, params, args)                                        \
    EXPORT cudaError_t name params {                                    \
        static cudaError_t (*real) params;                              \
        if (!real) real = (cudaError_t (*) params)dlsym(RTLD_NEXT, #name); \
        if (!real) return cudaErrorNotSupported;                        \
        enter();                                                        \
        cudaError_t rc = real args;                                     \
        leave();                                                        \
        return rc;                                                      \
    }

WRAP(__cudaLaunchKernel, (cudaKernel_t k, dim3 g, dim3 b, void **a, size_t s, cudaStream_t st), (k, g, b, a, s, st))
WRAP(cudaLaunchKernel, (const void *f, dim3 g, dim3 b, void **a, size_t s, cudaStream_t st), (f, g, b, a, s, st))
WRAP(cudaLaunchKernelExC, (const cudaLaunchConfig_t *c, const void *f, void **a), (c, f, a))
WRAP(cudaMemcpy, (void *d, const void *s, size_t n, enum cudaMemcpyKind k), (d, s, n, k))
WRAP(cudaMemcpyAsync, (void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st), (d, s, n, k, st))
WRAP(cudaMemcpyPeerAsync, (void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st), (d, dd, s, sd, n, st))
WRAP(cudaMemset, (void *p, int v, size_t n), (p, v, n))
WRAP(cudaMemsetAsync, (void *p, int v, size_t n, cudaStream_t st), (p, v, n, st))
WRAP(cudaEventRecord, (cudaEvent_t e, cudaStream_t st), (e, st))
WRAP(cudaEventRecordWithFlags, (cudaEvent_t e, cudaStream_t st, unsigned int f), (e, st, f))
WRAP(cudaStreamWaitEvent, (cudaStream_t st, cudaEvent_t e, unsigned int f), (st, e, f))
WRAP(cudaStreamSynchronize, (cudaStream_t st), (st))
WRAP(cudaEventSynchronize, (cudaEvent_t e), (e))
WRAP(cudaDeviceSynchronize, (void), ())
WRAP(cudaMalloc, (void **p, size_t n), (p, n))
WRAP(cudaMallocAsync, (void **p, size_t n, cudaStream_t st), (p, n, st))
WRAP(cudaFree, (void *p), (p))
WRAP(cudaFreeAsync, (void *p, cudaStream_t st), (p, st))
WRAP(cudaGraphLaunch, (cudaGraphExec_t g, cudaStream_t st), (g, st))
