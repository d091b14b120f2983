/* libnvidia-ml.so.1: the seven NVML functions torch's libc10_cuda names, so code that reaches for NVML (the
 * expandable-segments allocator, out-of-memory messages, peer-to-peer checks) finds a library (without one, torch
 * calls a null pointer). Built next to the emulated libcuda.so.1; the device is the same virtual one. */
#include <cuda.h>
#include <stdlib.h>

#define NVML_EXPORT __attribute__((visibility("default")))
typedef int nvmlReturn_t;  /* nvml.h is not shipped in the wheels: its documented values */
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6 };

static int device_handle;  /* one virtual device is addressed by the handle &device_handle */

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
NVML_EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = CUDA_VERSION;
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, void **device) {
    if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (!getenv("STEPCAST_DRIVER_ATTRS")) return NVML_ERROR_NOT_FOUND;
    *device = &device_handle;
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void *device, unsigned int *infoCount, void *infos) {
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;  /* no other process holds the virtual device */
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(void *device, void *info) { return NVML_ERROR_NOT_SUPPORTED; }
NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void *device, unsigned int link, int *type) {
    return NVML_ERROR_NOT_SUPPORTED;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned int link, void *pci) {
    return NVML_ERROR_NOT_SUPPORTED;
}
