/* CUDA graphs from stream capture (torch.cuda.graphs, torch.compile's mode="reduce-overhead").
 *
 * While a stream captures, the device work given to it (kernels, library calls, copies, memsets, collectives,
 * event records and waits: every record sc_emit would log for it) becomes a node of the capture's graph instead of
 * a log record. A stream that waits on an event recorded during a capture joins that capture, as in CUDA (fork /
 * join through events). Each cudaGraphLaunch writes the graph's nodes into the log again (core.c, sc_emit_graph):
 * one 'L' record (the launch call, with its host gap) followed by the nodes, on the launching stream where they
 * were captured on the capture's first stream, with fresh op-call numbers, so each replay is timed as new work; a
 * captured collective takes its communicator's next sequence number at each launch, as a new run of NCCL's kernel.
 * Graphs built node by node through cudaGraphAddNode (the entry torch imports) get kernel, copy, fill and empty
 * nodes the same way: their work is issued on a private stream capturing into the graph.
 *
 * Graph memory is never freed: torch destroys a graph right after instantiating it, and the executable graph
 * keeps reading its nodes; graphs are few and small. */
#define _GNU_SOURCE
#include "shim.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAPH_MAGIC 0x47524150u
#define EXEC_MAGIC 0x47455845u
#define MAX_CAPTURING 64          /* streams capturing at once (all captures together) */
#define MAX_CAPTURED_EVENTS 1024  /* events recorded during captures under way */

typedef struct sc_graph {
    uint32_t magic;
    unsigned long long id;   /* the capture id cudaStreamGetCaptureInfo answers, and the graph's number in the log */
    int origin;              /* the stream the capture began on: replays put its work on the launching stream */
    sc_node_t *nodes;
    size_t n, cap;
    uint32_t calls;          /* op calls numbered so far (a node's call is 1..calls, 0 outside ops) */
    uint64_t last_instance;  /* the op call of the previous captured kernel */
} sc_graph_t;

typedef struct { uint32_t magic; sc_graph_t *graph; } sc_exec_t;

int sc_capturing;
static struct { int stream; sc_graph_t *graph; } capturing[MAX_CAPTURING];
static struct { int event; sc_graph_t *graph; } recorded[MAX_CAPTURED_EVENTS];
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long next_graph_id = 1;
static __thread enum cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

static sc_graph_t *new_graph(void) {
    sc_graph_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->magic = GRAPH_MAGIC;
    g->origin = -1;
    g->id = __atomic_fetch_add(&next_graph_id, 1, __ATOMIC_RELAXED);
    return g;
}

static sc_graph_t *as_graph(cudaGraph_t g) {
    sc_graph_t *graph = (sc_graph_t *)g;
    return graph && graph->magic == GRAPH_MAGIC ? graph : NULL;
}

/* A node handle: a node's own record (cudaGraphGetNodes), or one given out by cudaGraphAddNode, which stays valid
 * while the graph's node array moves. */
#define HANDLE_KIND 'h'  /* a node handle given out by cudaGraphAddNode (stable: the graph's node array moves) */
typedef struct { char kind; sc_graph_t *graph; size_t index; } node_handle_t;

static const sc_node_t *node_of(cudaGraphNode_t node) {
    const node_handle_t *h = (const node_handle_t *)node;
    if (h && h->kind == HANDLE_KIND) return h->index < h->graph->n ? &h->graph->nodes[h->index] : NULL;
    return (const sc_node_t *)node;
}

/* ---- capture bookkeeping (graph_lock held) ---- */
static sc_graph_t *graph_of_stream_locked(int stream) {
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing[i].graph && capturing[i].stream == stream) return capturing[i].graph;
    return NULL;
}

static int join_locked(int stream, sc_graph_t *g) {
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (!capturing[i].graph) {
            capturing[i].stream = stream;
            capturing[i].graph = g;
            __atomic_fetch_add(&sc_capturing, 1, __ATOMIC_RELAXED);
            return 1;
        }
    return 0;
}

