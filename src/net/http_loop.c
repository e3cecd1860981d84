/*
 * http_loop.c - one thread, one libcurl multi handle, every submitted exchange; see http_loop.h.
 *
 * The thread loops: take what was submitted (a list under `mu`, the only lock), queue budgeted
 * exchanges behind the budget and start the others, start waiting exchanges while the budget
 * allows, run libcurl's timer when it is due, finish the completed ones (their callbacks may
 * submit more), then sleep in epoll_wait until a socket is ready, libcurl's timer is due, or a
 * submission wakes it (an eventfd), and hand each ready socket to libcurl
 * (curl_multi_socket_action), refilling the budget slots its answers free before the next one.
 * Everything but the submission list and the atomics of the stats is
 * touched by the loop's thread alone.
 *
 * Event-driven rather than curl_multi_perform + curl_multi_poll: libcurl 7.88's perform visits
 * every transfer and, not knowing which sockets are ready, polls each one (a poll(2) per transfer
 * per wake-up). In a perf profile of the App-mode ingest bench (four dispatches per webhook) the
 * loop's thread was 48 % of the relay's samples, 27 % of them in poll(2) inside perform. Told which
 * socket is ready, libcurl moves only that transfer; libcurl's socket and timer callbacks
 * (on_socket, on_timer) keep the epoll set and the one timer.
 *
 * A socket libcurl stops watching stays in the epoll set (l->watch records what it is registered
 * for, and whether libcurl watches it): libcurl stops watching a kept-alive connection after each
 * answer and watches it again for the next request on it, and an epoll_ctl each way was two to
 * three system calls per request (35,068 epoll_ctl for 17,552 requests in a `perf trace` of the
 * App-mode ingest; 11,663 of them a MOD that failed before its ADD). An event on a socket libcurl
 * does not watch (an idle connection the server closed) takes it out of the set then; libcurl
 * finds such a connection dead when it would reuse it. Every socket the loop's transfers open is
 * closed through on_close (CURLOPT_CLOSESOCKETFUNCTION, which libcurl keeps with the connection,
 * also for its cache's closes), which forgets it: the number may come back as another socket that
 * is not in the set. The wake-up eventfd is written only by the submission that finds the list
 * empty: the loop takes the whole list at once, so one wake-up serves the submissions after it.
 *
 * Easy handles are reused (LIFO, at most LOOP_IDLE_HANDLES kept): a handle holds no connection
 * of its own here (connections live in the multi handle's cache, CURLMOPT_MAXCONNECTS of them
 * when idle), only buffers worth keeping warm. libcurl's download buffer is LOOP_BUFFER_BYTES per
 * transfer instead of its 16 KiB: a thousand exchanges in flight would otherwise hold 16 MiB of
 * buffers for answers that are mostly empty (204) or a few hundred bytes.
 *
 * The thread asks the scheduler for a short time slice (LOOP_SLICE_NS; Linux 6.12+ EEVDF, a
 * SCHED_OTHER thread's sched_attr.sched_runtime, no privilege needed; older kernels ignore it, a
 * failure changes nothing). Its work per wake-up is tens of microseconds and every GitHub
 * request waits for it, but woken while the outbox workers, the HTTP threads and the store kept
 * both CPUs busy it waited for a running thread's default slice to end: 0.6-1.6 ms each time in a
 * `perf sched` trace of a warm fan-out to 100 repositories (2 CPUs, Linux 6.18), with the
 * requests submitted and not started meanwhile. A short slice makes a woken loop preempt at once.
 * Eight alternated series of ten warm fan-outs (bench/RESULTS.md, 2026-12-03 10:32): the second
 * round of requests reached the fake GitHub 57.3 ms after the webhook instead of 59.2 (medians of
 * 80), the last answer 113.4 ms instead of 114.4. The threads that work through queues are
 * SCHED_BATCH (thread_sched.c): woken, they wait for the loop; the loop, woken, still preempts
 * them.
 */
