/* fakegh_fast.c - the fan-out sections' fake GitHub, fast enough for 1,000 requests in flight.
 *
 * Why it exists (issue 26, item 5): bench/fakegh_proc.py (Python, asyncio) spends ~0.5 ms of CPU
 * on each dispatch (its HTTP framing, the 30 KB body's json.loads, an RS256 check per App call):
 * 2,054 dispatches/s at 1,000 connections, so a burst of 1,000 took it >= 487 ms, and a burst of
 * 80 added 9-15 ms to each round of a fan-out (runs 2026-12-03 04:05 and 05:30): the fake, not
 * the relay, set the fan-out figures. This one answers from one epoll loop in C; its own floor is
 * still measured and printed by bench.py (`_fake_calibration`).
 *
 * It serves only what a fan-out sends, in the documented shapes (GitHub's REST API description,
 * as tests/support/fakegh.py does; the test suites check the relay's requests against
 * @octokit/openapi, the bench does not):
 *   GET  /repos/{o}/{r}/installation            App JWT (Bearer, 3 parts) -> 200 installation
 *   POST /app/installations/{id}/access_tokens  App JWT                   -> 201 token
 *   POST /repos/{o}/{r}/dispatches              the owner's token, a body naming event_type
 *                                                                         -> 204 (else 401/422)
 *   anything else                                                         -> 404
 * Installation ids are a hash of the owner (> 2^31 as the Python fake's); a token names its
 * installation, so a dispatch sent with another owner's token is refused (401).
 *
 * Every answer is sent `latency_ms` after its request arrived whole (a FIFO: the latency is the
 * same for all). Control: the same one-JSON-object-per-line protocol as fakegh_proc.py on
 * stdin/stdout (clear, wait, records, sample, stop), with times on CLOCK_MONOTONIC, the clock of
 * Python's time.monotonic(). Listens on 127.0.0.1 only.
 *
 *   fakegh_fast '{"latency_ms": 50, "backlog": 4096}'
 *
 * Limits: FAKE_HEAD_MAX bytes of request line and headers, FAKE_BODY_MAX of body, FAKE_CONNS_MAX
 * connections, FAKE_RECORDS_MAX recorded requests between two `clear`s (beyond it requests are
 * answered 503 and counted as dropped).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FAKE_HEAD_MAX (64 * 1024)
#define FAKE_BODY_MAX (8 * 1024 * 1024)
#define FAKE_CONNS_MAX 65536
#define FAKE_RECORDS_MAX 2000000
#define FAKE_PATH_MAX 512
#define FAKE_OUT_MAX 4096
#define FAKE_CMD_MAX (64 * 1024)
#define INSTALLATION_ID_BASE 3000000000LL

typedef struct record {
    char method[8];
    char *path; /* owned by the record list */
    int status;
    double arrival, answered; /* CLOCK_MONOTONIC seconds; answered < 0: not yet */
    int port;
} record;

typedef struct conn {
    int fd;
    uint32_t gen; /* bumped on close: a queued answer for an older connection is dropped */
    int port;
    char *in; /* owned: bytes read, not yet consumed */
    size_t in_len, in_cap;
    char out[FAKE_OUT_MAX];
    size_t out_len, out_off;
    bool waiting; /* an answer is queued for its time */
    bool close_after;
    long rec;       /* the record the queued answer completes */
    size_t consume; /* bytes of the request it answers */
} conn;

typedef struct due {
    int fd;
    uint32_t gen;
    double at;
} due;

static struct {
    double latency_s;
    int ep, lfd;
    conn *conns[FAKE_CONNS_MAX];
    due *q; /* a ring of FAKE_CONNS_MAX entries: at most one queued answer per connection */
    size_t q_head, q_len;
    record *recs;
    size_t n_recs, dropped;
    size_t dispatches, in_flight;
    double last_event;
    char *sample_path, *sample_auth, *sample_body; /* the last accepted dispatch (owned) */
    size_t sample_body_len;
    /* a pending "wait" command */
    bool waiting;
    size_t wait_n;
    double wait_deadline, wait_idle, idle_deadline;
    bool wait_phase2;
    char cmd[FAKE_CMD_MAX];
    size_t cmd_len;
    bool stop;
} g;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void reply_json(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(s);
    }
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        h = (h ^ c) * 1099511628211ULL;
    }
    return h;
}

