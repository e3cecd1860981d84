/*
 * store_sqlite_checkpoint.c - the WAL's checkpoints, on a thread of their own.
 *
 * SQLite's automatic checkpoint (every 1,000 WAL frames) runs inside the COMMIT that passes the
 * mark, on the writer's connection: here that is a group commit's leader holding the write lock
 * (s->mu), so every ingest, callback and outbox outcome waited while the checkpoint copied ~4 MB
 * of pages into the database and synced both files. A scratch build with no checkpoint at all
 * took the durable ingest (bench, c64, SQLite on disk, 4 targets) to 4,525 webhooks/s, p99
 * 36.6 ms, against 3,315/s, p99 53.5 ms with the automatic one (one pair, a noisy host). With
 * this thread, four alternated pairs of 10 s at c64: 4,702 / 4,502 / 4,760 / 3,959 -> 5,368 /
 * 4,992 / 4,452 / 4,775 webhooks/s, the same CPU per webhook; p99 41.9 / 46.8 / 45.1 / 74.9 ->
 * 34.5 / 68.7 / 52.1 / 51.0 ms: the checkpoint's writes and syncs still share the disk with the
 * commits' fdatasync.
 *
 * How: the writer's WAL hook (sqlite3_wal_hook, which replaces the automatic checkpoint) only wakes
 * the checkpointer once the WAL holds SQ_CKPT_FRAMES frames more than the last checkpoint saw
 * (woken at every commit past the mark instead, it checkpointed continuously under load and cost
 * 0.04 ms more CPU per webhook), and the checkpointer runs a PASSIVE
 * checkpoint on its own connection: it copies what no reader still needs, without the write lock
 * and without waiting for anyone; the next write transaction then starts the WAL over from its
 * beginning once everything was copied (SQLite's rule). Durability is SQLite's: at
 * synchronous=NORMAL a checkpoint syncs the WAL before it copies and the database after.
 * Should the checkpointer fall behind (a long read holding old frames, a slow disk), the hook
 * checkpoints in the COMMIT as SQLite would once the WAL holds SQ_CKPT_BACKSTOP_FRAMES, so the
 * file never grows past that much for long.
 */
#include <stdio.h>

#include "log.h"
#include "store_sqlite.h"

/* WAL frames (pages) after which the checkpointer is woken: SQLite's own automatic mark. */
#define SQ_CKPT_FRAMES 1000
/* WAL frames after which the writer checkpoints itself (~64 MB with 4 KiB pages). */
#define SQ_CKPT_BACKSTOP_FRAMES 16000

/* sqlite3_wal_hook: after each commit of the writer's connection (s->mu held). */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    sqlite_store *s = arg;
    if (frames >= SQ_CKPT_BACKSTOP_FRAMES) {
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        atomic_fetch_add(&s->ckpt_inline, 1);
        return SQLITE_OK;
    }
    /* 1,000 frames past what the last checkpoint saw (all of them once the WAL started over) */
    int mark = atomic_load(&s->ckpt_mark);
    if (frames >= SQ_CKPT_FRAMES && (frames < mark || frames - mark >= SQ_CKPT_FRAMES)) {
        pthread_mutex_lock(&s->ckmu);
        if (!s->ckpt_due) {
            s->ckpt_due = true;
            pthread_cond_signal(&s->ckcv);
        }
        pthread_mutex_unlock(&s->ckmu);
    }
    return SQLITE_OK;
}

static void *checkpointer(void *arg)
{
    sqlite_store *s = arg;
    pthread_mutex_lock(&s->ckmu);
    for (;;) {
        while (!s->ckpt_due && !s->ckpt_stop)
            pthread_cond_wait(&s->ckcv, &s->ckmu);
        if (s->ckpt_stop)
            break;
        s->ckpt_due = false;
        pthread_mutex_unlock(&s->ckmu);
        int log = 0, copied = 0;
        int rc = sqlite3_wal_checkpoint_v2(s->ckdb, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
        if (rc == SQLITE_OK) {
            atomic_store(&s->ckpt_mark, log);
            atomic_fetch_add(&s->ckpt_background, 1);
        } else if (rc != SQLITE_BUSY) { /* BUSY: another one runs; the next wake-up retries */
            char code[16];
            snprintf(code, sizeof(code), "%d", rc);
            LOG_WARN("store.checkpoint", "code", code, "error", sqlite3_errmsg(s->ckdb), NULL);
        }
        pthread_mutex_lock(&s->ckmu);
    }
    pthread_mutex_unlock(&s->ckmu);
    return NULL;
}

crcr_err sq_checkpointer_start(sqlite_store *s, const char *path, char *err, size_t errsz)
{
    if (sqlite3_open_v2(path, &s->ckdb, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(s->ckdb, "PRAGMA synchronous=NORMAL;", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "CRCR_STORE: cannot open the checkpointer's connection to '%s': %s",
                 path, s->ckdb ? sqlite3_errmsg(s->ckdb) : "out of memory");
        return CRCR_E_STORE;
    }
    if (pthread_create(&s->ckthread, NULL, checkpointer, s) != 0) {
        snprintf(err, errsz, "CRCR_STORE: cannot start the checkpointer of '%s'", path);
        return CRCR_E_STORE;
    }
    s->ckpt_running = true;
    pthread_mutex_lock(&s->mu);
    sqlite3_wal_hook(s->db, wal_hook, s);
    pthread_mutex_unlock(&s->mu);
    return CRCR_OK;
}

void sq_checkpointer_stop(sqlite_store *s)
{
    if (s->ckpt_running) {
        pthread_mutex_lock(&s->mu);
        sqlite3_wal_hook(s->db, NULL, NULL);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->ckmu);
        s->ckpt_stop = true;
        pthread_cond_signal(&s->ckcv);
        pthread_mutex_unlock(&s->ckmu);
        pthread_join(s->ckthread, NULL);
        s->ckpt_running = false;
    }
    sqlite3_close(s->ckdb);
    s->ckdb = NULL;
}

void sq_checkpoints(store *st, uint64_t *background, uint64_t *in_commit)
{
    sqlite_store *s = sq_store(st);
    *background = atomic_load(&s->ckpt_background);
    *in_commit = atomic_load(&s->ckpt_inline);
}
