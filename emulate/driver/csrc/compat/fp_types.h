/* cublas_api.h and nccl.h include cuda_fp16.h / cuda_bf16.h / cuda_fp8.h, which need toolkit-only headers
 * (nv/target). The emulated NCCL only passes such values through pointers, so opaque stand-ins are enough: define the
 * include guards and the type names. */
#ifndef STEPCAST_COMPAT_FP_TYPES_H
#define STEPCAST_COMPAT_FP_TYPES_H
#define __CUDA_FP16_H__
#define __CUDA_BF16_H__
#define __CUDA_FP8_H__
typedef struct { unsigned short x; } __half;
typedef struct { unsigned short x, y; } __half2;
typedef struct { unsigned short x; } __nv_bfloat16;
#endif
