/* CUDA runtime API (libcudart.so.13 entry points torch imports): device queries from the target's catalog
 * figures, virtual memory, streams, events, kernel registration and launches. */
#define _GNU_SOURCE
#include "shim.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- device queries ---------------- */
static int reserved_smem_per_block(void) { return sc_cfg.cc_major >= 8 ? 1024 : 0; }

int sc_device_attribute(int attr, int device, int *value) {
    sc_init();
    if (device < 0 || device >= sc_cfg.device_count) return cudaErrorInvalidDevice;
    int v = 0;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: v = 64; break;
    case cudaDevAttrMaxGridDimX: v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: v = 48 << 10; break;
    case cudaDevAttrTotalConstantMemory: v = 64 << 10; break;
    case cudaDevAttrWarpSize: v = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: case cudaDevAttrMaxRegistersPerMultiprocessor: v = 65536; break;
    case cudaDevAttrClockRate: v = sc_cfg.clock_khz; break;
    case cudaDevAttrMultiProcessorCount: v = sc_cfg.sm_count; break;
    case cudaDevAttrIntegrated: v = 0; break;
    case cudaDevAttrCanMapHostMemory: case cudaDevAttrConcurrentKernels: case cudaDevAttrUnifiedAddressing: v = 1; break;
    case cudaDevAttrPciBusId: v = device + 1; break;
    case cudaDevAttrMemoryClockRate: v = sc_cfg.mem_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: v = sc_cfg.mem_bus_width; break;
    case cudaDevAttrL2CacheSize: v = sc_cfg.l2_bytes; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: v = sc_cfg.max_threads_per_sm; break;
    case cudaDevAttrAsyncEngineCount: v = 2; break;
    case cudaDevAttrComputeCapabilityMajor: v = sc_cfg.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: v = sc_cfg.cc_minor; break;
    case cudaDevAttrStreamPrioritiesSupported: case cudaDevAttrManagedMemory: v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: v = (int)sc_cfg.smem_per_sm; break;
    case cudaDevAttrMultiGpuBoardGroupID: v = device; break;
    case cudaDevAttrCooperativeLaunch: case cudaDevAttrHostRegisterSupported: case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrGPUDirectRDMASupported: case cudaDevAttrIpcEventSupport: v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = (int)sc_cfg.smem_per_sm - reserved_smem_per_block(); break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: v = sc_cfg.cc_major >= 8 ? 32 : 16; break;
    case cudaDevAttrMaxPersistingL2CacheSize: v = sc_cfg.l2_bytes / 4 * 3; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: v = reserved_smem_per_block(); break;
    case cudaDevAttrClusterLaunch: v = sc_cfg.cc_major >= 9; break;
    default: v = 0;
    }
    *value = v;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    return (cudaError_t)sc_device_attribute((int)attr, device, value);
}

SC_EXPORT cudaError_t cudaGetDeviceCount(int *count) { sc_init(); *count = sc_cfg.device_count; return cudaSuccess; }

SC_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    sc_init();
    if (device < 0 || device >= sc_cfg.device_count) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", sc_cfg.name);
    for (int i = 0; i < 16; i++) p->uuid.bytes[i] = (char)(0x5c + i * 7 + device);
    p->totalGlobalMem = sc_cfg.mem_bytes;
    p->sharedMemPerBlock = 48 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->totalConstMem = 64 << 10;
    p->major = sc_cfg.cc_major;
    p->minor = sc_cfg.cc_minor;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = sc_cfg.sm_count;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->pciBusID = device + 1;
    p->asyncEngineCount = 2;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = sc_cfg.mem_bus_width;
    p->l2CacheSize = sc_cfg.l2_bytes;
    p->persistingL2CacheMaxSize = sc_cfg.l2_bytes / 4 * 3;
    p->maxThreadsPerMultiProcessor = sc_cfg.max_threads_per_sm;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = sc_cfg.smem_per_sm;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->multiGpuBoardGroupID = device;
    p->computePreemptionSupported = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = sc_cfg.smem_per_sm - (size_t)reserved_smem_per_block();
    p->maxBlocksPerMultiProcessor = sc_cfg.cc_major >= 8 ? 32 : 16;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = (size_t)reserved_smem_per_block();
    p->hostRegisterSupported = 1;
    p->memoryPoolsSupported = 1;
    p->gpuDirectRDMASupported = 1;
    p->ipcEventSupported = 1;
    p->clusterLaunch = sc_cfg.cc_major >= 9;
    p->deviceNumaId = -1;
    p->hostNumaId = -1;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaGetDevice(int *device) { *device = sc_current_device(); return cudaSuccess; }
