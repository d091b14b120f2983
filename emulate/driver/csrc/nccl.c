/* NCCL on the emulated driver. Built with runtime_marks.c into libstepcast_nccl.so, which the launcher preloads
 * (LD_PRELOAD): torch loads the real libnccl.so.2 through its RPATH, ahead of any LD_LIBRARY_PATH, and the real
 * library would crash on device memory that has no pages, so its entry points are answered here instead.
 *
 * Communicators get a stable id every member computes the same way (from the unique id torch distributes through
 * its store, or from the parent's id and the split's arguments). Each collective is a timed "collective" record in
 * the driver's log (emulate/driver/csrc/capture.c, stepcast_log_record: the same clock, gap, thread and op fields as
 * the driver's own records) with its communicator's sequence number, and returns without moving data, except that
 * small collectives and point-to-point messages exchange their real bytes between the ranks through the driver's
 * data path (datapath.c: DDP's bucket indices, all_gather_object, a pipeline stage's recv_object_list). A collective issued on a capturing stream becomes a node of that CUDA
 * graph (graph.c) and takes the communicator's next number at each launch of the graph.
 *
 * Record members (emulate/driver/tracelog.py reads them): "comm" notes {comm, nranks, rank} (nranks -1: a split,
 * sized by the collator from its members' logs); "collective" {stream, coll, comm, seq, nranks, peer (-1: none),
 * count, dtype (ncclDataType_t), group (0: outside ncclGroupStart/End)}.
 *
 * Entry points not defined here answer ncclInvalidUsage and are logged once ("unsupported"): the stubs are
 * generated from nccl.h (emulate/driver/build.py). The driver is reached by name (dlsym): it is loaded after this
 * library, by the CUDA runtime. */
#define _GNU_SOURCE
/* nccl.h includes cuda_runtime.h, which needs toolkit-only headers; the runtime API header is all it uses here. */
#include <cuda_runtime_api.h>
#define __CUDA_RUNTIME_H__
#include "compat/fp_types.h"
#include <nccl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- the driver's capture API, resolved at first use ---- */
static void *driver_symbol(const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib) p = dlsym(lib, name);
    }
    return p;
}
#define DRIVER(fn_type, name)                                              \
    static fn_type name##_fn(void) {                                       \
        static fn_type fn;                                                 \
        if (!fn) fn = (fn_type)driver_symbol("stepcast_" #name);           \
        return fn;                                                         \
    }
typedef void (*log_record_t)(const char *event, int timed, const char *json);
typedef int (*graph_record_t)(unsigned long long stream, const char *event, const char *json);
typedef unsigned long long (*stream_id_t)(const void *stream);
typedef void *(*comm_shm_t)(const char *comm_id, int nranks);
typedef void (*exchange_t)(void *shm, int nranks, int rank, unsigned long long seq, int kind, const void *send,
                           void *recv, size_t count, int dtype, int redop, int root);
typedef void (*alltoallv_t)(void *shm, int nranks, int rank, unsigned long long round, const void *const *send,
                            const size_t *send_bytes, void *const *recv, const size_t *recv_bytes);
typedef size_t (*nccl_size_t)(int dtype);
typedef void (*member_state_t)(void *shm, int rank, unsigned long long program, int stopped);
typedef void (*comm_member_t)(void *shm, int rank);
DRIVER(log_record_t, log_record)
DRIVER(graph_record_t, graph_record)
DRIVER(stream_id_t, stream_id)
DRIVER(comm_shm_t, comm_shm)
DRIVER(exchange_t, exchange)
DRIVER(alltoallv_t, alltoallv)
DRIVER(nccl_size_t, nccl_size)
DRIVER(member_state_t, shm_member_state)
DRIVER(comm_member_t, comm_member)

static void log_record(const char *event, int timed, const char *json) {
    log_record_t fn = log_record_fn();
    if (fn) fn(event, timed, json);
}

