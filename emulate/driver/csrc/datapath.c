/* Value-faithful small data paths. Kernels never run, so device memory holds only what copies, memsets and
 * collectives put there. Byte ranges written that way (each at most STEPCAST_REAL_BYTES, default 1 MiB) are
 * remembered; a device-to-host copy of a fully remembered range returns the real bytes, anything else reads as
 * zeros. The capture layer forgets the outputs of every op that launched a kernel (stepcast_untrack), since a
 * kernel would have overwritten them. This is what lets metadata exchanges (DDP bucket indices,
 * all_gather_object, broadcast_object_list) produce the values a real run sees; small collectives exchange their
 * payloads through POSIX shared memory between the ranks of one run. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANGES 8192
typedef struct { uintptr_t lo, hi; uint64_t gen; } range_t;
static range_t ranges[MAX_RANGES];
static int n_ranges;
static pthread_mutex_t range_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t real_limit;
static uint64_t next_instance = 1;
static __thread uint64_t cur_instance;
static __thread int cur_instance_kernels;

size_t fk_real_limit(void) {
    if (!real_limit) {
        const char *v = getenv("STEPCAST_REAL_BYTES");
        real_limit = v && *v ? (size_t)strtoull(v, NULL, 10) : (1u << 20);
        if (!real_limit) real_limit = 1;
    }
    return real_limit;
}

void fk_op_instance_begin(void) {
    cur_instance = __atomic_fetch_add(&next_instance, 1, __ATOMIC_RELAXED);
    cur_instance_kernels = 0;
}
void fk_note_kernel_write(void) { cur_instance_kernels++; }

/* remove [lo, hi) from the remembered ranges, except ranges written by op instance `keep` (0: none kept) */
static void forget_locked(uintptr_t lo, uintptr_t hi, uint64_t keep) {
    for (int i = 0; i < n_ranges;) {
        range_t r = ranges[i];
        if (r.hi <= lo || r.lo >= hi || (keep && r.gen == keep)) { i++; continue; }
        ranges[i] = ranges[--n_ranges];
        if (r.lo < lo && n_ranges < MAX_RANGES) ranges[n_ranges++] = (range_t){r.lo, lo, r.gen};
        if (r.hi > hi && n_ranges < MAX_RANGES) ranges[n_ranges++] = (range_t){hi, r.hi, r.gen};
    }
}

void fk_range_written(const void *p, size_t n) {
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    pthread_mutex_lock(&range_lock);
    forget_locked(lo, hi, 0);
    if (n_ranges < MAX_RANGES) ranges[n_ranges++] = (range_t){lo, hi, cur_instance};
    pthread_mutex_unlock(&range_lock);
}

void fk_range_forget(const void *p, size_t n) {
    pthread_mutex_lock(&range_lock);
    forget_locked((uintptr_t)p, (uintptr_t)p + n, 0);
    pthread_mutex_unlock(&range_lock);
}

static int cmp_lo(const void *a, const void *b) {
    uintptr_t x = ((const range_t *)a)->lo, y = ((const range_t *)b)->lo;
    return x < y ? -1 : x > y;
}

/* Whether [p, p + n) holds remembered bytes (of op instance `only`, when not 0). */
static int range_known(const void *p, size_t n, uint64_t only) {
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    range_t hits[64];
    int k = 0;
    pthread_mutex_lock(&range_lock);
    for (int i = 0; i < n_ranges && k < 64; i++)
        if (ranges[i].hi > lo && ranges[i].lo < hi && (!only || ranges[i].gen == only)) hits[k++] = ranges[i];
    pthread_mutex_unlock(&range_lock);
    qsort(hits, (size_t)k, sizeof hits[0], cmp_lo);
    uintptr_t at = lo;
    for (int i = 0; i < k && at < hi; i++) {
        if (hits[i].lo > at) return 0;
        if (hits[i].hi > at) at = hits[i].hi;
    }
    return at >= hi;
}

