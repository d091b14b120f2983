/* cuBLAS and cuBLASLt: handles and descriptors are small records; each GEMM is logged ('G' line) with its shape,
 * transposes, data types and compute type, and returns success without computing. */
#define _GNU_SOURCE
#include "shim.h"

#include "compat/fp_types.h"
#include <cublasLt.h>
#include <cublas_api.h>
#include <stdlib.h>
#include <string.h>

typedef struct { cudaStream_t stream; cublasMath_t math; cublasPointerMode_t pmode; } sc_blas;

SC_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)calloc(1, sizeof(sc_blas)); return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { free(h); return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { ((sc_blas *)h)->stream = s; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) { *s = ((sc_blas *)h)->stream; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { ((sc_blas *)h)->math = m; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *m) { *m = ((sc_blas *)h)->math; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t m) { ((sc_blas *)h)->pmode = m; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t *m) { *m = ((sc_blas *)h)->pmode; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *w, size_t n) { (void)h; (void)w; (void)n; return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t h, int n) { (void)h; (void)n; return CUBLAS_STATUS_SUCCESS; }

/* G: stream, lib, function, transa, transb, m, n, k, batch, A/B/C cudaDataType, cublasComputeType_t, math mode,
 * epilogue (cublasLt only, else 0). */
static void log_gemm(uint64_t t, cudaStream_t s, const char *lib, const char *fn, int ta, int tb, long m, long n,
                     long k, long batch, int at, int bt, int ct, int compute, int math, int epilogue) {
    sc_note_kernel_write();
    sc_emit(t, 'G', "%d\t%s\t%s\t%d\t%d\t%ld\t%ld\t%ld\t%ld\t%d\t%d\t%d\t%d\t%d\t%d", sc_stream_id(s), lib, fn, ta, tb,
            m, n, k, batch, at, bt, ct, compute, math, epilogue);
}

#define BLAS(h) ((sc_blas *)(h))
#define LEGACY(name, T, dtype, compute)                                                                          \
    SC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,    \
                                  int k, const T *alpha, const T *A, int lda, const T *B, int ldb, const T *beta, \
                                  T *C, int ldc) {                                                               \
        (void)alpha; (void)A; (void)lda; (void)B; (void)ldb; (void)beta; (void)C; (void)ldc;                     \
        log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", #name, ta, tb, m, n, k, 1, dtype, dtype, dtype, compute, \
                 BLAS(h)->math, 0);                                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                            \
    }
LEGACY(cublasSgemm_v2, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
LEGACY(cublasDgemm_v2, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)

#define LEGACY_STRIDED(name, T, dtype, compute)                                                                  \
    SC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,    \
                                  int k, const T *alpha, const T *A, int lda, long long sa, const T *B, int ldb,  \
                                  long long sb, const T *beta, T *C, int ldc, long long sc, int batch) {          \
        (void)alpha; (void)A; (void)lda; (void)sa; (void)B; (void)ldb; (void)sb; (void)beta; (void)C; (void)ldc;  \
        (void)sc;                                                                                                \
        log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", #name, ta, tb, m, n, k, batch, dtype, dtype, dtype,      \
                 compute, BLAS(h)->math, 0);                                                                     \
        return CUBLAS_STATUS_SUCCESS;                                                                            \
    }
LEGACY_STRIDED(cublasSgemmStridedBatched, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
LEGACY_STRIDED(cublasDgemmStridedBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)

#define LEGACY_BATCHED(name, T, dtype, compute)                                                                  \
    SC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,    \
                                  int k, const T *alpha, const T *const A[], int lda, const T *const B[], int ldb,\
                                  const T *beta, T *const C[], int ldc, int batch) {                             \
        (void)alpha; (void)A; (void)lda; (void)B; (void)ldb; (void)beta; (void)C; (void)ldc;                     \
        log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", #name, ta, tb, m, n, k, batch, dtype, dtype, dtype,      \
                 compute, BLAS(h)->math, 0);                                                                     \
        return CUBLAS_STATUS_SUCCESS;                                                                            \
    }
LEGACY_BATCHED(cublasSgemmBatched, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
LEGACY_BATCHED(cublasDgemmBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)

SC_EXPORT cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const float *alpha, const void *A, cudaDataType at, int lda,
                                       const void *B, cudaDataType bt, int ldb, const float *beta, void *C,
                                       cudaDataType ct, int ldc) {
    (void)alpha; (void)A; (void)lda; (void)B; (void)ldb; (void)beta; (void)C; (void)ldc;
    log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", "cublasSgemmEx", ta, tb, m, n, k, 1, at, bt, ct,
             CUBLAS_COMPUTE_32F, BLAS(h)->math, 0);
    return CUBLAS_STATUS_SUCCESS;
}

SC_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                      int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                      const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                      cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)alpha; (void)A; (void)lda; (void)B; (void)ldb; (void)beta; (void)C; (void)ldc; (void)algo;
    log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", "cublasGemmEx", ta, tb, m, n, k, 1, at, bt, ct, compute,
             BLAS(h)->math, 0);
    return CUBLAS_STATUS_SUCCESS;
}