#include "http_loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "http_easy.h"
#include "thread_sched.h"

/* Idle easy handles kept for reuse. */
#define LOOP_IDLE_HANDLES 64
/* libcurl's receive buffer per transfer (CURLOPT_BUFFERSIZE, at least 1024). */
#define LOOP_BUFFER_BYTES 4096L
/* Longest sleep of the loop without any event (libcurl's own timers wake it earlier). */
#define LOOP_POLL_MS 1000
/* How often waiting exchanges are checked against their start_by_ms. */
#define LOOP_EXPIRY_MS 100
/* Ready sockets taken from epoll per wake-up (more wait for the next one). */
#define LOOP_EVENTS 64
/* The epoll tag of the wake-up eventfd (sockets are tagged with their descriptor, >= 0). */
#define LOOP_WAKE_TAG UINT64_MAX
/* The loop thread's time slice (see the header comment); Linux accepts 0.1 ms to 100 ms. */
#define LOOP_SLICE_NS 100000ULL
/* l->watch covers descriptors below this (the process's file limit is far lower); a socket past
 * it, or a table that cannot grow, is added to and removed from the set each time. */
#define LOOP_WATCH_MAX (1u << 20)
/* l->watch[fd]: registered for reading / writing, and libcurl watches it (0: not in the set). */
#define WATCH_IN 1u
#define WATCH_OUT 2u
#define WATCH_CURL 4u

typedef struct lx {
    http_call call; /* a copy; the strings it points at are the submitter's */
    http_answer *out;
    bool budgeted;
    http_loop_done_fn done;
    void *ud;
    CURL *h;
    http_easy_state st;
    crcr_err err;           /* the transfer's end (collect), for its callback */
    struct lx *next, *prev; /* submission or waiting list; in-flight list (doubly linked) */
} lx;

struct http_loop {
    pthread_t thread;
    CURLM *multi;
    CURLSH *share;
    int epfd;         /* the sockets libcurl asked to watch, and wakefd */
    int wakefd;       /* eventfd: a submission or a stop for the thread */
    int64_t timer_at; /* libcurl's timer, real monotonic ms; -1: none (the loop's thread only) */
    uint8_t *watch;   /* per descriptor: WATCH_* (the loop's thread, and libcurl's cleanup); grown
                       * by watch_of, freed by http_loop_free */
    size_t n_watch;

    pthread_mutex_t mu; /* the submission list and the flags below */
    lx *sub_head, *sub_tail;
    bool stopping, draining;
    http_loop_pressure_fn pressure;
    void *pressure_ud;

    atomic_long capacity;
    /* the loop's thread only */
    lx *wait_head, *wait_tail;
    long n_waiting, inflight_b, inflight;
    lx *flying; /* in flight, for the abort at the end */
    CURL *idle[LOOP_IDLE_HANDLES];
    size_t n_idle;

    /* read by any thread */
    atomic_long st_inflight_b, st_waiting, st_inflight, st_peak;
    atomic_uint_fast64_t st_started, st_completed, st_dropped;
};

static int on_close(void *clientp, curl_socket_t s);

/* ---------------------------------------------------------------- handles */

static CURL *handle_take(http_loop *l)
{
    if (l->n_idle)
        return l->idle[--l->n_idle];
    return curl_easy_init();
}

static void handle_give(http_loop *l, CURL *h)
{
    if (l->n_idle < LOOP_IDLE_HANDLES)
        l->idle[l->n_idle++] = h;
    else
        curl_easy_cleanup(h);
}

/* ---------------------------------------------------------------- finishing */

static void publish(http_loop *l)
{
    atomic_store(&l->st_inflight_b, l->inflight_b);
    atomic_store(&l->st_waiting, l->n_waiting);
    atomic_store(&l->st_inflight, l->inflight);
    if (l->inflight_b > atomic_load(&l->st_peak))
        atomic_store(&l->st_peak, l->inflight_b);
}

