/* Stand-in for libhsa-runtime64: hsa_queue_create hands out queues with distinct doorbell
 * signals; doorbell stores write the value. Signatures follow hsa.h (HSA runtime spec 1.x). */
#include <stdint.h>
#include <stddef.h>

typedef struct { uint64_t handle; } hsa_signal_t;
typedef struct { uint64_t handle; } hsa_agent_t;
typedef struct hsa_queue_s {
    uint32_t type;
    uint32_t features;
    void *base_address;
    hsa_signal_t doorbell_signal;
    uint32_t size;
    uint32_t reserved1;
    uint64_t id;
} hsa_queue_t;

#define MAX_QUEUES 64
static hsa_queue_t queues[MAX_QUEUES];
static volatile int64_t doorbells[MAX_QUEUES];
static int queue_count;
uint64_t standin_hsa_stores;

int hsa_queue_create(hsa_agent_t agent, uint32_t size, uint32_t type,
                     void (*callback)(int, hsa_queue_t *, void *), void *data,
                     uint32_t private_segment_size, uint32_t group_segment_size,
                     hsa_queue_t **queue) {
    (void)agent; (void)callback; (void)data; (void)private_segment_size; (void)group_segment_size;
    if (queue == NULL || queue_count >= MAX_QUEUES) return 0x1008;
    hsa_queue_t *q = &queues[queue_count];
    q->type = type;
    q->size = size;
    q->doorbell_signal.handle = (uint64_t)(uintptr_t)&doorbells[queue_count];
    q->id = 7000 + (uint64_t)queue_count;
    queue_count++;
    *queue = q;
    return 0;
}

void hsa_signal_store_screlease(hsa_signal_t signal, int64_t value) {
    __atomic_store_n((int64_t *)(uintptr_t)signal.handle, value, __ATOMIC_RELEASE);
    __atomic_fetch_add(&standin_hsa_stores, 1, __ATOMIC_RELAXED);
}

void hsa_signal_store_relaxed(hsa_signal_t signal, int64_t value) {
    __atomic_store_n((int64_t *)(uintptr_t)signal.handle, value, __ATOMIC_RELAXED);
    __atomic_fetch_add(&standin_hsa_stores, 1, __ATOMIC_RELAXED);
}
