/* Minimal stand-in for the CUDA toolkit's crt/host_defines.h, which the NVIDIA runtime wheel does not ship.
 * The driver is plain host C compiled by gcc/clang, so the execution-space qualifiers expand to nothing and the
 * alignment helpers to GCC attributes. Used only when no toolkit copy of the header is found. */
#ifndef STEPCAST_COMPAT_HOST_DEFINES_H
#define STEPCAST_COMPAT_HOST_DEFINES_H
#define __no_return__ __attribute__((noreturn))
#define __noinline__ __attribute__((noinline))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __inline_hint__
#define __align__(n) __attribute__((aligned(n)))
#define __thread__ __thread
#define __import__
#define __export__
#define __cdecl
#define __annotate__(a) __attribute__((a))
#define __location__(a) __annotate__(a)
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define __specialization_static
#define __host__
#define __device__
#define __global__
#define __shared__
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__
#define __nv_pure__
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __cudart_builtin__
#define __builtin_align__(a) __align__(a)
#define CUDA_CB
#define CUDART_CB
#endif
