/*
 * workpool.h - a few threads, at a lower CPU priority, working through a short bounded queue.
 *
 * The HTTP server runs its slow routes (the HUD) here so that they never hold the threads that
 * serve webhooks and callbacks (http_server.h). Items are the caller's pointers; the pool calls
 * `fn(item, false)` on one of its threads, or `fn(item, true)` for items still queued when it
 * stops, so that every item is finished exactly once. An item goes to the thread that went idle
 * last (workpool.c says why).
 */
#ifndef CRCR_WORKPOOL_H
#define CRCR_WORKPOOL_H

#include <stdbool.h>

typedef struct workpool workpool;

typedef void (*workpool_fn)(void *item, bool cancelled);

/* Starts `threads` threads at nice value `nice` (Linux nices threads one by one) taking items
 * from a queue of at most `queue`. NULL when memory or a thread cannot be had. Owned by the
 * caller: workpool_stop, then workpool_free. */
workpool *workpool_start(unsigned threads, unsigned queue, int nice, workpool_fn fn);

/* Queues `item`; false when the queue is full or the pool stops. `accepted` (may be NULL) runs
 * under the pool's lock just before the item becomes visible to the threads: whatever must
 * happen before a thread may finish the item goes there. */
bool workpool_submit(workpool *p, void *item, void (*accepted)(void *item));

/* Items queued now (waiting, not running). */
unsigned workpool_waiting(workpool *p);

/* Threads waiting for an item now. */
unsigned workpool_idle(workpool *p);

/* Whether workpool_stop has begun (submissions are refused from then on). */
bool workpool_stopping(workpool *p);

/* Lets the threads finish what they run, cancels what waits, joins them. NULL is fine. */
void workpool_stop(workpool *p);

/* Frees a stopped pool; NULL is fine. */
void workpool_free(workpool *p);

#endif
