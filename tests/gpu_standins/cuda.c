/* Stand-in for libcuda (driver API): cuLaunchKernel busy-waits a known time. Signature follows
 * the CUDA Driver API reference (cuda.h). */
#include <stdint.h>
#include "common.h"

typedef struct CUstream_st *CUstream;
static uint64_t launch_ns;
uint64_t standin_launches, standin_launch_total_ns;

void standin_configure(int k, uint64_t launch, uint64_t sync) { (void)k; (void)sync; launch_ns = launch; }

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shm, CUstream stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)stream;
    (void)params; (void)extra;
    standin_launch_total_ns += standin_busy(launch_ns);
    standin_launches++;
    return 0;
}
