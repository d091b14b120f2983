/* The run's ranks, as every rank and the launcher see them: one shared-memory area per run
 * (/dev/shm/stepcast-<run id>-ranks), indexed by global rank, in which each rank says that it runs, what it waits
 * in, and that it has left. Waits between ranks (small collectives: datapath.c; rank dedup: dedup.c) read it so
 * that they never wait for a rank that has exited, and so that a run in which every running rank waits is known to
 * be deadlocked at once, where it would hang on GPUs. The launcher (emulate/launcher.py, mark_rank_exited) marks a
 * rank that was killed before it could say so itself; the layout below is mirrored there (RANKS_AREA_*). */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_WORLD 4096
#define WHAT_BYTES 96
typedef struct {
    volatile uint64_t alive[MAX_WORLD];   /* 1: the rank's capture started */
    volatile uint64_t exited[MAX_WORLD];  /* 1: the rank's process has left (or was killed) */
    volatile uint64_t waiting[MAX_WORLD]; /* the wait's start (ns, its own clock) while the rank waits on others */
    char what[MAX_WORLD][WHAT_BYTES];     /* what it waits in ("all_reduce #12 of nccl-...") */
    volatile uint64_t copied;             /* 1: some rank stopped as a duplicate (dedup.c) */
    volatile uint64_t active[MAX_WORLD];  /* when (ns, CLOCK_MONOTONIC) the rank last logged a driver call */
} ranks_area;

static ranks_area *area;
static int my_rank = -1, world;
static unsigned char *absent;  /* ranks a sparse run does not start (STEPCAST_RUN_RANKS lists those it does) */
static pthread_once_t area_once = PTHREAD_ONCE_INIT;

static void read_present(void) {
    const char *present = getenv("STEPCAST_RUN_RANKS");
    if (!present || !*present || !(absent = malloc((size_t)world))) return;
    memset(absent, 1, (size_t)world);
    for (const char *p = present; *p;) {
        char *end;
        long r = strtol(p, &end, 10);
        if (end == p) break;
        if (r >= 0 && r < world) absent[r] = 0;
        p = *end == ',' ? end + 1 : end;
    }
}

static void open_area(void) {
    const char *run = getenv("STEPCAST_RUN_ID"), *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    if (!run || !*run || !r || !w) return;
    my_rank = atoi(r), world = atoi(w);
    if (my_rank < 0 || my_rank >= MAX_WORLD || world < 1 || world > MAX_WORLD) return;
    read_present();
    char name[128];
    snprintf(name, sizeof name, "/stepcast-%s-ranks", run);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return;
    if (ftruncate(fd, sizeof(ranks_area)) == 0) {
        void *p = mmap(NULL, sizeof(ranks_area), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) area = p;
    }
    close(fd);
}

static ranks_area *ranks(void) {
    pthread_once(&area_once, open_area);
    return area;
}

int fk_rank(void) { return ranks() ? my_rank : -1; }

/* The capture of this rank has started (the capture layer, once). */
FK_EXPORT void stepcast_rank_alive(void) {
    if (ranks()) __atomic_store_n(&area->alive[my_rank], 1, __ATOMIC_RELEASE);
}
/* This rank's process leaves (every exit path of the capture layer): no one waits for it from now on. */
FK_EXPORT void stepcast_rank_exited(void) {
    if (ranks()) __atomic_store_n(&area->exited[my_rank], 1, __ATOMIC_RELEASE);
}

/* A rank stops as a duplicate (dedup.c): its twin speaks for it in the communicators it had; one made later
 * cannot know it (datapath.c then gives up an exchange rather than call it a deadlock). */
void fk_ranks_note_copied(void) {
    if (ranks()) __atomic_store_n(&area->copied, 1, __ATOMIC_RELEASE);
}
int fk_ranks_copied(void) { return ranks() && __atomic_load_n(&area->copied, __ATOMIC_ACQUIRE) != 0; }

/* This rank logged a driver call at `now_ns` (capture.c, every logged call): it makes progress. */
void fk_rank_active(uint64_t now_ns) {
    if (ranks()) __atomic_store_n(&area->active[my_rank], now_ns, __ATOMIC_RELAXED);
}

