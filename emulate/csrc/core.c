/* stepcast shim core: configuration, the event log, the Python-facing capture API, virtual device memory and
 * the kernel-name registry. */
#define _GNU_SOURCE
#include "shim.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

sc_config_t sc_cfg;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;
static uint64_t t_origin;
/* Host time between intercepted calls (the gap), in one of two clocks chosen once by STEPCAST_HOST_CLOCK:
 * cpu (default): the calling thread's CPU time since its own previous return, so other processes on a shared
 * machine and time spent sleeping or blocked add nothing and reruns agree; wall: CLOCK_MONOTONIC since any thread's
 * previous return (the clock before; kept for comparison). The capture layer's own time (stepcast_pause/resume) is
 * measured in the same clock and taken off. */
static int host_clock_cpu = 1;
static uint64_t wall_last_return;
static volatile int64_t wall_excluded_ns;
static __thread uint64_t cpu_enter, cpu_last_return;
static __thread int64_t cpu_excluded_ns;
/* Reading the thread CPU clock is a system call (~0.35 us of CPU here, against ~0.03 us for the vDSO wall clock):
 * each host interval between two readings holds one reading's cost, which is the measurement's, not the script's.
 * Calibrated once (cpu_read_ns) and taken off per interval: a gap with n pause/resume pairs holds n + 1. */
static uint64_t cpu_read_ns;
static __thread uint32_t cpu_resumes;
static __thread int cur_op = -1;
/* Device work since the last iteration mark of each mark source (1 profiler, 2 optimizer, 3 backward), and that
 * of the iteration the last mark of each source ended. */
#define FNV0 0xcbf29ce484222325ull
static uint64_t window_hash[4] = {FNV0, FNV0, FNV0, FNV0};
static uint64_t iteration_hash[4];
uint64_t sc_last_iteration_hash(int source) { return source >= 0 && source < 4 ? iteration_hash[source] : 0; }
static __thread uint64_t pause_ts;   /* in the host clock */
static __thread uint64_t hash_override;   /* set by sc_log_kernel for the next sc_emit */
static __thread int thread_no = -1;
static int next_thread_no;
static uint64_t device_work;  /* pieces of device work so far: the event clock (sc_event_mark) */

static uint64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sc_now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* The host clock's reading (see host_clock_cpu). */
static uint64_t host_now_ns(void) { return host_clock_cpu ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : sc_now_ns(); }

static uint64_t calibrate_cpu_read(void) {
    uint64_t best = UINT64_MAX, prev = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < 256; i++) {
        uint64_t now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (now > prev && now - prev < best) best = now - prev;
        prev = now;
    }
    return best == UINT64_MAX ? 0 : best;
}

uint64_t sc_call_enter(void) {
    sc_init();
    if (host_clock_cpu) cpu_enter = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    return sc_now_ns();
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

/* Only the process the launcher started writes the rank's log. It marks itself in STEPCAST_LOG_OWNER before the
 * Python interpreter copies the environment, so the processes it execs (Triton's and Inductor's compile workers,
 * DeepSpeed's JIT builds, `subprocess.run`) inherit the mark, find another pid in it and neither open (which would
 * truncate) nor write the log; they still see the virtual GPU. STEPCAST_LOG itself stays: the capture layer reads
 * it. Every getenv comes before the setenv: bash (a preloaded wrapper) replaces both with its own, and its getenv
 * stops seeing the inherited environment once its setenv has run. */
static int log_owner(const char *path) {
    if (!path || !*path) return 0;
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    const char *owner = getenv("STEPCAST_LOG_OWNER");
    if (owner && *owner && strcmp(owner, pid) != 0) return 0;
    setenv("STEPCAST_LOG_OWNER", pid, 1);
    return 1;
}

/* A forked child (os.fork, multiprocessing's fork start method, DataLoader workers) gets a copy of the log's stdio
 * buffer: it must neither write nor flush it (exit() flushes every open stream), or the rank's records would be
 * written twice. The child drops the buffer unwritten and stops logging. The log lock is held across fork so the
 * child never inherits it locked by another thread. */
static void fork_prepare(void) { pthread_mutex_lock(&log_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&log_lock); }
static void fork_child(void) {
    if (log_file) {
        __fpurge(log_file);
        int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null_fd >= 0) {  /* anything buffered later still goes nowhere near the parent's file */
            dup2(null_fd, fileno(log_file));
            close(null_fd);
        }
        log_file = NULL;
    }
    pthread_mutex_unlock(&log_lock);
}

