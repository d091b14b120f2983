/* Launches and occupancy. Nothing executes: each launch appends one JSON line to the per-process log
 * ($STEPCAST_DRIVER_LOG.<pid>.jsonl) with the kernel's real name, grid, block, dynamic shared memory, cluster
 * shape and stream. Occupancy answers follow the device's limits (threads, blocks, registers, shared memory per
 * SM); cluster occupancy models the SMs as split over GPCs by SM pairs (TPCs). */
#include "fakecuda.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int log_fd = -1;
static pid_t log_pid;

static int log_file(void) {
    pid_t pid = getpid();
    if (log_fd >= 0 && log_pid == pid) return log_fd;
    const char *prefix = getenv("STEPCAST_DRIVER_LOG");
    if (!prefix || !*prefix) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.jsonl", prefix, (int)pid);
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    log_pid = pid;
    return log_fd;
}

void fk_log_line(const char *fmt, ...) {
    char line[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    pthread_mutex_lock(&fk_lock);
    int fd = log_file();
    if (fd >= 0 && write(fd, line, (size_t)n) < 0) { /* the log is best effort; the program goes on */ }
    pthread_mutex_unlock(&fk_lock);
}

void fk_log_unsupported(const char *name) {
    fk_log_line("{\"event\":\"unsupported\",\"name\":\"%s\"}", name);
    if (getenv("STEPCAST_DRIVER_DEBUG")) fprintf(stderr, "stepcast driver: %s is not emulated\n", name);
}

static void json_string(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; s && *s && o + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

void fk_log_launch(const fk_launch_rec_t *r, unsigned long long stream, const char *via, unsigned long long graph_launch,
                   size_t node) {
    CUdevice device = 0;
    cuCtxGetDevice(&device);
    char graph[64] = "";
    if (graph_launch) snprintf(graph, sizeof graph, ",\"graph\":%llu,\"node\":%zu", graph_launch, node);
    fk_count_device_work();
    char what[6200];
    snprintf(what, sizeof what, "%s|%u,%u,%u|%u,%u,%u|%u|%u,%u,%u|%llu", r->name, r->grid[0], r->grid[1], r->grid[2],
             r->block[0], r->block[1], r->block[2], r->smem, r->cluster[0], r->cluster[1], r->cluster[2], stream);
    fk_hash_next_record(what);
    fk_log_call("launch", "\"name\":\"%s\",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,"
                "\"cluster\":[%u,%u,%u],\"stream\":%llu,\"device\":%d,\"via\":\"%s\"%s",
                r->name, r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1], r->block[2], r->smem,
                r->cluster[0], r->cluster[1], r->cluster[2], stream, (int)device, via, graph);
}

CUresult fk_launch_record(fk_launch_rec_t *rec, const fk_function_t *f, const unsigned grid[3], const unsigned block[3],
                          unsigned smem, const unsigned cluster[3], const char *via) {
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (!grid[0] || !grid[1] || !grid[2] || !threads || threads > (unsigned)fk_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK))
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)smem > f->max_dynamic_smem && smem > 48 * 1024) return CUDA_ERROR_INVALID_VALUE;
    json_string(rec->name, sizeof rec->name, f->name);
    memcpy(rec->grid, grid, sizeof rec->grid);
    memcpy(rec->block, block, sizeof rec->block);
    memcpy(rec->cluster, cluster, sizeof rec->cluster);
    rec->smem = smem;
    rec->via = via;
    fk_kernel_bytes(&rec->read, &rec->written);
    return CUDA_SUCCESS;
}

