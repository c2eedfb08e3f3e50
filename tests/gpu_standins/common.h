/* Shared by the stand-in GPU runtimes (tests only): a calibrated busy-wait and its own clock. */
#ifndef STANDIN_COMMON_H
#define STANDIN_COMMON_H
#include <stdint.h>
#include <time.h>

static inline uint64_t standin_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spin until `ns` have passed; returns the time really spent (the test's ground truth). */
static inline uint64_t standin_busy(uint64_t ns) {
    uint64_t t0 = standin_now_ns(), t;
    do { t = standin_now_ns(); } while (t - t0 < ns);
    return t - t0;
}
#endif