static void do_init(void) {
    const char *name = getenv("STEPCAST_GPU_NAME");
    snprintf(sc_cfg.name, sizeof sc_cfg.name, "%s", name ? name : "NVIDIA H100 80GB HBM3");
    sc_cfg.cc_major = (int)env_long("STEPCAST_GPU_CC_MAJOR", 9);
    sc_cfg.cc_minor = (int)env_long("STEPCAST_GPU_CC_MINOR", 0);
    sc_cfg.sm_count = (int)env_long("STEPCAST_GPU_SMS", 132);
    sc_cfg.mem_bytes = (size_t)env_long("STEPCAST_GPU_MEM_BYTES", 80l << 30);
    sc_cfg.l2_bytes = (int)env_long("STEPCAST_GPU_L2_BYTES", 50 << 20);
    sc_cfg.smem_per_sm = (size_t)env_long("STEPCAST_GPU_SMEM_PER_SM", 228 << 10);
    sc_cfg.clock_khz = (int)env_long("STEPCAST_GPU_CLOCK_KHZ", 1980000);
    sc_cfg.mem_clock_khz = (int)env_long("STEPCAST_GPU_MEM_CLOCK_KHZ", 2619000);
    sc_cfg.mem_bus_width = (int)env_long("STEPCAST_GPU_MEM_BUS_WIDTH", 5120);
    sc_cfg.device_count = (int)env_long("STEPCAST_DEVICE_COUNT", 1);
    if (sc_cfg.device_count < 1) sc_cfg.device_count = 1;
    if (sc_cfg.device_count > SC_MAX_DEVICES) sc_cfg.device_count = SC_MAX_DEVICES;
    int maj = sc_cfg.cc_major, min = sc_cfg.cc_minor;
    sc_cfg.max_threads_per_sm = (maj == 8 && min > 0) || maj == 12 ? 1536 : (maj == 7 && min == 5) ? 1024 : 2048;
    const char *clock = getenv("STEPCAST_HOST_CLOCK");
    if (clock && *clock && strcmp(clock, "cpu") != 0 && strcmp(clock, "wall") != 0) {
        fprintf(stderr, "stepcast: STEPCAST_HOST_CLOCK must be cpu or wall, found %s\n", clock);
        _exit(2);
    }
    host_clock_cpu = !(clock && strcmp(clock, "wall") == 0);
    t_origin = wall_last_return = sc_now_ns();
    const char *path = getenv("STEPCAST_LOG");
    if (log_owner(path)) {
        log_file = fopen(path, "we");  /* close-on-exec: an exec'd child has no use for the descriptor */
        if (!log_file) {
            fprintf(stderr, "stepcast: cannot open the capture log %s\n", path);
            _exit(3);
        }
        setvbuf(log_file, NULL, _IOFBF, 1 << 20);
        fprintf(log_file, "H\t%lu\t%s\n", (unsigned long)t_origin, host_clock_cpu ? "cpu" : "wall");
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        if (host_clock_cpu) cpu_read_ns = calibrate_cpu_read();
    }
}

void sc_init(void) { pthread_once(&init_once, do_init); }

__attribute__((constructor)) static void sc_constructor(void) { sc_init(); }
__attribute__((destructor)) static void sc_destructor(void) {
    pthread_mutex_lock(&log_lock);
    if (log_file) fflush(log_file);
    pthread_mutex_unlock(&log_lock);
}

int sc_logging(void) { sc_init(); return log_file != NULL; }



/* Device-work records (kernels, library calls, copies, memsets, collectives) advance the event clock. */
static int is_device_work(char kind) { return kind == 'K' || kind == 'G' || kind == 'C' || kind == 'S' || kind == 'N'; }

/* A record's contribution to the iteration hash rank dedup compares (dedup.c): kernels, library calls and
 * collectives (not copies or syncs, which rank-0-only logging adds); 0 for the others. Kernels are hashed by name
 * (hash_override, set by sc_log_kernel), not by the per-process id; op ids are left out: they are numbered in
 * first-seen order, which rank-0-only logging shifts. */
