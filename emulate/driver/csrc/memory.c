/* Memory: device memory is never committed (addresses from one window reserved without memory); pinned and
 * managed memory are real host memory, as the host reads them (.item() goes through pinned memory). The small data
 * path is datapath.c's: small copies and fills into device memory really write
 * its pages (only those get memory) and are remembered, a device-to-host copy of a remembered range returns its
 * bytes, anything else reads as zeros; the emulated NCCL exchanges small collectives' payloads through it (DDP's
 * bucket indices, all_gather_object). Where the window cannot be writable it is PROT_NONE and every read is zeros. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define WINDOW_BYTES (1ull << 42)  /* address space only: expandable segments reserve ~96 GB at a time */
#define ALIGN 512ull

typedef struct { uintptr_t base; size_t size; int kind; unsigned flags; unsigned long long id; int device; } range_t;
enum { DEVICE = 1, HOST = 2, REGISTERED = 3, MANAGED = 4, RESERVED = 5 };

static uintptr_t window, window_next;
static range_t *ranges;
static size_t n_ranges, cap_ranges;
static size_t device_in_use, device_peak;
static unsigned long long next_id = 1;
static pthread_once_t window_once = PTHREAD_ONCE_INIT;

static int window_writable;
int fk_device_memory_writable(void) { return window_writable; }

static void reserve_window(void) {
    void *p = mmap(NULL, WINDOW_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    window_writable = p != MAP_FAILED;
    if (p == MAP_FAILED) p = mmap(NULL, WINDOW_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) window = window_next = ((uintptr_t)p + (1u << 21) - 1) & ~(uintptr_t)((1u << 21) - 1);
}
static void add_range(uintptr_t base, size_t size, int kind, unsigned flags) {
    if (n_ranges == cap_ranges) {
        cap_ranges = cap_ranges ? 2 * cap_ranges : 256;
        ranges = realloc(ranges, cap_ranges * sizeof *ranges);
    }
    ranges[n_ranges++] = (range_t){base, size, kind, flags, next_id++, fk_current_device()};  /* the device it is on */
}
static range_t *find(uintptr_t p) {  /* callers hold fk_lock */
    for (size_t i = n_ranges; i-- > 0;)
        if (p >= ranges[i].base && p < ranges[i].base + (ranges[i].size ? ranges[i].size : 1)) return &ranges[i];
    return NULL;
}
static void drop(range_t *r) { *r = ranges[--n_ranges]; }

/* address space from the window; 0 when exhausted */
static uintptr_t window_take(size_t bytes, size_t align) {
    pthread_once(&window_once, reserve_window);
    if (!window) return 0;
    uintptr_t p = (window_next + align - 1) & ~(uintptr_t)(align - 1);
    if (p + bytes > window + WINDOW_BYTES - (1u << 21)) return 0;
    window_next = p + bytes;
    return p;
}
CUdeviceptr fk_device_alloc(size_t bytes) {
    pthread_mutex_lock(&fk_lock);
    uintptr_t p = window_take(bytes ? bytes : 1, ALIGN);
    if (p) add_range(p, bytes, DEVICE, 0);
    pthread_mutex_unlock(&fk_lock);
    return (CUdeviceptr)p;
}
int fk_is_device_pointer(CUdeviceptr p) {
    pthread_once(&window_once, reserve_window);
    return window && p >= window && p < window + WINDOW_BYTES;
}
int fk_is_host_pointer(const void *p, int *is_mapped) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find((uintptr_t)p);
    int kind = r ? r->kind : 0;
    if (is_mapped) *is_mapped = r && (r->flags & CU_MEMHOSTALLOC_DEVICEMAP);
    pthread_mutex_unlock(&fk_lock);
    return kind == HOST || kind == REGISTERED;
}

