/* Rank dedup: ranks compare the hash of the device work they asked for in an iteration (kernels and collectives:
 * capture.c), over several iterations in a row (rounds), and a rank stops only when it matched the same lower rank
 * in every round: a rank whose program diverges within those iterations (skips a collective, takes another branch)
 * keeps running, and its divergence shows as the deadlock it is. Every rank but the lowest of each set of ranks
 * identical in all rounds stops; the collator rebuilds their traces from the representative's. Ranks meet in one
 * shared-memory area per run; a rank that has left (ranks.c) is not waited for. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 4096
#define MAX_ROUNDS 8
typedef struct {
    uint64_t program[MAX_ROUNDS][MAX_WORLD];
    volatile uint64_t arrived[MAX_ROUNDS][MAX_WORLD];
    volatile uint64_t published[MAX_WORLD];
} dedup_area;

static dedup_area *area;
static int rank = -1, world;
static uint64_t last_program;

static dedup_area *open_area(void) {
    if (area) return area;
    const char *run = getenv("STEPCAST_RUN_ID"), *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    if (!run || !*run || !r || !w) return NULL;
    rank = atoi(r), world = atoi(w);
    if (world < 2 || world > MAX_WORLD || rank < 0 || rank >= world) return NULL;
    char name[128];
    snprintf(name, sizeof name, "/stepcast-%s-dedup", run);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return NULL;
    if (ftruncate(fd, sizeof(dedup_area)) == 0) {
        void *p = mmap(NULL, sizeof(dedup_area), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) area = p;
    }
    close(fd);
    return area;
}

/* Wait until every rank has set its flag or left; 0, or -1 (dedup does not apply then) when every running rank waits
 * (ranks.c) or the run has called the driver for none of STEPCAST_WAIT_LIMIT_S seconds (a rank still compiling its
 * way to the mark is waited for: before, 60 s of this wait gave dedup up on a loaded machine). */
static int wait_all(volatile uint64_t *flags, const char *what) {
    uint64_t start = fk_now_ns();
    struct timespec nap = {0, 200000};
    int announced = 0, rc = 0;
    for (;;) {
        int ready = 1;
        for (int j = 0; j < world && ready; j++)
            ready = __atomic_load_n(&flags[j], __ATOMIC_ACQUIRE) != 0 || fk_rank_exited(j);
        if (ready) break;
        if (!announced) {
            fk_rank_waiting(what, 1);
            announced = 1;
        }
        /* every rank waits, some of them on this rank in a collective it has not reached (its program diverged
         * before this mark): dedup gives up rather than hold the run, which goes on as it would on GPUs */
        char blocked[1400];
        if (fk_ranks_all_blocked(1000000000ull, 1, blocked, sizeof blocked)) { rc = -1; break; }
        if (fk_ranks_silent_since(start)) { rc = -1; break; }
        nanosleep(&nap, NULL);
    }
    if (announced) fk_rank_waiting(NULL, 1);
    return rc;
}

/* Round `round` (0, 1, ...) of the comparison, at the same iteration mark of `source` on every rank (each rank takes
 * part in every round, whatever it found in the earlier ones, since the others wait for it): publish this rank's
 * hash of the iteration that just ended and return the lowest rank whose hash equals it (itself when none does),
 * or -1 when dedup does not apply (a single rank, no run, no device work, a round past MAX_ROUNDS, or a rank that
 * never arrived). */
FK_EXPORT int stepcast_dedup_round(int source, int round) {
    uint64_t program = fk_last_iteration_hash(source);
    if (!open_area() || round < 0 || round >= MAX_ROUNDS) return -1;
    last_program = program;
    area->program[round][rank] = program;  /* 0 (no device work): compared with no one, but arrived all the same */
    __atomic_store_n(&area->arrived[round][rank], 1, __ATOMIC_RELEASE);
    char what[64];
    snprintf(what, sizeof what, "rank dedup's comparison %d", round + 1);
    if (wait_all(area->arrived[round], what) != 0 || !program) return -1;
    for (int j = 0; j < rank; j++)
        if (__atomic_load_n(&area->arrived[round][j], __ATOMIC_ACQUIRE) && area->program[round][j] == program)
            return j;
    return rank;
}

/* After the last round, on every rank: publish whether this rank stops (its communicators' members then take their
 * small-collective bytes from its live twin), and leave together, so every stopped member is marked before anyone
 * goes on. */
FK_EXPORT void stepcast_dedup_decide(int stops) {
    if (!open_area()) return;
    fk_comms_publish(last_program, stops);
    if (stops) fk_ranks_note_copied();
    __atomic_store_n(&area->published[rank], 1, __ATOMIC_RELEASE);
    wait_all(area->published, "rank dedup's decision");
}