static long long owner_installation(const char *owner, size_t n)
{
    return INSTALLATION_ID_BASE + 1 + (long long)(fnv1a(owner, n) % 1000000000ULL);
}

/* ---- HTTP ---- */

/* The value of header `name` in the header block [h, end), or NULL; its length in *vlen. */
static const char *header(const char *h, const char *end, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *p = memchr(h, '\n', (size_t)(end - h)); /* skip the request line */
    while (p && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            break;
        if ((size_t)(eol - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            const char *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' '))
                ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = eol;
    }
    return NULL;
}

static void iso8601(time_t t, char *out, size_t n)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Writes the status line, GitHub's rate-limit headers and `body` (JSON) into c->out. */
static void respond(conn *c, int status, const char *reason, const char *body)
{
    static unsigned long used;
    size_t blen = body ? strlen(body) : 0;
    unsigned long k = ++used;
    int n = snprintf(c->out, sizeof(c->out),
                     "HTTP/1.1 %d %s\r\nServer: GitHub.com\r\nx-ratelimit-limit: 5000\r\n"
                     "x-ratelimit-remaining: %lu\r\nx-ratelimit-reset: %lld\r\n"
                     "x-ratelimit-used: %lu\r\nx-ratelimit-resource: core\r\n"
                     "x-github-request-id: FAKE:%08lX\r\n",
                     status, reason, 5000 - k % 5000, (long long)time(NULL) + 3600, k % 5000, k);
    if (status != 204)
        n += snprintf(c->out + n, sizeof(c->out) - (size_t)n,
                      "Content-Type: application/json; charset=utf-8\r\nContent-Length: %zu\r\n",
                      blen);
    n += snprintf(c->out + n, sizeof(c->out) - (size_t)n, "%s\r\n%s",
                  c->close_after ? "Connection: close\r\n" : "", status == 204 ? "" : body);
    c->out_len = (size_t)n < sizeof(c->out) ? (size_t)n : sizeof(c->out) - 1;
    c->out_off = 0;
}

static const char NOT_FOUND[] =
    "{\"message\":\"Not Found\",\"documentation_url\":\"https://docs.github.com/rest\"}";
static const char PERMISSIONS[] = "{\"actions\":\"write\",\"checks\":\"write\",\"contents\":"
                                  "\"write\",\"issues\":\"write\",\"metadata\":\"read\","
                                  "\"pull_requests\":\"write\"}";

static bool app_jwt(const char *auth, size_t n)
{
    if (!auth || n < 8 || strncasecmp(auth, "Bearer ", 7) != 0)
        return false;
    int dots = 0;
    for (size_t i = 7; i < n; i++)
        dots += auth[i] == '.';
    return dots == 2;
}

