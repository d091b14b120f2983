/* cuDNN: only what torch asks before it decides to use cuDNN. The emulator runs scripts with
 * torch.backends.cudnn.enabled = False (emulate/capture.py), so convolutions and normalisations take torch's native
 * CUDA kernels, which are captured as ordinary launches. Every other cudnn* entry point is answered generically. */
#include "shim.h"

#include <cudnn_graph.h>  /* cudnn.h would pull cuda_runtime.h (toolkit-only headers) */
#include <stdlib.h>

SC_EXPORT size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
SC_EXPORT size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }
SC_EXPORT size_t cudnnGetMaxDeviceVersion(void) { return 1200; }
SC_EXPORT const char *cudnnGetErrorString(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : "cuDNN is not emulated by stepcast"; }
SC_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *h) { *h = (cudnnHandle_t)calloc(1, 64); return CUDNN_STATUS_SUCCESS; }
SC_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { free(h); return CUDNN_STATUS_SUCCESS; }
