/* CUDA driver API: the cu* entry points torch resolves by name (libcaffe2_nvrtc links libcuda.so.1, c10's driver
 * API asks cudaGetDriverEntryPointByVersion). The shim itself answers to the soname libcuda.so.1. */
#define _GNU_SOURCE
#include "shim.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SC_EXPORT int sc_driver_generic(void) { return CUDA_SUCCESS; }

static char dummy_ctx[SC_MAX_DEVICES];

SC_EXPORT CUresult cuInit(unsigned int flags) { (void)flags; sc_init(); return CUDA_SUCCESS; }
SC_EXPORT CUresult cuDriverGetVersion(int *v) { *v = CUDA_VERSION; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == CUDA_SUCCESS ? "no error" : "error reported by the stepcast virtual device";
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = e == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuDeviceGetCount(int *n) { sc_init(); *n = sc_cfg.device_count; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice d) {
    /* CUdevice_attribute and cudaDeviceAttr share their numbering */
    return sc_device_attribute((int)attr, d, v) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
SC_EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)&dummy_ctx[sc_current_device()]; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuCtxGetDevice(CUdevice *d) { *d = sc_current_device(); return CUDA_SUCCESS; }
SC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
    *flags = 0;
    *active = d == sc_current_device();
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    *c = (CUcontext)&dummy_ctx[d & (SC_MAX_DEVICES - 1)];
    return CUDA_SUCCESS;
}
/* Modules (Triton's compiled kernels, NVRTC output): the image is never run, so a module is an empty handle; the
 * kernel names come with cuModuleGetFunction. A path that cannot be read fails as on the real driver. */
SC_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *img) {
    if (!img) return CUDA_ERROR_INVALID_VALUE;
    *m = (CUmodule)calloc(1, 16);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuModuleLoad(CUmodule *m, const char *path) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
    fclose(f);
    return cuModuleLoadData(m, path);
}
SC_EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *img, unsigned int n, CUjit_option *o, void **v) {
    (void)n; (void)o; (void)v;
    return cuModuleLoadData(m, img);
}
SC_EXPORT CUresult cuModuleUnload(CUmodule m) { (void)m; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m;
    *f = (CUfunction)sc_func_register(NULL, strdup(name));
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    (void)params; (void)extra;
    sc_log_kernel(sc_call_enter(), f, gx, gy, gz, bx, by, bz, shmem, s);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)params; (void)extra;
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    sc_log_kernel(sc_call_enter(), f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                  c->sharedMemBytes, c->hStream);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(c, f, params, extra);
}
SC_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}
SC_EXPORT CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
    (void)f;
    sc_init();
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *v = sc_cfg.cc_major * 10 + sc_cfg.cc_minor; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = 48 << 10; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { (void)f; (void)a; (void)v; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache c) { (void)f; (void)c; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem) {
    (void)f;
    sc_init();
    int v = block > 0 ? sc_cfg.max_threads_per_sm / block : 1;
    if (smem) {
        int s = (int)(sc_cfg.smem_per_sm / smem);
        if (s < v) v = s;
    }
    *n = v > 32 ? 32 : v;
    return CUDA_SUCCESS;
}
/* Pointer attributes as the real driver gives them: device allocations and pinned / registered host memory are
 * known; any other pointer is CUDA_ERROR_INVALID_VALUE (Triton's launcher relies on it to reject CPU tensors). */
static CUresult pointer_attribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    const void *ptr = (const void *)(uintptr_t)p;
    int device = sc_device_of_ptr(ptr), pinned = device < 0 && sc_is_pinned_host_ptr(ptr);
    if (device < 0 && !pinned) return CUDA_ERROR_INVALID_VALUE;
    int ordinal = device >= 0 ? device : sc_current_device();
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)&dummy_ctx[ordinal]; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = device >= 0 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = p; break;  /* unified addressing */
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (device >= 0) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = ordinal; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = (unsigned long long)p; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = device >= 0; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data = NULL; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;  /* ranges and mappings: no caller seen yet */
    }
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    return pointer_attribute(data, a, p);
}
/* The plural form never fails on an unknown pointer: it answers the "unregistered" values (zeros) instead. */
SC_EXPORT CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr p) {
    for (unsigned i = 0; i < n; i++) {
        if (pointer_attribute(data[i], attrs[i], p) == CUDA_SUCCESS) continue;
        if (attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *(int *)data[i] = -2;
        else if (attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attrs[i] == CU_POINTER_ATTRIBUTE_MAPPED ||
                 attrs[i] == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || attrs[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED)
            *(int *)data[i] = 0;
        else *(void **)data[i] = NULL;
    }
    return CUDA_SUCCESS;
}
/* Thread-block clusters (sm90+), with one block per SM as Triton asks: SMs / blocks per cluster. */
SC_EXPORT CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c) {
    (void)f;
    sc_init();
    if (!n || !c) return CUDA_ERROR_INVALID_VALUE;
    unsigned cluster = 1;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            const CUlaunchAttributeValue *v = &c->attrs[i].value;
            cluster = v->clusterDim.x * (v->clusterDim.y ? v->clusterDim.y : 1) *
                      (v->clusterDim.z ? v->clusterDim.z : 1);
        }
    if (sc_cfg.cc_major < 9 || cluster == 0) return CUDA_ERROR_INVALID_VALUE;
    *n = sc_cfg.sm_count / (int)cluster;
    return CUDA_SUCCESS;
}