SC_EXPORT cudaError_t cudaSetDevice(int device) {
    sc_init();
    if (device < 0 || device >= sc_cfg.device_count) return cudaErrorInvalidDevice;
    sc_set_current_device(device);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaDriverGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
SC_EXPORT cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
SC_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device) {
    snprintf(id, (size_t)len, "0000:%02x:00.0", device + 1);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) { (void)d; (void)peer; *can = 1; return cudaSuccess; }
SC_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) { (void)peer; (void)flags; return cudaSuccess; }
SC_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}

static const char *error_name(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    default: return "cudaErrorUnknown";
    }
}
SC_EXPORT const char *cudaGetErrorName(cudaError_t e) { return error_name(e); }
SC_EXPORT const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory (stepcast virtual device)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (stepcast virtual device)";
    case cudaErrorNotSupported: return "operation not supported by the stepcast virtual device";
    default: return "error reported by the stepcast virtual device";
    }
}
SC_EXPORT cudaError_t cudaGetLastError(void) { return cudaSuccess; }
SC_EXPORT cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }

/* ---------------- memory ---------------- */
SC_EXPORT cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    uint64_t t = sc_call_enter();
    sc_init();
    if (sc_device_alloc(bytes, ptr) != 0) {
        sc_emit(t, 'M', "0\t%zu\t0", bytes);
        return cudaErrorMemoryAllocation;
    }
    sc_emit(t, 'M', "%lu\t%zu\t1", (unsigned long)(uintptr_t)*ptr, bytes);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t bytes, cudaStream_t s) { (void)s; return cudaMalloc(ptr, bytes); }
SC_EXPORT cudaError_t cudaFree(void *ptr) {
    uint64_t t = sc_call_enter();
    if (!ptr) return cudaSuccess;
    size_t bytes = sc_device_free(ptr);
    sc_emit(t, 'f', "%lu\t%zu", (unsigned long)(uintptr_t)ptr, bytes);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t s) { (void)s; return cudaFree(ptr); }