/* Routes one whole request; returns the status it answers. */
static int route(conn *c, const char *method, const char *path, const char *auth, size_t alen,
                 const char *body, size_t blen)
{
    char out[2048];
    const char *o = NULL, *r = NULL, *rest = NULL;
    if (strncmp(path, "/repos/", 7) == 0) {
        o = path + 7;
        const char *s1 = strchr(o, '/');
        if (s1) {
            r = s1 + 1;
            rest = strchr(r, '/');
        }
    }
    if (rest && strcmp(method, "GET") == 0 && strcmp(rest, "/installation") == 0) {
        if (!app_jwt(auth, alen)) {
            respond(c, 401, "Unauthorized",
                    "{\"message\":\"A JSON web token could not be decoded\"}");
            return 401;
        }
        size_t ol = (size_t)(r - 1 - o);
        long long iid = owner_installation(o, ol);
        snprintf(out, sizeof(out),
                 "{\"id\":%lld,\"account\":{\"login\":\"%.*s\",\"id\":%lld,\"type\":"
                 "\"Organization\",\"site_admin\":false},\"repository_selection\":\"selected\","
                 "\"access_tokens_url\":\"/app/installations/%lld/access_tokens\","
                 "\"repositories_url\":\"/installation/repositories\",\"html_url\":"
                 "\"https://github.com/organizations/%.*s/settings/installations/%lld\","
                 "\"app_id\":424242,\"app_slug\":\"crcr-test\",\"target_id\":%lld,\"target_type\":"
                 "\"Organization\",\"permissions\":%s,\"events\":[],\"created_at\":"
                 "\"2024-01-01T00:00:00Z\",\"updated_at\":\"2024-01-01T00:00:00Z\","
                 "\"single_file_name\":null,\"suspended_by\":null,\"suspended_at\":null}",
                 iid, (int)ol, o, iid - INSTALLATION_ID_BASE + 1000, iid, (int)ol, o, iid,
                 iid - INSTALLATION_ID_BASE + 1000, PERMISSIONS);
        respond(c, 200, "OK", out);
        return 200;
    }
    static const char inst[] = "/app/installations/";
    long long iid = 0;
    char *num_end = NULL;
    if (strncmp(path, inst, sizeof(inst) - 1) == 0)
        iid = strtoll(path + sizeof(inst) - 1, &num_end, 10);
    if (strcmp(method, "POST") == 0 && num_end && num_end > path + sizeof(inst) - 1 &&
        strcmp(num_end, "/access_tokens") == 0) {
        if (!app_jwt(auth, alen)) {
            respond(c, 401, "Unauthorized",
                    "{\"message\":\"A JSON web token could not be decoded\"}");
            return 401;
        }
        static unsigned long minted;
        char exp[32];
        iso8601(time(NULL) + 3600, exp, sizeof(exp));
        snprintf(out, sizeof(out),
                 "{\"token\":\"ghs_%010lld%026lu\",\"expires_at\":\"%s\",\"permissions\":%s,"
                 "\"repository_selection\":\"selected\"}",
                 iid - INSTALLATION_ID_BASE, ++minted, exp, PERMISSIONS);
        respond(c, 201, "Created", out);
        return 201;
    }
    if (rest && strcmp(method, "POST") == 0 && strcmp(rest, "/dispatches") == 0) {
        /* "token ghs_<installation - base, 10 digits>..." or "Bearer ghs_..." */
        const char *t = NULL;
        if (auth && alen > 6 && strncasecmp(auth, "token ", 6) == 0)
            t = auth + 6;
        else if (auth && alen > 7 && strncasecmp(auth, "Bearer ", 7) == 0)
            t = auth + 7;
        long long want = owner_installation(o, (size_t)(r - 1 - o)) - INSTALLATION_ID_BASE;
        char idtext[16];
        snprintf(idtext, sizeof(idtext), "%010lld", want);
        if (!t || (size_t)(auth + alen - t) < 4 + 10 || strncmp(t, "ghs_", 4) != 0 ||
            strncmp(t + 4, idtext, 10) != 0) {
            respond(c, 401, "Unauthorized", "{\"message\":\"Bad credentials\"}");
            return 401;
        }
        if (!body || blen < 2 || body[0] != '{' || !memmem(body, blen, "\"event_type\"", 12)) {
            respond(c, 422, "Unprocessable Entity",
                    "{\"message\":\"Invalid request.\\n\\n\\\"event_type\\\" wasn't supplied.\"}");
            return 422;
        }
        respond(c, 204, "No Content", NULL);
        free(g.sample_path);
        free(g.sample_auth);
        free(g.sample_body);
        g.sample_path = strdup(path);
        g.sample_auth = strndup(auth, alen);
        g.sample_body = malloc(blen ? blen : 1);
        if (g.sample_body)
            memcpy(g.sample_body, body, blen);
        g.sample_body_len = g.sample_body ? blen : 0;
        return 204;
    }
    respond(c, 404, "Not Found", NOT_FOUND);
    return 404;
}

static void conn_close(conn *c)
{
    if (c->waiting && g.in_flight)
        g.in_flight--;
    epoll_ctl(g.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    g.conns[c->fd] = NULL;
    free(c->in);
    free(c);
}

static void flush_out(conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.fd = c->fd};
            epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (w <= 0) {
            conn_close(c);
            return;
        }
        c->out_off += (size_t)w;
    }
}

