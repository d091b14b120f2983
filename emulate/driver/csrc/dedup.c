/* Rank dedup: after an iteration, ranks compare the hash of the device work they asked for in it (kernels and
 * collectives: capture.c). Every rank but the lowest of each set of identical ranks stops; the
 * collator rebuilds their traces from the representative's. Ranks meet in one shared-memory area per run. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 4096
typedef struct {
    uint64_t program[MAX_WORLD];
    volatile uint64_t arrived[MAX_WORLD], published[MAX_WORLD];
} dedup_area;

static int wait_all(volatile uint64_t *flags, int world) {
    uint64_t start = fk_now_ns();
    struct timespec nap = {0, 200000};
    for (;;) {
        int ready = 1;
        for (int j = 0; j < world && ready; j++) ready = __atomic_load_n(&flags[j], __ATOMIC_ACQUIRE) != 0;
        if (ready) return 0;
        if (fk_now_ns() - start > 60ull * 1000000000ull) return -1;
        nanosleep(&nap, NULL);
    }
}

/* Returns the representative rank of this rank (itself when it keeps running), or -1 when dedup does not apply
 * (single rank, no run id, no iteration hash, or a rank that never arrived). Called once, by every rank, at the
 * same iteration mark of `source`. */
FK_EXPORT int stepcast_dedup(int source) {
    const char *run = getenv("STEPCAST_RUN_ID"), *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    if (!run || !*run || !r || !w) return -1;
    int rank = atoi(r), world = atoi(w);
    uint64_t program = fk_last_iteration_hash(source);
    if (world < 2 || world > MAX_WORLD || rank < 0 || rank >= world || !program) return -1;
    char name[128];
    snprintf(name, sizeof name, "/stepcast-%s-dedup", run);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return -1;
    if (ftruncate(fd, sizeof(dedup_area)) != 0) { close(fd); return -1; }
    dedup_area *a = mmap(NULL, sizeof(dedup_area), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (a == MAP_FAILED) return -1;
    a->program[rank] = program;
    __atomic_store_n(&a->arrived[rank], 1, __ATOMIC_RELEASE);
    if (wait_all(a->arrived, world) != 0) return -1;
    int rep = rank;
    for (int j = 0; j < rank; j++)
        if (a->program[j] == program) { rep = j; break; }
    fk_comms_publish(program, rep != rank);
    __atomic_store_n(&a->published[rank], 1, __ATOMIC_RELEASE);
    wait_all(a->published, world);  /* leave together: every stopped member is marked before anyone goes on */
    return rep;
}