int fk_range_known(const void *p, size_t n) { return range_known(p, n, 0); }

/* Whether a copy to the host out of [p, p + n) reads remembered bytes. Once the current op has launched a kernel,
 * only bytes this op wrote itself count: what an op copies back after its kernels is their result (nonzero's and
 * masked_select's count, unique's size, written into a scratch block of the caching allocator), and the bytes an
 * earlier op left in that reused block are stale (a count read as 0x01010101 made printing a 6-element tensor
 * iterate 16.8 M elements); they read as zeros, as any other kernel result. Whether an op's inputs are known (its
 * host replay, a collective's send buffer) is fk_range_known's: those bytes were there before its kernels. */
int fk_range_readback(const void *p, size_t n) {
    return range_known(p, n, cur_instance_kernels > 0 ? cur_instance : 0);
}

/* For the op-context hook's host replay (opctx.cpp), which follows integer and mask metadata past the real-bytes
 * limit: whether `bytes` at `ptr`, at most `limit`, hold real bytes; and that limit (STEPCAST_REAL_BYTES). */
FK_EXPORT int stepcast_range_known(unsigned long long ptr, unsigned long long bytes, unsigned long long limit) {
    return fk_device_memory_writable() && bytes <= limit && fk_range_known((const void *)ptr, bytes);
}
FK_EXPORT unsigned long long stepcast_real_limit(void) { return fk_real_limit(); }
FK_EXPORT void stepcast_range_written(unsigned long long ptr, unsigned long long bytes) {
    fk_range_written((const void *)ptr, bytes);
}

FK_EXPORT int stepcast_has_ranges(void) { return n_ranges > 0; }

FK_EXPORT int stepcast_needs_untrack(void) { return n_ranges > 0 && cur_instance_kernels > 0; }
FK_EXPORT void stepcast_untrack(unsigned long long ptr, unsigned long long bytes) {
    pthread_mutex_lock(&range_lock);
    forget_locked((uintptr_t)ptr, (uintptr_t)(ptr + bytes), cur_instance);
    pthread_mutex_unlock(&range_lock);
}

/* ---- small collectives through shared memory ---- */
#define SLOT (1u << 20)
#define MAX_RANKS 64
typedef struct {
    volatile uint64_t posted[MAX_RANKS], done[MAX_RANKS];
    volatile uint64_t stopped[MAX_RANKS];   /* members stopped by rank dedup: a live twin contributes for them */
    volatile uint64_t program[MAX_RANKS];   /* each member's iteration hash at dedup time */
    volatile uint64_t global[MAX_RANKS];    /* each member's global rank + 1 (0: not known yet) */
    char id[48];                            /* the communicator's id (messages) */
    volatile uint64_t sent[MAX_RANKS];      /* point-to-point: messages member r put in its slot (its outbox) */
    volatile uint64_t taken[MAX_RANKS];     /* and how many of them its peer has taken */
} shm_header;  /* emulate/sparse_store.py mirrors the offsets of stopped[] */

/* Rank dedup: record this member's program hash; a stopped member also marks itself stopped. */
void fk_shm_member_state(void *shm, int rank, uint64_t program, int stopped) {
    shm_header *h = shm;
    if (!shm || rank < 0 || rank >= MAX_RANKS) return;
    h->program[rank] = program;
    __atomic_store_n(&h->stopped[rank], (uint64_t)stopped, __ATOMIC_RELEASE);
}

/* The slot that speaks for member j: its own, a live twin's when it was stopped, or NULL (zeros). */
static const char *source_slot(shm_header *h, const char *slots, int nranks, int j) {
    if (!__atomic_load_n(&h->stopped[j], __ATOMIC_ACQUIRE)) return slots + (size_t)j * SLOT;
    for (int k = 0; k < nranks; k++)
        if (!h->stopped[k] && h->program[k] == h->program[j]) return slots + (size_t)k * SLOT;
    return NULL;
}

