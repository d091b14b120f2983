/* The capture API of `stepcast run` (called by emulate/capture.py through ctypes and by the RecordFunction hook
 * opctx.cpp, which resolves these names from the driver loaded RTLD_GLOBAL).
 *
 * Every record a call logs (fk_log_call) carries the capture fields: "t" (ns since the first record), "gap" (the
 * calling thread's CPU time since its own previous logged call returned, less the capture layer's own time between
 * stepcast_pause and stepcast_resume: time asleep or descheduled is not host work), "thread" (0 = the first
 * thread that logged), "op" (the aten op id the hook set, -1 outside ops) and "call" (the op call: one number per
 * op entry, shared by the kernels that call launches); "ops", "nodes" and "py" (the host work counted on the thread
 * since its previous logged call: aten op entries, autograd node evaluations and Python calls, hostwork.c; the
 * counted host model of emulate/sim/host.py); a launch also "rd" and "wr" when its launcher said what it reads and
 * writes (stepcast_kernel_bytes). Iteration marks ("mark") take no host time of their own. */
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static __thread int cur_op = -1;
static __thread unsigned long long cur_call;
static unsigned long long next_call;
static __thread int as_op_active, as_op;
static __thread unsigned long long as_call;

int fk_current_op(void) { return cur_op; }
unsigned long long fk_current_call(void) { return cur_op >= 0 ? cur_call : 0ull; }
unsigned long long fk_new_call(void) { return __atomic_add_fetch(&next_call, 1, __ATOMIC_RELAXED); }
void fk_log_as_op(int op, unsigned long long call) { as_op_active = 1, as_op = op, as_call = call; }
void fk_log_as_op_done(void) { as_op_active = 0; }
static __thread uint64_t cpu_last_return, pause_ts;
static __thread int64_t cpu_excluded_ns;
static __thread uint32_t cpu_resumes;
static __thread int thread_no = -1;
static int next_thread_no;
static uint64_t t_origin;
static unsigned long long records_logged;  /* timed records this process wrote (the end record's count) */

/* Rank dedup (dedup.c): the hash of the device work each iteration asked for, one window per
 * iteration-mark source, closed at that source's marks. Kernels (name, grid, block, shared memory, cluster, stream:
 * not the device ordinal, which differs between the ranks of a node) and collectives (their fields: communicator,
 * sequence number, size, count, type) count; copies, fills and syncs do not, since logging that only rank 0 does
 * (printing a loss) adds them. */
#define FNV0 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
static uint64_t window_hash[4] = {FNV0, FNV0, FNV0, FNV0};
static uint64_t iteration_hash[4];
static pthread_mutex_t hash_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread uint64_t next_record_hash;  /* set by fk_hash_next_record for the thread's next logged record */

static uint64_t fnv(const char *s, uint64_t h) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * FNV_PRIME;
    return h;
}
void fk_hash_next_record(const char *what) { next_record_hash = fnv(what, FNV0); }
static void hash_record(const char *event, const char *fields) {
    uint64_t h = next_record_hash;
    next_record_hash = 0;
    if (!h && strcmp(event, "collective") == 0) h = fnv(fields, FNV0);
    if (!h) return;
    h = fnv(event, h);
    pthread_mutex_lock(&hash_lock);
    for (int s = 0; s < 4; s++) window_hash[s] = (window_hash[s] ^ h) * FNV_PRIME;
    pthread_mutex_unlock(&hash_lock);
}
uint64_t fk_last_iteration_hash(int source) {
    pthread_mutex_lock(&hash_lock);
    uint64_t h = source >= 0 && source < 4 ? iteration_hash[source] : 0;
    pthread_mutex_unlock(&hash_lock);
    return h;
}
/* A thread CPU clock reading costs a system call; each interval holds one reading's cost, taken off per interval. */
static uint64_t cpu_read_ns;
static pthread_once_t calibrate_once = PTHREAD_ONCE_INIT;

