/* A stand-in NVML (libnvidia-ml.so.1, built next to the shim and found through LD_LIBRARY_PATH): torch's caching
 * allocator opens NVML for expandable segments and calls through its pointers without checking that the library
 * loaded, so with no NVML at all (any machine without an NVIDIA driver) it calls a null pointer. These are the
 * seven functions libc10_cuda.so names; what they would add (per-process memory in out-of-memory messages, NVLink
 * and fabric topology) is answered "none" or "not supported". NVML's own header is not in the wheels: the types
 * are reduced to what the calls pass (opaque handles, ints). */
#define SC_EXPORT __attribute__((visibility("default")))

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3 };
typedef void *nvmlDevice_t;
static char device_handle;

SC_EXPORT int nvmlInit_v2(void) { return NVML_SUCCESS; }
SC_EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = 13000;
    return NVML_SUCCESS;
}
SC_EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    if (!bus_id || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &device_handle;
    return NVML_SUCCESS;
}
SC_EXPORT int nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count, void *infos) {
    (void)device; (void)infos;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}
SC_EXPORT int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info) {
    (void)device; (void)info;
    return NVML_ERROR_NOT_SUPPORTED;
}
SC_EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, int *type) {
    (void)device; (void)link; (void)type;
    return NVML_ERROR_NOT_SUPPORTED;
}
SC_EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, void *pci) {
    (void)device; (void)link; (void)pci;
    return NVML_ERROR_NOT_SUPPORTED;
}
