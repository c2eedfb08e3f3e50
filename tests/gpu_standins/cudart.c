/* Stand-in for libcudart: launches busy-wait a known time; streams are opaque handles.
 * Signatures follow the CUDA Runtime API reference (cuda_runtime_api.h, driver_types.h). */
#include <stdint.h>
#include <stdlib.h>
#include "common.h"

typedef struct { uint32_t x, y, z; } dim3;
typedef struct CUstream_st { int id; } *cudaStream_t;
typedef struct {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    void *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;

static uint64_t launch_ns, sync_ns;
static int streams_made;
uint64_t standin_launches, standin_launch_total_ns, standin_sync_total_ns;

void standin_configure(int k, uint64_t launch, uint64_t sync) { (void)k; launch_ns = launch; sync_ns = sync; }

static int submit(void) {
    standin_launch_total_ns += standin_busy(launch_ns);
    standin_launches++;
    return 0;
}
static int create(cudaStream_t *out) {
    cudaStream_t s = calloc(1, sizeof(*s));
    if (s == NULL || out == NULL) return 2;
    s->id = ++streams_made;
    *out = s;
    return 0;
}

int cudaStreamCreate(cudaStream_t *s) { return create(s); }
int cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) { (void)flags; return create(s); }
int cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    (void)flags; (void)priority; return create(s);
}
int cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shm, cudaStream_t s) {
    (void)f; (void)grid; (void)block; (void)args; (void)shm; (void)s; return submit();
}
int cudaLaunchKernel_ptsz(const void *f, dim3 grid, dim3 block, void **args, size_t shm, cudaStream_t s) {
    (void)f; (void)grid; (void)block; (void)args; (void)shm; (void)s; return submit();
}
int cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *f, void **args) {
    (void)config; (void)f; (void)args; return submit();
}
int cudaStreamSynchronize(cudaStream_t s) { (void)s; standin_sync_total_ns += standin_busy(sync_ns); return 0; }
int cudaDeviceSynchronize(void) { standin_sync_total_ns += standin_busy(sync_ns); return 0; }
