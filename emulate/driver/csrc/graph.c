/* CUDA graphs, from stream capture or built node by node (cuGraphAdd*Node). Either way a graph holds the device
 * work a GPU would run at each launch: kernel launches, copies, fills, event records and waits, and the timed
 * records of the preloaded NCCL (nccl.c: collectives issued on a capturing stream). Nothing runs while capturing or adding
 * nodes, as on a GPU; each cuGraphLaunch logs the nodes again, in order, with "graph" (the launch's number, from 1)
 * and "node" (the position), and does their copies and fills then; a collective takes its communicator's next
 * sequence number at each launch (a new run of NCCL's kernel). Work captured on the stream that began the
 * capture goes to the launching stream; work of streams that joined the capture (through an event) stays on theirs,
 * ordered by the replayed event records and waits. Each node keeps the aten op it was captured under, and each
 * launch gives the op calls of its nodes new numbers, so the estimators time the replayed kernels as their ops.
 *
 * Dependencies between nodes are not kept: nodes replay in the order they were added (a graph built node by node
 * runs as one stream). Graph memory is never freed: torch destroys a graph right after instantiating it. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { NODE_LAUNCH, NODE_COPY, NODE_FILL, NODE_RECORD, NODE_EMPTY } node_kind_t;
typedef struct fk_node {
    uint32_t magic;
    node_kind_t kind;
    unsigned long long stream;  /* the capturing stream's id; 0 for a node added by hand (the launching stream) */
    fk_launch_rec_t *launch;    /* NODE_LAUNCH */
    uintptr_t dst, src;         /* NODE_COPY: rows of width bytes; NODE_FILL: rows of bytes elements of width */
    size_t bytes, width, rows, pitch, src_pitch;
    unsigned value;
    char *event, *json;         /* NODE_RECORD: a timed record, its members after "event" */
    int op, has_op;             /* the aten op the work was added under (capture.c), logged with it at each launch */
    unsigned long long call;    /* the op call it was added in (0: none): a launch's nodes of one call share a new one */
} fk_node_t;
struct fk_graph {
    uint32_t magic;
    unsigned long long capture_id;
    unsigned long long origin;  /* the stream the capture began on (0: none) */
    fk_node_t **nodes;          /* stable handles: nodes are never moved */
    size_t n, cap;
};
typedef struct { uint32_t magic; fk_graph_t *graph; size_t n; } fk_exec_t;
#define FK_GRAPH_MAGIC 0x464b4752u
#define FK_EXEC_MAGIC 0x464b4758u
#define FK_NODE_MAGIC 0x464b4e44u

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
static fk_node_t *as_node(CUgraphNode n) {
    fk_node_t *node = (fk_node_t *)n;
    return node && node->magic == FK_NODE_MAGIC ? node : NULL;
}
unsigned long long fk_graph_capture_id(const fk_graph_t *g) { return g->capture_id; }
void fk_graph_set_origin(fk_graph_t *g, unsigned long long stream) { if (!g->origin) g->origin = stream; }

/* append a copy of *node (a new node takes the op the calling thread is in); returns the graph's own node, or NULL
 * without memory */
static fk_node_t *add_node(fk_graph_t *g, const fk_node_t *node) {
    fk_node_t *copy = malloc(sizeof *copy);
    if (!copy) return NULL;
    *copy = *node;
    copy->magic = FK_NODE_MAGIC;
    if (!copy->has_op) {
        copy->has_op = 1;
        copy->op = fk_current_op();
        copy->call = fk_current_call();
    }
    pthread_mutex_lock(&fk_lock);
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        fk_node_t **nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes) { pthread_mutex_unlock(&fk_lock); free(copy); return NULL; }
        g->nodes = nodes;
        g->cap = cap;
    }
    g->nodes[g->n++] = copy;
    pthread_mutex_unlock(&fk_lock);
    return copy;
}