static void parse(conn *c);

/* The queued answer of c is due: record it, send it, go on with the next request. */
static void answer(conn *c)
{
    double t = now_s();
    if (c->rec >= 0 && (size_t)c->rec < g.n_recs) {
        g.recs[c->rec].answered = t;
        if (g.recs[c->rec].status == 204)
            g.dispatches++;
    }
    g.last_event = t;
    c->waiting = false;
    g.in_flight--;
    memmove(c->in, c->in + c->consume, c->in_len - c->consume);
    c->in_len -= c->consume;
    bool close_after = c->close_after;
    int fd = c->fd;
    flush_out(c);
    if (g.conns[fd] != c)
        return;
    if (close_after && c->out_off >= c->out_len) {
        conn_close(c);
        return;
    }
    parse(c);
}

static void enqueue(conn *c, double at)
{
    size_t i = (g.q_head + g.q_len) % FAKE_CONNS_MAX;
    g.q[i] = (due){.fd = c->fd, .gen = c->gen, .at = at};
    g.q_len++;
}

/* Parses one whole request in c->in, if there is one, and queues its answer. */
static void parse(conn *c)
{
    if (c->waiting)
        return;
    char *end = c->in_len ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
    if (!end) {
        if (c->in_len > FAKE_HEAD_MAX)
            conn_close(c);
        return;
    }
    size_t head = (size_t)(end - c->in) + 4;
    size_t vl = 0;
    const char *v = header(c->in, end + 2, "content-length", &vl);
    size_t blen = 0;
    if (v) {
        char num[24];
        snprintf(num, sizeof(num), "%.*s", (int)(vl < 23 ? vl : 23), v);
        char *e = NULL;
        unsigned long long x = strtoull(num, &e, 10);
        if (e == num || x > FAKE_BODY_MAX) {
            conn_close(c);
            return;
        }
        blen = (size_t)x;
    }
    if (c->in_len < head + blen) {
        v = header(c->in, end + 2, "expect", &vl);
        if (v && vl == 12 && strncasecmp(v, "100-continue", 12) == 0 && c->in_len == head) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            if (send(c->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL) < 0) {
                conn_close(c);
                return;
            }
        }
        return;
    }
    double arrival = now_s();
    g.last_event = arrival;
    char method[8] = "", path[FAKE_PATH_MAX] = "";
    const char *sp1 = memchr(c->in, ' ', (size_t)(end - c->in));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 - c->in >= (long)sizeof(method) ||
        sp2 - sp1 - 1 >= (long)sizeof(path)) {
        conn_close(c);
        return;
    }
    memcpy(method, c->in, (size_t)(sp1 - c->in));
    memcpy(path, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    v = header(c->in, end + 2, "connection", &vl);
    c->close_after = v && vl == 5 && strncasecmp(v, "close", 5) == 0;
    size_t alen = 0;
    const char *auth = header(c->in, end + 2, "authorization", &alen);
    int status;
    c->rec = -1;
    if (g.n_recs >= FAKE_RECORDS_MAX) {
        g.dropped++;
        respond(c, 503, "Service Unavailable", "{\"message\":\"fake: too many records\"}");
        status = 503;
    } else {
        status = route(c, method, path, auth, alen, c->in + head, blen);
        record *r = &g.recs[g.n_recs];
        memcpy(r->method, method, sizeof(method));
        r->path = strdup(path);
        r->status = status;
        r->arrival = arrival;
        r->answered = -1;
        r->port = c->port;
        c->rec = (long)g.n_recs++;
    }
    c->consume = head + blen;
    c->waiting = true;
    g.in_flight++;
    if (g.latency_s <= 0)
        answer(c);
    else
        enqueue(c, arrival + g.latency_s);
}

static void on_readable(conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 16384) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 32768;
            if (cap > FAKE_HEAD_MAX + FAKE_BODY_MAX + 16384) {
                conn_close(c);
                return;
            }
            char *p = realloc(c->in, cap);
            if (!p) {
                conn_close(c);
                return;
            }
            c->in = p;
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        c->in_len += (size_t)n;
    }
    parse(c);
}

