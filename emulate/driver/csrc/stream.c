/* Streams and events. All work completes at once (nothing executes), so every query answers "done". */
#include "fakecuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fk_stream {
    uint32_t magic;
    unsigned long long id;
    unsigned flags;
    int priority;
    fk_graph_t *capture;
    struct fk_stream *next;
} fk_stream_t;
typedef struct {
    uint32_t magic;
    unsigned flags;
    unsigned long long stream;
    fk_graph_t *capture;
    unsigned long long work;  /* the device-work count when recorded (the event clock) */
} fk_event_t;
#define FK_STREAM_MAGIC 0x464b5354u
#define FK_EVENT_MAGIC 0x464b4556u

static unsigned long long next_stream_id = 3;  /* 1: the legacy default stream, 2: the per-thread one */
static __thread CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static fk_stream_t *streams;  /* every live stream, for ending a capture that others joined */
static unsigned long long device_work;  /* pieces of device work issued so far (fk_count_device_work) */
void fk_count_device_work(void) { __atomic_fetch_add(&device_work, 1, __ATOMIC_RELAXED); }

static fk_stream_t *as_stream(CUstream s) {
    fk_stream_t *st = (fk_stream_t *)s;
    return (uintptr_t)s > 2 && st->magic == FK_STREAM_MAGIC ? st : NULL;
}
unsigned long long fk_stream_id(CUstream s) {
    if (!s || s == CU_STREAM_LEGACY) return 1;
    if (s == CU_STREAM_PER_THREAD) return 2;
    fk_stream_t *st = as_stream(s);
    return st ? st->id : 0;
}

FK_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    if (!phStream) return CUDA_ERROR_INVALID_VALUE;
    fk_stream_t *s = calloc(1, sizeof *s);
    s->magic = FK_STREAM_MAGIC;
    s->flags = flags;
    s->priority = priority;
    pthread_mutex_lock(&fk_lock);
    s->id = next_stream_id++;
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&fk_lock);
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int flags) { return cuStreamCreateWithPriority(phStream, flags, 0); }
FK_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
    fk_stream_t *s = as_stream(hStream);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&fk_lock);
    for (fk_stream_t **p = &streams; *p; p = &(*p)->next)
        if (*p == s) { *p = s->next; break; }
    pthread_mutex_unlock(&fk_lock);
    s->magic = 0;
    free(s);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    fk_log_call("stream_sync", "\"stream\":%llu", fk_stream_id(hStream));
    return CUDA_SUCCESS;
}
static fk_event_t *as_event(CUevent e);
FK_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    fk_event_t *e = as_event(hEvent);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (e->capture && !fk_stream_capture(hStream)) fk_stream_join_capture(hStream, e->capture);
    fk_graph_t *g = fk_stream_capture(hStream);
    char handle[48];
    snprintf(handle, sizeof handle, "\"handle\":%llu", (unsigned long long)(uintptr_t)e);
    if (g) return fk_graph_add_record(g, "stream_wait_event", handle, fk_stream_id(hStream)) ? CUDA_SUCCESS
                                                                                            : CUDA_ERROR_OUT_OF_MEMORY;
    fk_log_call("stream_wait_event", "\"stream\":%llu,%s", fk_stream_id(hStream), handle);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority) {
    fk_stream_t *s = as_stream(hStream);
    *priority = s ? s->priority : 0;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
    fk_stream_t *s = as_stream(hStream);
    *flags = s ? s->flags : 0;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId) {
    *streamId = fk_stream_id(hStream);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx) { *pctx = fk_primary_context(); return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx) {
    *pCtx = fk_primary_context();
    if (pGreenCtx) *pGreenCtx = NULL;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamGetDevice(CUstream hStream, CUdevice *device) { *device = 0; return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags) {
    callback(hStream, CUDA_SUCCESS, userData);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out) {
    memset(value_out, 0, sizeof *value_out);
    return CUDA_SUCCESS;
}

/* ---- capture (graph.c holds the graphs) ---- */
fk_graph_t *fk_stream_capture(CUstream hStream) {
    fk_stream_t *s = as_stream(hStream);
    return s ? s->capture : NULL;
}
void fk_stream_join_capture(CUstream hStream, fk_graph_t *g) {
    fk_stream_t *s = as_stream(hStream);
    if (s) s->capture = g;
}
fk_graph_t *fk_stream_capture_by_id(unsigned long long id) {
    fk_graph_t *g = NULL;
    pthread_mutex_lock(&fk_lock);
    for (fk_stream_t *s = streams; s && !g; s = s->next)
        if (s->id == id) g = s->capture;
    pthread_mutex_unlock(&fk_lock);
    return g;
}
int fk_stream_begin_capture(CUstream hStream, fk_graph_t *g) {
    fk_stream_t *s = as_stream(hStream);  /* the default streams cannot be captured */
    if (!s || s->capture) return 0;
    s->capture = g;
    fk_graph_set_origin(g, s->id);
    return 1;
}
void fk_streams_end_capture(fk_graph_t *g) {
    pthread_mutex_lock(&fk_lock);
    for (fk_stream_t *s = streams; s; s = s->next)
        if (s->capture == g) s->capture = NULL;
    pthread_mutex_unlock(&fk_lock);
}
FK_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    *captureStatus = fk_stream_capture(hStream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                     cuuint64_t *id_out, CUgraph *graph_out,
                                                     const CUgraphNode **dependencies_out,
                                                     const CUgraphEdgeData **edgeData_out,
                                                     size_t *numDependencies_out) {
    fk_graph_t *g = fk_stream_capture(hStream);
    if (captureStatus_out) *captureStatus_out = g ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id_out) *id_out = g ? fk_graph_capture_id(g) : 0;
    if (graph_out) *graph_out = (CUgraph)g;
    if (dependencies_out) *dependencies_out = NULL;
    if (edgeData_out) *edgeData_out = NULL;
    if (numDependencies_out) *numDependencies_out = 0;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- events ---- */
static fk_event_t *as_event(CUevent e) {
    fk_event_t *ev = (fk_event_t *)e;
    return ev && ev->magic == FK_EVENT_MAGIC ? ev : NULL;
}
FK_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    fk_event_t *e = calloc(1, sizeof *e);
    e->magic = FK_EVENT_MAGIC;
    e->flags = Flags;
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
    fk_event_t *e = as_event(hEvent);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    fk_event_t *e = as_event(hEvent);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    e->stream = fk_stream_id(hStream);
    e->capture = fk_stream_capture(hStream);
    e->work = __atomic_load_n(&device_work, __ATOMIC_RELAXED);
    char handle[48];
    snprintf(handle, sizeof handle, "\"handle\":%llu", (unsigned long long)(uintptr_t)e);
    if (e->capture)  /* recorded at each launch of the graph, on the stream the graph's work of this one goes to */
        return fk_graph_add_record(e->capture, "event_record", handle, e->stream) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    fk_log_call("event_record", "%s,\"stream\":%llu", handle, e->stream);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) { return cuEventRecord(hEvent, hStream); }