/* Context limits (stack, printf FIFO, malloc heap...): remembered, with the real driver's defaults. */
static size_t ctx_limits[CU_LIMIT_MAX] = {[CU_LIMIT_STACK_SIZE] = 1024, [CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20,
                                          [CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20, [CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
                                          [CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
                                          [CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64};
SC_EXPORT CUresult cuCtxGetLimit(size_t *v, CUlimit limit) {
    if (!v || (unsigned)limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
    *v = __atomic_load_n(&ctx_limits[limit], __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t v) {
    if ((unsigned)limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
    __atomic_store_n(&ctx_limits[limit], v, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuLinkCreate_v2(unsigned n, CUjit_option *o, void **v, CUlinkState *st) {
    (void)n; (void)o; (void)v;
    *st = (CUlinkState)calloc(1, 16);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuLinkAddData_v2(CUlinkState st, CUjitInputType t, void *d, size_t sz, const char *name,
                                    unsigned n, CUjit_option *o, void **v) {
    (void)st; (void)t; (void)d; (void)sz; (void)name; (void)n; (void)o; (void)v;
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuLinkComplete(CUlinkState st, void **cubin, size_t *size) {
    static char empty[16];
    (void)st;
    *cubin = empty;
    *size = sizeof empty;
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuLinkDestroy(CUlinkState st) { (void)st; return CUDA_SUCCESS; }
SC_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                                          const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                          const cuuint32_t *elem, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                          CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    (void)t; (void)rank; (void)addr; (void)dims; (void)strides; (void)box; (void)elem; (void)il; (void)sw; (void)l2;
    (void)oob;
    memset(m, 0, sizeof *m);
    return CUDA_SUCCESS;
}
/* Tensor-memory-accelerator descriptors (Hopper TMA): opaque to the caller and never read here. */
SC_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                                           const cuuint64_t *dims, const cuuint64_t *strides, const int *lower,
                                           const int *upper, cuuint32_t channels, cuuint32_t pixels,
                                           const cuuint32_t *elem, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                           CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    (void)t; (void)rank; (void)addr; (void)dims; (void)strides; (void)lower; (void)upper; (void)channels;
    (void)pixels; (void)elem; (void)il; (void)sw; (void)l2; (void)oob;
    memset(m, 0, sizeof *m);
    return CUDA_SUCCESS;
}

/* ---- virtual memory API (PYTORCH_ALLOC_CONF=expandable_segments:True): torch reserves a large address range
 * per segment and maps physical chunks into it as the segment grows. Chunks are what the device holds: each is
 * logged as an allocation (M/f records, the handle standing for the address) and counted against the target's
 * memory, so the peak is exact and a chunk beyond the memory fails as on the real device. ---- */
#define SC_VMM_GRANULARITY ((size_t)2 << 20)
typedef struct { uint32_t magic; int device; size_t bytes; } sc_chunk_t;

SC_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags option) {
    (void)prop; (void)option;
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    *g = SC_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    (void)flags;
    uint64_t t = sc_call_enter();
    if (!h || !prop || size == 0 || size % SC_VMM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= sc_cfg.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (sc_device_commit(prop->location.id, size) != 0) {
        sc_emit(t, 'M', "0\t%zu\t0", size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sc_chunk_t *c = calloc(1, sizeof *c);
    c->magic = 0xC4C4;
    c->device = prop->location.id;
    c->bytes = size;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)c;
    sc_emit(t, 'M', "%lu\t%zu\t1", (unsigned long)(uintptr_t)c, size);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    uint64_t t = sc_call_enter();
    sc_chunk_t *c = (sc_chunk_t *)(uintptr_t)h;
    if (!c || c->magic != 0xC4C4) return CUDA_ERROR_INVALID_VALUE;
    sc_device_uncommit(c->device, c->bytes);
    sc_emit(t, 'f', "%lu\t%zu", (unsigned long)(uintptr_t)c, c->bytes);
    c->magic = 0;
    free(c);
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h) {
    const sc_chunk_t *c = (const sc_chunk_t *)(uintptr_t)h;
    if (!prop || !c || c->magic != 0xC4C4) return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = c->device;
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
    (void)alignment; (void)addr; (void)flags;  /* the hint may be ignored, as the real driver may; 2 MiB aligned */
    void *p;
    if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (sc_device_reserve(size, &p) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    return sc_device_unreserve((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SC_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                            unsigned long long flags) {
    (void)offset; (void)flags;
    const sc_chunk_t *c = (const sc_chunk_t *)(uintptr_t)h;
    if (!c || c->magic != 0xC4C4 || !sc_is_device_ptr((void *)(uintptr_t)ptr) || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    if (!sc_is_device_ptr((void *)(uintptr_t)ptr)) return CUDA_ERROR_INVALID_VALUE;
    sc_range_forget((void *)(uintptr_t)ptr, size);  /* bytes the small data paths remembered there are gone */
    return CUDA_SUCCESS;
}
SC_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    (void)size; (void)desc; (void)count;
    return sc_is_device_ptr((void *)(uintptr_t)ptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