SC_EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    sc_init();
    size_t used = sc_device_used_bytes(sc_current_device());
    *total = sc_cfg.mem_bytes;
    *free_b = sc_cfg.mem_bytes - used;
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    (void)flags;
    if (posix_memalign(ptr, 4096, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
    sc_host_range_add(*ptr, bytes);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaFreeHost(void *ptr) { sc_host_range_remove(ptr); free(ptr); return cudaSuccess; }
SC_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned int flags) {
    (void)flags;
    sc_host_range_add(ptr, bytes);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaHostUnregister(void *ptr) { sc_host_range_remove(ptr); return cudaSuccess; }

SC_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr) {
    memset(a, 0, sizeof *a);
    if (sc_is_device_ptr(ptr)) {
        a->type = cudaMemoryTypeDevice;
        a->device = sc_current_device();
        a->devicePointer = (void *)ptr;
    } else if (sc_is_pinned_host_ptr(ptr)) {
        a->type = cudaMemoryTypeHost;
        a->device = sc_current_device();
        a->devicePointer = a->hostPointer = (void *)ptr;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        a->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}

static const char *direction(const void *dst, const void *src, enum cudaMemcpyKind kind) {
    if (kind == cudaMemcpyDefault) {
        int dd = sc_is_device_ptr(dst), sd = sc_is_device_ptr(src);
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    switch (kind) {
    case cudaMemcpyHostToDevice: return "h2d";
    case cudaMemcpyDeviceToHost: return "d2h";
    case cudaMemcpyDeviceToDevice: return "d2d";
    default: return "h2h";
    }
}

/* The data movement the virtual device does (see datapath.c): host-to-host for real; small copies into device
 * memory for real (remembered); device-to-host returns the real bytes of a remembered range, else zeros. */
static void move(void *dst, const void *src, size_t bytes, const char *dir) {
    int small = bytes <= sc_real_limit() && sc_device_memory_writable();
    if (dir[0] == 'h' && dir[2] == 'h') {
        memmove(dst, src, bytes);
    } else if (dir[2] == 'd') {   /* into device memory */
        if (small && (dir[0] == 'h' || sc_range_known(src, bytes))) {
            memmove(dst, src, bytes);
            sc_range_written(dst, bytes);
        } else if (sc_is_device_ptr(dst)) {
            sc_range_forget(dst, bytes);
        }
    } else {                      /* device to host */
        if (small && sc_range_readback(src, bytes)) memmove(dst, src, bytes);
        else memset(dst, 0, bytes);
    }
}

static void device_memset(void *ptr, int value, size_t bytes) {
    if (bytes <= sc_real_limit() && sc_device_memory_writable() && sc_is_device_ptr(ptr)) {
        memset(ptr, value, bytes);
        sc_range_written(ptr, bytes);
    } else if (sc_is_device_ptr(ptr)) {
        sc_range_forget(ptr, bytes);
    }
}

static void log_copy(uint64_t t, size_t bytes, const char *dir, cudaStream_t s, int blocking) {
    sc_emit(t, 'C', "%d\t%zu\t%s\t%d", sc_stream_id(s), bytes, dir, blocking);
}

SC_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    uint64_t t = sc_call_enter();
    const char *dir = direction(dst, src, kind);
    move(dst, src, bytes, dir);
    log_copy(t, bytes, dir, NULL, 1);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                                      cudaStream_t s) {
    uint64_t t = sc_call_enter();
    const char *dir = direction(dst, src, kind);
    move(dst, src, bytes, dir);
    log_copy(t, bytes, dir, s, 0);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                        size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    uint64_t t = sc_call_enter();
    const char *dir = direction(dst, src, kind);
    for (size_t r = 0; r < height; r++) move((char *)dst + r * dpitch, (const char *)src + r * spitch, width, dir);
    log_copy(t, width * height, dir, s, 0);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t bytes, cudaStream_t s) {
    (void)dd; (void)sd;
    move(dst, src, bytes, "d2d");
    log_copy(sc_call_enter(), bytes, "d2d", s, 0);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t bytes, size_t offset,
                                         enum cudaMemcpyKind kind) {
    (void)symbol; (void)src; (void)offset; (void)kind;
    log_copy(sc_call_enter(), bytes, "h2d", NULL, 1);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    device_memset(ptr, value, bytes);
    sc_emit(sc_call_enter(), 'S', "0\t%zu", bytes);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t s) {
    device_memset(ptr, value, bytes);
    sc_emit(sc_call_enter(), 'S', "%d\t%zu", sc_stream_id(s), bytes);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaGetSymbolAddress(void **ptr, const void *symbol) {
    (void)symbol;
    static void *fake;
    if (!fake) sc_device_alloc(1 << 20, &fake);
    *ptr = fake;
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
    (void)pool; (void)attr;
    memset(value, 0, sizeof(uint64_t));
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
    static char pools[SC_MAX_DEVICES];
    *pool = (cudaMemPool_t)&pools[device & (SC_MAX_DEVICES - 1)];
    return cudaSuccess;
}

/* ---------------- streams, events, synchronisation ---------------- */
SC_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = sc_new_stream(); return cudaSuccess; }
SC_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) { (void)f; *s = sc_new_stream(); return cudaSuccess; }
SC_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int prio) {
    (void)f; (void)prio;
    *s = sc_new_stream();
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
SC_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t s, int *prio) { (void)s; *prio = 0; return cudaSuccess; }
SC_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return cudaSuccess; }
SC_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    sc_emit(sc_call_enter(), 'Y', "%d", sc_stream_id(s));
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaDeviceSynchronize(void) { sc_emit(sc_call_enter(), 'D', "%s", ""); return cudaSuccess; }
SC_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    sc_emit(sc_call_enter(), 'W', "%d\t%d", sc_stream_id(s), sc_event_id(e));
    return cudaSuccess;
}
/* stream capture and CUDA graphs: graph.c */
SC_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = sc_new_event(); return cudaSuccess; }
SC_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f) { (void)f; *e = sc_new_event(); return cudaSuccess; }
SC_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
SC_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    sc_event_mark(e);
    sc_emit(sc_call_enter(), 'R', "%d\t%d", sc_event_id(e), sc_stream_id(s));
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int f) {
    (void)f;
    return cudaEventRecord(e, s);
}
SC_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }
SC_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    sc_emit(sc_call_enter(), 'E', "%d", sc_event_id(e));
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    /* the predicted device time of the work between, when the capture layer registered a predictor; else the
     * nominal event clock (core.c, sc_event_elapsed_ms) */
    return sc_event_elapsed_ms(a, b, ms) == 0 ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
SC_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
    (void)s;
    fn(data);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *data, unsigned int f) {
    (void)f;
    cb(s, cudaSuccess, data);
    return cudaSuccess;
}

