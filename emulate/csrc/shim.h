/* stepcast virtual-GPU shim: shared declarations.
 *
 * The shim is one shared object, preloaded into the training process (LD_PRELOAD) and also answering to the
 * name libcuda.so.1, that defines the CUDA runtime, driver, cuBLAS/cuBLASLt, cuDNN and NCCL entry points torch
 * imports. Device work becomes a no-op; each call that the simulator needs is appended to a per-rank text log
 * (one event per line, tab-separated; emulate/shimlog.py parses it). */
#ifndef STEPCAST_SHIM_H
/* The oldest GPU architecture whose code CUDA 13 builds (torch's cu130 wheels) carry: sm_75. */
#define SC_OLDEST_ARCH 75
#define STEPCAST_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define SC_EXPORT __attribute__((visibility("default")))
#define SC_MAX_DEVICES 16

/* Target device, read once from STEPCAST_* environment variables (emulate/shim_env.py writes them). */
typedef struct {
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    size_t mem_bytes;
    int l2_bytes;
    size_t smem_per_sm;
    int clock_khz;
    int mem_clock_khz;
    int mem_bus_width;
    int device_count;
    int max_threads_per_sm;
} sc_config_t;

extern sc_config_t sc_cfg;
void sc_init(void);
uint64_t sc_now_ns(void);
/* First thing in every logged entry point: the wall time of entry (the record's t_ns, and sc_emit's t_enter);
 * under the CPU host clock it also notes the thread's CPU time at entry, where the gap ends. */
uint64_t sc_call_enter(void);

/* Event log. sc_emit writes "<kind>\t<t_ns>\t<gap_ns>\t<thread>\t<op>\t" + the formatted fields + "\n".
 * t_enter is the call's wall-clock entry time (sc_call_enter() taken first thing); the gap is the host time since
 * the previous logged call returned (core.c: the calling thread's CPU time by default, STEPCAST_HOST_CLOCK), minus
 * the time the Python capture layer declared as its own (stepcast_pause/resume). */
void sc_emit(uint64_t t_enter, char kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int sc_logging(void);
/* A raw line that is not a timed call (definitions, notes): leaves the gap accounting alone. */
void sc_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* First call of an entry point the shim answers only generically: logged once per name ('U' line). */
void sc_unhandled(const char *name);

/* Streams and events are small objects; their ids (1, 2, ...) are what the trace shows. Null / legacy -> 0. */
int sc_stream_id(const void *stream);
int sc_event_id(const void *event);

/* Device memory (virtual, never backed). */
int sc_current_device(void);
int sc_device_alloc(size_t bytes, void **out);  /* 0 on success, -1 when the device is full */
size_t sc_device_free(void *ptr);               /* returns the size freed (0 if unknown) */
/* Virtual memory API (cuMemAddressReserve / cuMemCreate): an address range without memory, memory without an
 * address. reserve/commit return 0, or -1 when the device's window / memory is full. */
int sc_device_reserve(size_t bytes, void **out);
int sc_device_unreserve(void *ptr, size_t bytes);
int sc_device_commit(int device, size_t bytes);
void sc_device_uncommit(int device, size_t bytes);
int sc_is_device_ptr(const void *ptr);
int sc_device_of_ptr(const void *ptr);      /* the device whose range holds ptr, else -1 */
int sc_device_memory_writable(void);
int sc_is_pinned_host_ptr(const void *ptr);
void sc_set_current_device(int device);
void sc_host_range_add(const void *ptr, size_t bytes);
void sc_host_range_remove(const void *ptr);
size_t sc_device_used_bytes(int device);
void *sc_new_stream(void);
void *sc_new_event(void);
/* Events as a device clock (core.c): a record notes the device work so far; elapsed = the predicted time of the
 * work between (the registered predictor), else that work at a nominal microsecond a piece. */
void sc_event_mark(void *event);
int sc_event_elapsed_ms(const void *start, const void *end, float *ms);  /* -1 when either is not an event */
/* The capture layer's elapsed-time predictor (emulate/event_timing.py): the start and end events' trace ids (their
 * 'R' records in the log) and the nominal answer; 0 with *ms set, else nonzero (the nominal answer stands). */
typedef int (*sc_elapsed_predictor_t)(long long start, long long end, float nominal_ms, float *ms);
void stepcast_set_elapsed_predictor(sc_elapsed_predictor_t predictor);

/* Kernel names: a registered host stub / module function -> its (mangled) device name, logged once ('F' line). */
typedef struct sc_func {
    uint32_t magic;
    int id;            /* -1 until first logged */
    const char *name;
} sc_func_t;
sc_func_t *sc_func_register(const void *key, const char *name);
sc_func_t *sc_func_lookup(const void *key);
int sc_func_log_id(sc_func_t *f);
void sc_log_kernel(uint64_t t_enter, const void *func, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, size_t shmem, const void *stream);

int sc_device_attribute(int attr, int device, int *value);

uint64_t sc_last_iteration_hash(int source);
/* Rank dedup (dedup.c): mark this rank's slot in every communicator's exchange area as stopped. */
void sc_comms_publish(uint64_t program, int stopped);
void sc_shm_member_state(void *shm, int rank, uint64_t program, int stopped);

/* Small data paths (datapath.c). */
size_t sc_real_limit(void);
void sc_op_instance_begin(void);
/* the op call (instance) the calling thread is in: kernels of one call share it (0 before any op) */
uint64_t sc_op_instance(void);
void sc_note_kernel_write(void);
void sc_range_written(const void *p, size_t n);
void sc_range_forget(const void *p, size_t n);
int sc_range_known(const void *p, size_t n);
int sc_range_readback(const void *p, size_t n);  /* a copy to the host: see datapath.c */
void *sc_comm_shm(const char *comm_id, int nranks);
void sc_exchange(void *shm, int nranks, int rank, uint64_t seq, int kind, const void *send, void *recv, size_t count,
                 int dtype, int redop, int root);

/* CUDA graphs (graph.c). While a stream captures, what sc_emit would log for its work becomes a node of the
 * capture's graph; each graph launch writes the nodes into the log again (sc_emit_graph). */
typedef struct {
    char kind;         /* the record kind (K, G, C, S, N, R, W) */
    int op;            /* the aten op the work was captured under */
    int stream;        /* the stream id it was captured on */
    uint64_t hash;     /* its contribution to the iteration hash rank dedup compares (core.c) */
    uint32_t call;     /* a kernel's op call, numbered within the graph (1, 2, ...; 0 outside ops) */
    char *pre, *post;  /* the record's fields before and after the stream id (a kernel's op call left out) */
} sc_node_t;
extern int sc_capturing;  /* streams capturing now: while 0, sc_emit looks nothing up */
/* Called by sc_emit for device-work records while a capture is under way: 1 when the record became a node. */
int sc_capture_record(char kind, const char *fields, int op, uint64_t hash);
/* Log one graph launch on `stream`: an 'L' record, then the n nodes (those of `origin` on `stream`), kernels' op
 * calls numbered from call_base (sc_op_instances_reserve). */
void sc_emit_graph(uint64_t t_enter, int stream, unsigned long long graph_id, int origin, const sc_node_t *nodes,
                   size_t n, uint64_t call_base);
/* n fresh op-call numbers (datapath.c): returns the number before the first (call c is the result + c). */
uint64_t sc_op_instances_reserve(uint64_t n);

/* Host work counted on the calling thread since the last take (hostwork.c): the take returns and restarts it;
 * pause stops counting during the capture layer's own work. */
void sc_take_work(uint32_t *ops, uint32_t *nodes, uint32_t *py);
void sc_work_pause(int paused);

#endif