/* ---- communicators ---- */
typedef struct nccl_comm {
    char id[40];
    int nranks, rank;      /* nranks -1: unknown here (a split); the collator counts the members' traces */
    /* seq numbers the collectives every member makes (the collator matches them by it, the exchange area tags by
     * it); p2p_seq the sends and receives, which involve two members only: a pipeline stage sends and receives more
     * than the first and last on one communicator, and counted together its later collectives would not agree */
    uint64_t seq, p2p_seq, splits;
    uint64_t alltoalls;    /* all-to-alls exchanged through the area by a group of sends and receives (run_pending) */
    pthread_mutex_t lock;
    void *shm;             /* small-collective exchange area shared by the members (datapath.c), or NULL */
    struct nccl_comm *next;
} nccl_comm_t;

static nccl_comm_t *all_comms;
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_comm_id[40];  /* the newest communicator's id (a sparse run names a process group's comm by it) */

/* Copy the id of the communicator created last into buf (NUL-terminated; "" before any); returns its length. */
EXPORT int stepcast_last_comm(char *buf, int size) {
    if (!buf || size < 1) return 0;
    pthread_mutex_lock(&comms_lock);
    snprintf(buf, (size_t)size, "%s", last_comm_id);
    pthread_mutex_unlock(&comms_lock);
    return (int)strlen(buf);
}

/* Rank dedup (the driver's dedup.c): tell every communicator's members this rank's program hash, and whether it
 * stops (a stopped member's live twin then contributes its small-collective bytes). */
EXPORT void stepcast_comms_publish(unsigned long long program, int stopped) {
    member_state_t fn = shm_member_state_fn();
    pthread_mutex_lock(&comms_lock);
    for (nccl_comm_t *c = all_comms; c && fn; c = c->next) fn(c->shm, c->rank, program, stopped);
    pthread_mutex_unlock(&comms_lock);
}

static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static nccl_comm_t *new_comm(uint64_t key, int nranks, int rank) {
    nccl_comm_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    snprintf(c->id, sizeof c->id, "nccl-%016llx", (unsigned long long)key);
    c->nranks = nranks;
    c->rank = rank;
    pthread_mutex_init(&c->lock, NULL);
    comm_shm_t shm = comm_shm_fn();
    if (nranks > 1 && shm) c->shm = shm(c->id, nranks);
    comm_member_t member = comm_member_fn();
    if (c->shm && member) member(c->shm, rank);  /* waits on this area can tell when this rank has left */
    pthread_mutex_lock(&comms_lock);
    c->next = all_comms;
    all_comms = c;
    memcpy(last_comm_id, c->id, sizeof last_comm_id);
    pthread_mutex_unlock(&comms_lock);
    char json[160];
    snprintf(json, sizeof json, "\"comm\":\"%s\",\"nranks\":%d,\"rank\":%d", c->id, nranks, rank);
    log_record("comm", 0, json);
    return c;
}

static nccl_comm_t *find_comm(const char *id, size_t len) {
    nccl_comm_t *c;
    pthread_mutex_lock(&comms_lock);
    for (c = all_comms; c; c = c->next)
        if (strlen(c->id) == len && strncmp(c->id, id, len) == 0) break;
    pthread_mutex_unlock(&comms_lock);
    return c;
}

/* A collective captured into a CUDA graph runs again at each launch of the graph, as a new collective of its
 * communicator (a GPU runs NCCL's kernel again): it takes the communicator's next sequence number then. Every member
 * launches the same graphs in the same order relative to its other collectives, so the numbers agree across ranks,
 * and the exchange area only needs them to grow. `json` is a collective record's members; `out` gets the same with
 * the new "seq". Returns 1 when renumbered, 0 (out a copy) otherwise. Called by the driver's graph.c. */