/* ---------------- kernel registration and launch ---------------- */
static int fatbin_handles;
SC_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
    (void)fatCubin;
    __atomic_fetch_add(&fatbin_handles, 1, __ATOMIC_RELAXED);
    return (void **)calloc(1, sizeof(void *));
}
SC_EXPORT void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
SC_EXPORT void __cudaUnregisterFatBinary(void **h) { (void)h; }
SC_EXPORT void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                                      int threadLimit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
    (void)h; (void)deviceFun; (void)threadLimit; (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
    sc_func_register(hostFun, deviceName);
}
SC_EXPORT void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                                 size_t size, int constant, int global) {
    (void)h; (void)hostVar; (void)deviceAddress; (void)deviceName; (void)ext; (void)size; (void)constant; (void)global;
}
SC_EXPORT char __cudaInitModule(void **h) { (void)h; return 1; }

/* <<<>>> launches: the stub pushes the configuration, then pops it and launches. */
typedef struct { dim3 grid, block; size_t shmem; void *stream; } launch_cfg;
static __thread launch_cfg cfg_stack[16];
static __thread int cfg_depth;
SC_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void *stream) {
    if (cfg_depth < 16) cfg_stack[cfg_depth] = (launch_cfg){grid, block, shmem, stream};
    cfg_depth++;
    return 0;
}
SC_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream) {
    if (cfg_depth <= 0) return cudaErrorInvalidConfiguration;
    cfg_depth--;
    launch_cfg c = cfg_stack[cfg_depth < 16 ? cfg_depth : 15];
    *grid = c.grid;
    *block = c.block;
    *shmem = c.shmem;
    *(void **)stream = c.stream;
    return cudaSuccess;
}
/* CUDA 12.4+ stubs: __cudaGetKernel(&handle, stub) once, then __cudaLaunchKernel(handle, ...). The handle we
 * give out is the host stub itself, so both paths reach the registered name. */
SC_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun) {
    *kernel = (cudaKernel_t)hostFun;
    return cudaSuccess;
}
SC_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shmem,
                                         cudaStream_t s) {
    (void)args;
    sc_log_kernel(sc_call_enter(), kernel, g.x, g.y, g.z, b.x, b.y, b.z, shmem, s);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s) {
    (void)args;
    sc_log_kernel(sc_call_enter(), func, g.x, g.y, g.z, b.x, b.y, b.z, shmem, s);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem,
                                                  cudaStream_t s) {
    return cudaLaunchKernel(func, g, b, args, shmem, s);
}
SC_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args) {
    (void)args;
    sc_log_kernel(sc_call_enter(), func, c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y,
                  c->blockDim.z, c->dynamicSmemBytes, c->stream);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *jo, void **jv,
                                          unsigned int nj, enum cudaLibraryOption *lo, void **lv, unsigned int nl) {
    (void)code; (void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl;
    *lib = (cudaLibrary_t)calloc(1, 16);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name) {
    (void)lib;
    *k = (cudaKernel_t)sc_func_register(NULL, strdup(name));
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t lib) { (void)lib; return cudaSuccess; }

SC_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *func) {
    (void)func;
    sc_init();
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 32;
    /* The version of the code the fat binary would run: the target's own architecture, but never below the oldest
     * one a CUDA 13 build carries (sm_75): on a V100/P100/P4 target an older answer sends CUB's dispatch to a
     * kernel variant the binary lacks ("invalid device function" in radix sort, embedding backward). */
    int arch = sc_cfg.cc_major * 10 + sc_cfg.cc_minor;
    a->ptxVersion = a->binaryVersion = arch < SC_OLDEST_ARCH ? SC_OLDEST_ARCH : arch;
    a->maxDynamicSharedSizeBytes = 48 << 10;
    a->preferredShmemCarveout = -1;
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    (void)func; (void)attr; (void)value;
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *func, int block,
                                                                             size_t smem, unsigned int flags) {
    (void)func; (void)flags;
    sc_init();
    int by_threads = block > 0 ? sc_cfg.max_threads_per_sm / block : 1;
    int by_smem = smem ? (int)(sc_cfg.smem_per_sm / (smem + (size_t)reserved_smem_per_block())) : 1 << 30;
    int limit = sc_cfg.cc_major >= 8 ? 32 : 16;
    int v = by_threads < by_smem ? by_threads : by_smem;
    *n = v < limit ? (v > 0 ? v : 0) : limit;
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int block, size_t smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block, smem, 0);
}

/* Driver entry points by name: ours when the shim defines them, else a generic success-returning function. */
int sc_driver_generic(void);
SC_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                                       unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult *status) {
    (void)version; (void)flags;
    void *p = dlsym(RTLD_DEFAULT, symbol);
    if (!p) p = (void *)sc_driver_generic;   /* looked up by torch's driver table, rarely called */
    *fn = p;
    if (status) *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *ptr) {
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &ptr, sizeof ptr);
    return cudaSuccess;
}
SC_EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e) {
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &e, sizeof e);
    return cudaSuccess;
}