/* a launch on a capturing stream becomes a node of the graph (logged at each replay), else it is logged now */
CUresult fk_launch(fk_function_t *f, const unsigned grid[3], const unsigned block[3], unsigned smem, CUstream stream,
                   const unsigned cluster[3], const char *via) {
    static __thread fk_launch_rec_t rec;
    CUresult rc = fk_launch_record(&rec, f, grid, block, smem, cluster, via);
    if (rc != CUDA_SUCCESS) return rc;
    fk_note_kernel_write();  /* the data path: this op's outputs are a kernel's, not bytes it knows */
    fk_graph_t *g = fk_stream_capture(stream);
    if (g) return fk_graph_add_launch(g, &rec, fk_stream_id(stream)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    fk_log_launch(&rec, fk_stream_id(stream), via, 0, 0);
    return CUDA_SUCCESS;
}

FK_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                          unsigned int by, unsigned int bz, unsigned int smem, CUstream s,
                                          void **kernelParams, void **extra) {
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, cluster[3] = {1, 1, 1};
    return fk_launch(fk_function_of(f), grid, block, smem, s, cluster, "cuLaunchKernel");
}
FK_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                               CUstream s, void **kernelParams, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, kernelParams, extra);
}
static void cluster_of(const CUlaunchConfig *config, unsigned cluster[3]) {
    cluster[0] = cluster[1] = cluster[2] = 1;
    for (unsigned i = 0; config && i < config->numAttrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            cluster[0] = config->attrs[i].value.clusterDim.x ? config->attrs[i].value.clusterDim.x : 1;
            cluster[1] = config->attrs[i].value.clusterDim.y ? config->attrs[i].value.clusterDim.y : 1;
            cluster[2] = config->attrs[i].value.clusterDim.z ? config->attrs[i].value.clusterDim.z : 1;
        }
}
FK_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    unsigned cluster[3];
    cluster_of(config, cluster);
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    if (grid[0] % cluster[0] || grid[1] % cluster[1] || grid[2] % cluster[2]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    return fk_launch(fk_function_of(f), grid, block, config->sharedMemBytes, config->hStream, cluster, "cuLaunchKernelEx");
}
FK_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    return cuLaunchKernelEx(config, f, kernelParams, extra);
}
FK_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                     unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                                     CUstream s, void **kernelParams) {
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, cluster[3] = {1, 1, 1};
    return fk_launch(fk_function_of(f), grid, block, smem, s, cluster, "cuLaunchCooperativeKernel");
}
FK_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
    fn(userData);  /* the stream's earlier work is done at once, so the host function may run now */
    return CUDA_SUCCESS;
}

/* ---- occupancy ---- */
int fk_blocks_per_sm(const fk_function_t *f, int threads, size_t dynamic_smem) {
    if (threads <= 0) return 0;
    int warps = (threads + 31) / 32;
    int by_warps = fk_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) / 32 / warps;
    int regs_per_warp = ((fk_function_regs(f) * 32 + 255) / 256) * 256;
    int by_regs = regs_per_warp ? fk_attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR) / regs_per_warp / warps : by_warps;
    size_t per_block = dynamic_smem + (size_t)fk_function_static_smem(f);
    if (per_block > (size_t)fk_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)) return 0;
    per_block += (size_t)fk_attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);  /* 0 before sm_80 */
    int n = fk_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    int by_smem = per_block ? (int)((size_t)fk_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) / per_block) : n;
    if (by_warps < n) n = by_warps;
    if (by_regs < n) n = by_regs;
    if (by_smem < n) n = by_smem;
    return n;
}
FK_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
                                                                               size_t dynamicSMemSize, unsigned int flags) {
    fk_function_t *f = fk_function_of(func);
    if (!f || !numBlocks) return CUDA_ERROR_INVALID_VALUE;
    *numBlocks = fk_blocks_per_sm(f, blockSize, dynamicSMemSize);
    if (getenv("STEPCAST_DRIVER_DEBUG"))
        fk_log_line("{\"event\":\"occupancy\",\"name\":\"%.80s\",\"threads\":%d,\"smem\":%zu,\"blocks\":%d}", f->name,
                    blockSize, dynamicSMemSize, *numBlocks);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                                       size_t dynamicSMemSize) {
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}
FK_EXPORT CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                                   int blockSize) {
    fk_function_t *f = fk_function_of(func);
    if (!f || !dynamicSmemSize || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (fk_blocks_per_sm(f, blockSize, 0) < numBlocks) { *dynamicSmemSize = 0; return CUDA_SUCCESS; }
    long per_block = fk_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) / numBlocks -
                     fk_attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK) - fk_function_static_smem(f);
    long cap = fk_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) - fk_function_static_smem(f);
    if (per_block > cap) per_block = cap;
    *dynamicSmemSize = per_block > 0 ? (size_t)per_block : 0;
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                                     CUoccupancyB2DSize smemOf, size_t dynamicSMemSize,
                                                                     int blockSizeLimit, unsigned int flags) {
    fk_function_t *f = fk_function_of(func);
    if (!f || !minGridSize || !blockSize) return CUDA_ERROR_INVALID_VALUE;
    int limit = fk_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    if (blockSizeLimit > 0 && blockSizeLimit < limit) limit = blockSizeLimit;
    int best = 0, best_threads = 32, best_blocks = 0;
    for (int t = (limit / 32) * 32; t >= 32; t -= 32) {
        int blocks = fk_blocks_per_sm(f, t, smemOf ? smemOf(t) : dynamicSMemSize);
        if (blocks * t > best) { best = blocks * t; best_threads = t; best_blocks = blocks; }
    }
    *blockSize = best_threads;
    *minGridSize = best_blocks * fk_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                            CUoccupancyB2DSize smemOf, size_t dynamicSMemSize, int blockSizeLimit) {
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, smemOf, dynamicSMemSize, blockSizeLimit, 0);
}

