/* Initialisation, versions, errors and the two lookup entry points the CUDA runtime starts with:
 * cuGetProcAddress (answered from the table build.py generates out of cudaTypedefs.h, honouring the version the
 * caller asks for, since one name has several ABIs) and cuGetExportTable (export.c). */
#include "fakecuda.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; int version; void *fn; } fk_proc_t;
extern const fk_proc_t fk_proc_table[];  /* generated: sorted by name, then version */
extern const int fk_proc_count;

static int initialised;

FK_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
    if (fk_device_count() <= 0) return CUDA_ERROR_NO_DEVICE;
    initialised = 1;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;  /* the version of the headers this driver was built from */
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
    return fk_export_table(ppExportTable, pExportTableId);
}

static const char *error_name(CUresult error) {
    switch (error) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_INVALID_CLUSTER_SIZE: return "CUDA_ERROR_INVALID_CLUSTER_SIZE";
    default: return NULL;
    }
}
FK_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    const char *name = error_name(error);
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = name ? name : "CUDA_ERROR_UNKNOWN";
    return name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FK_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = error == CUDA_ERROR_NOT_SUPPORTED ? "operation not supported by the stepcast virtual driver"
                                              : error_name(error) ? error_name(error) : "unknown error";
    return CUDA_SUCCESS;
}

/* the newest ABI of `symbol` not newer than `version` */
FK_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    int lo = 0, hi = fk_proc_count;
    while (lo < hi) {  /* first entry with this name */
        int mid = (lo + hi) / 2;
        if (strcmp(fk_proc_table[mid].name, symbol) < 0) lo = mid + 1; else hi = mid;
    }
    const fk_proc_t *best = NULL;
    int known = 0;
    for (int i = lo; i < fk_proc_count && strcmp(fk_proc_table[i].name, symbol) == 0; i++) {
        known = 1;
        if (fk_proc_table[i].version <= version) best = &fk_proc_table[i];
    }
    *pfn = best ? best->fn : NULL;
    if (status) *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                               : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!best) fk_log_line("{\"event\":\"proc_missing\",\"name\":\"%.200s\",\"version\":%d}", symbol, version);
    else if (getenv("STEPCAST_DRIVER_DEBUG"))
        fk_log_line("{\"event\":\"proc\",\"name\":\"%.200s\",\"version\":%d}", symbol, version);
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