static void set_recorded_locked(int event, sc_graph_t *g) {
    int free_slot = -1;
    for (int i = 0; i < MAX_CAPTURED_EVENTS; i++) {
        if (recorded[i].graph && recorded[i].event == event) {
            recorded[i].graph = g;
            return;
        }
        if (!recorded[i].graph && free_slot < 0) free_slot = i;
    }
    if (g && free_slot >= 0) {
        recorded[free_slot].event = event;
        recorded[free_slot].graph = g;
    }
}

static sc_graph_t *graph_of_event_locked(int event) {
    for (int i = 0; i < MAX_CAPTURED_EVENTS; i++)
        if (recorded[i].graph && recorded[i].event == event) return recorded[i].graph;
    return NULL;
}

static int add_node_locked(sc_graph_t *g, const sc_node_t *node) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        sc_node_t *nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes) return 0;
        g->nodes = nodes;
        g->cap = cap;
    }
    g->nodes[g->n++] = *node;
    return 1;
}

/* The two integer fields of a record's text (R: event, stream; the others: stream first). */
static int leading_ints(const char *fields, int *a, int *b) { return sscanf(fields, "%d\t%d", a, b); }

static char *dup_range(const char *from, const char *to) {
    size_t n = (size_t)(to - from);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, from, n);
        s[n] = 0;
    }
    return s;
}

int sc_capture_record(char kind, const char *fields, int op, uint64_t hash) {
    int a = 0, b = 0;
    if (leading_ints(fields, &a, &b) < 1) return 0;
    int stream = kind == 'R' ? b : a;
    pthread_mutex_lock(&graph_lock);
    sc_graph_t *g = graph_of_stream_locked(stream);
    if (!g && kind == 'W') {  /* a stream waiting on an event recorded during a capture joins that capture */
        sc_graph_t *from = graph_of_event_locked(b);
        if (from && join_locked(stream, from)) g = from;
    }
    if (kind == 'R') set_recorded_locked(a, g);
    if (!g) {
        pthread_mutex_unlock(&graph_lock);
        return 0;
    }
    /* split the text around the stream id: "<pre><stream><post>", a kernel's op call (its last field) left out */
    const char *s = fields;
    if (kind == 'R') s = strchr(s, '\t') + 1;
    const char *after = s;
    while (*after && *after != '\t') after++;
    const char *end = after + strlen(after);
    sc_node_t node = {.kind = kind, .op = op, .stream = stream, .hash = hash};
    if (kind == 'K') {
        const char *last = strrchr(after, '\t');
        uint64_t instance = last ? strtoull(last + 1, NULL, 10) : 0;
        if (last) end = last;
        if (instance && instance != g->last_instance) g->calls++;
        node.call = instance ? g->calls : 0;
        g->last_instance = instance;
    }
    node.pre = dup_range(fields, s);
    node.post = dup_range(after, end);
    int ok = node.pre && node.post && add_node_locked(g, &node);
    pthread_mutex_unlock(&graph_lock);
    return ok;
}

/* ---- stream capture ---- */
static cudaError_t begin_capture(cudaStream_t s, sc_graph_t *g) {
    int stream = sc_stream_id(s);
    if (stream == 0 || stream == -1) return cudaErrorStreamCaptureUnsupported;  /* the legacy default stream */
    pthread_mutex_lock(&graph_lock);
    cudaError_t rc = cudaSuccess;
    if (graph_of_stream_locked(stream)) rc = cudaErrorIllegalState;
    else if (!join_locked(stream, g)) rc = cudaErrorStreamCaptureUnsupported;
    else if (g->origin < 0) g->origin = stream;
    pthread_mutex_unlock(&graph_lock);
    return rc;
}

SC_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    (void)mode;
    sc_graph_t *g = new_graph();
    return g ? begin_capture(s, g) : cudaErrorMemoryAllocation;
}

