/* CUDA driver API: the cu* entry points torch resolves by name (libcaffe2_nvrtc links libcuda.so.1, c10's driver
 * API asks cudaGetDriverEntryPointByVersion). The shim itself answers to the soname libcuda.so.1. */
#define _GNU_SOURCE
#include "shim.h"

#include <cuda.h>
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
SC_EXPORT CUresult cuModuleLoad(CUmodule *m, const char *path) { (void)path; *m = (CUmodule)calloc(1, 16); return CUDA_SUCCESS; }
SC_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *img) { (void)img; *m = (CUmodule)calloc(1, 16); return CUDA_SUCCESS; }
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
    sc_log_kernel(sc_now_ns(), f, gx, gy, gz, bx, by, bz, shmem, s);
    return CUDA_SUCCESS;
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
SC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = sc_is_device_ptr((void *)p) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = sc_current_device(); break;
    default: memset(data, 0, sizeof(void *));
    }
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
