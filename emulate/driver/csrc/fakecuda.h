/* Shared declarations of the emulated CUDA driver (emulate/driver/csrc).
 *
 * Each file implements one API area with the *current* ABI of each entry point: cuda.h's own macros give the
 * exported name (cuMemAlloc -> cuMemAlloc_v2), so the compiler checks every signature against the header.
 * Everything not implemented here answers CUDA_ERROR_NOT_SUPPORTED (generated stubs, see build.py).
 * Device memory is never committed: addresses come from a window without memory, of which only the pages the small
 * data path writes get any (memory.c). */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define FK_EXPORT __attribute__((visibility("default")))

/* ---- device description (device.c), read once from the environment that emulate/driver/device.py writes ---- */
typedef struct {
    char name[256];
    size_t total_mem;
    int attrs[CU_DEVICE_ATTRIBUTE_MAX];
    int gpc_count;   /* SMs are split evenly over this many GPCs (modelled: cluster occupancy) */
    CUuuid uuid;
} fk_device_t;

int fk_device_count(void);
const fk_device_t *fk_device(int ordinal);
int fk_attr(int attribute);  /* device 0's value */
CUcontext fk_primary_context(void);
int fk_current_device(void);  /* the ordinal of the calling thread's current context's device */
void fk_ensure_init(void);