/* clusters that fit at once: SM pairs (TPCs) spread evenly over the GPCs; a cluster lives inside one GPC */
static int active_clusters(int cluster_blocks, int blocks_per_sm) {
    int sms = fk_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    const fk_device_t *d = fk_device(0);
    int gpcs = d && d->gpc_count > 0 ? d->gpc_count : 1;
    int tpcs = sms / 2, total = 0;
    for (int g = 0; g < gpcs; g++) {
        int gpc_sms = 2 * (tpcs / gpcs + (g < tpcs % gpcs ? 1 : 0));
        total += gpc_sms * blocks_per_sm / cluster_blocks;
    }
    return total;
}
FK_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config) {
    fk_function_t *f = fk_function_of(func);
    if (!f || !numClusters || !config) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    unsigned cluster[3];
    cluster_of(config, cluster);
    int size = (int)(cluster[0] * cluster[1] * cluster[2]);
    int per_sm = fk_blocks_per_sm(f, (int)(config->blockDimX * config->blockDimY * config->blockDimZ), config->sharedMemBytes);
    int count = per_sm > 0 ? active_clusters(size, per_sm) : 0;
    /* Past the portable 8, a kernel without the non-portable flag is refused. With the flag every size gets the GPC
     * arithmetic, past the launchable 16 too, and 0 where no GPC holds the cluster: libraries probe the GPC layout
     * with such sizes and the real driver must answer them, since the libraries run on real GPUs. cuBLAS 12.1's
     * cluster discovery asks 18, 16, ..., 4 blocks at one block per SM and fails to create a handle unless 18 gets
     * the count of 18-SM GPCs (a real H100 has 66 TPCs over 8 GPCs, so at least two of 9 TPCs); cuDNN 9's sm_100
     * engines ask 32 blocks and crash on a refusal (no B200 GPC holds 32 SMs, so the real answer is 0). */
    if (size > 8 && !f->non_portable_cluster) {
        if (getenv("STEPCAST_DRIVER_DEBUG"))
            fk_log_line("{\"event\":\"clusters_refused\",\"name\":\"%.80s\",\"size\":%d,\"non_portable\":%d}", f->name,
                        size, f->non_portable_cluster);
        *numClusters = 0;
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
    *numClusters = count;
    if (getenv("STEPCAST_DRIVER_DEBUG"))
        fk_log_line("{\"event\":\"clusters\",\"name\":\"%.80s\",\"size\":%d,\"smem\":%u,\"clusters\":%d}", f->name, size,
                    config->sharedMemBytes, *numClusters);
    return CUDA_SUCCESS;
}
FK_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config) {
    fk_function_t *f = fk_function_of(func);
    if (!f || !clusterSize || !config) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)) { *clusterSize = 0; return CUDA_SUCCESS; }
    int per_sm = fk_blocks_per_sm(f, (int)(config->blockDimX * config->blockDimY * config->blockDimZ), config->sharedMemBytes);
    *clusterSize = per_sm > 0 ? (f->non_portable_cluster ? 16 : 8) : 0;
    return CUDA_SUCCESS;
}

/* Tensor-memory-access descriptors (Hopper and later): a kernel reads its operands through them, and CUTLASS's
 * grouped GEMMs (torch._grouped_mm: MoE experts) encode theirs on the host before each launch. Kernels never run
 * here, so a descriptor only has to exist: it is zeroed, and the arguments the real driver checks are checked. */
FK_EXPORT CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                                  void *address, const cuuint64_t *dims, const cuuint64_t *strides,
                                                  const cuuint32_t *box, const cuuint32_t *element_strides,
                                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                  CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill) {
    (void)type; (void)address; (void)strides; (void)element_strides; (void)interleave; (void)swizzle; (void)l2;
    (void)fill;
    if (!map || !dims || !box || rank < 1 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, sizeof *map);
    return CUDA_SUCCESS;
}