/* When any rank that runs (started, not left, not absent from a sparse run) last logged a driver call; 0 for none.
 * A wait that outlasts its limit is a deadlock only once the whole run has been silent that long: a peer still
 * compiling or computing its way to the collective (Inductor on a loaded machine takes minutes) logs calls as it
 * goes, and a program stuck where the driver cannot see (a host barrier, a store) logs none. */
static uint64_t ranks_last_active(void) {
    if (!ranks()) return 0;
    uint64_t last = 0;
    for (int j = 0; j < world; j++) {
        if ((absent && absent[j]) || !__atomic_load_n(&area->alive[j], __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&area->exited[j], __ATOMIC_ACQUIRE))
            continue;
        uint64_t t = __atomic_load_n(&area->active[j], __ATOMIC_RELAXED);
        if (t > last) last = t;
    }
    return last;
}

/* How long the whole run may stay silent (no rank logs a driver call) while a rank waits on others before the
 * wait ends: STEPCAST_WAIT_LIMIT_S seconds (stepcast/settings.py, which checks the value), default 120. */
uint64_t fk_wait_limit_ns(void) {
    static uint64_t limit;
    if (!limit) {
        const char *raw = getenv("STEPCAST_WAIT_LIMIT_S");
        char *end = NULL;
        double seconds = raw && *raw ? strtod(raw, &end) : 0.0;
        if (!(seconds > 0.0) || (end && *end)) seconds = 120.0;
        limit = (uint64_t)(seconds * 1e9);
    }
    return limit;
}

/* Whether no rank of the run has logged a driver call for fk_wait_limit_ns() since `start_ns` (a wait's start) or
 * since its latest one, whichever is later. */
int fk_ranks_silent_since(uint64_t start_ns) {
    uint64_t now = fk_now_ns();
    if (now <= start_ns || now - start_ns <= fk_wait_limit_ns()) return 0;  /* the common case: no scan of the ranks */
    uint64_t active = ranks_last_active();
    uint64_t quiet = active > start_ns ? active : start_ns;
    return now > quiet && now - quiet > fk_wait_limit_ns();
}

int fk_rank_exited(int global_rank) {
    return ranks() && global_rank >= 0 && global_rank < MAX_WORLD &&
           __atomic_load_n(&area->exited[global_rank], __ATOMIC_ACQUIRE) != 0;
}

void fk_rank_waiting(const char *what, int yields) {
    if (!ranks()) return;
    if (what) {
        snprintf(area->what[my_rank], WHAT_BYTES, "%s", what);
        __atomic_store_n(&area->waiting[my_rank], (fk_now_ns() & ~3ull) | 1 | (yields ? 2 : 0), __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&area->waiting[my_rank], 0, __ATOMIC_RELEASE);
    }
}

/* Whether every rank that runs is waiting on others, or has left, and has been for `settle_ns`: no rank can make
 * progress, so the run is deadlocked. A rank in a wait that gives up when all are blocked (rank dedup's: `yields`)
 * will move on, so it counts as blocked only when `count_yielding`. `out` gets one clause per waiting rank ("rank 1
 * in broadcast #3 of ..."). */
int fk_ranks_all_blocked(uint64_t settle_ns, int count_yielding, char *out, size_t cap) {
    if (!ranks()) return 0;
    uint64_t now = fk_now_ns();
    int any = 0;
    for (int j = 0; j < world; j++) {
        if (absent && absent[j]) continue;
        if (__atomic_load_n(&area->exited[j], __ATOMIC_ACQUIRE)) continue;
        if (!__atomic_load_n(&area->alive[j], __ATOMIC_ACQUIRE)) return 0;  /* still starting */
        uint64_t since = __atomic_load_n(&area->waiting[j], __ATOMIC_ACQUIRE);
        if (!since || now - (since & ~3ull) < settle_ns || ((since & 2) && !count_yielding)) return 0;
        any = 1;
    }
    if (!any) return 0;
    size_t used = 0;
    out[0] = 0;
    for (int j = 0; j < world && used + 8 < cap; j++) {
        if (!area->alive[j] || area->exited[j] || !area->waiting[j]) continue;
        used += (size_t)snprintf(out + used, cap - used, "%srank %d in %s", used ? ", " : "", j, area->what[j]);
    }
    return 1;
}