SC_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                                    const cudaGraphEdgeData *edges, size_t ndeps,
                                                    enum cudaStreamCaptureMode mode) {
    (void)deps; (void)edges; (void)ndeps; (void)mode;
    sc_graph_t *g = as_graph(graph);
    return g ? begin_capture(s, g) : cudaErrorInvalidValue;
}

SC_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *pGraph) {
    int stream = sc_stream_id(s);
    pthread_mutex_lock(&graph_lock);
    sc_graph_t *g = graph_of_stream_locked(stream);
    if (!g || g->origin != stream) {
        pthread_mutex_unlock(&graph_lock);
        return cudaErrorIllegalState;
    }
    for (int i = 0; i < MAX_CAPTURING; i++)   /* the capture's first stream and every stream that joined it */
        if (capturing[i].graph == g) {
            capturing[i].graph = NULL;
            __atomic_fetch_sub(&sc_capturing, 1, __ATOMIC_RELAXED);
        }
    for (int i = 0; i < MAX_CAPTURED_EVENTS; i++)
        if (recorded[i].graph == g) recorded[i].graph = NULL;
    pthread_mutex_unlock(&graph_lock);
    if (pGraph) *pGraph = (cudaGraph_t)g;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    int stream = sc_stream_id(s);
    pthread_mutex_lock(&graph_lock);
    int active = graph_of_stream_locked(stream) != NULL;
    pthread_mutex_unlock(&graph_lock);
    *status = active ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                               unsigned long long *id, cudaGraph_t *graph,
                                               const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                               size_t *ndeps) {
    int stream = sc_stream_id(s);
    pthread_mutex_lock(&graph_lock);
    sc_graph_t *g = graph_of_stream_locked(stream);
    pthread_mutex_unlock(&graph_lock);
    if (status) *status = g ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    if (id) *id = g ? g->id : 0;
    if (graph) *graph = (cudaGraph_t)g;
    if (deps) *deps = NULL;
    if (edges) *edges = NULL;
    if (ndeps) *ndeps = 0;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    enum cudaStreamCaptureMode previous = thread_mode;
    thread_mode = *mode;
    *mode = previous;
    return cudaSuccess;
}

/* ---- graphs and executable graphs ---- */
SC_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
    (void)flags;
    sc_graph_t *g = new_graph();
    if (!g) return cudaErrorMemoryAllocation;
    *pGraph = (cudaGraph_t)g;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    return as_graph(graph) ? cudaSuccess : cudaErrorInvalidValue;  /* kept: executable graphs read its nodes */
}

SC_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
    sc_graph_t *g = as_graph(graph);
    if (!g || !numNodes) return cudaErrorInvalidValue;
    pthread_mutex_lock(&graph_lock);
    if (nodes)  /* node handles: the nodes' own records */
        for (size_t i = 0; i < *numNodes && i < g->n; i++) nodes[i] = (cudaGraphNode_t)&g->nodes[i];
    *numNodes = g->n;
    pthread_mutex_unlock(&graph_lock);
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *type) {
    const sc_node_t *n = node_of(node);
    if (!n || !type) return cudaErrorInvalidValue;
    switch (n->kind) {
    case 'K': case 'G': case 'N': *type = cudaGraphNodeTypeKernel; break;
    case 'C': *type = cudaGraphNodeTypeMemcpy; break;
    case 'S': *type = cudaGraphNodeTypeMemset; break;
    case 'R': *type = cudaGraphNodeTypeEventRecord; break;
    case 'W': *type = cudaGraphNodeTypeWaitEvent; break;
    default: *type = cudaGraphNodeTypeEmpty;
    }
    return cudaSuccess;
}

/* ---- nodes added by hand (cudaGraphAddNode: what torch imports): the node's work is issued on a private stream
 * that captures into the graph, so the node is the record a stream-captured one would be (one way to make nodes).
 * Dependencies are accepted and not kept: nodes replay in the order they were added. ---- */
