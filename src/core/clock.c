/* clock.c - see clock.h. */
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The mapped offset of the test control, or NULL (always NULL without CRCR_TEST_HOOKS). Set
 * once before any thread starts, never unmapped (the mapping lives as long as the process). */
static const int64_t *g_offset;

static int64_t test_offset(void)
{
    if (!g_offset)
        return 0;
    /* The test writes 8 bytes with one store on the machines the suite runs on; reading until
     * two loads agree also covers a writer that copies them byte by byte. */
    int64_t a = __atomic_load_n(g_offset, __ATOMIC_ACQUIRE);
    for (;;) {
        int64_t b = __atomic_load_n(g_offset, __ATOMIC_ACQUIRE);
        if (a == b)
            return a;
        a = b;
    }
}

int64_t clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + test_offset();
}

int64_t clock_real_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + test_offset();
}

void clock_iso8601(int64_t ms, char *out, unsigned outsz)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(out, outsz, "invalid");
        return;
    }
    snprintf(out, outsz, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

bool clock_test_hooks_built(void)
{
#ifdef CRCR_TEST_HOOKS
    return true;
#else
    return false;
#endif
}

#ifdef CRCR_TEST_HOOKS
/* The in-process offset of unit tests (clock_test_set_offset_ms). */
static int64_t g_local_offset;

void clock_test_set_offset_ms(int64_t ms)
{
    __atomic_store_n(&g_local_offset, ms, __ATOMIC_RELEASE);
    g_offset = &g_local_offset;
}
#endif

bool clock_test_control_on(void)
{
    return g_offset != NULL;
}

int64_t clock_wait_ms(int64_t ms)
{
    if (g_offset && ms > CLOCK_TEST_SLICE_MS)
        return CLOCK_TEST_SLICE_MS;
    return ms;
}

void clock_sleep_until(int64_t deadline_ms)
{
    for (;;) {
        int64_t left = deadline_ms - clock_mono_ms();
        if (left <= 0)
            return;
        int64_t ms = clock_wait_ms(left);
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        (void)nanosleep(&ts, NULL); /* EINTR: the loop looks at the clock again */
    }
}

int clock_test_control_init(char *err, size_t errsz)
{
    const char *path = getenv("CRCR_TEST_CLOCK_FILE");
    if (!path || !*path)
        return 0;
#ifndef CRCR_TEST_HOOKS
    snprintf(err, errsz,
             "CRCR_TEST_CLOCK_FILE is set, but this crcr was built without test hooks "
             "(cmake -DCRCR_TEST_HOOKS=ON); unset it");
    return -1;
#else
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errsz, "CRCR_TEST_CLOCK_FILE: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)sizeof(int64_t)) {
        close(fd);
        snprintf(err, errsz, "CRCR_TEST_CLOCK_FILE: %s must hold an 8-byte offset", path);
        return -1;
    }
    void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    int saved = errno;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, errsz, "CRCR_TEST_CLOCK_FILE: cannot map %s: %s", path, strerror(saved));
        return -1;
    }
    g_offset = p;
    return 0;
#endif
}