int fk_graph_add_launch(fk_graph_t *g, const fk_launch_rec_t *rec, unsigned long long stream) {
    fk_launch_rec_t *launch = malloc(sizeof *launch);
    if (!launch) return 0;
    *launch = *rec;
    fk_node_t node = {.kind = NODE_LAUNCH, .stream = stream, .launch = launch};
    if (add_node(g, &node)) return 1;
    free(launch);
    return 0;
}
int fk_graph_add_copy(fk_graph_t *g, uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch, size_t width,
                      size_t rows, unsigned long long stream) {
    fk_node_t node = {.kind = NODE_COPY, .stream = stream, .dst = dst, .pitch = dst_pitch, .src = src,
                      .src_pitch = src_pitch, .width = width, .rows = rows};
    return add_node(g, &node) != NULL;
}
int fk_graph_add_fill(fk_graph_t *g, uintptr_t dst, unsigned value, size_t width, size_t count, size_t pitch,
                      size_t rows, unsigned long long stream) {
    fk_node_t node = {.kind = NODE_FILL, .stream = stream, .dst = dst, .value = value, .width = width, .bytes = count,
                      .pitch = pitch, .rows = rows};
    return add_node(g, &node) != NULL;
}
int fk_graph_add_record(fk_graph_t *g, const char *event, const char *json, unsigned long long stream) {
    fk_node_t node = {.kind = NODE_RECORD, .stream = stream, .event = strdup(event), .json = strdup(json)};
    return node.event && node.json && add_node(g, &node) != NULL;
}

/* Timed records of a library above the driver (the preloaded NCCL, nccl.c) issued on a stream:
 * 1 when that stream is capturing, so the record became a node of its graph (logged at each launch), else 0. */
FK_EXPORT int stepcast_graph_record(unsigned long long stream, const char *event, const char *json) {
    fk_graph_t *g = fk_stream_capture_by_id(stream);
    return g && fk_graph_add_record(g, event, json, stream);
}

/* ---- one node at a graph launch ---- */
/* The preloaded NCCL (nccl.c): a captured collective's record with its communicator's
 * next sequence number, one run of NCCL's kernel per graph launch. */
typedef int (*collective_rerun_fn)(const char *json, char *out, size_t cap);
static collective_rerun_fn collective_rerun(void) {
    static collective_rerun_fn fn;
    if (!fn) fn = (collective_rerun_fn)dlsym(RTLD_DEFAULT, "stepcast_collective_rerun");
    return fn;
}

static void replay_node(const fk_node_t *node, unsigned long long stream, unsigned long long launch, size_t i) {
    char graph[64];
    snprintf(graph, sizeof graph, "\"graph\":%llu,\"node\":%zu", launch, i);
    switch (node->kind) {
    case NODE_LAUNCH: {  /* with the bytes its launcher gave when it was captured */
        unsigned long long read, written;
        fk_kernel_bytes(&read, &written);
        stepcast_kernel_bytes(node->launch->read, node->launch->written);
        fk_log_launch(node->launch, stream, "cuGraphLaunch", launch, i);
        stepcast_kernel_bytes(read, written);
        break;
    }
    case NODE_COPY:
        fk_replay_copy(node->dst, node->pitch, node->src, node->src_pitch, node->width, node->rows, stream, graph);
        break;
    case NODE_FILL:
        fk_replay_fill(node->dst, node->value, node->width, node->bytes, node->pitch, node->rows, stream, graph);
        break;
    case NODE_RECORD:
        if (!strcmp(node->event, "event_record") || !strcmp(node->event, "stream_wait_event")) {
            fk_log_call(node->event, "\"stream\":%llu,%s,%s", stream, node->json, graph);
        } else if (!strcmp(node->event, "collective") && collective_rerun()) {
            size_t cap = strlen(node->json) + 24;
            char *json = malloc(cap);
            if (!json) break;
            collective_rerun()(node->json, json, cap);
            fk_log_call(node->event, "%s,%s", json, graph);
            free(json);
        } else {
            fk_log_call(node->event, "%s,%s", node->json, graph);
        }
        break;
    case NODE_EMPTY: break;
    }
}

/* ---- graphs ---- */
static fk_graph_t *new_graph(void) {
    fk_graph_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->magic = FK_GRAPH_MAGIC;
    pthread_mutex_lock(&fk_lock);
    g->capture_id = next_capture_id++;
    pthread_mutex_unlock(&fk_lock);
    return g;
}

FK_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = (CUgraph)new_graph();
    return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
