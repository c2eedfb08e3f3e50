/* Stand-in for libamdhip64: streams are spread round-robin over at most K HSA queues; every
 * launch busy-waits a known time, then writes the queue's doorbell through the HSA stand-in
 * (a call across libraries, like the real runtime's direct dispatch). Signatures follow
 * hip_runtime_api.h / hip_ext.h. */
#include <stdint.h>
#include <stdlib.h>
#include "common.h"

typedef struct { uint64_t handle; } hsa_signal_t;
typedef struct { uint64_t handle; } hsa_agent_t;
typedef struct hsa_queue_s {
    uint32_t type, features; void *base_address; hsa_signal_t doorbell_signal;
    uint32_t size, reserved1; uint64_t id;
} hsa_queue_t;
int hsa_queue_create(hsa_agent_t, uint32_t, uint32_t, void (*)(int, hsa_queue_t *, void *),
                     void *, uint32_t, uint32_t, hsa_queue_t **);
void hsa_signal_store_screlease(hsa_signal_t, int64_t);

typedef struct { uint32_t x, y, z; } dim3;
typedef struct ihipStream_t { hsa_queue_t *queue; int64_t index; } *hipStream_t;
typedef struct {
    dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes; hipStream_t stream; void *attrs;
    unsigned int numAttrs;
} hipLaunchConfig_t;

static hsa_queue_t *queues[64];
static int max_queues = 1, created, next_queue;
static struct ihipStream_t null_stream;
static uint64_t launch_ns, sync_ns;
uint64_t standin_launches, standin_launch_total_ns;

void standin_configure(int k, uint64_t launch, uint64_t sync) {
    max_queues = k < 1 ? 1 : (k > 64 ? 64 : k);
    launch_ns = launch;
    sync_ns = sync;
}

static hsa_queue_t *pick_queue(void) {
    int i = next_queue++ % max_queues;
    if (queues[i] == NULL) {
        hsa_agent_t agent = {1};
        hsa_queue_create(agent, 1024, 0, NULL, NULL, 0, 0, &queues[i]);
        created++;
    }
    return queues[i];
}

static int submit(hipStream_t stream) {
    uint64_t t0 = standin_now_ns();
    standin_busy(launch_ns);
    if (stream == NULL) stream = &null_stream;
    if (stream->queue == NULL) stream->queue = pick_queue();
    stream->index++;
    hsa_signal_store_screlease(stream->queue->doorbell_signal, stream->index);
    __atomic_fetch_add(&standin_launches, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&standin_launch_total_ns, standin_now_ns() - t0, __ATOMIC_RELAXED);
    return 0;
}

static int create(hipStream_t *out) {
    hipStream_t s = calloc(1, sizeof(*s));
    if (s == NULL || out == NULL) return 2;
    s->queue = pick_queue();
    *out = s;
    return 0;
}

int hipStreamCreate(hipStream_t *stream) { return create(stream); }
int hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) { (void)flags; return create(stream); }
int hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags, int priority) {
    (void)flags; (void)priority; return create(stream);
}

int hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shm, hipStream_t stream) {
    (void)f; (void)grid; (void)block; (void)args; (void)shm; return submit(stream);
}
int hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block, void **args, size_t shm, hipStream_t stream) {
    (void)f; (void)grid; (void)block; (void)args; (void)shm; return submit(stream);
}
int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shm, hipStream_t stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)params;
    (void)extra; return submit(stream);
}
int hipExtModuleLaunchKernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                             uint32_t lz, size_t shm, hipStream_t stream, void **params, void **extra,
                             void *start_event, void *stop_event, uint32_t flags) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)lx; (void)ly; (void)lz; (void)shm; (void)params;
    (void)extra; (void)start_event; (void)stop_event; (void)flags; return submit(stream);
}
int hipLaunchKernelExC(const hipLaunchConfig_t *config, const void *f, void **args) {
    (void)f; (void)args; return submit(config->stream);
}
int hipStreamSynchronize(hipStream_t stream) { (void)stream; standin_busy(sync_ns); return 0; }
int hipDeviceSynchronize(void) { standin_busy(sync_ns); return 0; }