/* Calls the exchange's callback and frees it. */
static void finish(http_loop *l, lx *x, crcr_err err)
{
    http_loop_done_fn done = x->done;
    void *ud = x->ud;
    free(x);
    atomic_fetch_add(&l->st_completed, 1);
    done(ud, err);
}

/* Ends an exchange that never started (draining, or past its start_by_ms). */
static void finish_unsent(http_loop *l, lx *x, const char *why)
{
    x->out->status = 0;
    x->out->sent = false;
    x->out->permanent = false;
    snprintf(x->out->error, sizeof(x->out->error), "not sent: %s", why);
    finish(l, x, CRCR_E_STATE);
}

#define WHY_STOPPING "the relay is stopping"

/* Ends the waiting exchanges whose start_by_ms has passed. */
static void expire_waiting(http_loop *l)
{
    int64_t now = clock_now_ms();
    lx *prev = NULL;
    for (lx *x = l->wait_head; x;) {
        lx *next = x->next;
        if (x->call.start_by_ms > 0 && now >= x->call.start_by_ms) {
            if (prev)
                prev->next = next;
            else
                l->wait_head = next;
            if (l->wait_tail == x)
                l->wait_tail = prev;
            l->n_waiting--;
            finish_unsent(l, x, "its start deadline passed while it waited for the budget");
        } else {
            prev = x;
        }
        x = next;
    }
}

static void flying_add(http_loop *l, lx *x)
{
    x->prev = NULL;
    x->next = l->flying;
    if (l->flying)
        l->flying->prev = x;
    l->flying = x;
}

static void flying_remove(http_loop *l, lx *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        l->flying = x->next;
    if (x->next)
        x->next->prev = x->prev;
}

/* Starts one exchange on the multi handle, or finishes it at once when it cannot start. */
static void start(http_loop *l, lx *x)
{
    x->h = handle_take(l);
    if (!x->h) {
        x->out->status = 0;
        x->out->sent = false;
        snprintf(x->out->error, sizeof(x->out->error), "out of memory");
        finish(l, x, CRCR_E_NOMEM);
        return;
    }
    crcr_err err = http_easy_begin(x->h, l->share, &x->call, x->out, &x->st);
    if (!err && curl_easy_setopt(x->h, CURLOPT_BUFFERSIZE, LOOP_BUFFER_BYTES) == CURLE_OK &&
        curl_easy_setopt(x->h, CURLOPT_PRIVATE, x) == CURLE_OK &&
        curl_easy_setopt(x->h, CURLOPT_CLOSESOCKETFUNCTION, on_close) == CURLE_OK &&
        curl_easy_setopt(x->h, CURLOPT_CLOSESOCKETDATA, l) == CURLE_OK &&
        curl_multi_add_handle(l->multi, x->h) == CURLM_OK) {
        if (x->budgeted)
            l->inflight_b++;
        l->inflight++;
        flying_add(l, x);
        atomic_fetch_add(&l->st_started, 1);
        publish(l);
        return;
    }
    if (!err) { /* begun, but libcurl would not take it: end it as a failed transfer */
        err = http_easy_end(x->h, CURLE_OUT_OF_MEMORY, &x->st);
        x->out->sent = false;
    }
    handle_give(l, x->h);
    finish(l, x, err);
}

/* Starts waiting budgeted exchanges while the budget allows. */
static void pump(http_loop *l)
{
    long cap = atomic_load(&l->capacity);
    while (l->wait_head && l->inflight_b < cap) {
        lx *x = l->wait_head;
        l->wait_head = x->next;
        if (!l->wait_head)
            l->wait_tail = NULL;
        l->n_waiting--;
        start(l, x);
    }
    publish(l);
}

/* Takes the transfers libcurl reports done off the multi handle and frees their budget slots;
 * returns them chained on `next`, oldest first, for finish_all (after the freed slots are
 * refilled, so that a waiting request does not wait for the finished ones' callbacks). */
