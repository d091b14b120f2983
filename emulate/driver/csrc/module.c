/* Libraries, modules, kernels and functions. Nothing is parsed or compiled: a library or module is a handle that
 * remembers the kernels asked of it by name, so each launch can be logged with the kernel's real name. */
#include "fakecuda.h"

#include <stdlib.h>
#include <string.h>

CUdeviceptr fk_device_alloc(size_t bytes);  /* memory.c */

typedef struct global { char *name; CUdeviceptr ptr; struct global *next; } global_t;
typedef struct {
    uint32_t magic;
    int is_module;
    fk_function_t *functions;
    global_t *globals;
} fk_library_t;
#define FK_LIBRARY_MAGIC 0x464b4c42u
/* a symbol's size is in the image, which is not parsed: each global gets this much never-backed space */
#define FK_GLOBAL_BYTES (1u << 20)

static fk_library_t *new_library(int is_module) {
    fk_library_t *l = calloc(1, sizeof *l);
    l->magic = FK_LIBRARY_MAGIC;
    l->is_module = is_module;
    return l;
}
static fk_library_t *as_library(const void *h) {
    fk_library_t *l = (fk_library_t *)h;
    return l && l->magic == FK_LIBRARY_MAGIC ? l : NULL;
}
void *fk_module_from_image(const void *image) { return new_library(1); }

fk_function_t *fk_function_of(const void *handle) {
    fk_function_t *f = (fk_function_t *)handle;
    return f && f->magic == FK_FUNCTION_MAGIC ? f : NULL;
}
int fk_function_static_smem(const fk_function_t *f) { return 0; }  /* in the image, not parsed */
int fk_function_regs(const fk_function_t *f) { return 32; }        /* in the image, not parsed */

static fk_function_t *function_named(fk_library_t *l, const char *name) {
    pthread_mutex_lock(&fk_lock);
    fk_function_t *f = l->functions;
    while (f && strcmp(f->name, name) != 0) f = f->next;
    if (!f) {
        f = calloc(1, sizeof *f);
        f->magic = FK_FUNCTION_MAGIC;
        f->name = strdup(name);
        f->library = l;
        f->max_dynamic_smem = 48 * 1024;
        f->carveout = -1;
        f->next = l->functions;
        l->functions = f;
    }
    pthread_mutex_unlock(&fk_lock);
    return f;
}
static CUdeviceptr global_named(fk_library_t *l, const char *name) {
    pthread_mutex_lock(&fk_lock);
    global_t *g = l->globals;
    while (g && strcmp(g->name, name) != 0) g = g->next;
    if (!g) {
        g = calloc(1, sizeof *g);
        g->name = strdup(name);
        g->ptr = fk_device_alloc(FK_GLOBAL_BYTES);
        g->next = l->globals;
        l->globals = g;
    }
    pthread_mutex_unlock(&fk_lock);
    return g->ptr;
}

FK_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                             void **jitOptionsValues, unsigned int numJitOptions,
                                             CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                             unsigned int numLibraryOptions) {
    if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
    *library = (CUlibrary)new_library(0);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                                 void **jitOptionsValues, unsigned int numJitOptions,
                                                 CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                                 unsigned int numLibraryOptions) {
    if (!library || !fileName) return CUDA_ERROR_INVALID_VALUE;
    *library = (CUlibrary)new_library(0);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library) { return as_library(library) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
FK_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    fk_library_t *l = as_library(library);
    if (!l || !pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
    *pKernel = (CUkernel)function_named(l, name);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuLibraryGetModule(CUmodule *pMod, CUlibrary library) {
    if (!as_library(library) || !pMod) return CUDA_ERROR_INVALID_VALUE;
    *pMod = (CUmodule)library;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name) {
    fk_library_t *l = as_library(library);
    if (!l || !name) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p = global_named(l, name);
    if (dptr) *dptr = p;
    if (bytes) *bytes = FK_GLOBAL_BYTES;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name) {
    return cuLibraryGetGlobal(dptr, bytes, library, name);
}
FK_EXPORT CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib) {
    fk_library_t *l = as_library(lib);
    if (!l || !count) return CUDA_ERROR_INVALID_VALUE;
    unsigned n = 0;
    for (fk_function_t *f = l->functions; f; f = f->next) n++;
    *count = n;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    if (!fk_function_of(kernel) || !pFunc) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)kernel;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel) {
    fk_function_t *f = fk_function_of(kernel);
    if (!f || !pLib) return CUDA_ERROR_INVALID_HANDLE;
    *pLib = (CUlibrary)f->library;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc) {
    fk_function_t *f = fk_function_of(hfunc);
    if (!f || !name) return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc) { return cuKernelGetName(name, (CUkernel)hfunc); }

/* ---- modules ---- */
FK_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    *module = (CUmodule)new_library(1);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                              CUjit_option *options, void **optionValues) {
    return cuModuleLoadData(module, image);
}
FK_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return cuModuleLoadData(module, fatCubin); }
FK_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname) { return cuModuleLoadData(module, fname); }
FK_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod) { return as_library(hmod) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
FK_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    fk_library_t *l = as_library(hmod);
    if (!l || !hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    *hfunc = (CUfunction)function_named(l, name);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
    return cuLibraryGetGlobal(dptr, bytes, (CUlibrary)hmod, name);
}
FK_EXPORT CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
    if (!mode) return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuFuncGetModule(CUmodule *hmod, CUfunction hfunc) {
    fk_function_t *f = fk_function_of(hfunc);
    if (!f || !hmod) return CUDA_ERROR_INVALID_HANDLE;
    *hmod = (CUmodule)f->library;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuFuncLoad(CUfunction function) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function) {
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

/* ---- attributes ---- */
FK_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    fk_function_t *f = fk_function_of(hfunc);
    if (!f || !pi) return CUDA_ERROR_INVALID_HANDLE;
    int cc = fk_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 + fk_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = fk_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK); break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = fk_function_static_smem(f); break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = fk_function_regs(f); break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = cc; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = f->non_portable_cluster; break;
    default: *pi = 0;
    }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    fk_function_t *f = fk_function_of(hfunc);
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0 || value > fk_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) - fk_function_static_smem(f))
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dynamic_smem = value;
    } else if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        f->carveout = value;
    } else if (attrib == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) {
        if (fk_attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH) == 0) return CUDA_ERROR_INVALID_VALUE;
        f->non_portable_cluster = value;
    }
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) { return CUDA_SUCCESS; }
FK_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
    return cuFuncGetAttribute(pi, attrib, (CUfunction)kernel);
}
FK_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
    return cuFuncSetAttribute((CUfunction)kernel, attrib, val);
}
FK_EXPORT CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) { return CUDA_SUCCESS; }