static int is_p2p(const char *op) { return !strcmp(op, "send") || !strcmp(op, "recv"); }
/* Whether a collective record (its JSON) is a send or receive: its "coll", by is_p2p. */
static int record_is_p2p(const char *json) {
    const char *coll = strstr(json, "\"coll\":\"");
    char op[16];
    if (!coll) return 0;
    coll += 8;
    const char *end = strchr(coll, '"');
    if (!end || (size_t)(end - coll) >= sizeof op) return 0;
    memcpy(op, coll, (size_t)(end - coll));
    op[end - coll] = 0;
    return is_p2p(op);
}
EXPORT int stepcast_collective_rerun(const char *json, char *out, size_t cap) {
    const char *comm = strstr(json, "\"comm\":\""), *seq = strstr(json, "\"seq\":");
    int p2p = record_is_p2p(json);
    nccl_comm_t *c = NULL;
    if (comm && seq) {
        comm += 8;
        const char *end = strchr(comm, '"');
        if (end) c = find_comm(comm, (size_t)(end - comm));
    }
    if (!c) { snprintf(out, cap, "%s", json); return 0; }
    pthread_mutex_lock(&c->lock);
    uint64_t next = p2p ? c->p2p_seq++ : c->seq++;
    pthread_mutex_unlock(&c->lock);
    const char *digits = seq + 6, *rest = digits + strspn(digits, "0123456789");
    snprintf(out, cap, "%.*s%llu%s", (int)(digits - json), json, (unsigned long long)next, rest);
    return 1;
}

EXPORT ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *u) {
    static int counter;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    memset(u, 0, sizeof *u);
    snprintf(u->internal, sizeof u->internal, "stepcast-nccl pid=%d t=%lld.%09ld n=%d", (int)getpid(),
             (long long)ts.tv_sec, ts.tv_nsec, __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    return ncclSuccess;
}
static uint64_t id_key(const ncclUniqueId *u) { return fnv1a(u->internal, sizeof u->internal, 0xcbf29ce484222325ull); }

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    *comm = (ncclComm_t)new_comm(id_key(&id), nranks, rank);
    return *comm ? ncclSuccess : ncclSystemError;
}
EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    (void)cfg;
    return ncclCommInitRank(comm, nranks, id, rank);
}
EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nid, ncclUniqueId *ids,
                                             ncclConfig_t *cfg) {
    (void)nid; (void)cfg;
    return ncclCommInitRank(comm, nranks, ids[0], rank);
}
EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    (void)devlist;
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    for (int i = 0; i < ndev; i++) comms[i] = (ncclComm_t)new_comm(id_key(&id), ndev, i);
    return ncclSuccess;
}
/* A split is collective over the parent: every member calls it, with a color (or none) and a key. Where the
 * parent has an exchange area of more than two members (and every member runs: not a sparse run), the members'
 * colors and keys are exchanged through it (an all-to-all of the same message to each), so the new communicator
 * knows its size and this rank's place (ordered by key, then parent rank), and gets an exchange area of its own:
 * small collectives on it carry their bytes (a MoE dispatcher's token counts on an expert-parallel group). Else
 * its size is unknown here (-1) and the collator counts its members' traces. */
