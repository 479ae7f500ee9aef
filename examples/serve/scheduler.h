/* scheduler.h — continuous batching for serve: requests (jobs) wait in a
 * bounded queue for one of the engine's slots; one worker thread steps
 * every active slot together (a prompt in chunks, then a token a step),
 * samples each slot's next token, and ends a job at an end-of-turn token,
 * a stop sequence, its max_tokens or the end of the context. A slot
 * remembers what its last job left in it: a job goes to the idle slot
 * that holds the longest prefix of its prompt (at least half of it), else
 * to the least recently used one, and keeps the prefix it shares with it
 * instead of computing it again (a conversation's next turn). A job whose
 * client went away (sched_cancel) leaves its slot at the next step. The
 * HTTP threads read a job's text as it grows (sched_next); stop
 * sequences are held back until they cannot match any more. A job that
 * leaves its slot says so on stderr: its id, its tokens, its speed, why.
 *
 *     sched *s = sched_new(m, tok, 4, 2048, 64);
 *     job *j = job_new(ids, n, &params);           // the prompt's ids
 *     if (sched_submit(s, j)) ...                  // the queue is full: 503
 *     job_news news;
 *     do n = sched_next(s, j, buf, sizeof buf, 1000, &news); while (!news.done);
 *     k = sched_logprobs(s, j, 0, recs, cap);       // with p.logprobs
 *     job_release(s, j);                           // the HTTP side is done with it
 */
#ifndef SERVE_SCHEDULER_H
#define SERVE_SCHEDULER_H

#include "kiln.h"
#include "llama.h"
#include "logprobs.h"
#include "sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sched sched;
typedef struct job job;

typedef struct job_params {
    int max_tokens;     /* 0: until the end of the turn or of the context */
    sampler_params sampling;
    uint64_t seed;
    const char *const *stop; /* n_stop sequences, copied */
    int n_stop;
    const char *id;     /* for the log line when it ends ("chatcmpl-...") */
    bool no_prompt_cache; /* recompute the whole prompt (else a slot's shared prefix is kept) */
    bool logprobs;        /* a record of each generated token (logprobs.h) */
    int top_logprobs;     /* with this many alternatives */
} job_params;

typedef struct job_news {
    bool done;          /* all the text was taken and the job ended */
    const char *finish; /* once done: "stop", "length" or NULL with error set */
    const char *error;  /* once done: why the job failed (the server stopped, the engine failed) */
    int prompt_tokens, completion_tokens;
    int cached_tokens;  /* of the prompt's, those its slot held already */
} job_news;

typedef struct sched_stats {
    int slots, busy, queued;
    int64_t generated; /* tokens since the start */
} sched_stats;

/* n_slots sequences of up to ctx positions; at most queue jobs wait beyond
 * them. NULL on failure (kiln_last_error). */
sched *sched_new(llama *m, const kiln_tokenizer *tok, int n_slots, int64_t ctx, int queue);
/* End every job (their readers see the error "the server is stopping"). */
void sched_stop(sched *s);
/* Stop the worker and free (after the HTTP threads are gone). */
void sched_free(sched *s);
void sched_get_stats(sched *s, sched_stats *st);

/* A job for the prompt's n ids (copied). NULL when out of memory. */
job *job_new(const int32_t *ids, int n, const job_params *p);
/* Queue j: 0, or -1 when the queue is full (j is then still the caller's
 * alone: job_release frees it). */
int sched_submit(sched *s, job *j);
/* The client is gone: the job leaves its slot or the queue. */
void sched_cancel(sched *s, job *j);
/* Wait up to ms milliseconds for new text of j; copy at most cap bytes of
 * it into buf and return how many. news says whether j is done. */
size_t sched_next(sched *s, job *j, char *buf, size_t cap, int ms, job_news *news);
/* With p.logprobs: the records of j's tokens from the from-th on whose
 * text sched_next has given (once news.done: those whose text begins
 * before a stop sequence), at most cap pointers into out, valid until
 * job_release. Returns how many. */
int sched_logprobs(sched *s, job *j, int from, const job_logprob **out, int cap);
/* The caller is done with j (cancels it if it still runs). */
void job_release(sched *s, job *j);

#endif
