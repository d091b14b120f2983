/* Host work counted per thread, for the counted host model (emulate/sim/host.py): between two logged calls, how
 * many aten ops the thread entered and autograd nodes it evaluated (told by the RecordFunction hook, opctx.cpp,
 * through stepcast_host_work) and how many Python functions it called (a profile function installed on the thread:
 * Python and builtin calls). A clock reading of the same work changes with whatever else runs on the machine; these
 * counts do not. The capture layer's own work (between stepcast_pause and stepcast_resume, fk_work_pause) is not
 * counted. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static __thread uint32_t work_ops, work_nodes, work_py;
static __thread int work_paused, python_installed;

FK_EXPORT void stepcast_host_work(int node) {
    if (node) work_nodes++;
    else work_ops++;
}

void fk_work_pause(int paused) { work_paused = paused; }

void fk_take_work(uint32_t *ops, uint32_t *nodes, uint32_t *py) {
    *ops = work_ops, *nodes = work_nodes, *py = work_py;
    work_ops = work_nodes = work_py = 0;
}

/* Py_tracefunc (Python's C API, declared here without its headers): PyTrace_CALL 0, PyTrace_C_CALL 4. */
static int count_python(void *obj, void *frame, int what, void *arg) {
    (void)obj, (void)frame, (void)arg;
    if ((what == 0 || what == 4) && !work_paused) work_py++;
    return 0;
}

/* Counting Python calls slows the interpreter a little: only when the counted host model will read the counts. */
static int python_wanted(void) {
    static int wanted = -1;
    if (wanted < 0) {
        const char *model = getenv("STEPCAST_HOST_MODEL");
        wanted = !(model && strcmp(model, "measured") == 0);
    }
    return wanted;
}

/* Install the Python-call counter on the calling thread, once (the capture layer calls it on the main thread, the
 * RecordFunction hook on every thread that runs ops: autograd's device threads keep one Python thread state for
 * their lifetime, so the profile function set here stays). It replaces a profile function the script set itself
 * on that thread (sys.setprofile, cProfile). A no-op outside a Python process. */
FK_EXPORT void stepcast_count_python(void) {
    if (python_installed) return;
    python_installed = 1;
    if (!python_wanted()) return;
    int (*initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    void (*set_profile)(int (*)(void *, void *, int, void *), void *) =
        (void (*)(int (*)(void *, void *, int, void *), void *))dlsym(RTLD_DEFAULT, "PyEval_SetProfile");
    if (!initialized || !ensure || !release || !set_profile || !initialized()) return;
    int state = ensure();
    set_profile(count_python, NULL);
    release(state);
}