FK_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent) { return as_event(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
FK_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    if (!as_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    fk_log_call("event_sync", "\"handle\":%llu", (unsigned long long)(uintptr_t)hEvent);
    return CUDA_SUCCESS;
}

/* The event clock. The capture layer registers a
 * predictor (emulate/event_timing.py, stepcast_set_elapsed_predictor): given the two events' handles as logged, it
 * finds their latest event_record records and answers the predicted device time of the work between them on the
 * start event's stream, so that autotuners (Inductor max-autotune, Triton's autotune, cudnn.benchmark) compare
 * candidates as the estimator predicts them on the target. Without one, or when it cannot answer, each piece of
 * device work issued between the events counts one nominal microsecond: elapsed times are then positive and grow
 * with the work, as on a GPU (autotuners divide by them: Inductor's coordinate descent does), and every candidate
 * that issues the same number of launches ties, so the autotuner keeps its first, heuristic choice. */
#define FK_NOMINAL_WORK_MS 1e-3f
typedef int (*fk_elapsed_predictor_t)(long long start, long long end, float nominal_ms, float *ms);
static fk_elapsed_predictor_t elapsed_predictor;
FK_EXPORT void stepcast_set_elapsed_predictor(fk_elapsed_predictor_t predictor) {
    __atomic_store_n(&elapsed_predictor, predictor, __ATOMIC_RELEASE);
}
FK_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    fk_event_t *a = as_event(hStart), *b = as_event(hEnd);
    if (!pMilliseconds || !a || !b) return CUDA_ERROR_INVALID_HANDLE;
    float nominal = (float)(long long)(b->work - a->work) * FK_NOMINAL_WORK_MS, predicted;
    *pMilliseconds = nominal;
    fk_elapsed_predictor_t predict = __atomic_load_n(&elapsed_predictor, __ATOMIC_ACQUIRE);
    if (predict && predict((long long)(uintptr_t)a, (long long)(uintptr_t)b, nominal, &predicted) == 0)
        *pMilliseconds = predicted;
    return CUDA_SUCCESS;
}