static uint64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static uint64_t cpu_now(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static void calibrate(void) {
    enum { READS = 2000 };
    uint64_t start = cpu_now();
    for (int i = 0; i < READS; i++) (void)cpu_now();
    cpu_read_ns = (cpu_now() - start) / (READS + 1);
    t_origin = clock_ns(CLOCK_MONOTONIC);
}

/* The real runtime's span on this thread (emulate/csrc/runtime_marks.c, preloaded): a record logged inside it
 * takes its gap up to the runtime's entry, and the runtime's return ends the next gap's start, so the runtime's own
 * host time (which the simulator adds back as the calibrated call cost) is not in the gaps too. */
static __thread uint64_t runtime_entered;
static __thread int in_runtime, logged_in_runtime;
FK_EXPORT void stepcast_runtime_mark(int entering) {
    if (entering) {
        runtime_entered = cpu_now();
        in_runtime = 1;
        logged_in_runtime = 0;
        return;
    }
    if (in_runtime && logged_in_runtime) cpu_last_return = cpu_now();
    in_runtime = 0;
}

/* The bytes the next launches of this thread read and write, as their launcher knows them (the capture layer's
 * wrapper of Inductor's Triton launcher, emulate/triton_bytes.py): a launch record carries them as "rd" and "wr". */
static __thread unsigned long long kernel_read, kernel_written;
FK_EXPORT void stepcast_kernel_bytes(unsigned long long read, unsigned long long written) {
    kernel_read = read;
    kernel_written = written;
}
void fk_kernel_bytes(unsigned long long *read, unsigned long long *written) {
    *read = kernel_read;
    *written = kernel_written;
}

void fk_log_call(const char *event, const char *fmt, ...) {
    pthread_once(&calibrate_once, calibrate);
    uint64_t enter = in_runtime ? runtime_entered : cpu_now();
    int at_runtime = in_runtime;
    logged_in_runtime |= in_runtime;
    if (thread_no < 0) thread_no = __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
    int64_t gap = (int64_t)(enter - cpu_last_return) - cpu_excluded_ns - (int64_t)((cpu_resumes + 1) * cpu_read_ns);
    if (gap < 0) gap = 0;
    cpu_excluded_ns = 0;
    cpu_resumes = 0;
    char fields[7000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fields, sizeof fields, fmt, ap);
    va_end(ap);
    if ((kernel_read || kernel_written) && strcmp(event, "launch") == 0) {
        size_t used = strlen(fields);
        snprintf(fields + used, sizeof fields - used, ",\"rd\":%llu,\"wr\":%llu", kernel_read, kernel_written);
    }
    hash_record(event, fields);
    __atomic_add_fetch(&records_logged, 1, __ATOMIC_RELAXED);
    uint32_t ops, nodes, py;
    fk_take_work(&ops, &nodes, &py);  /* hostwork.c */
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    fk_rank_active(now);  /* ranks.c: the run makes progress (what a long wait's deadlock limit asks) */
    fk_log_line("{\"event\":\"%s\",\"t\":%llu,\"gap\":%lld,\"ops\":%u,\"nodes\":%u,\"py\":%u,\"thread\":%d,"
                "\"op\":%d,\"call\":%llu,\"rt\":%d,%s}",
                event, (unsigned long long)(now - t_origin), (long long)gap, ops, nodes, py,
                thread_no, as_op_active ? as_op : cur_op, as_op_active ? as_call : fk_current_call(), at_runtime,
                fields);
    cpu_last_return = cpu_now();
}

FK_EXPORT void stepcast_pause(void) {
    pause_ts = cpu_now();
    fk_work_pause(1);
}
FK_EXPORT void stepcast_resume(void) {
    fk_work_pause(0);
    if (!pause_ts) return;
    cpu_excluded_ns += (int64_t)(cpu_now() - pause_ts);
    cpu_resumes++;
    pause_ts = 0;
}
/* Set the op without touching the clock (the RecordFunction hook brackets itself with pause/resume). */
FK_EXPORT void stepcast_set_op(int op) {
    cur_op = op;
    if (op >= 0) {
        cur_call = fk_new_call();
        fk_op_instance_begin();  /* the data path forgets the outputs of ops that launched kernels */
    }
}
FK_EXPORT void stepcast_op_enter(int op) { stepcast_set_op(op); stepcast_resume(); }
FK_EXPORT void stepcast_op_exit(int prev) { stepcast_pause(); cur_op = prev; }
FK_EXPORT int stepcast_current_op(void) { return cur_op; }
FK_EXPORT void stepcast_mark(int source, int step) {
    pthread_once(&calibrate_once, calibrate);
    if (source >= 0 && source < 4) {
        pthread_mutex_lock(&hash_lock);
        iteration_hash[source] = window_hash[source];
        window_hash[source] = FNV0;
        pthread_mutex_unlock(&hash_lock);
    }
    if (thread_no < 0) thread_no = __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
    fk_log_line("{\"event\":\"mark\",\"t\":%llu,\"thread\":%d,\"op\":%d,\"source\":%d,\"step\":%d}",
                (unsigned long long)(clock_ns(CLOCK_MONOTONIC) - t_origin), thread_no, cur_op, source, step);
}
/* The log is written unbuffered (one write per record): nothing to flush. */
FK_EXPORT void stepcast_flush(void) {}
/* The capture layer's last word on this process (every exit path it reaches: the end of the script, sys.exit,
 * os._exit, an exception, a signal, a deadlock): an "end" record with how it ended and how many timed records the
 * process wrote, which the collator checks the log against. A log without it was cut short (the process was
 * killed). */
FK_EXPORT void stepcast_end(const char *how) {
    pthread_once(&calibrate_once, calibrate);
    char text[64];
    snprintf(text, sizeof text, "%s", how ? how : "");
    for (char *c = text; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_';
    fk_log_line("{\"event\":\"end\",\"t\":%llu,\"how\":\"%s\",\"records\":%llu}",
                (unsigned long long)(clock_ns(CLOCK_MONOTONIC) - t_origin), text,
                __atomic_load_n(&records_logged, __ATOMIC_RELAXED));
}

/* Deadlocks (datapath.c, dedup.c): the capture layer's handler saves the capture and ends the process. */
typedef void (*deadlock_handler_t)(const char *message);
static deadlock_handler_t deadlock_handler;
FK_EXPORT void stepcast_set_deadlock_handler(deadlock_handler_t handler) {
    __atomic_store_n(&deadlock_handler, handler, __ATOMIC_RELEASE);
}
void fk_deadlock(const char *message) {
    char json[1800], *o = json;
    for (const char *c = message; *c && o < json + sizeof json - 2; c++) *o++ = (*c == '"' || *c == '\\') ? '\'' : *c;
    *o = 0;
    fk_log_line("{\"event\":\"deadlock\",\"message\":\"%s\"}", json);
    deadlock_handler_t handler = __atomic_load_n(&deadlock_handler, __ATOMIC_ACQUIRE);
    if (handler) handler(message);  /* does not return */
    fprintf(stderr, "stepcast: deadlock: %s\n", message);
    stepcast_rank_exited();
    _exit(FK_EXIT_DEADLOCK);
}
/* The small data path's exports (stepcast_needs_untrack, stepcast_untrack, stepcast_range_known, ...) are
 * datapath.c's. */
FK_EXPORT long long stepcast_device_peak(int device) { return device == 0 ? (long long)fk_device_peak() : -1; }
/* For the NCCL preloaded above this driver (nccl.c): a record in this log, timed as the
 * driver's own calls ("timed"), else a note; "json" is the record's members after "event". */
FK_EXPORT void stepcast_log_record(const char *event, int timed, const char *json) {
    if (timed) fk_log_call(event, "%s", json);
    else fk_log_line("{\"event\":\"%s\",%s}", event, json);
}
/* ...its small-collective exchange (datapath.c)... */
FK_EXPORT void *stepcast_comm_shm(const char *comm_id, int nranks) { return fk_comm_shm(comm_id, nranks); }
FK_EXPORT void stepcast_exchange(void *shm, int nranks, int rank, unsigned long long seq, int kind, const void *send,
                                 void *recv, size_t count, int dtype, int redop, int root) {
    fk_exchange(shm, nranks, rank, seq, kind, send, recv, count, dtype, redop, root);
}
/* ...its all-to-all among the members of a larger communicator (datapath.c)... */
FK_EXPORT void stepcast_alltoallv(void *shm, int nranks, int rank, unsigned long long round, const void *const *send,
                                  const size_t *send_bytes, void *const *recv, const size_t *recv_bytes) {
    fk_alltoallv(shm, nranks, rank, round, send, send_bytes, recv, recv_bytes);
}
/* ...the bytes of an NCCL element type, as the exchange counts them (datapath.c)... */
FK_EXPORT size_t stepcast_nccl_size(int dtype) { return fk_nccl_size(dtype); }
/* ...its membership of a communicator's exchange area (datapath.c: waits can tell when a member has left)... */
FK_EXPORT void stepcast_comm_member(void *shm, int rank) { fk_comm_member(shm, rank); }
/* ...its members' state for rank dedup (dedup.c, built in, publishes through the preloaded NCCL's communicators)... */
FK_EXPORT void stepcast_shm_member_state(void *shm, int rank, unsigned long long program, int stopped) {
    fk_shm_member_state(shm, rank, program, stopped);
}
typedef void (*comms_publish_fn)(unsigned long long program, int stopped);
void fk_comms_publish(uint64_t program, int stopped) {
    comms_publish_fn fn = (comms_publish_fn)dlsym(RTLD_DEFAULT, "stepcast_comms_publish");
    if (fn) fn(program, stopped);
}
/* ...and the ids this driver's log gives streams. */
FK_EXPORT unsigned long long stepcast_stream_id(CUstream stream) { return fk_stream_id(stream); }

/* The capture's monotonic clock (the data path's and dedup's waits). */
uint64_t fk_now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