static cudaError_t issue_node(cudaStream_t s, const struct cudaGraphNodeParams *p) {
    switch (p->type) {
    case cudaGraphNodeTypeKernel: {
        const struct cudaKernelNodeParamsV2 *k = &p->kernel;
        return cudaLaunchKernel(k->func, k->gridDim, k->blockDim, k->kernelParams, k->sharedMemBytes, s);
    }
    case cudaGraphNodeTypeMemset: {
        const struct cudaMemsetParamsV2 *m = &p->memset;
        size_t height = m->height ? m->height : 1;
        if (m->elementSize == 1 && (height == 1 || m->pitch == m->width))
            return cudaMemsetAsync(m->dst, (int)m->value, m->width * height, s);
        sc_emit(sc_call_enter(), 'S', "%d\t%zu", sc_stream_id(s), (size_t)m->elementSize * m->width * height);
        return cudaSuccess;
    }
    case cudaGraphNodeTypeMemcpy: {
        const struct cudaMemcpy3DParms *c = &p->memcpy.copyParams;
        if (c->srcArray || c->dstArray) return cudaErrorNotSupported;
        size_t src_slice = c->srcPtr.pitch * c->srcPtr.ysize, dst_slice = c->dstPtr.pitch * c->dstPtr.ysize;
        const char *src = (const char *)c->srcPtr.ptr + c->srcPos.x + c->srcPos.y * c->srcPtr.pitch + c->srcPos.z * src_slice;
        char *dst = (char *)c->dstPtr.ptr + c->dstPos.x + c->dstPos.y * c->dstPtr.pitch + c->dstPos.z * dst_slice;
        size_t rows = (c->extent.height ? c->extent.height : 1) * (c->extent.depth ? c->extent.depth : 1);
        if (rows == 1) return cudaMemcpyAsync(dst, src, c->extent.width, c->kind, s);
        return cudaMemcpy2DAsync(dst, c->dstPtr.pitch, src, c->srcPtr.pitch, c->extent.width, rows, c->kind, s);
    }
    case cudaGraphNodeTypeEmpty: return cudaSuccess;
    default: return cudaErrorNotSupported;  /* host, child-graph, event, memory and conditional nodes */
    }
}

SC_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                       const cudaGraphEdgeData *edges, size_t ndeps, struct cudaGraphNodeParams *p) {
    (void)deps; (void)edges; (void)ndeps;
    sc_graph_t *g = as_graph(graph);
    if (!g || !p) return cudaErrorInvalidValue;
    static __thread cudaStream_t builder;  /* this thread's private stream, capturing into one graph at a time */
    if (!builder) builder = sc_new_stream();
    int stream = sc_stream_id(builder);
    pthread_mutex_lock(&graph_lock);
    int joined = join_locked(stream, g);
    if (joined && g->origin < 0) g->origin = stream;  /* replays put a hand-built graph's work on the launching stream */
    size_t index = g->n;
    pthread_mutex_unlock(&graph_lock);
    if (!joined) return cudaErrorMemoryAllocation;
    cudaError_t rc = issue_node(builder, p);
    pthread_mutex_lock(&graph_lock);
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing[i].graph == g && capturing[i].stream == stream) {
            capturing[i].graph = NULL;
            __atomic_fetch_sub(&sc_capturing, 1, __ATOMIC_RELAXED);
        }
    int added = g->n > index;
    pthread_mutex_unlock(&graph_lock);
    if (rc != cudaSuccess) return rc;
    node_handle_t *h = calloc(1, sizeof *h);
    if (!h) return cudaErrorMemoryAllocation;
    *h = (node_handle_t){.kind = added ? HANDLE_KIND : 0, .graph = g, .index = index};  /* kind 0: an empty node */
    if (pGraphNode) *pGraphNode = (cudaGraphNode_t)h;
    return cudaSuccess;
}