static uint64_t record_hash(char kind, const char *fields) {
    if (kind != 'K' && kind != 'G' && kind != 'N') return 0;
    uint64_t h = (uint64_t)(unsigned char)kind * 0x100000001b3ull;
    if (hash_override) return (h ^ hash_override) * 0x100000001b3ull;
    for (const char *p = fields; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h;
}

static void hash_window_locked(uint64_t h) {
    if (!h) return;
    for (int s = 0; s < 4; s++) window_hash[s] = (window_hash[s] ^ h) * 0x100000001b3ull;
}

/* The host gap of a call entered at t_enter (log_lock held): see host_clock_cpu. */
static int64_t take_gap_locked(uint64_t t_enter) {
    int64_t gap;
    if (host_clock_cpu) {  /* this thread's CPU time since its own previous return (thread start at first) */
        gap = (int64_t)(cpu_enter - cpu_last_return) - cpu_excluded_ns - (int64_t)((cpu_resumes + 1) * cpu_read_ns);
        cpu_excluded_ns = 0;
        cpu_resumes = 0;
    } else {
        int64_t excl = __atomic_exchange_n(&wall_excluded_ns, 0, __ATOMIC_RELAXED);
        gap = t_enter < wall_last_return ? 0 : (int64_t)(t_enter - wall_last_return) - excl;
    }
    return gap < 0 ? 0 : gap;
}

/* The host work counted on this thread since its previous logged call (hostwork.c), as an 'O' line for the record
 * that follows (none when nothing was counted); the counts restart. */
static void write_work_locked(void) {
    uint32_t ops, nodes, py;
    sc_take_work(&ops, &nodes, &py);
    if (ops || nodes || py) fprintf(log_file, "O\t%u\t%u\t%u\n", ops, nodes, py);
}

static void note_return_locked(void) {
    if (host_clock_cpu) cpu_last_return = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    else wall_last_return = sc_now_ns();
}

void sc_emit(uint64_t t_enter, char kind, const char *fmt, ...) {
    int capture = __atomic_load_n(&sc_capturing, __ATOMIC_RELAXED) > 0 &&
                  (is_device_work(kind) || kind == 'R' || kind == 'W');
    if (!capture && !sc_logging()) {
        if (is_device_work(kind)) __atomic_fetch_add(&device_work, 1, __ATOMIC_RELAXED);
        hash_override = 0;
        return;
    }
    char fields[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fields, sizeof fields, fmt, ap);
    va_end(ap);
    uint64_t h = record_hash(kind, fields);
    hash_override = 0;
    /* work given to a capturing stream is not done now: it becomes a node of the graph (graph.c), logged at each
     * launch; its call's host time stays in the next logged call's gap (capture is one-time host work) */
    if (capture && sc_capture_record(kind, fields, cur_op, h)) return;
    if (is_device_work(kind)) __atomic_fetch_add(&device_work, 1, __ATOMIC_RELAXED);
    if (!sc_logging()) return;
    if (thread_no < 0) thread_no = __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&log_lock);
    int64_t gap = take_gap_locked(t_enter);
    write_work_locked();
    fprintf(log_file, "%c\t%lu\t%ld\t%d\t%d\t%s\n", kind, (unsigned long)(t_enter - t_origin), (long)gap,
            thread_no, cur_op, fields);
    hash_window_locked(h);
    note_return_locked();
    pthread_mutex_unlock(&log_lock);
}

/* One graph launch (graph.c): the launch call ('L': stream, graph, node count; it carries the host gap) and then
 * its nodes as the records they were captured as, with no gap of their own, written together. */
void sc_emit_graph(uint64_t t_enter, int stream, unsigned long long graph_id, int origin, const sc_node_t *nodes,
                   size_t n, uint64_t call_base) {
    uint64_t work = 0;
    for (size_t i = 0; i < n; i++) work += is_device_work(nodes[i].kind);
    __atomic_fetch_add(&device_work, work, __ATOMIC_RELAXED);
    if (!sc_logging()) return;
    if (thread_no < 0) thread_no = __atomic_fetch_add(&next_thread_no, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&log_lock);
    int64_t gap = take_gap_locked(t_enter);
    write_work_locked();
    unsigned long t = (unsigned long)(t_enter - t_origin);
    fprintf(log_file, "L\t%lu\t%ld\t%d\t%d\t%d\t%llu\t%zu\n", t, (long)gap, thread_no, cur_op, stream, graph_id, n);
    for (size_t i = 0; i < n; i++) {
        const sc_node_t *node = &nodes[i];
        fprintf(log_file, "%c\t%lu\t0\t%d\t%d\t%s%d%s", node->kind, t, thread_no, node->op, node->pre,
                node->stream == origin ? stream : node->stream, node->post);
        if (node->kind == 'K') fprintf(log_file, "\t%lu", (unsigned long)(node->call ? call_base + node->call : 0));
        fputc('\n', log_file);
        hash_window_locked(node->hash);
    }
    note_return_locked();
    pthread_mutex_unlock(&log_lock);
}