static lx *collect(http_loop *l)
{
    lx *head = NULL, **tail = &head;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(l->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *h = m->easy_handle;
        CURLcode rc = m->data.result; /* read before the handle is removed */
        lx *x = NULL;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(l->multi, h);
        if (!x) {
            curl_easy_cleanup(h);
            continue;
        }
        flying_remove(l, x);
        x->err = http_easy_end(h, rc, &x->st);
        handle_give(l, h);
        if (x->budgeted)
            l->inflight_b--;
        l->inflight--;
        x->next = NULL;
        *tail = x;
        tail = &x->next;
    }
    if (head)
        publish(l);
    return head;
}

/* Calls the callbacks of the exchanges collect() returned (they may submit more). */
static void finish_all(http_loop *l, lx *done)
{
    while (done) {
        lx *x = done;
        done = x->next;
        finish(l, x, x->err);
    }
}

/* ---------------------------------------------------------------- events */

/* Real monotonic milliseconds: libcurl's timeouts are real time, whatever a test does to the
 * relay's clock (clock.h). */
static int64_t real_ms(void)
{
    return clock_real_mono_us() / 1000;
}

/* l->watch's entry of `s`, grown to hold it when `grow` (NULL: past LOOP_WATCH_MAX, out of
 * memory, or not there and not grown). */
static uint8_t *watch_of(http_loop *l, curl_socket_t s, bool grow)
{
    if (s < 0 || (size_t)s >= LOOP_WATCH_MAX)
        return NULL;
    size_t i = (size_t)s;
    if (i >= l->n_watch) {
        if (!grow)
            return NULL;
        size_t n = l->n_watch ? l->n_watch : 64;
        while (n <= i)
            n *= 2;
        uint8_t *w = realloc(l->watch, n);
        if (!w)
            return NULL;
        memset(w + l->n_watch, 0, n - l->n_watch);
        l->watch = w;
        l->n_watch = n;
    }
    return &l->watch[i];
}

/* CURLMOPT_SOCKETFUNCTION: watch `s` for what libcurl waits on, or stop watching it (it stays in
 * the set when l->watch can say so; see the header comment). */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)socketp;
    http_loop *l = userp;
    uint8_t *w = watch_of(l, s, what != CURL_POLL_REMOVE);
    if (what == CURL_POLL_REMOVE) {
        if (w && *w)
            *w &= (uint8_t)~WATCH_CURL;
        else
            epoll_ctl(l->epfd, EPOLL_CTL_DEL, s, NULL); /* ENOENT/EBADF: gone already */
        return 0;
    }
    uint8_t want = (uint8_t)(((what & CURL_POLL_IN) ? WATCH_IN : 0) |
                             ((what & CURL_POLL_OUT) ? WATCH_OUT : 0));
    if (w && *w && (*w & (WATCH_IN | WATCH_OUT)) == want) {
        *w |= WATCH_CURL;
        return 0;
    }
    struct epoll_event ev = {.events = 0, .data.u64 = (uint64_t)s};
    if (want & WATCH_IN)
        ev.events |= EPOLLIN;
    if (want & WATCH_OUT)
        ev.events |= EPOLLOUT;
    int op = w && *w ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(l->epfd, op, s, &ev) != 0 &&
        (op == EPOLL_CTL_ADD ? errno != EEXIST || epoll_ctl(l->epfd, EPOLL_CTL_MOD, s, &ev) != 0
                             : errno != ENOENT || epoll_ctl(l->epfd, EPOLL_CTL_ADD, s, &ev) != 0)) {
        if (w)
            *w = 0;
        return -1; /* libcurl fails the transfer */
    }
    if (w)
        *w = (uint8_t)(want | WATCH_CURL);
    return 0;
}