/* This process is member `rank` of the communicator whose area is `shm` (the preloaded NCCL, at creation): its
 * global rank goes in the header, so waits on it can tell when it has left (ranks.c). */
void fk_comm_member(void *shm, int rank) {
    shm_header *h = shm;
    int global = fk_rank();
    if (!shm || rank < 0 || rank >= MAX_RANKS || global < 0) return;
    __atomic_store_n(&h->global[rank], (uint64_t)global + 1, __ATOMIC_RELEASE);
}

void *fk_comm_shm(const char *comm_id, int nranks) {
    const char *run = getenv("STEPCAST_RUN_ID");
    if (!run || !*run || nranks < 2 || nranks > MAX_RANKS) return NULL;
    char name[128];
    snprintf(name, sizeof name, "/stepcast-%s-%s", run, comm_id);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return NULL;
    size_t size = 4096 + (size_t)nranks * SLOT;
    if (ftruncate(fd, (off_t)size) != 0) { close(fd); return NULL; }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    snprintf(((shm_header *)p)->id, sizeof ((shm_header *)p)->id, "%s", comm_id);
    return p;
}

#define SETTLE_NS 1000000000ull  /* every running rank waiting this long: no one can make progress */

/* Wait until flags[lo..hi) have reached `tag`, each advanced by its own member (owner -1) or by member `owner`
 * (a point-to-point slot's taken count: its peer's); a member stopped by dedup needs no wait (its twin speaks for
 * it): 0. A member that has left, or a run in which every rank waits, is a deadlock: reported (fk_deadlock, which
 * ends the process), as the GPUs would hang there; except that a member of a communicator made after rank dedup
 * stopped some ranks may be one of them, unknown to the area: the exchange is then given up (-1: zeros). So is a
 * wait through which the whole run has logged no driver call for fk_wait_limit_ns() (a program stuck where the driver
 * cannot see it); a peer that is still on its way, however slowly, keeps the wait going. */
static int wait_flags(shm_header *h, volatile uint64_t *flags, int lo, int hi, int owner, int nranks, uint64_t tag,
                      const char *what) {
    stepcast_pause();  /* waiting for peers is no host work of this rank's (the simulator times the wait itself) */
    uint64_t start = fk_now_ns();
    struct timespec nap = {0, 20000};
    int announced = 0, rc = 0;
    for (;;) {
        int ready = 1, gone = -1, unknown = 0;
        for (int j = lo; j < hi; j++) {
            int member = owner >= 0 ? owner : j;
            if (__atomic_load_n(&flags[j], __ATOMIC_ACQUIRE) >= tag ||
                __atomic_load_n(&h->stopped[member], __ATOMIC_ACQUIRE))
                continue;
            ready = 0;
            uint64_t global = __atomic_load_n(&h->global[member], __ATOMIC_ACQUIRE);
            if (global && fk_rank_exited((int)global - 1)) gone = (int)global - 1;
            unknown |= !global;
        }
        if (ready) break;
        char message[1600];
        if (gone >= 0) {
            snprintf(message, sizeof message, "rank %d waits in %s (%d ranks) for rank %d, which has exited", fk_rank(),
                     what, nranks, gone);
            fk_deadlock(message);
        }
        if (!announced) {  /* ranks.c: what this rank waits in, for a run-wide deadlock message */
            fk_rank_waiting(what, 0);
            announced = 1;
        }
        char blocked[1400];
        if (fk_ranks_all_blocked(SETTLE_NS, 0, blocked, sizeof blocked)) {
            if (unknown && fk_ranks_copied()) {  /* a member that stopped as a duplicate before this communicator */
                fk_log_unsupported("stepcast: a small collective's member was stopped by rank dedup: zeros");
                rc = -1;
                break;
            }
            snprintf(message, sizeof message, "every running rank waits: %s", blocked);
            fk_deadlock(message);
        }
        if (fk_ranks_silent_since(start)) {
            snprintf(message, sizeof message, "rank %d waits in %s (%d ranks), and no rank of the run has called the "
                     "driver for %.0f s (STEPCAST_WAIT_LIMIT_S)", fk_rank(), what, nranks, fk_wait_limit_ns() / 1e9);
            fk_deadlock(message);
        }
        nanosleep(&nap, NULL);
    }
    if (announced) fk_rank_waiting(NULL, 0);
    stepcast_resume();
    return rc;
}
static int wait_all(shm_header *h, volatile uint64_t *flags, int nranks, uint64_t tag, const char *what) {
    return wait_flags(h, flags, 0, nranks, -1, nranks, tag, what);
}