/* ---- the launch log (launch.c) ---- */
void fk_log_unsupported(const char *name);
void fk_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* a record of a call the capture times (capture.c): the event name, then the record's own JSON fields */
void fk_log_call(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the thread's next logged record counts in rank dedup's iteration hash as `what` (capture.c) */
void fk_hash_next_record(const char *what);
/* the bytes the calling thread's launcher said its next launches read and write (capture.c), and setting them */
void fk_kernel_bytes(unsigned long long *read, unsigned long long *written);
void stepcast_kernel_bytes(unsigned long long read, unsigned long long written);

/* ---- kernels and functions (module.c): one object serves as CUkernel and CUfunction ---- */
typedef struct fk_function {
    uint32_t magic;
    char *name;
    void *library;          /* owning library or module */
    int max_dynamic_smem;   /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as set by the caller */
    int non_portable_cluster;
    int carveout;
    struct fk_function *next;
} fk_function_t;
#define FK_FUNCTION_MAGIC 0x464b464eu
fk_function_t *fk_function_of(const void *handle);
int fk_function_static_smem(const fk_function_t *f);
int fk_function_regs(const fk_function_t *f);

/* ---- memory (memory.c) ---- */
int fk_is_device_pointer(CUdeviceptr p);
int fk_is_host_pointer(const void *p, int *is_mapped);
size_t fk_device_peak(void);  /* most device memory in use at once, bytes */

/* ---- streams (stream.c) and graphs (graph.c) ---- */
unsigned long long fk_stream_id(CUstream s);
typedef struct fk_graph fk_graph_t;
fk_graph_t *fk_stream_capture(CUstream s);             /* the graph a stream is capturing into, or NULL */
fk_graph_t *fk_stream_capture_by_id(unsigned long long stream);  /* the same, by the stream's id */
unsigned long long fk_graph_capture_id(const fk_graph_t *g);
void fk_graph_set_origin(fk_graph_t *g, unsigned long long stream);  /* the stream a capture began on */
void fk_stream_join_capture(CUstream s, fk_graph_t *g); /* a stream waiting on a captured event joins */
void fk_streams_end_capture(fk_graph_t *g);             /* every stream capturing into g stops */
int fk_stream_begin_capture(CUstream s, fk_graph_t *g);
/* one piece of device work was issued (a logged launch, copy or fill): the event clock (cuEventElapsedTime) */
void fk_count_device_work(void);

/* one launch, as logged and as a captured graph node */
typedef struct {
    char name[6000];  /* JSON-escaped */
    unsigned grid[3], block[3], smem, cluster[3];
    const char *via;
    unsigned long long read, written;  /* bytes, as its launcher said (0: unknown); a graph's launches keep them */
} fk_launch_rec_t;
/* fill *rec for a launch of f, checking it as cuLaunchKernel does (launch.c) */
CUresult fk_launch_record(fk_launch_rec_t *rec, const fk_function_t *f, const unsigned grid[3], const unsigned block[3],
                          unsigned smem, const unsigned cluster[3], const char *via);
/* graph_launch: the n-th graph launch (from 1) that replays this node (its position: node); 0 for a plain launch */
void fk_log_launch(const fk_launch_rec_t *rec, unsigned long long stream, const char *via, unsigned long long graph_launch,
                   size_t node);
/* device work issued on a capturing stream (its id: stream) becomes a node of the graph: 1 done, 0 out of memory */
int fk_graph_add_launch(fk_graph_t *g, const fk_launch_rec_t *rec, unsigned long long stream);
/* copies: rows of width bytes, dst_pitch / src_pitch bytes apart (one row: a plain copy) */
int fk_graph_add_copy(fk_graph_t *g, uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch, size_t width,
                      size_t rows, unsigned long long stream);
int fk_graph_add_fill(fk_graph_t *g, uintptr_t dst, unsigned value, size_t width, size_t count, size_t pitch,
                      size_t rows, unsigned long long stream);
int fk_graph_add_record(fk_graph_t *g, const char *event, const char *json, unsigned long long stream);
/* a graph's copy / fill at its launch (memory.c): done and logged, `graph` holding the record's graph members */
void fk_replay_copy(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch, size_t width, size_t rows,
                    unsigned long long stream, const char *graph);
void fk_replay_fill(uintptr_t dst, unsigned value, size_t width, size_t count, size_t pitch, size_t rows,
                    unsigned long long stream, const char *graph);

/* ---- the capture (capture.c): clock, op context, rank dedup's iteration hash ---- */
uint64_t fk_now_ns(void);
int fk_current_op(void);                   /* the aten op the calling thread is in (-1: none) */
unsigned long long fk_current_call(void);  /* its op call (0: none) */
unsigned long long fk_new_call(void);      /* a fresh op-call number */
/* the thread's next logged records carry this op and call instead of its own, until fk_log_as_op_done (a graph
 * launch's nodes: the op they were captured under) */
void fk_log_as_op(int op, unsigned long long call);
void fk_log_as_op_done(void);
/* the calling thread's time from pause to resume is not host work (the capture layer's own, or a wait on peers) */
void stepcast_pause(void);
void stepcast_resume(void);
uint64_t fk_last_iteration_hash(int source);
/* tell every communicator's members this rank's program hash, and whether it stops (the preloaded NCCL, nccl.c) */
void fk_comms_publish(uint64_t program, int stopped);

/* ---- host work counted per thread (hostwork.c) ---- */
void fk_take_work(uint32_t *ops, uint32_t *nodes, uint32_t *py);
void fk_work_pause(int paused);

/* ---- the small data path (datapath.c): real bytes for small copies, fills and collectives ---- */
size_t fk_real_limit(void);
int fk_device_memory_writable(void);  /* memory.c */
void fk_op_instance_begin(void);
void fk_note_kernel_write(void);
void fk_range_written(const void *p, size_t n);
void fk_range_forget(const void *p, size_t n);
int fk_range_known(const void *p, size_t n);
int fk_range_readback(const void *p, size_t n);
void *fk_comm_shm(const char *comm_id, int nranks);
void fk_comm_member(void *shm, int rank);
void fk_shm_member_state(void *shm, int rank, uint64_t program, int stopped);
void fk_exchange(void *shm, int nranks, int rank, uint64_t seq, int kind, const void *send, void *recv, size_t count,
                 int dtype, int redop, int root);
void fk_alltoallv(void *shm, int nranks, int rank, uint64_t round, const void *const *send, const size_t *send_bytes,
                  void *const *recv, const size_t *recv_bytes);
size_t fk_nccl_size(int dtype);  /* bytes of an ncclDataType_t's element */

/* ---- the run's ranks (ranks.c): who runs, waits, has left; deadlocks (capture.c) ---- */
int fk_rank(void);                       /* this process's global rank, -1 outside a run */
void stepcast_rank_exited(void);
int fk_rank_exited(int global_rank);
void fk_rank_active(uint64_t now_ns);    /* this rank logged a driver call (capture.c) */
uint64_t fk_wait_limit_ns(void);         /* STEPCAST_WAIT_LIMIT_S: how long a silent run is waited for */
int fk_ranks_silent_since(uint64_t start_ns);  /* no rank has called the driver for that long since start_ns */
void fk_ranks_note_copied(void);
int fk_ranks_copied(void);
void fk_rank_waiting(const char *what, int yields);  /* NULL: no longer waiting; yields: gives up if all block */
int fk_ranks_all_blocked(uint64_t settle_ns, int count_yielding, char *out, size_t cap);
/* The run is deadlocked (`message` says where): reported through the capture layer's handler, which saves the
 * capture and ends the process; without one, printed, and the process exits with FK_EXIT_DEADLOCK. */
#define FK_EXIT_DEADLOCK 4
void fk_deadlock(const char *message) __attribute__((noreturn));

/* ---- occupancy (launch.c) ---- */
int fk_blocks_per_sm(const fk_function_t *f, int threads, size_t dynamic_smem);

/* ---- private tables (export.c; their layout: export_layout.c, generated from runtime_versions.py) ---- */
CUresult fk_export_table(const void **table, const CUuuid *id);
typedef union { const void *p; size_t n; } fk_entry_t;  /* a function, or entry 0's size in bytes */
CUresult fk_export_refused(const char *table, int index);

extern pthread_mutex_t fk_lock;

#endif