/* CURLOPT_CLOSESOCKETFUNCTION: closes a socket of the loop's transfers, forgetting it first. */
static int on_close(void *clientp, curl_socket_t s)
{
    http_loop *l = clientp;
    uint8_t *w = watch_of(l, s, false);
    if (w)
        *w = 0;
    return close(s);
}

/* An event on socket `s`: false when libcurl does not watch it (it leaves the set then). */
static bool watched(http_loop *l, curl_socket_t s)
{
    uint8_t *w = watch_of(l, s, false);
    if (!w || (*w & WATCH_CURL))
        return true;
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, s, NULL);
    *w = 0;
    atomic_fetch_add(&l->st_dropped, 1);
    return false;
}

/* CURLMOPT_TIMERFUNCTION: libcurl's one timer, `ms` from now (-1: none). */
static int on_timer(CURLM *multi, long ms, void *userp)
{
    (void)multi;
    http_loop *l = userp;
    l->timer_at = ms < 0 ? -1 : real_ms() + ms;
    return 0;
}

/* Wakes the loop's thread (a submission, a stop). */
static void wake(http_loop *l)
{
    uint64_t one = 1;
    ssize_t n = write(l->wakefd, &one, sizeof(one)); /* EAGAIN: a wake-up is pending already */
    (void)n;
}

/* Runs libcurl's timer when it is due. */
static void run_timer(http_loop *l)
{
    if (l->timer_at >= 0 && real_ms() >= l->timer_at) {
        int running = 0;
        l->timer_at = -1;
        curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
}

/* Starts waiting exchanges in the slots finished ones freed, and sends them now (libcurl's
 * timer for a new transfer is due at once): an answer's slot goes to the next request before
 * the loop reads the other ready sockets or runs any callback. Returns the finished ones, still
 * to be finished (finish_all). */
static lx *refill(http_loop *l)
{
    lx *done = collect(l);
    if (done && l->wait_head) {
        pump(l);
        run_timer(l);
    }
    return done;
}

/* Sleeps until a socket is ready, libcurl's timer is due, a wake-up comes, or `cap_ms` passed
 * (0: only look), and hands the ready sockets to libcurl. */
static void wait_events(http_loop *l, int cap_ms)
{
    int ms = cap_ms;
    if (l->timer_at >= 0) {
        int64_t left = l->timer_at - real_ms();
        if (left < ms)
            ms = left < 0 ? 0 : (int)left;
    }
    struct epoll_event evs[LOOP_EVENTS];
    int n = epoll_wait(l->epfd, evs, LOOP_EVENTS, ms);
    lx *done = NULL, **tail = &done;
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == LOOP_WAKE_TAG) {
            uint64_t v;
            ssize_t r = read(l->wakefd, &v, sizeof(v));
            (void)r;
            continue;
        }
        if (!watched(l, (curl_socket_t)evs[i].data.u64))
            continue;
        int flags = 0;
        if (evs[i].events & EPOLLIN)
            flags |= CURL_CSELECT_IN;
        if (evs[i].events & EPOLLOUT)
            flags |= CURL_CSELECT_OUT;
        if (evs[i].events & (EPOLLERR | EPOLLHUP))
            flags |= CURL_CSELECT_ERR;
        int running = 0;
        curl_multi_socket_action(l->multi, (curl_socket_t)evs[i].data.u64, flags, &running);
        lx *d = refill(l);
        *tail = d;
        while (*tail)
            tail = &(*tail)->next;
    }
    finish_all(l, done);
}

/* ---------------------------------------------------------------- the thread */

