/* NCCL: communicators get a stable id every member computes the same way (from the unique id torch distributes
 * through its store, or from the parent id + split arguments); each collective is logged ('N' line) with its
 * per-communicator sequence number and returns success without moving data. */
#define _GNU_SOURCE
#include "shim.h"

/* nccl.h includes cuda_runtime.h, which needs toolkit-only headers; the runtime API header is all it uses here. */
#include <cuda_runtime_api.h>
#define __CUDA_RUNTIME_H__
#include "compat/fp_types.h"
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sc_comm {
    char id[40];
    int nranks, rank;      /* nranks -1: unknown here (a split); the collator counts the members' traces */
    uint64_t seq, splits;
    pthread_mutex_t lock;
    void *shm;             /* small-collective exchange area shared by the members (datapath.c), or NULL */
    struct sc_comm *next;
} sc_comm;

static sc_comm *all_comms;
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_comm_id[40];  /* the newest communicator's id (a sparse run names a process group's comm by it) */

/* Copy the id of the communicator created last into buf (NUL-terminated; "" before any); returns its length. */
SC_EXPORT int stepcast_last_comm(char *buf, int size) {
    if (!buf || size < 1) return 0;
    pthread_mutex_lock(&comms_lock);
    snprintf(buf, (size_t)size, "%s", last_comm_id);
    pthread_mutex_unlock(&comms_lock);
    return (int)strlen(buf);
}

/* Rank dedup: tell every communicator's members this rank's program hash (and whether it stops). */
void sc_comms_publish(uint64_t program, int stopped) {
    pthread_mutex_lock(&comms_lock);
    for (sc_comm *c = all_comms; c; c = c->next) sc_shm_member_state(c->shm, c->rank, program, stopped);
    pthread_mutex_unlock(&comms_lock);
}

static __thread int group_depth;
static __thread int group_id;
static int next_group_id = 1;

static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static sc_comm *new_comm(uint64_t key, int nranks, int rank) {
    sc_comm *c = calloc(1, sizeof *c);
    snprintf(c->id, sizeof c->id, "nccl-%016lx", (unsigned long)key);
    c->nranks = nranks;
    c->rank = rank;
    pthread_mutex_init(&c->lock, NULL);
    if (nranks > 1) c->shm = sc_comm_shm(c->id, nranks);
    pthread_mutex_lock(&comms_lock);
    c->next = all_comms;
    all_comms = c;
    memcpy(last_comm_id, c->id, sizeof last_comm_id);
    pthread_mutex_unlock(&comms_lock);
    sc_note("X\t%s\t%d\t%d\n", c->id, nranks, rank);
    return c;
}

/* A collective captured into a CUDA graph runs again at each launch of the graph, as a new collective of its
 * communicator (a GPU runs NCCL's kernel again): it takes the communicator's next sequence number then. Every member
 * launches the same graphs in the same order relative to its other collectives, so the numbers agree across ranks,
 * and the exchange area (datapath.c) only needs them to grow. `text` is an 'N' line's fields from the stream on
 * (field 2 the communicator, 3 the number) separated by `sep` (a tab, or the two characters \t inside a JSON
 * string); `out` gets the same with the new number. Returns 1 when renumbered, 0 (out a copy) otherwise. */
int sc_collective_rerun(const char *text, const char *sep, char *out, size_t cap) {
    const char *field[5] = {text};
    size_t n = strlen(sep);
    for (int i = 1; i < 5; i++) {
        const char *next = strstr(field[i - 1], sep);
        if (!next) { snprintf(out, cap, "%s", text); return 0; }
        field[i] = next + n;
    }
    size_t id_len = (size_t)(field[3] - n - field[2]);
    sc_comm *c = NULL;
    pthread_mutex_lock(&comms_lock);
    for (c = all_comms; c; c = c->next)
        if (strlen(c->id) == id_len && strncmp(c->id, field[2], id_len) == 0) break;
    pthread_mutex_unlock(&comms_lock);
    if (!c) { snprintf(out, cap, "%s", text); return 0; }
    pthread_mutex_lock(&c->lock);
    uint64_t seq = c->seq++;
    pthread_mutex_unlock(&c->lock);
    snprintf(out, cap, "%.*s%lu%s", (int)(field[3] - text), text, (unsigned long)seq, field[4] - n);
    return 1;
}