SC_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                    int m, int n, int k, const void *alpha, const void *A,
                                                    cudaDataType at, int lda, long long sa, const void *B,
                                                    cudaDataType bt, int ldb, long long sb, const void *beta,
                                                    void *C, cudaDataType ct, int ldc, long long sc, int batch,
                                                    cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)alpha; (void)A; (void)lda; (void)sa; (void)B; (void)ldb; (void)sb; (void)beta; (void)C; (void)ldc;
    (void)sc; (void)algo;
    log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", "cublasGemmStridedBatchedEx", ta, tb, m, n, k, batch, at, bt,
             ct, compute, BLAS(h)->math, 0);
    return CUBLAS_STATUS_SUCCESS;
}

/* Matrix-vector products are logged as GEMMs with n = 1 (m = output length, k = reduction length). */
#define GEMV(name, T, dtype, compute)                                                                            \
    SC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t tr, int m, int n, const T *alpha,          \
                                  const T *A, int lda, const T *x, int incx, const T *beta, T *y, int incy) {     \
        (void)alpha; (void)A; (void)lda; (void)x; (void)incx; (void)beta; (void)y; (void)incy;                   \
        long out = tr == CUBLAS_OP_N ? m : n, red = tr == CUBLAS_OP_N ? n : m;                                   \
        log_gemm(sc_call_enter(), BLAS(h)->stream, "cublas", #name, tr, CUBLAS_OP_N, out, 1, red, 1, dtype, dtype,    \
                 dtype, compute, BLAS(h)->math, 0);                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                            \
    }
GEMV(cublasSgemv_v2, float, CUDA_R_32F, CUBLAS_COMPUTE_32F)
GEMV(cublasDgemv_v2, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)

/* ---------------- cuBLASLt ---------------- */
typedef struct { int compute, scale, ta, tb, epilogue; } sc_lt_desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld; int batch; } sc_lt_layout;

SC_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
SC_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                  cudaDataType_t scale) {
    sc_lt_desc *p = calloc(1, sizeof *p);
    p->compute = compute;
    p->scale = scale;
    *d = (cublasLtMatmulDesc_t)p;
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { free(d); return CUBLAS_STATUS_SUCCESS; }
static int read_int(const void *buf, size_t size) {
    if (size == 1) return *(const int8_t *)buf;
    if (size == 2) return *(const int16_t *)buf;
    if (size >= 4) return *(const int32_t *)buf;
    return 0;
}
SC_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                        const void *buf, size_t size) {
    sc_lt_desc *p = (sc_lt_desc *)d;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: p->ta = read_int(buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: p->tb = read_int(buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: p->epilogue = read_int(buf, size); break;
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: p->compute = read_int(buf, size); break;
    default: break;
    }
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                    uint64_t cols, int64_t ld) {
    sc_lt_layout *p = calloc(1, sizeof *p);
    *p = (sc_lt_layout){type, rows, cols, ld, 1};
    *l = (cublasLtMatrixLayout_t)p;
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { free(l); return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                          const void *buf, size_t size) {
    sc_lt_layout *p = (sc_lt_layout *)l;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: p->batch = read_int(buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_TYPE: p->type = read_int(buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: p->rows = *(const uint64_t *)buf; break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: p->cols = *(const uint64_t *)buf; break;
    default: break;
    }
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t)calloc(1, 16);
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
SC_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                              cublasLtMatmulPreferenceAttributes_t a, const void *b,
                                                              size_t s) {
    (void)p; (void)a; (void)b; (void)s;
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                        cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                        cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                        cublasLtMatmulPreference_t pref, int requested,
                                                        cublasLtMatmulHeuristicResult_t results[], int *returned) {
    (void)h; (void)d; (void)a; (void)b; (void)c; (void)dd; (void)pref;
    if (requested < 1) { *returned = 0; return CUBLAS_STATUS_INVALID_VALUE; }
    memset(&results[0], 0, sizeof results[0]);
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}
SC_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                                        const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                                        cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                                        cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                        const cublasLtMatmulAlgo_t *algo, void *ws, size_t wss, cudaStream_t s) {
    (void)h; (void)alpha; (void)A; (void)B; (void)beta; (void)C; (void)D; (void)algo; (void)ws; (void)wss;
    uint64_t t = sc_call_enter();
    const sc_lt_desc *p = (const sc_lt_desc *)desc;
    const sc_lt_layout *a = (const sc_lt_layout *)Ad, *b = (const sc_lt_layout *)Bd, *c = (const sc_lt_layout *)Cd,
                       *d = (const sc_lt_layout *)(Dd ? Dd : Cd);
    long k = p->ta == CUBLAS_OP_N ? (long)a->cols : (long)a->rows;
    log_gemm(t, s, "cublasLt", "cublasLtMatmul", p->ta, p->tb, (long)d->rows, (long)d->cols, k, d->batch, a->type,
             b->type, c->type, p->compute, 0, p->epilogue);
    return CUBLAS_STATUS_SUCCESS;
}