static void on_accept(void)
{
    for (;;) {
        struct sockaddr_in a;
        socklen_t al = sizeof(a);
        int fd = accept4(g.lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (fd >= FAKE_CONNS_MAX) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        static uint32_t gens;
        c->fd = fd;
        c->gen = ++gens;
        c->port = ntohs(a.sin_port);
        c->rec = -1;
        g.conns[fd] = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev);
    }
}

static void clear_records(void)
{
    for (size_t i = 0; i < g.n_recs; i++)
        free(g.recs[i].path);
    g.n_recs = 0;
    g.dispatches = 0;
    g.dropped = 0;
    /* a request still waiting for its answer completes no record now */
    for (int fd = 0; fd < FAKE_CONNS_MAX; fd++)
        if (g.conns[fd])
            g.conns[fd]->rec = -1;
}

static void b64(const char *in, size_t n, json_t *o, const char *key)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out)
        return;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[k++] = t[(v >> 18) & 63];
        out[k++] = t[(v >> 12) & 63];
        out[k++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[k] = '\0';
    json_object_set_new(o, key, json_string(out));
    free(out);
}

static void command(const char *line)
{
    json_error_t err;
    json_t *req = json_loads(line, 0, &err);
    const char *cmd = json_string_value(json_object_get(req, "cmd"));
    if (!cmd) {
        reply_json(json_pack("{s:s}", "error", "not a command"));
    } else if (strcmp(cmd, "clear") == 0) {
        clear_records();
        reply_json(json_pack("{s:b}", "ok", 1));
    } else if (strcmp(cmd, "wait") == 0) {
        double now = now_s();
        json_t *t = json_object_get(req, "timeout"), *i = json_object_get(req, "idle");
        g.waiting = true;
        g.wait_phase2 = false;
        g.wait_n = (size_t)json_integer_value(json_object_get(req, "n"));
        g.wait_deadline = now + (t ? json_number_value(t) : 60.0);
        g.wait_idle = i ? json_number_value(i) : 0.5;
    } else if (strcmp(cmd, "records") == 0) {
        json_t *a = json_array();
        for (size_t k = 0; k < g.n_recs; k++) {
            record *r = &g.recs[k];
            json_array_append_new(
                a, json_pack("[s,s,i,f,o,i]", r->method, r->path, r->status, r->arrival,
                             r->answered < 0 ? json_null() : json_real(r->answered), r->port));
        }
        reply_json(json_pack("{s:o,s:i}", "records", a, "dropped", (json_int_t)g.dropped));
    } else if (strcmp(cmd, "sample") == 0) {
        if (!g.sample_path) {
            reply_json(json_pack("{s:s}", "error", "no accepted dispatch"));
        } else {
            json_t *o = json_pack("{s:s,s:s}", "path", g.sample_path, "authorization",
                                  g.sample_auth ? g.sample_auth : "");
            b64(g.sample_body, g.sample_body_len, o, "body_b64");
            reply_json(o);
        }
    } else if (strcmp(cmd, "stop") == 0) {
        g.stop = true;
    } else {
        reply_json(json_pack("{s:s}", "error", "unknown command"));
    }
    json_decref(req);
}

static void on_stdin(void)
{
    for (;;) {
        ssize_t n = read(0, g.cmd + g.cmd_len, sizeof(g.cmd) - 1 - g.cmd_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            g.stop = true; /* stdin closed: the bench is gone */
            return;
        }
        g.cmd_len += (size_t)n;
        char *nl;
        while ((nl = memchr(g.cmd, '\n', g.cmd_len))) {
            *nl = '\0';
            if (nl > g.cmd)
                command(g.cmd);
            size_t used = (size_t)(nl - g.cmd) + 1;
            memmove(g.cmd, nl + 1, g.cmd_len - used);
            g.cmd_len -= used;
        }
        if (g.cmd_len >= sizeof(g.cmd) - 1)
            g.cmd_len = 0; /* a line longer than any command: dropped */
    }
}

/* The pending "wait": n dispatches accepted (or its timeout), then idle: nothing in flight and
 * no request for `idle` seconds (or 5 s past the timeout, as fakegh_proc.py). */
