#define _GNU_SOURCE
/* Devices and contexts: the virtual device's description comes from the environment (emulate/driver/device.py
 * writes it from the hardware catalog); contexts are plain objects, one primary context per device. */
#include "fakecuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FK_MAX_DEVICES 16

pthread_mutex_t fk_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;  /* re-entered: allocation under the table lock */

typedef struct {
    uint32_t magic;
    int device;
    unsigned int flags;
    int retained;
    unsigned long long id;
    size_t limits[16];
} fk_context_t;
#define FK_CONTEXT_MAGIC 0x464b4358u

static fk_device_t devices[FK_MAX_DEVICES];
static fk_context_t contexts[FK_MAX_DEVICES];
static int device_count = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread fk_context_t *current;
static __thread int current_set;

static void fnv_uuid(const char *text, int ordinal, CUuuid *out) {
    uint64_t h1 = 1469598103934665603ull, h2 = 1099511628211ull ^ (uint64_t)ordinal;
    for (const char *c = text; *c; c++) {
        h1 = (h1 ^ (unsigned char)*c) * 1099511628211ull;
        h2 = (h2 + (unsigned char)*c) * 6364136223846793005ull;
    }
    h1 ^= (uint64_t)ordinal * 0x9e3779b97f4a7c15ull;
    memcpy(out->bytes, &h1, 8);
    memcpy(out->bytes + 8, &h2, 8);
}

static void load(void) {
    const char *attrs = getenv("STEPCAST_DRIVER_ATTRS");
    device_count = 0;
    if (!attrs || !*attrs) return;  /* no virtual device described: the driver reports none */
    fk_device_t base;
    memset(&base, 0, sizeof base);
    const char *p = attrs;
    while (*p) {
        char *end;
        long id = strtol(p, &end, 10);
        if (*end != '=') break;
        long value = strtol(end + 1, &end, 10);
        if (id > 0 && id < CU_DEVICE_ATTRIBUTE_MAX) base.attrs[id] = (int)value;
        p = *end == ',' ? end + 1 : end;
    }
    const char *name = getenv("STEPCAST_GPU_NAME");
    snprintf(base.name, sizeof base.name, "%s", name && *name ? name : "stepcast virtual GPU");
    const char *mem = getenv("STEPCAST_GPU_MEM_BYTES");
    base.total_mem = mem ? strtoull(mem, NULL, 10) : 0;
    const char *gpcs = getenv("STEPCAST_DRIVER_GPCS");
    base.gpc_count = gpcs ? atoi(gpcs) : 0;
    const char *count = getenv("STEPCAST_DEVICE_COUNT");
    int n = count ? atoi(count) : 1;
    if (n < 1) n = 1;
    if (n > FK_MAX_DEVICES) n = FK_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        devices[i] = base;
        devices[i].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = base.attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] + i;
        fnv_uuid(base.name, i, &devices[i].uuid);
        contexts[i].magic = FK_CONTEXT_MAGIC;
        contexts[i].device = i;
        contexts[i].id = (unsigned long long)i + 1;
        contexts[i].limits[CU_LIMIT_STACK_SIZE] = 1024;
        contexts[i].limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
        contexts[i].limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
        contexts[i].limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
        contexts[i].limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
        contexts[i].limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    }
    device_count = n;
}

void fk_ensure_init(void) { pthread_once(&once, load); }
int fk_device_count(void) { fk_ensure_init(); return device_count; }
const fk_device_t *fk_device(int ordinal) {
    fk_ensure_init();
    return ordinal >= 0 && ordinal < device_count ? &devices[ordinal] : NULL;
}
int fk_attr(int attribute) {
    const fk_device_t *d = fk_device(0);
    return d && attribute > 0 && attribute < CU_DEVICE_ATTRIBUTE_MAX ? d->attrs[attribute] : 0;
}
CUcontext fk_primary_context(void) { return fk_device_count() > 0 ? (CUcontext)&contexts[0] : NULL; }

static fk_context_t *as_context(CUcontext c) {
    fk_context_t *ctx = (fk_context_t *)c;
    return ctx && ctx->magic == FK_CONTEXT_MAGIC ? ctx : NULL;
}

