/* Shifts a process's wall clock (CLOCK_REALTIME and what derives from it) by an offset that
 * another process can change at any moment, as an NTP step or an operator's `date -s` moves a
 * machine's clock; CLOCK_MONOTONIC and CLOCK_BOOTTIME are left alone, as they are by a real
 * clock step. Loaded with LD_PRELOAD; the offset is a signed 64-bit count of nanoseconds at
 * the start of the file named by CHAOS_CLOCK_OFFSET_FILE, mapped shared so that a write to
 * the file takes effect at the next reading of the clock. See e2e/chaos/clocks.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const int64_t no_offset = 0;
static const volatile int64_t *offset_ns = &no_offset;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void load(void) {
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    const char *path = getenv("CHAOS_CLOCK_OFFSET_FILE");
    if (path == NULL) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *mapped = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) offset_ns = (const volatile int64_t *)mapped;
}

static int shifted(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int rc = real_clock_gettime(clock, ts);
    if (rc != 0 || !shifted(clock)) return rc;
    int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ns;
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    if (ts->tv_nsec < 0) {
        ts->tv_sec -= 1;
        ts->tv_nsec += 1000000000;
    }
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    if (tv == NULL) return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