static void split_place(nccl_comm_t *p, int color, int key, int *nranks, int *rank) {
    *nranks = *rank = -1;
    alltoallv_t alltoallv = alltoallv_fn();
    exchange_t exchange = exchange_fn();
    const char *sparse = getenv("STEPCAST_RUN_RANKS");
    if (!alltoallv || !exchange || !p->shm || p->nranks < 2 || p->nranks > 64 || p->rank < 0 || (sparse && *sparse))
        return;
    int n = p->nranks, mine[2] = {color, key}, all[64][2];
    for (int j = 0; j < n; j++) all[j][0] = all[j][1] = INT_MIN;  /* a message that never came stays so */
    if (n == 2) {  /* a pair: the two messages go as its point-to-point ones do (datapath.c p2p) */
        int peer = 1 - p->rank;
        exchange(p->shm, 2, p->rank, 0, 5, mine, NULL, 2, ncclInt32, 0, peer);
        exchange(p->shm, 2, p->rank, 0, 6, NULL, all[peer], 2, ncclInt32, 0, peer);
        all[p->rank][0] = color;
        all[p->rank][1] = key;
    } else {
        const void *send[64];
        void *recv[64];
        size_t bytes[64];
        for (int j = 0; j < n; j++) {
            send[j] = mine;
            recv[j] = all[j];
            bytes[j] = sizeof mine;
        }
        pthread_mutex_lock(&p->lock);
        uint64_t round = p->alltoalls++;
        pthread_mutex_unlock(&p->lock);
        alltoallv(p->shm, n, p->rank, round, send, bytes, recv, bytes);
    }
    for (int j = 0; j < n; j++)
        if (all[j][0] == INT_MIN && all[j][1] == INT_MIN) return;  /* not every member was heard: unknown */
    int members = 0, before = 0;
    for (int j = 0; j < n; j++) {
        if (all[j][0] != color) continue;
        members++;
        before += all[j][1] < key || (all[j][1] == key && j < p->rank);
    }
    if (members >= 1 && all[p->rank][0] == color) {  /* its own message came back: the exchange took place */
        *nranks = members;
        *rank = before;
    }
}
EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *cfg) {
    (void)cfg;
    nccl_comm_t *p = (nccl_comm_t *)comm;
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->splits++;
    pthread_mutex_unlock(&p->lock);
    int nranks, rank;
    split_place(p, color, key, &nranks, &rank);
    if (color == NCCL_SPLIT_NOCOLOR) { *newcomm = NULL; return ncclSuccess; }
    uint64_t h = fnv1a(p->id, strlen(p->id), 0xcbf29ce484222325ull);
    h = fnv1a(&n, sizeof n, h);
    h = fnv1a(&color, sizeof color, h);
    *newcomm = (ncclComm_t)new_comm(h, nranks, rank);
    return *newcomm ? ncclSuccess : ncclSystemError;
}
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) { (void)comm; *e = ncclSuccess; return ncclSuccess; }
EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *n) {
    const nccl_comm_t *c = (const nccl_comm_t *)comm;
    *n = c->nranks > 0 ? c->nranks : 1;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *r) {
    const nccl_comm_t *c = (const nccl_comm_t *)comm;
    *r = c->rank > 0 ? c->rank : 0;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { (void)comm; return ncclSuccess; }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { (void)comm; return ncclSuccess; }
EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { (void)comm; return ncclSuccess; }
EXPORT const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "stepcast NCCL error"; }
EXPORT const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return ""; }
EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t dt,
                                             ncclScalarResidence_t res, ncclComm_t comm) {
    (void)scalar; (void)dt; (void)res; (void)comm;
    *op = ncclNumOps;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) { (void)op; (void)comm; return ncclSuccess; }
/* NCCL's own allocations are the driver's device memory (cuMemAlloc), so they count against the device. */
typedef int (*mem_alloc_t)(unsigned long long *ptr, size_t bytes);
typedef int (*mem_free_t)(unsigned long long ptr);
EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    mem_alloc_t fn = (mem_alloc_t)driver_symbol("cuMemAlloc_v2");
    unsigned long long p = 0;
    if (!fn || fn(&p, size) != 0) { *ptr = NULL; return ncclSystemError; }
    *ptr = (void *)(uintptr_t)p;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclMemFree(void *ptr) {
    mem_free_t fn = (mem_free_t)driver_symbol("cuMemFree_v2");
    if (fn && ptr) fn((unsigned long long)(uintptr_t)ptr);
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
    (void)comm; (void)size;
    *handle = buff;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) { (void)comm; (void)handle; return ncclSuccess; }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)  /* symmetric-memory windows: NCCL 2.27 on */
EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags) {
    (void)comm; (void)size; (void)flags;
    *win = (ncclWindow_t)buff;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) { (void)comm; (void)win; return ncclSuccess; }
#endif

static __thread int group_depth;
static __thread int group_id;
static int next_group_id = 1;

/* Point-to-point messages with real bytes issued inside ncclGroupStart/End wait for the group's end, where the
 * sends go first: a group's sends and receives progress together in NCCL, and a receive that blocked before its
 * own group's send would hang a pair that sends to each other (batch_isend_irecv). */
typedef struct {
    void *shm;
    struct nccl_comm *comm;
    int nranks, rank, kind, dtype, peer;
    unsigned long long seq;
    const void *send;
    void *recv;
    size_t count;
} pending_t;
#define MAX_PENDING 256
static __thread pending_t pending[MAX_PENDING];
static __thread int n_pending;