static void *loop_main(void *arg)
{
    http_loop *l = arg;
    thread_sched_short_slice(LOOP_SLICE_NS); /* refused by older kernels: no matter */
    bool was_idle = true;
    int64_t next_expiry = 0;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        lx *sub = l->sub_head;
        l->sub_head = l->sub_tail = NULL;
        bool stopping = l->stopping, draining = l->draining;
        pthread_mutex_unlock(&l->mu);

        long waiting_before = l->n_waiting;
        while (sub) {
            lx *x = sub;
            sub = x->next;
            x->next = NULL;
            if (!x->budgeted) {
                start(l, x);
            } else if (draining) {
                finish_unsent(l, x, WHY_STOPPING);
            } else {
                if (l->wait_tail)
                    l->wait_tail->next = x;
                else
                    l->wait_head = x;
                l->wait_tail = x;
                l->n_waiting++;
            }
        }
        if (draining) {
            while (l->wait_head) {
                lx *x = l->wait_head;
                l->wait_head = x->next;
                l->n_waiting--;
                finish_unsent(l, x, WHY_STOPPING);
            }
            l->wait_tail = NULL;
        }
        if (stopping)
            break;
        if (l->wait_head && clock_mono_ms() >= next_expiry) {
            expire_waiting(l);
            next_expiry = clock_mono_ms() + LOOP_EXPIRY_MS;
        }
        pump(l);
        run_timer(l);
        finish_all(l, refill(l));
        pump(l);
        bool idle = l->inflight_b == 0 && l->n_waiting == 0;
        if (l->n_waiting > waiting_before || (idle && !was_idle)) {
            /* Under `mu`: once http_loop_set_pressure returns, the old callback is not running. */
            pthread_mutex_lock(&l->mu);
            if (l->pressure)
                l->pressure(l->pressure_ud);
            pthread_mutex_unlock(&l->mu);
        }
        was_idle = idle;

        pthread_mutex_lock(&l->mu);
        bool more = l->sub_head != NULL || l->stopping;
        pthread_mutex_unlock(&l->mu);
        /* With more submitted, only a look: the ready sockets are served either way. */
        wait_events(l, more ? 0 : l->wait_head ? LOOP_EXPIRY_MS : LOOP_POLL_MS);
    }
    /* Stopping: what waits was never sent; what is in flight is cut off. */
    while (l->wait_head) {
        lx *x = l->wait_head;
        l->wait_head = x->next;
        l->n_waiting--;
        finish_unsent(l, x, WHY_STOPPING);
    }
    l->wait_tail = NULL;
    while (l->flying) {
        lx *x = l->flying;
        flying_remove(l, x);
        curl_multi_remove_handle(l->multi, x->h);
        crcr_err err = http_easy_end(x->h, CURLE_ABORTED_BY_CALLBACK, &x->st);
        snprintf(x->out->error, sizeof(x->out->error), "%s",
                 "no answer: the relay stopped while the request was out");
        handle_give(l, x->h);
        if (x->budgeted)
            l->inflight_b--;
        l->inflight--;
        finish(l, x, err);
    }
    publish(l);
    return NULL;
}

/* ---------------------------------------------------------------- API */

/* Closes the loop's epoll set and eventfd (after the multi handle, whose cleanup may still
 * unwatch sockets). */
static void close_fds(http_loop *l)
{
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->wakefd >= 0)
        close(l->wakefd);
    l->epfd = l->wakefd = -1;
}

/* Owner: the caller, through http_loop_free. */
http_loop *http_loop_new(long capacity, long idle_conns, char *err, size_t errsz)
{
    http_loop *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    atomic_init(&l->capacity, capacity < 0 ? 0 : capacity);
    pthread_mutex_init(&l->mu, NULL);
    l->timer_at = -1;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event wev = {.events = EPOLLIN, .data.u64 = LOOP_WAKE_TAG};
    l->multi = curl_multi_init();
    l->share = curl_share_init();
    /* One thread uses the share: no lock functions needed. */
    bool ok =
        l->epfd >= 0 && l->wakefd >= 0 && epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &wev) == 0 &&
        l->multi && l->share &&
        curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_socket) == CURLM_OK &&
        curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l) == CURLM_OK &&
        curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_timer) == CURLM_OK &&
        curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l) == CURLM_OK &&
        curl_share_setopt(l->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) == CURLSHE_OK &&
        curl_share_setopt(l->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) == CURLSHE_OK &&
        curl_multi_setopt(l->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX) == CURLM_OK &&
        curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, idle_conns < 1 ? 1L : idle_conns) ==
            CURLM_OK;
    if (!ok) {
        snprintf(err, errsz, "cannot set up libcurl's multi handle");
        if (l->multi)
            curl_multi_cleanup(l->multi);
        if (l->share)
            curl_share_cleanup(l->share);
        close_fds(l);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        snprintf(err, errsz, "cannot start the HTTP loop thread");
        curl_multi_cleanup(l->multi);
        curl_share_cleanup(l->share);
        close_fds(l);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    return l;
}

