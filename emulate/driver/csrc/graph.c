/* CUDA graphs from stream capture: launches on a capturing stream become kernel nodes; each graph launch logs
 * its nodes again on the launching stream ("via": "cuGraphLaunch", "graph": the launch's number, "node"). Graphs built node by node are not emulated. */
#include "fakecuda.h"

#include <stdlib.h>
#include <string.h>

struct fk_graph {
    uint32_t magic;
    unsigned long long capture_id;
    fk_launch_rec_t *nodes;
    size_t n, cap;
};
typedef struct { uint32_t magic; fk_graph_t *graph; } fk_exec_t;
#define FK_GRAPH_MAGIC 0x464b4752u
#define FK_EXEC_MAGIC 0x464b4758u

static unsigned long long next_capture_id = 1;
static unsigned long long graph_launches;

static fk_graph_t *as_graph(CUgraph g) {
    fk_graph_t *graph = (fk_graph_t *)g;
    return graph && graph->magic == FK_GRAPH_MAGIC ? graph : NULL;
}
static fk_exec_t *as_exec(CUgraphExec e) {
    fk_exec_t *exec = (fk_exec_t *)e;
    return exec && exec->magic == FK_EXEC_MAGIC ? exec : NULL;
}
unsigned long long fk_graph_capture_id(const fk_graph_t *g) { return g->capture_id; }

int fk_graph_add_launch(fk_graph_t *g, const fk_launch_rec_t *rec) {
    pthread_mutex_lock(&fk_lock);
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        fk_launch_rec_t *nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes) { pthread_mutex_unlock(&fk_lock); return 0; }
        g->nodes = nodes;
        g->cap = cap;
    }
    g->nodes[g->n++] = *rec;
    pthread_mutex_unlock(&fk_lock);
    return 1;
}

static fk_graph_t *new_graph(void) {
    fk_graph_t *g = calloc(1, sizeof *g);
    g->magic = FK_GRAPH_MAGIC;
    pthread_mutex_lock(&fk_lock);
    g->capture_id = next_capture_id++;
    pthread_mutex_unlock(&fk_lock);
    return g;
}

FK_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = (CUgraph)new_graph();
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
    fk_graph_t *g = new_graph();
    if (!fk_stream_begin_capture(hStream, g)) {
        g->magic = 0;
        free(g);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                       const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                       CUstreamCaptureMode mode) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    return fk_stream_begin_capture(hStream, g) ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}
FK_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    fk_graph_t *g = fk_stream_capture(hStream);
    if (!g) return CUDA_ERROR_ILLEGAL_STATE;
    fk_streams_end_capture(g);
    if (phGraph) *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g || !numNodes) return CUDA_ERROR_INVALID_VALUE;
    if (nodes)  /* node handles: the nodes' own addresses */
        for (size_t i = 0; i < *numNodes && i < g->n; i++) nodes[i] = (CUgraphNode)&g->nodes[i];
    *numNodes = g->n;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
    *type = CU_GRAPH_NODE_TYPE_KERNEL;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    g->magic = 0;  /* kept: an instantiated graph still reads its nodes */
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g || !phGraphExec) return CUDA_ERROR_INVALID_VALUE;
    fk_exec_t *e = calloc(1, sizeof *e);
    e->magic = FK_EXEC_MAGIC;
    e->graph = g;
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    CUresult rc = cuGraphInstantiateWithFlags(phGraphExec, hGraph, params ? params->flags : 0);
    if (params) params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}
FK_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
    return as_exec(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FK_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    fk_exec_t *e = as_exec(hGraphExec);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    fk_graph_t *into = fk_stream_capture(hStream);
    /* each launch is numbered: the trace charges one launch call's host cost per graph launch, not one per node */
    unsigned long long launch = into ? 0 : __atomic_add_fetch(&graph_launches, 1, __ATOMIC_RELAXED);
    for (size_t i = 0; i < e->graph->n; i++) {
        if (into) fk_graph_add_launch(into, &e->graph->nodes[i]);
        else fk_log_launch(&e->graph->nodes[i], fk_stream_id(hStream), "cuGraphLaunch", launch, i);
    }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    fk_exec_t *e = as_exec(hGraphExec);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}