static void combine(void *dst, const void *src, size_t count, int dtype, int op, int first) {
#define COMBINE(T)                                                                                  \
    {                                                                                               \
        T *d = dst;                                                                                 \
        const T *s = src;                                                                           \
        for (size_t i = 0; i < count; i++) {                                                        \
            if (first) d[i] = s[i];                                                                 \
            else if (op == 2) d[i] = s[i] > d[i] ? s[i] : d[i];                                     \
            else if (op == 3) d[i] = s[i] < d[i] ? s[i] : d[i];                                     \
            else if (op == 1) d[i] = d[i] * s[i];                                                   \
            else d[i] = d[i] + s[i];                                                                \
        }                                                                                           \
    }                                                                                               \
    break;
    switch (dtype) {
    case 0: COMBINE(int8_t)
    case 1: COMBINE(uint8_t)
    case 2: COMBINE(int32_t)
    case 3: COMBINE(uint32_t)
    case 4: COMBINE(int64_t)
    case 5: COMBINE(uint64_t)
    case 7: COMBINE(float)
    case 8: COMBINE(double)
    default: if (first) memcpy(dst, src, count); /* 16-bit floats: the first rank's value */
    }
#undef COMBINE
}

size_t fk_nccl_size(int dtype) {
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return dtype >= 0 && dtype < 12 ? sizes[dtype] : 4;
}

/* Whether a message's bytes are real: a host buffer's always, a device buffer's where written with real bytes. */
static int message_known(const void *p, size_t n) {
    return p && (!fk_is_device_pointer((CUdeviceptr)p) || fk_range_known(p, n));
}
/* Put a message in `slot`: its bytes when real (`send` NULL: none), else zeros. */
static void post(char *slot, const void *send, size_t n) {
    if (message_known(send, n)) memcpy(slot, send, n);
    else memset(slot, 0, n);
}
/* Hand a received message to `recv`; a device buffer now holds real bytes there. */
static void deliver(void *recv, const void *src, size_t n) {
    memcpy(recv, src, n);
    if (fk_is_device_pointer((CUdeviceptr)recv)) fk_range_written(recv, n);
}