/* A group that sends to and receives from every member of a communicator of more than two, once each, is an
 * all-to-all (torch's all_to_all_single): its messages are exchanged through the area at once (datapath.c
 * fk_alltoallv), every member doing the same. Its ops are marked done (kind -1). In a sparse run an absent member,
 * marked stopped in the area (emulate/sparse_store.py), sends what a running member sends: the copies' rule. */
static void run_alltoalls(void) {
    alltoallv_t alltoallv = alltoallv_fn();
    nccl_size_t element = nccl_size_fn();
    for (int i = 0; i < n_pending && alltoallv && element; i++) {
        nccl_comm_t *c = pending[i].comm;
        int n = pending[i].nranks;
        if (pending[i].kind < 0 || !c || n <= 2 || n > 64) continue;
        const void *send[64] = {0};
        void *recv[64] = {0};
        size_t send_bytes[64] = {0}, recv_bytes[64] = {0};
        int sends = 0, recvs = 0, index[128], k = 0;
        for (int j = i; j < n_pending && k < 128; j++) {
            pending_t *q = &pending[j];
            if (q->comm != c || q->kind < 5 || q->peer < 0 || q->peer >= n) continue;
            size_t bytes = q->count * element(q->dtype);
            if (q->kind == 5 && !send_bytes[q->peer] && !send[q->peer]) {
                send[q->peer] = q->send ? q->send : (const void *)1;
                send_bytes[q->peer] = bytes;
                sends++;
            } else if (q->kind == 6 && !recv_bytes[q->peer] && !recv[q->peer]) {
                recv[q->peer] = q->recv ? q->recv : NULL;
                recv_bytes[q->peer] = bytes;
                recvs++;
            } else {
                continue;
            }
            index[k++] = j;
        }
        if (sends != n || recvs != n) continue;
        for (int j = 0; j < n; j++)
            if (send[j] == (const void *)1) send[j] = NULL;
        pthread_mutex_lock(&c->lock);
        uint64_t round = c->alltoalls++;
        pthread_mutex_unlock(&c->lock);
        alltoallv(c->shm, n, c->rank, round, send, send_bytes, recv, recv_bytes);
        for (int j = 0; j < k; j++) pending[index[j]].kind = -1;
    }
}

static void run_pending(void) {
    exchange_t exchange = exchange_fn();
    run_alltoalls();
    for (int pass = 5; pass <= 6 && exchange; pass++)
        for (int i = 0; i < n_pending; i++) {
            pending_t *q = &pending[i];
            if (q->kind == pass)
                exchange(q->shm, q->nranks, q->rank, q->seq, q->kind, q->send, q->recv, q->count, q->dtype, 0,
                         q->peer);
        }
    n_pending = 0;
}