SC_EXPORT ncclResult_t ncclGetVersion(int *v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
SC_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *u) {
    static int counter;
    memset(u, 0, sizeof *u);
    snprintf(u->internal, sizeof u->internal, "stepcast-nccl pid=%d t=%lu n=%d", (int)getpid(),
             (unsigned long)sc_now_ns(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    return ncclSuccess;
}
static uint64_t id_key(const ncclUniqueId *u) { return fnv1a(u->internal, sizeof u->internal, 0xcbf29ce484222325ull); }

SC_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    *comm = (ncclComm_t)new_comm(id_key(&id), nranks, rank);
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    (void)cfg;
    return ncclCommInitRank(comm, nranks, id, rank);
}
SC_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nid, ncclUniqueId *ids,
                                                ncclConfig_t *cfg) {
    (void)nid; (void)cfg;
    return ncclCommInitRank(comm, nranks, ids[0], rank);
}
SC_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    (void)devlist;
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    for (int i = 0; i < ndev; i++) comms[i] = (ncclComm_t)new_comm(id_key(&id), ndev, i);
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *cfg) {
    (void)key; (void)cfg;
    sc_comm *p = (sc_comm *)comm;
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->splits++;
    pthread_mutex_unlock(&p->lock);
    if (color == NCCL_SPLIT_NOCOLOR) { *newcomm = NULL; return ncclSuccess; }
    uint64_t h = fnv1a(p->id, strlen(p->id), 0xcbf29ce484222325ull);
    h = fnv1a(&n, sizeof n, h);
    h = fnv1a(&color, sizeof color, h);
    *newcomm = (ncclComm_t)new_comm(h, -1, -1);
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) { (void)comm; *e = ncclSuccess; return ncclSuccess; }
SC_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *n) {
    const sc_comm *c = (const sc_comm *)comm;
    *n = c->nranks > 0 ? c->nranks : 1;
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *r) {
    const sc_comm *c = (const sc_comm *)comm;
    *r = c->rank > 0 ? c->rank : 0;
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { (void)comm; return ncclSuccess; }
SC_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { (void)comm; return ncclSuccess; }
SC_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { (void)comm; return ncclSuccess; }
SC_EXPORT const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "stepcast NCCL error"; }
SC_EXPORT const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return ""; }
SC_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t dt,
                                                ncclScalarResidence_t res, ncclComm_t comm) {
    (void)scalar; (void)dt; (void)res; (void)comm;
    *op = ncclNumOps;
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) { (void)op; (void)comm; return ncclSuccess; }
SC_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    return sc_device_alloc(size, ptr) == 0 ? ncclSuccess : ncclSystemError;
}
SC_EXPORT ncclResult_t ncclMemFree(void *ptr) { sc_device_free(ptr); return ncclSuccess; }
SC_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
    (void)comm; (void)size;
    *handle = buff;
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) { (void)comm; (void)handle; return ncclSuccess; }
SC_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags) {
    (void)comm; (void)size; (void)flags;
    *win = (ncclWindow_t)buff;
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) { (void)comm; (void)win; return ncclSuccess; }

SC_EXPORT ncclResult_t ncclGroupStart(void) {
    if (group_depth++ == 0) group_id = __atomic_fetch_add(&next_group_id, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
}
SC_EXPORT ncclResult_t ncclGroupEnd(void) {
    if (group_depth > 0 && --group_depth == 0) group_id = 0;
    return ncclSuccess;
}

/* N: stream, op, comm id, comm seq, comm size (-1 unknown), peer/root (-1 none), count, ncclDataType_t, group */
/* kind for sc_exchange: 0 all_reduce, 1 broadcast, 2 all_gather, 3 reduce_scatter, 4 reduce; -1 no data */
static ncclResult_t log_coll_data(const char *op, ncclComm_t comm, size_t count, ncclDataType_t dt, int peer,
                                  cudaStream_t stream, int kind, const void *send, void *recv, int redop) {
    uint64_t t = sc_call_enter();
    sc_comm *c = (sc_comm *)comm;
    pthread_mutex_lock(&c->lock);
    uint64_t seq = c->seq++;
    pthread_mutex_unlock(&c->lock);
    if (kind >= 0 && c->shm) sc_exchange(c->shm, c->nranks, c->rank, seq, kind, send, recv, count, (int)dt, (int)redop, peer);
    sc_emit(t, 'N', "%d\t%s\t%s\t%lu\t%d\t%d\t%zu\t%d\t%d", sc_stream_id(stream), op, c->id, (unsigned long)seq,
            c->nranks, peer, count, (int)dt, group_depth ? group_id : 0);
    return ncclSuccess;
}

static ncclResult_t log_coll(const char *op, ncclComm_t comm, size_t count, ncclDataType_t dt, int peer,
                             cudaStream_t stream) {
    return log_coll_data(op, comm, count, dt, peer, stream, -1, NULL, NULL, 0);
}

SC_EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                                     ncclComm_t comm, cudaStream_t st) {
    return log_coll_data("all_reduce", comm, n, dt, -1, st, 0, s, r, op);
}
SC_EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t comm,
                                     cudaStream_t st) {
    return log_coll_data("broadcast", comm, n, dt, root, st, 1, s, r, 0);
}
SC_EXPORT ncclResult_t ncclBcast(void *b, size_t n, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t st) {
    return log_coll_data("broadcast", comm, n, dt, root, st, 1, b, b, 0);
}
SC_EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t st) {
    return log_coll_data("reduce", comm, n, dt, root, st, 4, s, r, op);
}
/* all_gather: count is the per-rank send count; reduce_scatter: the per-rank receive count */
SC_EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t comm,
                                     cudaStream_t st) {
    return log_coll_data("all_gather", comm, n, dt, -1, st, 2, s, r, 0);
}
SC_EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                                         ncclComm_t comm, cudaStream_t st) {
    return log_coll_data("reduce_scatter", comm, n, dt, -1, st, 3, s, r, op);
}
SC_EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t comm,
                                    cudaStream_t st) {
    (void)s; (void)r;
    return log_coll("all_to_all", comm, n, dt, -1, st);
}
SC_EXPORT ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t comm,
                                  cudaStream_t st) {
    (void)s; (void)r;
    return log_coll("gather", comm, n, dt, root, st);
}
SC_EXPORT ncclResult_t ncclSend(const void *b, size_t n, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t st) {
    (void)b;
    return log_coll("send", comm, n, dt, peer, st);
}
SC_EXPORT ncclResult_t ncclRecv(void *b, size_t n, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t st) {
    (void)b;
    return log_coll("recv", comm, n, dt, peer, st);
}