static const char *const KIND_NAMES[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce"};

/* A small point-to-point message between the two members of a pair communicator (torch makes one per pair of ranks
 * that send to each other: a pipeline stage's metadata, recv_object_list): the sender puts it in its slot (its
 * outbox) once the peer has taken the previous one, the receiver waits for it, copies it and takes it. Members of
 * larger communicators, and a peer stopped by dedup or absent from a sparse run, exchange nothing (the receive
 * reads as zeros, as any large payload). Host buffers are real (nccl.c's split exchanges its members' colors so). */
static void p2p(shm_header *h, int nranks, int rank, int peer, int sending, const void *send, void *recv,
                size_t bytes) {
    if (nranks != 2 || peer < 0 || peer >= nranks || peer == rank) {
        if (!sending && recv) fk_range_forget(recv, bytes);  /* nothing arrives: zeros, never stale bytes */
        return;
    }
    char what[96];
    char *slots = (char *)h + 4096;
    if (__atomic_load_n(&h->stopped[peer], __ATOMIC_ACQUIRE)) {
        /* the peer stopped as this rank's copy (rank dedup: the same device work), so it sends what this rank
         * sends it, as the pair's programs mirror each other: the message is this rank's own last one */
        char *mine = slots + (size_t)rank * SLOT;
        if (sending) post(mine, send, bytes);
        else if (recv) deliver(recv, mine, bytes);
        return;
    }
    if (sending) {
        uint64_t n = h->sent[rank];
        snprintf(what, sizeof what, "send #%llu of %s (its previous message untaken)", (unsigned long long)n, h->id);
        if (wait_flags(h, h->taken, rank, rank + 1, peer, nranks, n, what) != 0) return;
        post(slots + (size_t)rank * SLOT, send, bytes);
        __atomic_store_n(&h->sent[rank], n + 1, __ATOMIC_RELEASE);
        return;
    }
    uint64_t n = h->taken[peer];
    snprintf(what, sizeof what, "recv #%llu of %s", (unsigned long long)n, h->id);
    if (wait_flags(h, h->sent, peer, peer + 1, -1, nranks, n + 1, what) != 0 ||
        __atomic_load_n(&h->stopped[peer], __ATOMIC_ACQUIRE)) {
        if (recv) fk_range_forget(recv, bytes);
        return;
    }
    if (recv) deliver(recv, slots + (size_t)peer * SLOT, bytes);
    __atomic_store_n(&h->taken[peer], n + 1, __ATOMIC_RELEASE);
}

/* A member's message to itself (an all-to-all's own part: NCCL sends and receives it like any other): the receive
 * takes the oldest untaken send of this thread, with its bytes when they were real and no larger than the limit. */
#define MAX_SELF 64
typedef struct { const void *p; size_t n; int known; } self_msg_t;
static __thread self_msg_t self_sent[MAX_SELF];
static __thread int n_self_sent;
static void self_message(int sending, const void *send, void *recv, size_t bytes) {
    if (sending) {
        if (n_self_sent < MAX_SELF)
            self_sent[n_self_sent++] = (self_msg_t){send, bytes,
                                                    send && bytes <= fk_real_limit() && fk_range_known(send, bytes)};
        return;
    }
    if (!recv) return;
    int ok = n_self_sent > 0 && self_sent[0].known && self_sent[0].n == bytes;
    if (ok) {
        memmove(recv, self_sent[0].p, bytes);
        fk_range_written(recv, bytes);
    } else {
        fk_range_forget(recv, bytes);
    }
    if (n_self_sent > 0) memmove(&self_sent[0], &self_sent[1], (size_t)--n_self_sent * sizeof self_sent[0]);
}

/* An all-to-all among the members of a communicator of more than two (NCCL's grouped sends to and receives from
 * every member: torch's all_to_all_single, a MoE layer's token-count exchange): each member puts its message to
 * member j in the j-th part of its slot, waits until every member has, takes its own part of each sender's slot,
 * and waits until every member has taken. Tagged by the communicator's count of such exchanges (`round`), on the
 * flags that pair communicators' point-to-point messages use (a larger communicator's are otherwise unused). A
 * message larger than its part (SLOT / members) or the real-bytes limit, or not real, arrives as zeros. Host
 * buffers are real (nccl.c's split exchanges its members' colors so). */
void fk_alltoallv(void *shm, int nranks, int rank, uint64_t round, const void *const *send, const size_t *send_bytes,
                  void *const *recv, const size_t *recv_bytes) {
    if (!shm || nranks <= 2 || rank < 0 || rank >= nranks) return;
    shm_header *h = shm;
    size_t part = SLOT / (size_t)nranks;
    char *slots = (char *)h + 4096, *mine = slots + (size_t)rank * SLOT;
    for (int j = 0; j < nranks; j++) {
        size_t n = send_bytes[j] < part ? send_bytes[j] : part;
        post(mine + (size_t)j * part, send_bytes[j] <= part && send_bytes[j] <= fk_real_limit() ? send[j] : NULL, n);
    }
    uint64_t tag = round + 1;
    char what[96];
    snprintf(what, sizeof what, "all_to_all #%llu of %s", (unsigned long long)round, h->id);
    __atomic_store_n(&h->sent[rank], tag, __ATOMIC_RELEASE);
    if (wait_all(h, h->sent, nranks, tag, what) != 0) return;
    for (int j = 0; j < nranks; j++) {
        if (!recv[j] || !recv_bytes[j]) continue;
        const char *src = source_slot(h, slots, nranks, j);
        if (src && recv_bytes[j] <= part && recv_bytes[j] <= fk_real_limit()) {
            deliver(recv[j], src + (size_t)rank * part, recv_bytes[j]);
        } else if (fk_is_device_pointer((CUdeviceptr)recv[j])) {
            fk_range_forget(recv[j], recv_bytes[j]);
        } else {
            memset(recv[j], 0, recv_bytes[j]);
        }
    }
    __atomic_store_n(&h->taken[rank], tag, __ATOMIC_RELEASE);
    wait_all(h, h->taken, nranks, tag, what);
}

/* kind: 0 all_reduce, 1 broadcast, 2 all_gather, 3 reduce_scatter, 4 reduce, 5 send, 6 recv (root: the peer).
 * count as NCCL takes it. */
void fk_exchange(void *shm, int nranks, int rank, uint64_t seq, int kind, const void *send, void *recv,
                 size_t count, int dtype, int redop, int root) {
    size_t elem = fk_nccl_size(dtype);
    if ((kind == 5 || kind == 6) && root == rank && rank >= 0) {
        self_message(kind == 5, send, recv, count * elem);
        return;
    }
    if (kind == 5 || kind == 6) {
        if (shm && rank >= 0 && count * elem <= SLOT && count * elem <= fk_real_limit())
            p2p(shm, nranks, rank, root, kind == 5, send, recv, count * elem);
        else if (kind == 6 && recv)
            fk_range_forget(recv, count * elem);  /* too large to carry: zeros, never stale bytes */
        return;
    }
    size_t send_bytes = count * elem * (kind == 3 ? (size_t)nranks : 1);
    size_t recv_bytes = count * elem * (kind == 2 ? (size_t)nranks : 1);
    if (!shm || rank < 0 || send_bytes > SLOT || send_bytes > fk_real_limit() * (size_t)nranks) return;
    shm_header *h = shm;
    char *slot = (char *)shm + 4096;
    char *mine = slot + (size_t)rank * SLOT;
    if (send && fk_range_known(send, send_bytes)) memcpy(mine, send, send_bytes);
    else memset(mine, 0, send_bytes);
    uint64_t tag = seq + 1;
    char what[96];
    snprintf(what, sizeof what, "%s #%llu of %s", kind >= 0 && kind <= 4 ? KIND_NAMES[kind] : "collective",
             (unsigned long long)seq, h->id);
    __atomic_store_n(&h->posted[rank], tag, __ATOMIC_RELEASE);
    if (wait_all(h, h->posted, nranks, tag, what) != 0) return;
    int writes = 1;
    static const char zeros[SLOT];
    const char *src[MAX_RANKS];
    for (int j = 0; j < nranks; j++) {
        src[j] = source_slot(h, slot, nranks, j);
        if (!src[j]) src[j] = zeros;
    }
    switch (kind) {
    case 0: case 4:
        for (int j = 0; j < nranks; j++) combine(recv, src[j], count, dtype, redop, j == 0);
        writes = kind == 0 || rank == root;
        break;
    case 1: memcpy(recv, src[root >= 0 && root < nranks ? root : 0], recv_bytes); break;
    case 2: for (int j = 0; j < nranks; j++) memcpy((char *)recv + (size_t)j * count * elem, src[j], count * elem); break;
    case 3:
        for (int j = 0; j < nranks; j++) combine(recv, src[j] + (size_t)rank * count * elem, count, dtype, redop, j == 0);
        break;
    }
    if (writes && recv) fk_range_written(recv, recv_bytes);
    __atomic_store_n(&h->done[rank], tag, __ATOMIC_RELEASE);
    wait_all(h, h->done, nranks, tag, what);
}