EXPORT ncclResult_t ncclGroupStart(void) {
    if (group_depth++ == 0) group_id = __atomic_fetch_add(&next_group_id, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
}
EXPORT ncclResult_t ncclGroupEnd(void) {
    if (group_depth > 0 && --group_depth == 0) {
        group_id = 0;
        run_pending();
    }
    return ncclSuccess;
}

/* kind for the exchange: 0 all_reduce, 1 broadcast, 2 all_gather, 3 reduce_scatter, 4 reduce, 5 send, 6 recv
 * (peer: the other member); -1 no data */
static ncclResult_t collective(const char *op, ncclComm_t comm, size_t count, ncclDataType_t dt, int peer,
                               cudaStream_t stream, int kind, const void *send, void *recv, int redop) {
    nccl_comm_t *c = (nccl_comm_t *)comm;
    if (!c) return ncclInvalidArgument;
    pthread_mutex_lock(&c->lock);
    uint64_t seq = is_p2p(op) ? c->p2p_seq++ : c->seq++;
    pthread_mutex_unlock(&c->lock);
    exchange_t exchange = exchange_fn();
    if ((kind == 5 || kind == 6) && group_depth && c->shm && n_pending < MAX_PENDING)
        pending[n_pending++] = (pending_t){c->shm, c, c->nranks, c->rank, kind, (int)dt, peer, seq, send, recv, count};
    else if (kind >= 0 && c->shm && exchange)
        exchange(c->shm, c->nranks, c->rank, seq, kind, send, recv, count, (int)dt, redop, peer);
    stream_id_t sid = stream_id_fn();
    unsigned long long s = sid ? sid(stream) : 0;
    char json[320];
    snprintf(json, sizeof json, "\"stream\":%llu,\"coll\":\"%s\",\"comm\":\"%s\",\"seq\":%llu,\"nranks\":%d,"
             "\"peer\":%d,\"count\":%zu,\"dtype\":%d,\"group\":%d", s, op, c->id, (unsigned long long)seq, c->nranks,
             peer, count, (int)dt, group_depth ? group_id : 0);
    /* issued on a capturing stream: a node of that graph, logged at each of its launches */
    graph_record_t captured = graph_record_fn();
    if (captured && captured(s, "collective", json)) return ncclSuccess;
    log_record("collective", 1, json);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t st) {
    return collective("all_reduce", comm, n, dt, -1, st, 0, s, r, op);
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t comm,
                                  cudaStream_t st) {
    return collective("broadcast", comm, n, dt, root, st, 1, s, r, 0);
}
EXPORT ncclResult_t ncclBcast(void *b, size_t n, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t st) {
    return collective("broadcast", comm, n, dt, root, st, 1, b, b, 0);
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root,
                               ncclComm_t comm, cudaStream_t st) {
    return collective("reduce", comm, n, dt, root, st, 4, s, r, op);
}
/* all_gather: count is the per-rank send count; reduce_scatter: the per-rank receive count */
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t comm,
                                  cudaStream_t st) {
    return collective("all_gather", comm, n, dt, -1, st, 2, s, r, 0);
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t st) {
    return collective("reduce_scatter", comm, n, dt, -1, st, 3, s, r, op);
}
/* NCCL's all-to-all is its group of a send to and a receive from every member (torch calls it for equal splits):
 * one record, and its small messages move as that group's would (run_pending). */
EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t comm,
                                 cudaStream_t st) {
    ncclResult_t rc = collective("all_to_all", comm, n, dt, -1, st, -1, NULL, NULL, 0);
    nccl_comm_t *c = (nccl_comm_t *)comm;
    nccl_size_t element = nccl_size_fn();
    if (rc != ncclSuccess || !element || !c->shm || c->nranks < 2 || n_pending + 2 * c->nranks > MAX_PENDING) return rc;
    size_t bytes = n * element((int)dt);
    int outer = group_depth == 0;
    if (outer) ncclGroupStart();
    for (int j = 0; j < c->nranks; j++) {
        pending[n_pending++] = (pending_t){c->shm, c, c->nranks, c->rank, 5, (int)dt, j, 0,
                                           s ? (const char *)s + (size_t)j * bytes : NULL, NULL, n};
        pending[n_pending++] = (pending_t){c->shm, c, c->nranks, c->rank, 6, (int)dt, j, 0, NULL,
                                           r ? (char *)r + (size_t)j * bytes : NULL, n};
    }
    if (outer) ncclGroupEnd();
    return rc;
}
EXPORT ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t comm,
                               cudaStream_t st) {
    (void)s; (void)r;
    return collective("gather", comm, n, dt, root, st, -1, NULL, NULL, 0);
}
EXPORT ncclResult_t ncclSend(const void *b, size_t n, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t st) {
    return collective("send", comm, n, dt, peer, st, 5, b, NULL, 0);
}
EXPORT ncclResult_t ncclRecv(void *b, size_t n, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t st) {
    return collective("recv", comm, n, dt, peer, st, 6, NULL, b, 0);
}

/* What the generated stubs (entry points not defined above) call, once per name. */
void stepcast_nccl_unsupported(const char *name) {
    char json[256];
    snprintf(json, sizeof json, "\"name\":\"%.200s\"", name);
    log_record("unsupported", 0, json);
}