crcr_err http_loop_submit(http_loop *l, const http_call *rq, http_answer *out, bool budgeted,
                          http_loop_done_fn done, void *ud)
{
    if (!l || !rq || !out || !done)
        return CRCR_E_INVALID;
    lx *x = calloc(1, sizeof(*x));
    if (!x) {
        out->status = 0;
        out->sent = false;
        snprintf(out->error, sizeof(out->error), "out of memory");
        return CRCR_E_NOMEM;
    }
    x->call = *rq;
    x->out = out;
    x->budgeted = budgeted;
    x->done = done;
    x->ud = ud;
    pthread_mutex_lock(&l->mu);
    bool first = l->sub_head == NULL; /* else its submitter woke the loop, which has not taken it */
    if (l->sub_tail)
        l->sub_tail->next = x;
    else
        l->sub_head = x;
    l->sub_tail = x;
    pthread_mutex_unlock(&l->mu);
    if (first && !pthread_equal(pthread_self(), l->thread))
        wake(l);
    return CRCR_OK;
}

void http_loop_set_capacity(http_loop *l, long capacity)
{
    if (!l)
        return;
    atomic_store(&l->capacity, capacity < 0 ? 0 : capacity);
    if (!pthread_equal(pthread_self(), l->thread))
        wake(l);
}

void http_loop_set_pressure(http_loop *l, http_loop_pressure_fn fn, void *ud)
{
    pthread_mutex_lock(&l->mu);
    l->pressure = fn;
    l->pressure_ud = ud;
    pthread_mutex_unlock(&l->mu);
}

void http_loop_get_stats(http_loop *l, http_loop_stats *out)
{
    out->capacity = atomic_load(&l->capacity);
    out->inflight_budgeted = atomic_load(&l->st_inflight_b);
    out->waiting = atomic_load(&l->st_waiting);
    out->inflight = atomic_load(&l->st_inflight);
    out->peak_budgeted = atomic_load(&l->st_peak);
    out->started = atomic_load(&l->st_started);
    out->completed = atomic_load(&l->st_completed);
    out->dropped = atomic_load(&l->st_dropped);
}

bool http_loop_on_thread(http_loop *l)
{
    return l && pthread_equal(pthread_self(), l->thread);
}

void http_loop_drain(http_loop *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->draining = true;
    pthread_mutex_unlock(&l->mu);
    wake(l);
}

void http_loop_free(http_loop *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_mutex_unlock(&l->mu);
    wake(l);
    pthread_join(l->thread, NULL);
    /* Submissions that raced with the stop: never sent. */
    while (l->sub_head) {
        lx *x = l->sub_head;
        l->sub_head = x->next;
        finish_unsent(l, x, WHY_STOPPING);
    }
    for (size_t i = 0; i < l->n_idle; i++)
        curl_easy_cleanup(l->idle[i]);
    curl_multi_cleanup(l->multi);
    curl_share_cleanup(l->share);
    close_fds(l);
    free(l->watch); /* after the multi handle's cleanup, whose closes reach on_close */
    pthread_mutex_destroy(&l->mu);
    free(l);
}