static cudaError_t instantiate(cudaGraphExec_t *pExec, cudaGraph_t graph) {
    sc_graph_t *g = as_graph(graph);
    if (!g || !pExec) return cudaErrorInvalidValue;
    sc_exec_t *e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    e->magic = EXEC_MAGIC;
    e->graph = g;
    *pExec = (cudaGraphExec_t)e;
    return cudaSuccess;
}

SC_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pExec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    return instantiate(pExec, graph);
}
SC_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
    (void)flags;
    return instantiate(pExec, graph);
}
SC_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pExec, cudaGraph_t graph,
                                                     cudaGraphInstantiateParams *params) {
    cudaError_t rc = instantiate(pExec, graph);
    if (params) params->result_out = rc == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
    return rc;
}

static sc_exec_t *as_exec(cudaGraphExec_t e) {
    sc_exec_t *exec = (sc_exec_t *)e;
    return exec && exec->magic == EXEC_MAGIC ? exec : NULL;
}

SC_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t e, cudaStream_t s) {
    (void)s;
    return as_exec(e) ? cudaSuccess : cudaErrorInvalidValue;
}

SC_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    sc_exec_t *exec = as_exec(e);
    if (!exec) return cudaErrorInvalidValue;
    exec->magic = 0;
    free(exec);
    return cudaSuccess;
}

/* nccl.c: a captured collective's fields with its communicator's next sequence number (one run per graph launch) */
int sc_collective_rerun(const char *text, const char *sep, char *out, size_t cap);

/* The nodes of one launch when the graph holds collectives: a copy whose collectives ('N') carry this run's sequence
 * numbers (their own strings, the rest shared); NULL when it holds none (or without memory). */
static sc_node_t *rerun_collectives(const sc_node_t *nodes, size_t n) {
    size_t i = 0;
    while (i < n && nodes[i].kind != 'N') i++;
    if (i == n) return NULL;
    sc_node_t *copy = malloc(n * sizeof *copy);
    if (!copy) return NULL;
    memcpy(copy, nodes, n * sizeof *copy);
    for (; i < n; i++) {
        if (copy[i].kind != 'N') continue;
        size_t cap = strlen(nodes[i].post) + 24;
        char *post = malloc(cap);
        if (!post) continue;
        sc_collective_rerun(nodes[i].post, "\t", post, cap);
        copy[i].post = post;
    }
    return copy;
}

SC_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    uint64_t t = sc_call_enter();
    sc_exec_t *exec = as_exec(e);
    if (!exec) return cudaErrorInvalidValue;
    sc_graph_t *g = exec->graph;
    int stream = sc_stream_id(s);
    pthread_mutex_lock(&graph_lock);
    sc_graph_t *into = graph_of_stream_locked(stream);
    if (into) {  /* launched into another capture: its nodes become that graph's, on the capturing stream */
        uint32_t base = into->calls;
        int ok = 1;
        for (size_t i = 0; i < g->n && ok; i++) {
            sc_node_t node = g->nodes[i];
            if (node.stream == g->origin) node.stream = stream;
            if (node.call) node.call += base;
            ok = add_node_locked(into, &node);
        }
        into->calls = base + g->calls;
        into->last_instance = 0;
        pthread_mutex_unlock(&graph_lock);
        return ok ? cudaSuccess : cudaErrorMemoryAllocation;
    }
    size_t n = g->n;
    uint32_t calls = g->calls;
    pthread_mutex_unlock(&graph_lock);
    sc_node_t *nodes = rerun_collectives(g->nodes, n);
    sc_emit_graph(t, stream, g->id, g->origin, nodes ? nodes : g->nodes, n, calls ? sc_op_instances_reserve(calls) : 0);
    if (nodes) {
        for (size_t i = 0; i < n; i++)
            if (nodes[i].post != g->nodes[i].post) free(nodes[i].post);
        free(nodes);
    }
    return cudaSuccess;
}