void sc_note(const char *fmt, ...) {
    if (!sc_logging()) return;
    pthread_mutex_lock(&log_lock);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log_file, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&log_lock);
}

/* ---- names answered generically ---- */
#define UNHANDLED_SLOTS 1024
static const char *unhandled_seen[UNHANDLED_SLOTS];
static pthread_mutex_t unhandled_lock = PTHREAD_MUTEX_INITIALIZER;

void sc_unhandled(const char *name) {
    size_t h = 5381;
    for (const char *p = name; *p; p++) h = h * 33 + (unsigned char)*p;
    pthread_mutex_lock(&unhandled_lock);
    for (size_t i = 0; i < UNHANDLED_SLOTS; i++) {
        size_t s = (h + i) % UNHANDLED_SLOTS;
        if (unhandled_seen[s] == name) { pthread_mutex_unlock(&unhandled_lock); return; }
        if (!unhandled_seen[s]) { unhandled_seen[s] = name; break; }
    }
    pthread_mutex_unlock(&unhandled_lock);
    if (getenv("STEPCAST_DEBUG")) fprintf(stderr, "stepcast: generic answer for %s\n", name);
    sc_note("U\t%s\n", name);
}

/* ---- Python-facing capture API (called through ctypes by emulate/capture.py) ---- */
SC_EXPORT void stepcast_pause(void) {
    pause_ts = host_now_ns();
    sc_work_pause(1);
}
SC_EXPORT void stepcast_resume(void) {
    sc_work_pause(0);
    if (!pause_ts) return;
    int64_t own = (int64_t)(host_now_ns() - pause_ts);
    if (host_clock_cpu) {
        cpu_excluded_ns += own;
        cpu_resumes++;
    }
    else __atomic_fetch_add(&wall_excluded_ns, own, __ATOMIC_RELAXED);
    pause_ts = 0;
}
/* Enter an aten op: resume the clock and make `op` the op of every call this thread makes until op_exit. */
SC_EXPORT void stepcast_op_enter(int op) { cur_op = op; sc_op_instance_begin(); stepcast_resume(); }
/* Leave an op: pause the clock (the capture layer's bookkeeping follows) and restore the enclosing op. */
SC_EXPORT void stepcast_op_exit(int prev) { stepcast_pause(); cur_op = prev; }
SC_EXPORT int stepcast_current_op(void) { return cur_op; }
/* Set the op without touching the clock (the C++ RecordFunction path brackets itself with pause/resume). */
SC_EXPORT void stepcast_set_op(int op) {
    cur_op = op;
    if (op >= 0) sc_op_instance_begin();
}
/* Iteration marks take no host time of their own: written without touching the gap accounting. */
SC_EXPORT void stepcast_mark(int source, int step) {
    pthread_mutex_lock(&log_lock);
    if (source >= 0 && source < 4) {
        iteration_hash[source] = window_hash[source];
        window_hash[source] = FNV0;
    }
    pthread_mutex_unlock(&log_lock);
    sc_note("I\t%lu\t0\t%d\t%d\t%d\t%d\n", (unsigned long)(sc_now_ns() - t_origin), thread_no, cur_op, source, step);
}
/* The bytes the next kernel launches of this thread read and write, as their launcher knows them (the capture
 * layer's wrapper of Inductor's Triton launcher, emulate/triton_bytes.py): set before the launch, 0, 0 after it. A
 * launch's K record carries them (0 = unknown). */
static __thread unsigned long long kernel_read, kernel_written;
SC_EXPORT void stepcast_kernel_bytes(unsigned long long read, unsigned long long written) {
    kernel_read = read;
    kernel_written = written;
}
SC_EXPORT void stepcast_flush(void) {
    pthread_mutex_lock(&log_lock);
    if (log_file) fflush(log_file);
    pthread_mutex_unlock(&log_lock);
}