/* the context a call without one means: the thread's own, else the primary context of device 0 (every thread,
 * including autograd's, sees it, as torch's code expects) */
static fk_context_t *current_context(void) {
    if (current_set) return current;
    return as_context(fk_primary_context());
}

int fk_current_device(void) {
    fk_context_t *c = current_context();
    return c ? c->device : 0;
}

#define NEED_DEVICE(dev) do { if (fk_device_count() <= 0) return CUDA_ERROR_NO_DEVICE; \
    if ((dev) < 0 || (dev) >= device_count) return CUDA_ERROR_INVALID_DEVICE; } while (0)

FK_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = fk_device_count();
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    NEED_DEVICE(ordinal);
    *device = ordinal;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    NEED_DEVICE(dev);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", devices[dev].name);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    NEED_DEVICE(dev);
    *bytes = devices[dev].total_mem;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    NEED_DEVICE(dev);
    *uuid = devices[dev].uuid;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
FK_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    NEED_DEVICE(dev);
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    *pi = devices[dev].attrs[attrib];
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    NEED_DEVICE(dev);
    *major = devices[dev].attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
    *minor = devices[dev].attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    NEED_DEVICE(dev);
    snprintf(pciBusId, (size_t)len, "%08x:%02x:%02x.0", devices[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
             devices[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], devices[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
    unsigned domain, bus, device;
    if (!dev || !pciBusId || sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &device) != 3) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < fk_device_count(); i++)
        if ((unsigned)devices[i].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] == bus) { *dev = i; return CUDA_SUCCESS; }
    return CUDA_ERROR_INVALID_DEVICE;
}
FK_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    NEED_DEVICE(dev);
    *canAccessPeer = dev != peerDev && peerDev >= 0 && peerDev < device_count;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
    NEED_DEVICE(src);
    *value = attrib == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : 1;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev) {
    NEED_DEVICE(dev);
    *pi = 0;
    return CUDA_SUCCESS;
}

/* ---- primary contexts ---- */
FK_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEED_DEVICE(dev);
    pthread_mutex_lock(&fk_lock);
    contexts[dev].retained++;
    pthread_mutex_unlock(&fk_lock);
    *pctx = (CUcontext)&contexts[dev];
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    NEED_DEVICE(dev);
    pthread_mutex_lock(&fk_lock);
    if (contexts[dev].retained > 0) contexts[dev].retained--;
    pthread_mutex_unlock(&fk_lock);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    NEED_DEVICE(dev);
    *flags = contexts[dev].flags;
    *active = contexts[dev].retained > 0;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    NEED_DEVICE(dev);
    contexts[dev].flags = flags;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { NEED_DEVICE(dev); return CUDA_SUCCESS; }

/* ---- the context stack (one level deep per thread is all the libraries use) ---- */
FK_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)current_context();
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    if (ctx && !as_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    current = as_context(ctx);
    current_set = 1;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return cuCtxSetCurrent(ctx); }
FK_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) {
    if (pctx) *pctx = (CUcontext)current_context();
    current = NULL;
    current_set = 0;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    fk_context_t *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    fk_context_t *c = ctx ? as_context(ctx) : current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags) {
    fk_context_t *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *flags = c->flags;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
    fk_context_t *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    c->flags = flags;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) {
    fk_context_t *c = ctx ? as_context(ctx) : current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
    *version = 12010;  /* the context API version every driver since CUDA 12.1 reports */
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) { fk_log_call("device_sync", "\"device\":0"); return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) { return cuCtxSynchronize(); }
FK_EXPORT CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
    fk_context_t *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if ((unsigned)limit >= 16) return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *pvalue = c->limits[limit];
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
    fk_context_t *c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if ((unsigned)limit >= 16) return CUDA_ERROR_UNSUPPORTED_LIMIT;
    c->limits[limit] = value;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache *pconfig) { *pconfig = CU_FUNC_CACHE_PREFER_NONE; return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;  /* the range sm_70+ devices report */
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuCtxGetExecAffinity(CUexecAffinityParam *pExecAffinity, CUexecAffinityType type) {
    return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
}
FK_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuCtxResetPersistingL2Cache(void) { return CUDA_SUCCESS; }