FK_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
    fk_graph_t *g = new_graph();
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
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
    pthread_mutex_lock(&fk_lock);
    if (nodes)
        for (size_t i = 0; i < *numNodes && i < g->n; i++) nodes[i] = (CUgraphNode)g->nodes[i];
    *numNodes = g->n;
    pthread_mutex_unlock(&fk_lock);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
    const fk_node_t *node = as_node(hNode);
    if (!node || !type) return CUDA_ERROR_INVALID_VALUE;
    switch (node->kind) {
    case NODE_LAUNCH: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
    case NODE_COPY: *type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
    case NODE_FILL: *type = CU_GRAPH_NODE_TYPE_MEMSET; break;
    case NODE_RECORD:
        *type = !strcmp(node->event, "event_record") ? CU_GRAPH_NODE_TYPE_EVENT_RECORD
              : !strcmp(node->event, "stream_wait_event") ? CU_GRAPH_NODE_TYPE_WAIT_EVENT
                                                          : CU_GRAPH_NODE_TYPE_KERNEL;  /* a collective: NCCL's kernel */
        break;
    default: *type = CU_GRAPH_NODE_TYPE_EMPTY;
    }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    g->magic = 0;  /* kept: an instantiated graph still reads its nodes */
    return CUDA_SUCCESS;
}

