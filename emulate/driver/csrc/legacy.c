/* Older ABIs that the runtimes still ask for by version through cuGetProcAddress: cuda.h maps each plain name to
 * its newest form, so these are defined after undoing that mapping. */
#include "fakecuda.h"

#undef cuStreamGetCaptureInfo
#undef cuGetProcAddress
#undef cuStreamGetCaptureInfo_v2
#undef cuCtxCreate

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **,
                                           const CUgraphEdgeData **, size_t *);
CUresult CUDAAPI cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

FK_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id) {
    return cuStreamGetCaptureInfo_v3(s, status, id, NULL, NULL, NULL, NULL);
}
FK_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                                     const CUgraphNode **deps, size_t *n) {
    return cuStreamGetCaptureInfo_v3(s, status, id, graph, deps, NULL, n);
}
FK_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

#undef cuDeviceGetUuid
FK_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

#undef cuDevicePrimaryCtxRelease
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev);
FK_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

#undef cuEventElapsedTime
CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd);
FK_EXPORT CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent start, CUevent end) { return cuEventElapsedTime_v2(ms, start, end); }

/* CUDA 12's headers map the plain names below to these older ABIs and CUDA 13's to the newer ones, so the newer ones
 * are defined under their versioned names (stream.c, graph.c) and the older ones here, from either header. */
#undef cuGraphAddNode
#undef cuGraphAddDependencies
CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                                   CUgraphNodeParams *);
CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph, const CUgraphNode *, const CUgraphNode *, const CUgraphEdgeData *,
                                           size_t);
FK_EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                                          CUgraphNodeParams *params) {
    return cuGraphAddNode_v2(node, graph, deps, NULL, n, params);
}
FK_EXPORT CUresult CUDAAPI cuGraphAddDependencies(CUgraph graph, const CUgraphNode *from, const CUgraphNode *to,
                                                  size_t n) {
    return cuGraphAddDependencies_v2(graph, from, to, NULL, n);
}
