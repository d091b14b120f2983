/* The shim's NCCL (nccl.c) on the emulated driver (emulate/driver, `stepcast run --backend driver`): built with
 * this file into a small library (emulate/driver/build.py: nccl_path) that the launcher preloads above the fake
 * libcuda.so.1, so torch's ProcessGroupNCCL calls the emulated NCCL instead of the real libnccl, which crashes on
 * device memory without pages. nccl.c is used unchanged; what it needs of the shim's core is answered here from
 * the driver's capture API (emulate/driver/csrc/capture.c), resolved at first use:
 * - records go into the driver's log (stepcast_log_record), as "collective" / "comm" records holding the shim's
 *   own line ("text"), timed with the driver's clock, gap, thread and op fields like the driver's own records; a
 *   collective issued on a capturing stream becomes a node of that CUDA graph instead (stepcast_graph_record),
 *   logged at each launch of the graph, as a GPU runs it;
 * - stream ids are the driver's (stepcast_stream_id), device memory is the driver's (cuMemAlloc / cuMemFree);
 * - small collectives exchange their payloads as on the shim, through the driver's built-in copy of the shim's data
 *   path (stepcast_comm_shm / stepcast_exchange: emulate/csrc/datapath.c); large ones move no data. */
#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*log_record_fn)(const char *event, int timed, const char *json);
typedef unsigned long long (*stream_id_fn)(const void *stream);
typedef int (*mem_alloc_fn)(unsigned long long *ptr, size_t bytes);
typedef int (*mem_free_fn)(unsigned long long ptr);
typedef int (*graph_record_fn)(unsigned long long stream, const char *event, const char *json);

static void *driver_symbol(const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib) p = dlsym(lib, name);
    }
    return p;
}

static log_record_fn log_record(void) {
    static log_record_fn fn;
    if (!fn) fn = (log_record_fn)driver_symbol("stepcast_log_record");
    return fn;
}

void sc_init(void) {}
uint64_t sc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
uint64_t sc_call_enter(void) { return sc_now_ns(); }  /* the driver's log takes its own time and gap */

/* The shim's tab-separated line as a JSON string member ("text"): tabs escaped, nothing else needs it. */
static void log_text(const char *event, int timed, const char *text) {
    log_record_fn fn = log_record();
    if (!fn) return;
    char json[1200];
    size_t o = (size_t)snprintf(json, sizeof json, "\"text\":\"");
    for (const char *p = text; *p && o + 8 < sizeof json; p++) {
        if (*p == '\n') continue;
        if (*p == '\t' || *p == '"' || *p == '\\') {
            json[o++] = '\\';
            json[o++] = *p == '\t' ? 't' : *p;
        } else {
            json[o++] = *p;
        }
    }
    json[o++] = '"';
    json[o] = 0;
    static graph_record_fn captured;
    if (!captured) captured = (graph_record_fn)driver_symbol("stepcast_graph_record");
    /* issued on a capturing stream (the line's first field): a node of that graph, logged at each of its launches */
    if (timed && captured && captured(strtoull(text, NULL, 10), event, json)) return;
    fn(event, timed, json);
}

void sc_emit(uint64_t t_enter, char kind, const char *fmt, ...) {
    (void)t_enter;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (kind == 'N') log_text("collective", 1, text);
}

void sc_note(const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (text[0] == 'X' && text[1] == '\t') log_text("comm", 0, text + 2);
}

void sc_unhandled(const char *name) {
    log_record_fn fn = log_record();
    char json[256];
    snprintf(json, sizeof json, "\"name\":\"%s\"", name);
    if (fn) fn("unsupported", 0, json);
}

int sc_stream_id(const void *stream) {
    static stream_id_fn fn;
    if (!fn) fn = (stream_id_fn)driver_symbol("stepcast_stream_id");
    return fn ? (int)fn(stream) : 0;
}

int sc_device_alloc(size_t bytes, void **out) {
    static mem_alloc_fn fn;
    if (!fn) fn = (mem_alloc_fn)driver_symbol("cuMemAlloc_v2");
    unsigned long long p = 0;
    if (!fn || fn(&p, bytes) != 0) {
        *out = NULL;
        return -1;
    }
    *out = (void *)(uintptr_t)p;
    return 0;
}

size_t sc_device_free(void *ptr) {
    static mem_free_fn fn;
    if (!fn) fn = (mem_free_fn)driver_symbol("cuMemFree_v2");
    if (fn && ptr) fn((unsigned long long)(uintptr_t)ptr);
    return 0;
}

typedef void *(*comm_shm_fn)(const char *comm_id, int nranks);
typedef void (*exchange_fn)(void *shm, int nranks, int rank, unsigned long long seq, int kind, const void *send,
                            void *recv, size_t count, int dtype, int redop, int root);

void *sc_comm_shm(const char *comm_id, int nranks) {
    comm_shm_fn fn = (comm_shm_fn)driver_symbol("stepcast_comm_shm");
    return fn ? fn(comm_id, nranks) : NULL;
}
void sc_exchange(void *shm, int nranks, int rank, uint64_t seq, int kind, const void *send, void *recv, size_t count,
                 int dtype, int redop, int root) {
    static exchange_fn fn;
    if (!fn) fn = (exchange_fn)driver_symbol("stepcast_exchange");
    if (fn) fn(shm, nranks, rank, seq, kind, send, recv, count, dtype, redop, root);
}
void sc_shm_member_state(void *shm, int rank, uint64_t program, int stopped) {}  /* rank dedup: not on the driver */
/* The driver's CUDA graphs (emulate/driver/csrc/graph.c) hold a captured collective as its record's members: at each
 * launch of the graph they are logged with the communicator's next sequence number (nccl.c, sc_collective_rerun). */
int sc_collective_rerun(const char *text, const char *sep, char *out, size_t cap);
SC_EXPORT int stepcast_collective_rerun(const char *json, char *out, size_t cap) {
    return sc_collective_rerun(json, "\\t", out, cap);
}