/* ---- virtual device memory ----
 * One PROT_NONE reservation (never backed, never touched) gives each device a disjoint address range, so device
 * pointers can be told from host ones. Allocation is a bump pointer; freeing the topmost block lowers it. The
 * budget (the target's memory size) is what makes cudaMalloc fail like the real device. */
#define DEV_RANGE (1ull << 39)
#define ALIGN (2ull << 20)
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static char *va_base;
static int va_writable = 1;
static uint64_t dev_top[SC_MAX_DEVICES], dev_used[SC_MAX_DEVICES], dev_peak[SC_MAX_DEVICES];
static int dev_reservations[SC_MAX_DEVICES];  /* live address reservations of the virtual memory API */
static __thread int cur_device = 0;
static int any_device_set;

typedef struct { uintptr_t ptr; size_t bytes; } alloc_slot;
static alloc_slot *alloc_tab;
static size_t alloc_cap, alloc_len;

int sc_current_device(void) { return cur_device; }
void sc_set_current_device(int d) { cur_device = d; __atomic_store_n(&any_device_set, 1, __ATOMIC_RELAXED); }

static int reserve_va(void) {
    if (va_base) return 0;
    /* Readable and writable but never committed: only pages the small data paths touch get memory. Where the
     * kernel refuses (strict overcommit), fall back to an inaccessible range and all-zero reads. */
    void *p = mmap(NULL, DEV_RANGE * SC_MAX_DEVICES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        p = mmap(NULL, DEV_RANGE * SC_MAX_DEVICES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return -1;
        va_writable = 0;
    }
    va_base = (char *)(((uintptr_t)p + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    return 0;
}

static size_t hash_ptr(uintptr_t p, size_t cap) { return (size_t)((p >> 12) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

static void alloc_insert(uintptr_t ptr, size_t bytes) {
    if ((alloc_len + 1) * 2 > alloc_cap) {
        size_t ncap = alloc_cap ? alloc_cap * 2 : 4096;
        alloc_slot *n = calloc(ncap, sizeof *n);
        for (size_t i = 0; i < alloc_cap; i++)
            if (alloc_tab[i].ptr) {
                size_t s = hash_ptr(alloc_tab[i].ptr, ncap);
                while (n[s].ptr) s = (s + 1) & (ncap - 1);
                n[s] = alloc_tab[i];
            }
        free(alloc_tab);
        alloc_tab = n;
        alloc_cap = ncap;
    }
    size_t s = hash_ptr(ptr, alloc_cap);
    while (alloc_tab[s].ptr) s = (s + 1) & (alloc_cap - 1);
    alloc_tab[s].ptr = ptr;
    alloc_tab[s].bytes = bytes;
    alloc_len++;
}

static size_t alloc_remove(uintptr_t ptr) {
    if (!alloc_cap) return 0;
    size_t s = hash_ptr(ptr, alloc_cap);
    while (alloc_tab[s].ptr && alloc_tab[s].ptr != ptr) s = (s + 1) & (alloc_cap - 1);
    if (!alloc_tab[s].ptr) return 0;
    size_t bytes = alloc_tab[s].bytes;
    alloc_tab[s].ptr = 0;
    alloc_len--;
    /* re-insert the rest of the cluster (linear probing deletion) */
    for (size_t j = (s + 1) & (alloc_cap - 1); alloc_tab[j].ptr; j = (j + 1) & (alloc_cap - 1)) {
        alloc_slot moved = alloc_tab[j];
        alloc_tab[j].ptr = 0;
        alloc_len--;
        alloc_insert(moved.ptr, moved.bytes);
    }
    return bytes;
}

static size_t va_rounded(size_t bytes) {
    size_t rounded = (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    return rounded ? rounded : ALIGN;
}

static void count_used_locked(int d, size_t bytes) {
    dev_used[d] += bytes;
    if (dev_used[d] > dev_peak[d]) dev_peak[d] = dev_used[d];
}

int sc_device_alloc(size_t bytes, void **out) {
    int d = cur_device;
    size_t rounded = va_rounded(bytes);
    pthread_mutex_lock(&mem_lock);
    if (reserve_va() != 0 || dev_used[d] + bytes > sc_cfg.mem_bytes || dev_top[d] + rounded > DEV_RANGE) {
        pthread_mutex_unlock(&mem_lock);
        *out = NULL;
        return -1;
    }
    uintptr_t p = (uintptr_t)va_base + (uintptr_t)d * DEV_RANGE + dev_top[d];
    dev_top[d] += rounded;
    count_used_locked(d, bytes);
    alloc_insert(p, bytes);
    pthread_mutex_unlock(&mem_lock);
    *out = (void *)p;
    return 0;
}

/* The driver's virtual memory API splits cudaMalloc in two: address ranges (reserved from the device's window,
 * no memory) and physical allocations (memory, counted against the target's budget, no address). */
int sc_device_reserve(size_t bytes, void **out) {
    int d = cur_device;
    size_t rounded = va_rounded(bytes);
    pthread_mutex_lock(&mem_lock);
    if (reserve_va() != 0 || dev_top[d] + rounded > DEV_RANGE) {
        pthread_mutex_unlock(&mem_lock);
        *out = NULL;
        return -1;
    }
    *out = va_base + (uintptr_t)d * DEV_RANGE + dev_top[d];
    dev_top[d] += rounded;
    dev_reservations[d]++;
    pthread_mutex_unlock(&mem_lock);
    return 0;
}

int sc_device_unreserve(void *ptr, size_t bytes) {
    int d = sc_device_of_ptr(ptr);
    if (d < 0) return -1;
    pthread_mutex_lock(&mem_lock);
    sc_range_forget(ptr, bytes);
    size_t rounded = va_rounded(bytes);
    if ((uintptr_t)ptr + rounded == (uintptr_t)va_base + (uintptr_t)d * DEV_RANGE + dev_top[d]) dev_top[d] -= rounded;
    if (dev_reservations[d] > 0) dev_reservations[d]--;
    pthread_mutex_unlock(&mem_lock);
    return 0;
}

int sc_device_commit(int d, size_t bytes) {
    if (d < 0 || d >= SC_MAX_DEVICES) return -1;
    pthread_mutex_lock(&mem_lock);
    int ok = dev_used[d] + bytes <= sc_cfg.mem_bytes;
    if (ok) count_used_locked(d, bytes);
    pthread_mutex_unlock(&mem_lock);
    return ok ? 0 : -1;
}

void sc_device_uncommit(int d, size_t bytes) {
    if (d < 0 || d >= SC_MAX_DEVICES) return;
    pthread_mutex_lock(&mem_lock);
    dev_used[d] -= bytes < dev_used[d] ? bytes : dev_used[d];
    pthread_mutex_unlock(&mem_lock);
}

size_t sc_device_free(void *ptr) {
    if (!ptr) return 0;
    pthread_mutex_lock(&mem_lock);
    size_t bytes = alloc_remove((uintptr_t)ptr);
    if (bytes && va_base) {
        sc_range_forget(ptr, bytes);
        int d = (int)(((uintptr_t)ptr - (uintptr_t)va_base) / DEV_RANGE);
        dev_used[d] -= bytes;
        size_t rounded = va_rounded(bytes);
        if ((uintptr_t)ptr + rounded == (uintptr_t)va_base + (uintptr_t)d * DEV_RANGE + dev_top[d])
            dev_top[d] -= rounded;
        if (dev_used[d] == 0 && dev_reservations[d] == 0) dev_top[d] = 0;
    }
    pthread_mutex_unlock(&mem_lock);
    return bytes;
}

int sc_device_memory_writable(void) { return va_base && va_writable; }

int sc_is_device_ptr(const void *ptr) {
    return va_base && (const char *)ptr >= va_base && (const char *)ptr < va_base + DEV_RANGE * SC_MAX_DEVICES;
}

int sc_device_of_ptr(const void *ptr) {
    return sc_is_device_ptr(ptr) ? (int)(((uintptr_t)ptr - (uintptr_t)va_base) / DEV_RANGE) : -1;
}

SC_EXPORT long long stepcast_device_used(int d) { return d >= 0 && d < SC_MAX_DEVICES ? (long long)dev_used[d] : -1; }
SC_EXPORT long long stepcast_device_peak(int d) { return d >= 0 && d < SC_MAX_DEVICES ? (long long)dev_peak[d] : -1; }
SC_EXPORT int stepcast_device_in_use(void) { return any_device_set ? cur_device : 0; }

size_t sc_device_used_bytes(int d) { return dev_used[d]; }

/* ---- pinned host allocations (real memory; ranges remembered for cudaPointerGetAttributes) ---- */
#define HOST_SLOTS 4096
static struct { uintptr_t lo, hi; } host_ranges[HOST_SLOTS];
static int host_n;
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;

void sc_host_range_add(const void *p, size_t bytes) {
    pthread_mutex_lock(&host_lock);
    if (host_n < HOST_SLOTS) {
        host_ranges[host_n].lo = (uintptr_t)p;
        host_ranges[host_n].hi = (uintptr_t)p + bytes;
        host_n++;
    }
    pthread_mutex_unlock(&host_lock);
}

void sc_host_range_remove(const void *p) {
    pthread_mutex_lock(&host_lock);
    for (int i = 0; i < host_n; i++)
        if (host_ranges[i].lo == (uintptr_t)p) { host_ranges[i] = host_ranges[--host_n]; break; }
    pthread_mutex_unlock(&host_lock);
}

int sc_is_pinned_host_ptr(const void *p) {
    int found = 0;
    pthread_mutex_lock(&host_lock);
    for (int i = 0; i < host_n && !found; i++)
        found = (uintptr_t)p >= host_ranges[i].lo && (uintptr_t)p < host_ranges[i].hi;
    pthread_mutex_unlock(&host_lock);
    return found;
}

/* ---- kernel-name registry: host stub / handle -> sc_func_t ---- */
typedef struct { const void *key; sc_func_t *f; } func_slot;
static func_slot *func_tab;
static size_t func_cap, func_len;
static pthread_mutex_t func_lock = PTHREAD_MUTEX_INITIALIZER;
static int next_func_id;

static void func_insert(const void *key, sc_func_t *f) {
    if ((func_len + 1) * 2 > func_cap) {
        size_t ncap = func_cap ? func_cap * 2 : 1 << 16;
        func_slot *n = calloc(ncap, sizeof *n);
        for (size_t i = 0; i < func_cap; i++)
            if (func_tab[i].key) {
                size_t s = hash_ptr((uintptr_t)func_tab[i].key, ncap);
                while (n[s].key) s = (s + 1) & (ncap - 1);
                n[s] = func_tab[i];
            }
        free(func_tab);
        func_tab = n;
        func_cap = ncap;
    }
    size_t s = hash_ptr((uintptr_t)key, func_cap);
    while (func_tab[s].key && func_tab[s].key != key) s = (s + 1) & (func_cap - 1);
    if (!func_tab[s].key) func_len++;
    func_tab[s].key = key;
    func_tab[s].f = f;
}

sc_func_t *sc_func_register(const void *key, const char *name) {
    sc_func_t *f = calloc(1, sizeof *f);
    f->magic = 0x5C5C;
    f->id = -1;
    f->name = name ? name : "unknown";
    pthread_mutex_lock(&func_lock);
    if (key) func_insert(key, f);
    func_insert(f, f);
    pthread_mutex_unlock(&func_lock);
    return f;
}

sc_func_t *sc_func_lookup(const void *key) {
    sc_func_t *f = NULL;
    pthread_mutex_lock(&func_lock);
    if (func_cap) {
        size_t s = hash_ptr((uintptr_t)key, func_cap);
        while (func_tab[s].key && func_tab[s].key != key) s = (s + 1) & (func_cap - 1);
        f = func_tab[s].f;
    }
    pthread_mutex_unlock(&func_lock);
    return f;
}

int sc_func_log_id(sc_func_t *f) {
    int id = __atomic_load_n(&f->id, __ATOMIC_ACQUIRE);
    if (id >= 0) return id;
    pthread_mutex_lock(&func_lock);
    if (f->id < 0) {
        f->id = next_func_id++;
        sc_note("F\t%d\t%s\n", f->id, f->name);
    }
    id = f->id;
    pthread_mutex_unlock(&func_lock);
    return id;
}

void sc_log_kernel(uint64_t t_enter, const void *func, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, size_t shmem, const void *stream) {
    sc_note_kernel_write();
    if (!sc_logging()) return;
    sc_func_t *f = sc_func_lookup(func);
    if (!f) {
        char *name = malloc(48);
        snprintf(name, 48, "unregistered_kernel_%p", func);
        f = sc_func_register(func, name);
    }
    int id = sc_func_log_id(f);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = f->name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    for (int i = 0; i < 6; i++) h = (h ^ dims[i]) * 0x100000001b3ull;
    hash_override = ((h ^ (uint64_t)shmem) * 0x100000001b3ull) ^ (uint64_t)(uint32_t)sc_stream_id(stream);
    /* then the bytes the launcher said it reads and writes (stepcast_kernel_bytes); the op call last: the kernels
     * of one call share it (an op timed as a whole is timed once); K records are hashed by hash_override above, so
     * neither the per-call number nor the bytes reach rank dedup */
    sc_emit(t_enter, 'K', "%d\t%d\t%u,%u,%u\t%u,%u,%u\t%zu\t%llu\t%llu\t%lu", sc_stream_id(stream), id, gx, gy, gz,
            bx, by, bz, shmem, kernel_read, kernel_written, (unsigned long)sc_op_instance());
}

/* ---- streams and events: handles are pointers to small records carrying a trace id ---- */
typedef struct { uint32_t magic; int id; uint64_t work_mark; } sc_handle_t;

/* The emulated device's clock, for code that times itself with events (Triton's and Inductor's autotuners,
 * torch.utils.benchmark). The capture layer registers a predictor (emulate/event_timing.py,
 * stepcast_set_elapsed_predictor): given the two events' ids, it finds their latest 'R' records in the log and
 * answers the predicted device time of the work between them on the start event's stream, so that an autotuner's
 * candidates compare as the estimator predicts them on the target. Without one, or when it cannot answer, every
 * piece of device work (kernel, library call, copy, memset, collective) counts one nominal microsecond: elapsed
 * times stay positive and grow with the work, and all candidates tie on equal launch counts (the first is kept).
 * A record stays O(1): it notes the work count; the log is only read at a query (rare: once per timed run). */
#define SC_NOMINAL_WORK_MS 1e-3f
static sc_elapsed_predictor_t elapsed_predictor;
SC_EXPORT void stepcast_set_elapsed_predictor(sc_elapsed_predictor_t predictor) {
    __atomic_store_n(&elapsed_predictor, predictor, __ATOMIC_RELEASE);
}

void sc_event_mark(void *event) {
    sc_handle_t *h = event;
    if (h && h->magic == 0xE7E7) h->work_mark = __atomic_load_n(&device_work, __ATOMIC_RELAXED);
}

int sc_event_elapsed_ms(const void *start, const void *end, float *ms) {
    const sc_handle_t *a = start, *b = end;
    if (!a || !b || a->magic != 0xE7E7 || b->magic != 0xE7E7) return -1;
    float nominal = (float)((int64_t)(b->work_mark - a->work_mark)) * SC_NOMINAL_WORK_MS;
    *ms = nominal;
    sc_elapsed_predictor_t predict = __atomic_load_n(&elapsed_predictor, __ATOMIC_ACQUIRE);
    if (predict && sc_logging()) {
        stepcast_flush();  /* the predictor reads the records up to the end event's from the file */
        float predicted;
        if (predict(a->id, b->id, nominal, &predicted) == 0) *ms = predicted;
    }
    return 0;
}
static int next_stream_id = 1, next_event_id = 1;

void *sc_new_stream(void) {
    sc_handle_t *h = calloc(1, sizeof *h);
    h->magic = 0x57AE;
    h->id = __atomic_fetch_add(&next_stream_id, 1, __ATOMIC_RELAXED);
    return h;
}

void *sc_new_event(void) {
    sc_handle_t *h = calloc(1, sizeof *h);
    h->magic = 0xE7E7;
    h->id = __atomic_fetch_add(&next_event_id, 1, __ATOMIC_RELAXED);
    return h;
}

int sc_stream_id(const void *stream) {
    /* 0 = legacy default (NULL or cudaStreamLegacy), -2 = per-thread default (cudaStreamPerThread) */
    if ((uintptr_t)stream <= 1) return 0;
    if ((uintptr_t)stream == 2) return -2;
    const sc_handle_t *h = stream;
    return h->magic == 0x57AE ? h->id : -1;
}

int sc_event_id(const void *event) {
    if (!event) return 0;
    const sc_handle_t *h = event;
    return h->magic == 0xE7E7 ? h->id : -1;
}
