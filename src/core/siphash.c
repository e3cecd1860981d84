/* siphash.c - the per-process SipHash key; the hash itself is inline in siphash.h. */
#include "siphash.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static siphash_key g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Draws the key from the kernel. getrandom() only fails before the pool is initialised on very
 * early boot or with a seccomp filter; the fallback mixes what varies per process and start so
 * that the key is at least not the same for every process. */
static void draw_key(void)
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got < sizeof(raw)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
        uint64_t b = (uint64_t)(uintptr_t)&got ^ ((uint64_t)getppid() << 32);
        memcpy(raw, &a, 8);
        memcpy(raw + 8, &b, 8);
    }
    memcpy(&g_key.k0, raw, 8);
    memcpy(&g_key.k1, raw + 8, 8);
}

const siphash_key *siphash_process_key(void)
{
    pthread_once(&g_once, draw_key);
    return &g_key;
}