static void check_wait(double now)
{
    if (!g.waiting)
        return;
    if (!g.wait_phase2) {
        if (g.dispatches < g.wait_n && now < g.wait_deadline)
            return;
        g.wait_phase2 = true;
        double left = g.wait_deadline - now + 5;
        g.idle_deadline = now + (left > 1.0 ? left : 1.0);
    }
    bool idle = g.in_flight == 0 && now - g.last_event >= g.wait_idle;
    if (!idle && now < g.idle_deadline)
        return;
    g.waiting = false;
    reply_json(json_pack("{s:i,s:b}", "dispatches", (json_int_t)g.dispatches, "idle", idle));
}

int main(int argc, char **argv)
{
    json_error_t jerr;
    json_t *cfg = argc > 1 ? json_loads(argv[1], 0, &jerr) : json_object();
    if (!cfg) {
        fprintf(stderr, "fakegh_fast: the argument is not JSON: %s\n", jerr.text);
        return 2;
    }
    g.latency_s = (double)json_integer_value(json_object_get(cfg, "latency_ms")) / 1000.0;
    json_int_t backlog = json_integer_value(json_object_get(cfg, "backlog"));
    json_decref(cfg);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < FAKE_CONNS_MAX) {
        rl.rlim_cur = rl.rlim_max < FAKE_CONNS_MAX ? rl.rlim_max : FAKE_CONNS_MAX;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    g.q = calloc(FAKE_CONNS_MAX, sizeof(*g.q));
    g.recs = calloc(FAKE_RECORDS_MAX, sizeof(*g.recs));
    if (!g.q || !g.recs)
        return 1;
    g.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (g.lfd < 0 || bind(g.lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(g.lfd, backlog > 0 ? (int)backlog : 4096) != 0 ||
        getsockname(g.lfd, (struct sockaddr *)&a, &al) != 0) {
        perror("fakegh_fast: listen");
        return 1;
    }
    g.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = g.lfd};
    epoll_ctl(g.ep, EPOLL_CTL_ADD, g.lfd, &ev);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    ev = (struct epoll_event){.events = EPOLLIN, .data.fd = 0};
    epoll_ctl(g.ep, EPOLL_CTL_ADD, 0, &ev);
    char hello[96];
    snprintf(hello, sizeof(hello), "{\"url\":\"http://127.0.0.1:%d\",\"pid\":%d}",
             ntohs(a.sin_port), (int)getpid());
    puts(hello);
    fflush(stdout);
    g.last_event = now_s();
    struct epoll_event evs[256];
    while (!g.stop) {
        /* epoll_pwait2: the next answer is due to the microsecond, not to the millisecond */
        double now = now_s(), wait_s = -1;
        if (g.q_len)
            wait_s = g.q[g.q_head].at > now ? g.q[g.q_head].at - now : 0;
        if (g.waiting && (wait_s < 0 || wait_s > 0.01))
            wait_s = 0.01;
        struct timespec ts = {.tv_sec = (time_t)wait_s,
                              .tv_nsec = (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
        int n = epoll_pwait2(g.ep, evs, 256, wait_s < 0 ? NULL : &ts, NULL);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == g.lfd) {
                on_accept();
            } else if (fd == 0) {
                on_stdin();
            } else if (g.conns[fd]) {
                conn *c = g.conns[fd];
                if (evs[i].events & EPOLLOUT) {
                    flush_out(c);
                    if (g.conns[fd] != c)
                        continue;
                    if (c->out_off >= c->out_len) {
                        struct epoll_event e2 = {.events = EPOLLIN, .data.fd = fd};
                        epoll_ctl(g.ep, EPOLL_CTL_MOD, fd, &e2);
                    }
                }
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_readable(c);
            }
        }
        now = now_s();
        while (g.q_len && g.q[g.q_head].at <= now) {
            due d = g.q[g.q_head];
            g.q_head = (g.q_head + 1) % FAKE_CONNS_MAX;
            g.q_len--;
            conn *c = g.conns[d.fd];
            if (c && c->gen == d.gen && c->waiting)
                answer(c);
        }
        check_wait(now_s());
    }
    reply_json(json_pack("{s:b}", "ok", 1));
    return 0;
}