/* ---- nodes added by hand (the graph's own order; dependencies are accepted and not kept) ---- */
static CUresult added(CUgraphNode *phGraphNode, fk_graph_t *g, fk_node_t *node) {
    if (!node) return CUDA_ERROR_OUT_OF_MEMORY;
    if (phGraphNode) *phGraphNode = (CUgraphNode)node;
    return CUDA_SUCCESS;
}
static CUresult kernel_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUDA_KERNEL_NODE_PARAMS *p) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g || !p) return CUDA_ERROR_INVALID_VALUE;
    fk_function_t *f = fk_function_of(p->func ? (const void *)p->func : (const void *)p->kern);
    static __thread fk_launch_rec_t rec;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    const unsigned cluster[3] = {1, 1, 1};
    CUresult rc = fk_launch_record(&rec, f, grid, block, p->sharedMemBytes, cluster, "cuGraphAddKernelNode");
    if (rc != CUDA_SUCCESS) return rc;
    fk_launch_rec_t *launch = malloc(sizeof *launch);
    if (!launch) return CUDA_ERROR_OUT_OF_MEMORY;
    *launch = rec;
    fk_node_t node = {.kind = NODE_LAUNCH, .launch = launch};
    return added(phGraphNode, g, add_node(g, &node));
}
FK_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                                size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
    return kernel_node(phGraphNode, hGraph, nodeParams);
}
FK_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams) {
    const fk_node_t *node = as_node(hNode);
    if (!node || node->kind != NODE_LAUNCH || !nodeParams) return CUDA_ERROR_INVALID_VALUE;
    memset(nodeParams, 0, sizeof *nodeParams);
    const fk_launch_rec_t *r = node->launch;
    nodeParams->gridDimX = r->grid[0], nodeParams->gridDimY = r->grid[1], nodeParams->gridDimZ = r->grid[2];
    nodeParams->blockDimX = r->block[0], nodeParams->blockDimY = r->block[1], nodeParams->blockDimZ = r->block[2];
    nodeParams->sharedMemBytes = r->smem;
    return CUDA_SUCCESS;
}
static CUresult copy_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUDA_MEMCPY3D *c) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g || !c) return CUDA_ERROR_INVALID_VALUE;
    if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;
    uintptr_t dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->dstHost : (uintptr_t)c->dstDevice;
    uintptr_t src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->srcHost : (uintptr_t)c->srcDevice;
    size_t height = c->Height ? c->Height : 1, depth = c->Depth ? c->Depth : 1;
    if (depth > 1 && (c->srcHeight != height || c->dstHeight != height)) return CUDA_ERROR_NOT_SUPPORTED;
    fk_node_t node = {.kind = NODE_COPY, .dst = dst + c->dstXInBytes + (c->dstY + c->dstZ * c->dstHeight) * c->dstPitch,
                      .pitch = c->dstPitch, .src = src + c->srcXInBytes + (c->srcY + c->srcZ * c->srcHeight) * c->srcPitch,
                      .src_pitch = c->srcPitch, .width = c->WidthInBytes, .rows = height * depth};
    if (node.rows == 1) node.pitch = node.src_pitch = node.width;
    return added(phGraphNode, g, add_node(g, &node));
}
FK_EXPORT CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                                size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
    return copy_node(phGraphNode, hGraph, copyParams);
}
static CUresult fill_node(CUgraphNode *phGraphNode, CUgraph hGraph, CUdeviceptr dst, size_t pitch, unsigned value,
                          unsigned element, size_t width, size_t height) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g || (element != 1 && element != 2 && element != 4)) return CUDA_ERROR_INVALID_VALUE;
    fk_node_t node = {.kind = NODE_FILL, .dst = dst, .value = value, .width = element, .bytes = width, .pitch = pitch,
                      .rows = height ? height : 1};
    return added(phGraphNode, g, add_node(g, &node));
}
FK_EXPORT CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                                size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    return fill_node(phGraphNode, hGraph, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
}
FK_EXPORT CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                               size_t numDependencies) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    fk_node_t node = {.kind = NODE_EMPTY};
    return added(phGraphNode, g, add_node(g, &node));
}
FK_EXPORT CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                                    size_t numDependencies, CUgraph childGraph) {
    fk_graph_t *g = as_graph(hGraph), *child = as_graph(childGraph);
    if (!g || !child) return CUDA_ERROR_INVALID_VALUE;
    fk_node_t *first = NULL;
    for (size_t i = 0; i < child->n; i++) {  /* the child's nodes, inlined in their order */
        fk_node_t *node = add_node(g, child->nodes[i]);
        if (!node) return CUDA_ERROR_OUT_OF_MEMORY;
        if (!first) first = node;
    }
    if (!first) {
        fk_node_t empty = {.kind = NODE_EMPTY};
        first = add_node(g, &empty);
    }
    return added(phGraphNode, g, first);
}
FK_EXPORT CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                                     const CUgraphEdgeData *edgeData, size_t numDependencies) {
    return as_graph(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* the generic entry (the runtime's cudaGraphAddNode comes here): kernel, copy, fill and empty nodes */
FK_EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUgraphNodeParams *nodeParams) {
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &nodeParams->kernel;
        const CUDA_KERNEL_NODE_PARAMS p = {k->func, k->gridDimX, k->gridDimY, k->gridDimZ, k->blockDimX, k->blockDimY,
                                           k->blockDimZ, k->sharedMemBytes, k->kernelParams, k->extra, k->kern, k->ctx};
        return kernel_node(phGraphNode, hGraph, &p);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: return copy_node(phGraphNode, hGraph, &nodeParams->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &nodeParams->memset;
        return fill_node(phGraphNode, hGraph, m->dst, m->pitch, m->value, m->elementSize, m->width, m->height);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY: return cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies);
    default: return CUDA_ERROR_NOT_SUPPORTED;  /* host, child-graph, event, memory and conditional nodes */
    }
}

/* ---- executable graphs ---- */
FK_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    fk_graph_t *g = as_graph(hGraph);
    if (!g || !phGraphExec) return CUDA_ERROR_INVALID_VALUE;
    fk_exec_t *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FK_EXEC_MAGIC;
    e->graph = g;
    e->n = g->n;  /* the nodes it had when instantiated */
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
    const fk_graph_t *g = e->graph;
    unsigned long long stream = fk_stream_id(hStream);
    fk_graph_t *into = fk_stream_capture(hStream);
    if (into) {  /* launched into another capture: its nodes become that graph's, on the capturing stream */
        for (size_t i = 0; i < e->n; i++) {
            fk_node_t node = *g->nodes[i];
            if (!node.stream || node.stream == g->origin) node.stream = stream;
            if (!add_node(into, &node)) return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
    }
    /* each launch is numbered: the trace charges one launch call's host cost per graph launch, not one per node */
    unsigned long long launch = __atomic_add_fetch(&graph_launches, 1, __ATOMIC_RELAXED);
    /* each launch runs the captured op calls again: the nodes of one captured call share a new call number */
    unsigned long long *calls = e->n ? calloc(2 * e->n, sizeof *calls) : NULL;
    size_t ncalls = 0;
    for (size_t i = 0; i < e->n; i++) {
        const fk_node_t *node = g->nodes[i];
        unsigned long long call = 0;
        if (node->call && calls) {
            size_t k = 0;
            while (k < ncalls && calls[2 * k] != node->call) k++;
            if (k == ncalls) calls[2 * ncalls] = node->call, calls[2 * ncalls++ + 1] = fk_new_call();
            call = calls[2 * k + 1];
        }
        fk_log_as_op(node->op, call);
        replay_node(node, !node->stream || node->stream == g->origin ? stream : node->stream, launch, i);
        fk_log_as_op_done();
    }
    free(calls);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    fk_exec_t *e = as_exec(hGraphExec);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}