size_t fk_device_peak(void) {
    pthread_mutex_lock(&fk_lock);
    size_t peak = device_peak;
    pthread_mutex_unlock(&fk_lock);
    return peak;
}
/* callers hold fk_lock */
static void count_in_use(size_t bytes) {
    device_in_use += bytes;
    if (device_in_use > device_peak) device_peak = device_in_use;
}
static void log_malloc(unsigned long long ptr, size_t bytes, int ok) {
    fk_log_call("malloc", "\"ptr\":%llu,\"bytes\":%zu,\"ok\":%d", ptr, bytes, ok);
}
static void log_free(unsigned long long ptr, size_t bytes) {
    fk_log_call("free", "\"ptr\":%llu,\"bytes\":%zu", ptr, bytes);
}

FK_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    if (!dptr || !bytesize) return CUDA_ERROR_INVALID_VALUE;
    const fk_device_t *d = fk_device(0);
    pthread_mutex_lock(&fk_lock);
    int full = d && d->total_mem && device_in_use + bytesize > d->total_mem;
    pthread_mutex_unlock(&fk_lock);
    CUdeviceptr p = full ? 0 : fk_device_alloc(bytesize);
    if (!p) {
        log_malloc(0, bytesize, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&fk_lock);
    count_in_use(bytesize);
    pthread_mutex_unlock(&fk_lock);
    log_malloc(p, bytesize, 1);
    *dptr = p;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) { return cuMemAlloc(dptr, bytesize); }
FK_EXPORT CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                           unsigned int ElementSizeBytes) {
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    *pPitch = pitch;
    return cuMemAlloc(dptr, pitch * Height);
}
FK_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
    if (!dptr) return CUDA_SUCCESS;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    size_t bytes = 0;
    pthread_mutex_lock(&fk_lock);
    range_t *r = find(dptr);
    if (r && r->kind == DEVICE && r->base == dptr) {
        bytes = r->size;
        device_in_use -= r->size;
        drop(r);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&fk_lock);
    if (rc == CUDA_SUCCESS) {
        fk_range_forget((const void *)(uintptr_t)dptr, bytes);
        log_free(dptr, bytes);
    }
    return rc;
}
FK_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return cuMemFree(dptr); }
FK_EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total) {
    const fk_device_t *d = fk_device(0);
    if (!d) return CUDA_ERROR_NO_DEVICE;
    pthread_mutex_lock(&fk_lock);
    if (total) *total = d->total_mem;
    if (free) *free = d->total_mem > device_in_use ? d->total_mem - device_in_use : 0;
    pthread_mutex_unlock(&fk_lock);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find(dptr);
    if (r) { if (pbase) *pbase = r->base; if (psize) *psize = r->size; }
    pthread_mutex_unlock(&fk_lock);
    return r ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- host memory ---- */
FK_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    if (!pp) return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize ? bytesize : 1) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fk_lock);
    add_range((uintptr_t)p, bytesize, HOST, Flags | CU_MEMHOSTALLOC_DEVICEMAP);
    pthread_mutex_unlock(&fk_lock);
    *pp = p;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }
FK_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find((uintptr_t)p);
    int ok = r && r->kind == HOST && r->base == (uintptr_t)p;
    if (ok) drop(r);
    pthread_mutex_unlock(&fk_lock);
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
    if (!pdptr || !fk_is_host_pointer(p, NULL)) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)p;  /* unified addressing: the device sees host memory at the same address */
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find((uintptr_t)p);
    if (r && pFlags) *pFlags = r->flags;
    pthread_mutex_unlock(&fk_lock);
    return r && (r->kind == HOST || r->kind == REGISTERED) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FK_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags) {
    pthread_mutex_lock(&fk_lock);
    int already = find((uintptr_t)p) != NULL;
    if (!already) add_range((uintptr_t)p, bytesize, REGISTERED, Flags | CU_MEMHOSTALLOC_DEVICEMAP);
    pthread_mutex_unlock(&fk_lock);
    return already ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find((uintptr_t)p);
    int ok = r && r->kind == REGISTERED;
    if (ok) drop(r);
    pthread_mutex_unlock(&fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}
FK_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    void *p = NULL;
    if (!dptr || posix_memalign(&p, 4096, bytesize ? bytesize : 1) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0, bytesize);
    pthread_mutex_lock(&fk_lock);
    add_range((uintptr_t)p, bytesize, MANAGED, flags);
    pthread_mutex_unlock(&fk_lock);
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

/* ---- copies and fills (asynchronous ones complete at once: nothing runs) ---- */
/* whether the thread's last copy to the host read zeros in place of bytes a kernel computed (its record says so:
 * the script read a GPU-computed value, and went on with 0) */
static __thread int read_zeros;
/* A size a kernel computes and the host reads back (nonzero's count, which sizes its output): the op-context hook
 * replays the op on the host when its inputs are real and answers the count here (stepcast_answer_readback), so
 * the op's next copy of 4 or 8 bytes to the host that would read zeros reads it instead (little-endian). */
static __thread int answer_active;
static __thread int64_t answer_value;
FK_EXPORT void stepcast_answer_readback(int active, long long value) {
    answer_active = active;
    answer_value = value;
}
static int answered(uintptr_t dst, size_t n) {
    if (!answer_active || (n != 4 && n != 8)) return 0;
    if (n == 4) { int32_t v = (int32_t)answer_value; memcpy((void *)dst, &v, 4); }
    else memcpy((void *)dst, &answer_value, 8);
    answer_active = 0;
    return 1;
}
static void copy(uintptr_t dst, uintptr_t src, size_t n) {
    if (!n) return;
    int to_device = fk_is_device_pointer(dst), from_device = fk_is_device_pointer(src);
    int small = n <= fk_real_limit() && fk_device_memory_writable();
    if (to_device) {
        if (small && (!from_device || fk_range_known((const void *)src, n))) {
            memmove((void *)dst, (const void *)src, n);
            fk_range_written((const void *)dst, n);
        } else {
            fk_range_forget((const void *)dst, n);
        }
    } else if (from_device) {
        if (small && fk_range_readback((const void *)src, n)) {
            memmove((void *)dst, (const void *)src, n);
        } else {
            if (!answered(dst, n)) {
                memset((void *)dst, 0, n);
                read_zeros = 1;
            }
        }
    } else {
        memmove((void *)dst, (const void *)src, n);
    }
}
static void fill(uintptr_t dst, unsigned value, size_t n, size_t width) {
    if (fk_is_device_pointer(dst)) {
        if (n * width > fk_real_limit() || !fk_device_memory_writable()) {
            fk_range_forget((const void *)dst, n * width);
            return;
        }
        for (size_t i = 0; i < n; i++) memcpy((char *)dst + i * width, &value, width);
        fk_range_written((const void *)dst, n * width);
        return;
    }
    for (size_t i = 0; i < n; i++) memcpy((char *)dst + i * width, &value, width);
}
/* Peers' blocks mapped into this process (cuMemMap of an imported handle: symmetric memory, whose fused
 * collective-matmuls copy shards to and from peers with the copy engines). A copy with either end in one crosses
 * NVLink, not this device's memory alone: it is logged with "peer":1. A handful of blocks, so a list. */
typedef struct { uintptr_t base; size_t size; } peer_map_t;
static peer_map_t *peer_maps;
static size_t n_peer_maps, cap_peer_maps;
static int peer_mapped(uintptr_t p) {
    int hit = 0;
    pthread_mutex_lock(&fk_lock);
    for (size_t i = 0; i < n_peer_maps && !hit; i++) hit = p >= peer_maps[i].base && p - peer_maps[i].base < peer_maps[i].size;
    pthread_mutex_unlock(&fk_lock);
    return hit;
}
/* copies and fills are logged with their bytes, direction and stream; the synchronous entry points block. On a
 * capturing stream they become graph nodes instead (graph.c): done and logged at each launch of the graph. */
static void log_copy(uintptr_t dst, uintptr_t src, size_t n, unsigned long long stream, int blocking, const char *graph) {
    static const char *directions[2][2] = {{"h2h", "h2d"}, {"d2h", "d2d"}};
    int from_device = fk_is_device_pointer(src), to_device = fk_is_device_pointer(dst);
    int peer = n_peer_maps && ((from_device && peer_mapped(src)) || (to_device && peer_mapped(dst)));
    fk_count_device_work();
    fk_log_call("memcpy", "\"stream\":%llu,\"bytes\":%zu,\"direction\":\"%s\",\"blocking\":%d%s%s%s%s", stream, n,
                directions[from_device ? 1 : 0][to_device ? 1 : 0], blocking, peer ? ",\"peer\":1" : "",
                read_zeros ? ",\"zeros\":1" : "", graph ? "," : "", graph ? graph : "");
    read_zeros = 0;
}
static void log_fill(size_t bytes, unsigned long long stream, int blocking, const char *graph) {
    fk_count_device_work();
    fk_log_call("memset", "\"stream\":%llu,\"bytes\":%zu,\"blocking\":%d%s%s", stream, bytes, blocking,
                graph ? "," : "", graph ? graph : "");
}
static void copy_rows(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch, size_t width, size_t rows) {
    for (size_t r = 0; r < rows; r++) copy(dst + r * dst_pitch, src + r * src_pitch, width);
}
static CUresult logged_copy_rows(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch, size_t width,
                                 size_t rows, CUstream s, int blocking) {
    fk_graph_t *g = blocking ? NULL : fk_stream_capture(s);
    if (g)
        return fk_graph_add_copy(g, dst, dst_pitch, src, src_pitch, width, rows, fk_stream_id(s)) ? CUDA_SUCCESS
                                                                                                   : CUDA_ERROR_OUT_OF_MEMORY;
    copy_rows(dst, dst_pitch, src, src_pitch, width, rows);  /* first: the record says what the host read */
    log_copy(dst, src, width * rows, blocking ? 1ull : fk_stream_id(s), blocking, NULL);
    return CUDA_SUCCESS;
}
static CUresult logged_copy(uintptr_t dst, uintptr_t src, size_t n, CUstream s, int blocking) {
    return logged_copy_rows(dst, n, src, n, n, 1, s, blocking);
}
static void fill_rows(uintptr_t dst, unsigned value, size_t width, size_t count, size_t pitch, size_t rows) {
    for (size_t r = 0; r < rows; r++) fill(dst + r * pitch, value, count, width);
}
/* count elements of width bytes a row, rows rows pitch bytes apart */
static CUresult logged_fill_rows(uintptr_t dst, unsigned value, size_t width, size_t count, size_t pitch, size_t rows,
                                 CUstream s, int blocking) {
    fk_graph_t *g = blocking ? NULL : fk_stream_capture(s);
    if (g)
        return fk_graph_add_fill(g, dst, value, width, count, pitch, rows, fk_stream_id(s)) ? CUDA_SUCCESS
                                                                                            : CUDA_ERROR_OUT_OF_MEMORY;
    log_fill(count * width * rows, blocking ? 1ull : fk_stream_id(s), blocking, NULL);
    fill_rows(dst, value, width, count, pitch, rows);
    return CUDA_SUCCESS;
}
static CUresult logged_fill(uintptr_t dst, unsigned value, size_t n, size_t width, CUstream s, int blocking) {
    return logged_fill_rows(dst, value, width, n, 0, 1, s, blocking);
}
void fk_replay_copy(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch, size_t width, size_t rows,
                    unsigned long long stream, const char *graph) {
    copy_rows(dst, dst_pitch, src, src_pitch, width, rows);
    log_copy(dst, src, width * rows, stream, 0, graph);
}
void fk_replay_fill(uintptr_t dst, unsigned value, size_t width, size_t count, size_t pitch, size_t rows,
                    unsigned long long stream, const char *graph) {
    log_fill(count * width * rows, stream, 0, graph);
    fill_rows(dst, value, width, count, pitch, rows);
}
FK_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return logged_copy(dst, src, n, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return logged_copy(dst, src, n, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) { return logged_copy(dst, (uintptr_t)src, n, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return logged_copy(dst, (uintptr_t)src, n, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) { return logged_copy((uintptr_t)dst, src, n, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) { return logged_copy((uintptr_t)dst, src, n, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { return logged_copy(dst, src, n, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return logged_copy(dst, src, n, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) { return logged_copy(dst, src, n, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s) { return logged_copy(dst, src, n, s, 0); }
static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int blocking) {
    uintptr_t dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->dstHost : (uintptr_t)c->dstDevice;
    uintptr_t src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->srcHost : (uintptr_t)c->srcDevice;
    if (c->dstMemoryType == CU_MEMORYTYPE_ARRAY || c->srcMemoryType == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;
    return logged_copy_rows(dst + c->dstY * c->dstPitch + c->dstXInBytes, c->dstPitch,
                            src + c->srcY * c->srcPitch + c->srcXInBytes, c->srcPitch, c->WidthInBytes, c->Height, s,
                            blocking);
}
FK_EXPORT CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { return logged_fill(d, v, n, 1, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) { return logged_fill(d, v, n, 2, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) { return logged_fill(d, v, n, 4, NULL, 1); }
FK_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return logged_fill(d, v, n, 1, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return logged_fill(d, v, n, 2, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return logged_fill(d, v, n, 4, s, 0); }
FK_EXPORT CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
    return logged_fill_rows(d, v, 1, w, pitch, h, s, 0);
}
FK_EXPORT CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
    return logged_fill_rows(d, v, 4, w, pitch, h, s, 0);
}
FK_EXPORT CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc) { return CUDA_SUCCESS; }

/* ---- pointer attributes ---- */
static CUresult pointer_attribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr, int strict) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find(ptr);
    range_t copy_r = r ? *r : (range_t){0};
    pthread_mutex_unlock(&fk_lock);
    int device = r ? copy_r.kind == DEVICE || copy_r.kind == RESERVED : fk_is_device_pointer(ptr);
    if (!r && !device) {
        if (strict) return CUDA_ERROR_INVALID_VALUE;  /* an unregistered host pointer, as the real driver says */
        memset(data, 0, attribute == CU_POINTER_ATTRIBUTE_CONTEXT || attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                            attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER || attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                            attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE || attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID
                        ? 8 : 4);
        if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *(int *)data = -2;
        return CUDA_SUCCESS;
    }
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = fk_primary_context(); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (device) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = copy_r.id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = copy_r.kind == MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = r ? copy_r.device : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = r ? copy_r.base : ptr; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = copy_r.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data = NULL; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, attribute, ptr, 1);
}
FK_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr) {
    for (unsigned i = 0; i < n; i++)
        if (data[i] && pointer_attribute(data[i], attributes[i], ptr, 0) != CUDA_SUCCESS) {
            /* attributes that do not apply read as zero, as the real driver answers */
        }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr) { return CUDA_SUCCESS; }

/* ---- virtual memory management (expandable segments; symmetric memory's exported and imported blocks) ---- */
typedef struct { uint32_t magic; size_t size; int imported; } phys_t;
FK_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                         CUmemAllocationGranularity_flags option) {
    *granularity = 2u << 20;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                               unsigned long long flags) {
    pthread_mutex_lock(&fk_lock);
    uintptr_t p = window_take(size, alignment > (2u << 20) ? alignment : (2u << 20));
    if (p) add_range(p, size, RESERVED, 0);
    pthread_mutex_unlock(&fk_lock);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = p;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&fk_lock);
    range_t *r = find(ptr);
    if (r && r->kind == RESERVED) drop(r);
    pthread_mutex_unlock(&fk_lock);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                       unsigned long long flags) {
    const fk_device_t *d = fk_device(0);
    pthread_mutex_lock(&fk_lock);
    int full = d && d->total_mem && device_in_use + size > d->total_mem;
    if (!full) count_in_use(size);
    pthread_mutex_unlock(&fk_lock);
    if (full) {
        log_malloc(0, size, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    phys_t *h = malloc(sizeof *h);
    *h = (phys_t){0x464b5048u, size, 0};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    log_malloc((unsigned long long)(uintptr_t)h, size, 1);  /* the handle stands for the physical memory */
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
    phys_t *h = (phys_t *)(uintptr_t)handle;
    if (!h || h->magic != 0x464b5048u) return CUDA_ERROR_INVALID_VALUE;
    if (h->imported) {  /* a peer's memory: not this device's */
        h->magic = 0;
        free(h);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&fk_lock);
    device_in_use -= h->size;
    pthread_mutex_unlock(&fk_lock);
    log_free((unsigned long long)(uintptr_t)handle, h->size);
    h->magic = 0;
    free(h);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                    unsigned long long flags) {
    phys_t *h = (phys_t *)(uintptr_t)handle;
    if (!h || h->magic != 0x464b5048u || !h->imported) return CUDA_SUCCESS;
    pthread_mutex_lock(&fk_lock);  /* a peer's block: copies to and from it cross NVLink (peer_mapped) */
    if (n_peer_maps == cap_peer_maps) {
        size_t cap = cap_peer_maps ? 2 * cap_peer_maps : 64;
        peer_map_t *grown = realloc(peer_maps, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&fk_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        peer_maps = grown;
        cap_peer_maps = cap;
    }
    peer_maps[n_peer_maps++] = (peer_map_t){(uintptr_t)ptr, size};
    pthread_mutex_unlock(&fk_lock);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&fk_lock);
    for (size_t i = n_peer_maps; i-- > 0;)
        if (peer_maps[i].base == (uintptr_t)ptr) peer_maps[i] = peer_maps[--n_peer_maps];
    pthread_mutex_unlock(&fk_lock);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) { return CUDA_SUCCESS; }

/* Sharing a block with other processes (torch's symmetric memory: each rank exports its block, the peers import and
 * map it). A POSIX file descriptor is a real one, so it passes between processes as the driver's does (SCM_RIGHTS):
 * an empty memory file whose length is the block's size (a sparse file: no memory). A fabric handle carries the
 * size in its bytes. An imported handle stands for a peer's memory: mapping it costs this device nothing. */
#define FK_FABRIC_MAGIC "stepcast-fabric"
FK_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                                        CUmemAllocationHandleType type, unsigned long long flags) {
    phys_t *h = (phys_t *)(uintptr_t)handle;
    if (!h || h->magic != 0x464b5048u || !shareable) return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        int fd = memfd_create("stepcast-vmm", MFD_CLOEXEC);
        if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        if (ftruncate(fd, (off_t)h->size) != 0) {
            close(fd);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *(int *)shareable = fd;
        return CUDA_SUCCESS;
    }
    if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
        CUmemFabricHandle *f = shareable;
        memset(f, 0, sizeof *f);
        memcpy(f->data, FK_FABRIC_MAGIC, sizeof FK_FABRIC_MAGIC);
        memcpy(f->data + 32, &h->size, sizeof h->size);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}
FK_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                                          CUmemAllocationHandleType type) {
    size_t size = 0;
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        struct stat st;
        if (fstat((int)(uintptr_t)os_handle, &st) != 0) return CUDA_ERROR_INVALID_HANDLE;
        size = (size_t)st.st_size;
    } else if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
        const CUmemFabricHandle *f = os_handle;
        if (!f || memcmp(f->data, FK_FABRIC_MAGIC, sizeof FK_FABRIC_MAGIC) != 0) return CUDA_ERROR_INVALID_HANDLE;
        memcpy(&size, f->data + 32, sizeof size);
    } else {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    phys_t *h = malloc(sizeof *h);
    *h = (phys_t){0x464b5048u, size, 1};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}
