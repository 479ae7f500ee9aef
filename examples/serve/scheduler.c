/* scheduler.c — the queue, the slots and the worker that steps them
 * (scheduler.h). One mutex guards the jobs; the engine belongs to the
 * worker and runs outside it, so readers take text while a step runs. */
#include "scheduler.h"

#include "engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { STEP_PROMPT = 128 }; /* prompt tokens in one step, beside the generating slots' one each */

struct job {
    int32_t *prompt;
    int n_prompt, fed; /* prompt ids, and how many went into the slot */
    int cached;        /* of them, how many the slot held already (its first fed) */
    job_params p;
    char id[48];
    struct timespec t0; /* when it was queued */
    char *stop[4];
    sampler smp;
    int32_t *gen; /* the generated ids */
    int n_gen, cap_gen;
    char *text; /* their text, cut at a stop sequence */
    size_t len, cap, ready, taken; /* ready: bytes a reader may take */
    size_t decoded;                /* bytes of the text before the cut */
    job_logprob **lp;              /* with p.logprobs: a record per generated token */
    int n_lp, cap_lp;
    const char *finish, *error;
    bool ended, cancelled, queued;
    int slot, refs;
    job *next; /* in the queue */
    pthread_cond_t news;
};

/* What an idle slot's positions hold: a finished job's prompt and answer,
 * for the next prompt that begins as they do. */
typedef struct held {
    int32_t *ids;
    int64_t n, cap;
    uint64_t used; /* when its last job left (a count): the least recent is taken first */
} held;

struct sched {
    llama *m;
    const kiln_tokenizer *tok;
    engine *eng;
    int n_slots, queue_limit, n_queued;
    int next_prompt; /* the slot whose prompt goes in first at the next step */
    int64_t ctx, generated;
    job **active;  /* [n_slots] */
    held *held;    /* [n_slots] */
    uint64_t left; /* jobs that have left a slot */
    job **wanting; /* [n_slots]: the jobs whose logits a step gives, in order */
    job *head, *tail;
    bool stopping;
    pthread_mutex_t mu;
    pthread_cond_t work;
    pthread_t worker;
    bool started;
    /* the step's entries */
    int *slots;
    int32_t *tokens;
    bool *want;
    float *logits;
    float *zcopy; /* [vocab]: a job's logits before its draw, for its logprobs */
};

job *job_new(const int32_t *ids, int n, const job_params *p) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->p = *p;
    j->prompt = malloc((size_t)(n ? n : 1) * sizeof *ids);
    bool ok = j->prompt && !sampler_init(&j->smp, &p->sampling, p->seed);
    for (int i = 0; ok && i < p->n_stop && i < 4; i++) ok = (j->stop[i] = strdup(p->stop[i])) != NULL;
    if (!ok) {
        for (int i = 0; i < 4; i++) free(j->stop[i]);
        free(j->prompt), free(j);
        return NULL;
    }
    memcpy(j->prompt, ids, (size_t)n * sizeof *ids);
    snprintf(j->id, sizeof j->id, "%s", p->id ? p->id : "job");
    j->p.id = j->id;
    j->n_prompt = n, j->slot = -1, j->refs = 1;
    j->p.n_stop = p->n_stop < 4 ? p->n_stop : 4;
    pthread_cond_init(&j->news, NULL);
    return j;
}

static void job_free(job *j) {
    sampler_free(&j->smp);
    for (int i = 0; i < 4; i++) free(j->stop[i]);
    pthread_cond_destroy(&j->news);
    for (int i = 0; i < j->n_lp; i++) free(j->lp[i]);
    free(j->prompt), free(j->gen), free(j->text), free(j->lp), free(j);
}

static void unref(job *j) {
    if (--j->refs == 0) job_free(j);
}

/* j ends: all its text becomes readable. Under the lock. */
static void end(job *j, const char *finish, const char *error) {
    if (j->ended) return;
    j->ended = true, j->finish = finish, j->error = error, j->ready = j->len;
    pthread_cond_broadcast(&j->news);
}

/* Bytes at the end of text that may still begin a stop sequence or are an
 * unfinished UTF-8 character: not readable yet. */
static size_t held_back(const job *j) {
    size_t hold = 0;
    for (int i = 0; i < j->p.n_stop; i++) {
        size_t sl = strlen(j->stop[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= j->len && !memcmp(j->text + j->len - k, j->stop[i], k)) {
                hold = k;
                break;
            }
    }
    size_t back = 0; /* a lead byte whose continuation bytes have not all come */
    for (size_t k = 1; k <= 4 && k <= j->len; k++) {
        unsigned char c = (unsigned char)j->text[j->len - k];
        if ((c & 0xC0) == 0x80) continue;
        int need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if ((size_t)need > k) back = k;
        break;
    }
    return hold > back ? hold : back;
}

/* The text of the generated ids again, then stop sequences. Under the lock. */
static kiln_status retext(sched *s, job *j) {
    size_t len = 0, from = j->len;
    kiln_status st;
    while ((st = kiln_tokenizer_decode(s->tok, j->gen, j->n_gen, j->text, j->cap, &len)) == KILN_ERR_ARG &&
           len > j->cap) {
        char *t = realloc(j->text, 2 * len);
        if (!t) return KILN_ERR_OOM;
        j->text = t, j->cap = 2 * len;
    }
    if (st) return st;
    j->len = j->decoded = len;
    for (int i = 0; i < j->p.n_stop; i++) {
        size_t sl = strlen(j->stop[i]), start = from >= sl ? from - sl + 1 : 0;
        char *hit = start + sl <= len ? memmem(j->text + start, len - start, j->stop[i], sl) : NULL;
        if (hit && (size_t)(hit - j->text) < j->len) j->len = (size_t)(hit - j->text);
    }
    if (j->len < len) {
        end(j, "stop", NULL);
        return KILN_OK;
    }
    size_t r = j->len - held_back(j);
    if (r > j->ready) {
        j->ready = r;
        pthread_cond_broadcast(&j->news);
    }
    return KILN_OK;
}

/* The record of j's last token, drawn from the logits z (as they were
 * before the draw), whose text begins at byte from. Under the lock. */
static bool record(sched *s, job *j, const float *z, size_t from) {
    if (j->n_lp == j->cap_lp) {
        int cap = j->cap_lp ? 2 * j->cap_lp : 64;
        job_logprob **lp = realloc(j->lp, (size_t)cap * sizeof *lp);
        if (!lp) return false;
        j->lp = lp, j->cap_lp = cap;
    }
    const job_logprob *last = j->n_lp ? j->lp[j->n_lp - 1] : NULL;
    size_t offset = last ? last->offset : 0, end = j->decoded > from ? j->decoded : from;
    for (size_t i = last ? last->start : 0; last && i < last->end; i++) /* characters: UTF-8 lead bytes */
        offset += ((unsigned char)j->text[i] & 0xC0) != 0x80;
    int32_t prev = j->n_gen > 1 ? j->gen[j->n_gen - 2] : -1; /* the first token's text is the answer's start */
    job_logprob *r = lp_record(s->tok, z, s->m->cfg.vocab, j->p.top_logprobs, prev, j->gen[j->n_gen - 1],
                               j->text + from, end - from, offset);
    if (!r) return false;
    r->start = from, r->end = end;
    j->lp[j->n_lp++] = r;
    return true;
}

/* The next token of j from its logits z. Under the lock. */
static void advance(sched *s, job *j, float *z) {
    if (j->p.logprobs) memcpy(s->zcopy, z, (size_t)s->m->cfg.vocab * sizeof *z); /* the draw may change z */
    int32_t id = sampler_draw(&j->smp, z, s->m->cfg.vocab);
    if (kiln_tokenizer_is_eog(s->tok, id)) return end(j, "stop", NULL);
    sampler_accept(&j->smp, id);
    if (j->n_gen == j->cap_gen) {
        int cap = j->cap_gen ? 2 * j->cap_gen : 64;
        int32_t *g = realloc(j->gen, (size_t)cap * sizeof *g);
        if (!g) return end(j, NULL, "out of memory");
        j->gen = g, j->cap_gen = cap;
    }
    j->gen[j->n_gen++] = id;
    s->generated++;
    size_t from = j->decoded;
    if (retext(s, j)) return end(j, NULL, "the generated tokens could not be decoded");
    if (j->p.logprobs && !record(s, j, s->zcopy, from)) return end(j, NULL, "out of memory");
    if (j->ended) return;
    if (j->p.max_tokens && j->n_gen >= j->p.max_tokens) return end(j, "length", NULL);
    if (j->n_prompt + j->n_gen > s->ctx) return end(j, "length", NULL); /* no position left to feed it */
}

/* j leaves the scheduler: a line on stderr. */
static void leave(job *j) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double secs = (double)(t.tv_sec - j->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - j->t0.tv_nsec);
    fprintf(stderr, "serve: %s: %d prompt (%d cached) + %d completion tokens in %.2f s: %s\n", j->id, j->n_prompt,
            j->cached, j->n_gen, secs,
            j->cancelled && !j->finish ? "cancelled (the client went away)" : j->finish ? j->finish : j->error);
    unref(j);
}

/* Slot i's job j leaves it: what its positions hold (the prompt, then
 * the answer's tokens that went in) is kept for a later prompt. Under the
 * lock. */
static void remember(sched *s, int i, const job *j) {
    held *h = &s->held[i];
    int64_t n = engine_pos(s->eng, i);
    h->n = 0, h->used = ++s->left;
    if (n < 0 || n > (int64_t)j->n_prompt + j->n_gen) return; /* not the job's tokens: nothing to reuse */
    if (n > h->cap) {
        int32_t *ids = realloc(h->ids, (size_t)n * sizeof *ids);
        if (!ids) return;
        h->ids = ids, h->cap = n;
    }
    int64_t from_prompt = n < j->n_prompt ? n : j->n_prompt;
    memcpy(h->ids, j->prompt, (size_t)from_prompt * sizeof *h->ids);
    memcpy(h->ids + from_prompt, j->gen, (size_t)(n - from_prompt) * sizeof *h->ids);
    h->n = n;
}

/* The tokens q's prompt shares with what slot i holds, from the start. */
static int64_t common(const sched *s, int i, const job *q) {
    const held *h = &s->held[i];
    int64_t k = 0;
    while (k < h->n && k < q->n_prompt && h->ids[k] == q->prompt[k]) k++;
    return k;
}

/* The idle slot for q: the one that holds the longest prefix of its
 * prompt where that is at least half the prompt (llama-server's
 * similarity threshold: a short shared head, a system prompt, does not
 * take a slot that holds another conversation), else the least recently
 * used. -1 when none is idle. Under the lock. */
static int pick(const sched *s, const job *q) {
    int best = -1, lru = -1;
    int64_t most = 0;
    for (int i = 0; i < s->n_slots; i++) {
        if (s->active[i]) continue;
        int64_t k = q->p.no_prompt_cache ? 0 : common(s, i, q);
        if (k > most) most = k, best = i;
        if (lru < 0 || s->held[i].used < s->held[lru].used) lru = i;
    }
    return best >= 0 && 2 * most >= q->n_prompt ? best : lru;
}

/* Free the slots of ended or cancelled jobs, fill them from the queue.
 * A job keeps the positions its slot holds that begin its prompt (all
 * but the last prompt token, whose logits it needs). Under the lock. */
static void admit(sched *s) {
    for (int i = 0; i < s->n_slots; i++) {
        job *j = s->active[i];
        if (j && (j->ended || j->cancelled)) {
            end(j, NULL, "cancelled");
            s->active[i] = NULL;
            remember(s, i, j);
            leave(j);
        }
    }
    int i;
    while (s->head && (i = pick(s, s->head)) >= 0) {
        job *q = s->head;
        s->head = q->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--, q->queued = false;
        if (q->cancelled || q->ended) {
            end(q, NULL, "cancelled");
            leave(q);
            continue;
        }
        int64_t keep = q->p.no_prompt_cache ? 0 : common(s, i, q);
        if (keep >= q->n_prompt) keep = q->n_prompt - 1;
        if (engine_keep(s->eng, i, keep)) {
            s->held[i].n = 0;
            end(q, NULL, "the engine could not clear a slot");
            unref(q);
            continue;
        }
        s->held[i].n = 0; /* the job's own tokens from here */
        q->fed = q->cached = (int)keep;
        q->slot = i;
        s->active[i] = q;
    }
}

/* The step's entries: every generating job's last token, then prompt
 * tokens in what room is left of STEP_PROMPT, from the slot whose prompt
 * went in last, so a long prompt (or many) never stalls the others' tokens
 * for more than a step of that size. Under the lock. Returns the number of
 * entries. */
static int gather(sched *s, job **wanting, int *n_want) {
    int n = 0;
    *n_want = 0;
    for (int i = 0; i < s->n_slots; i++) {
        job *j = s->active[i];
        if (!j || j->fed < j->n_prompt) continue;
        s->slots[n] = i, s->tokens[n] = j->gen[j->n_gen - 1], s->want[n] = true;
        n++;
        wanting[(*n_want)++] = j;
    }
    int room = STEP_PROMPT;
    for (int k = 0; k < s->n_slots && room > 0; k++) {
        int i = (s->next_prompt + k) % s->n_slots;
        job *j = s->active[i];
        if (!j || j->fed == j->n_prompt) continue;
        int c = j->n_prompt - j->fed < room ? j->n_prompt - j->fed : room;
        for (int t = 0; t < c; t++) {
            s->slots[n] = i, s->tokens[n] = j->prompt[j->fed + t], s->want[n] = false;
            n++;
        }
        j->fed += c, room -= c;
        s->next_prompt = i;
        if (j->fed < j->n_prompt) break;
        s->next_prompt = (i + 1) % s->n_slots;
        s->want[n - 1] = true;
        wanting[(*n_want)++] = j;
    }
    return n;
}

static void *work(void *arg) {
    sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        admit(s);
        int n_want = 0, n = gather(s, s->wanting, &n_want);
        if (!n) {
            if (s->stopping) break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        /* the jobs stay: only this thread takes them out of their slots */
        pthread_mutex_unlock(&s->mu);
        kiln_status st = engine_step(s->eng, n, s->slots, s->tokens, s->want, s->logits);
        pthread_mutex_lock(&s->mu);
        if (st) { /* every slot's state is in doubt: their jobs end */
            fprintf(stderr, "serve: the model's step failed: %s\n", kiln_last_error());
            for (int i = 0; i < s->n_slots; i++)
                if (s->active[i]) {
                    end(s->active[i], NULL, "the model's step failed");
                    engine_clear(s->eng, i); /* nothing to remember of it for a later prompt */
                }
            continue;
        }
        for (int i = 0; i < n_want; i++) {
            job *j = s->wanting[i];
            if (!j->ended && !j->cancelled) advance(s, j, s->logits + (int64_t)i * s->m->cfg.vocab);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sched *sched_new(llama *m, const kiln_tokenizer *tok, int n_slots, int64_t ctx, int queue) {
    sched *s = calloc(1, sizeof *s);
    if (!s) return kiln_set_error(KILN_ERR_OOM, "sched_new: out of memory"), NULL;
    s->m = m, s->tok = tok, s->n_slots = n_slots, s->ctx = ctx, s->queue_limit = queue;
    size_t entries = (size_t)n_slots + STEP_PROMPT;
    s->active = calloc((size_t)n_slots, sizeof *s->active);
    s->held = calloc((size_t)n_slots, sizeof *s->held);
    s->wanting = malloc((size_t)n_slots * sizeof *s->wanting);
    s->slots = malloc(entries * sizeof *s->slots);
    s->tokens = malloc(entries * sizeof *s->tokens);
    s->want = malloc(entries * sizeof *s->want);
    s->logits = malloc((size_t)n_slots * (size_t)m->cfg.vocab * sizeof *s->logits);
    s->zcopy = malloc((size_t)m->cfg.vocab * sizeof *s->zcopy);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    if (!s->active || !s->held || !s->wanting || !s->slots || !s->tokens || !s->want || !s->logits || !s->zcopy) {
        kiln_set_error(KILN_ERR_OOM, "sched_new: out of memory for %d slots", n_slots);
        sched_free(s);
        return NULL;
    }
    if (!(s->eng = engine_new(m, n_slots, ctx))) {
        sched_free(s);
        return NULL;
    }
    if (pthread_create(&s->worker, NULL, work, s)) {
        kiln_set_error(KILN_ERR_OOM, "sched_new: cannot start the worker thread");
        sched_free(s);
        return NULL;
    }
    s->started = true;
    return s;
}

void sched_stop(sched *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (int i = 0; i < s->n_slots; i++)
        if (s->active[i]) end(s->active[i], NULL, "the server is stopping");
    for (job *q = s->head; q; q = q->next) end(q, NULL, "the server is stopping");
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

void sched_free(sched *s) {
    if (!s) return;
    if (s->started) {
        sched_stop(s);
        pthread_join(s->worker, NULL);
    }
    for (int i = 0; s->active && i < s->n_slots; i++)
        if (s->active[i]) unref(s->active[i]);
    while (s->head) {
        job *q = s->head;
        s->head = q->next;
        unref(q);
    }
    engine_free(s->eng);
    for (int i = 0; s->held && i < s->n_slots; i++) free(s->held[i].ids);
    free(s->held);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    free(s->active), free(s->wanting), free(s->slots), free(s->tokens), free(s->want), free(s->logits), free(s->zcopy),
        free(s);
}

void sched_get_stats(sched *s, sched_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = (sched_stats){.slots = s->n_slots, .queued = s->n_queued, .generated = s->generated};
    for (int i = 0; i < s->n_slots; i++) st->busy += s->active[i] != NULL;
    pthread_mutex_unlock(&s->mu);
}

int sched_submit(sched *s, job *j) {
    pthread_mutex_lock(&s->mu);
    int busy = 0;
    for (int i = 0; i < s->n_slots; i++) busy += s->active[i] != NULL;
    /* a free slot takes it at once; beyond the slots, the queue's limit */
    if (s->stopping || s->n_queued - (s->n_slots - busy) >= s->queue_limit) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    j->refs++, j->queued = true;
    clock_gettime(CLOCK_MONOTONIC, &j->t0);
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j, s->n_queued++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void sched_cancel(sched *s, job *j) {
    pthread_mutex_lock(&s->mu);
    if (!j->ended) {
        j->cancelled = true;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
}

size_t sched_next(sched *s, job *j, char *buf, size_t cap, int ms, job_news *news) {
    pthread_mutex_lock(&s->mu);
    if (j->taken == j->ready && !j->ended && ms > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ms / 1000, until.tv_nsec += (long)(ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        while (j->taken == j->ready && !j->ended)
            if (pthread_cond_timedwait(&j->news, &s->mu, &until)) break;
    }
    size_t n = j->ready - j->taken < cap ? j->ready - j->taken : cap;
    memcpy(buf, j->text + j->taken, n);
    j->taken += n;
    *news = (job_news){.done = j->ended && j->taken == j->ready, .prompt_tokens = j->n_prompt,
                       .completion_tokens = j->n_gen, .cached_tokens = j->cached};
    if (news->done) news->finish = j->finish, news->error = j->error;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int sched_logprobs(sched *s, job *j, int from, const job_logprob **out, int cap) {
    pthread_mutex_lock(&s->mu);
    bool done = j->ended && j->taken == j->ready;
    int n = 0;
    for (int i = from; i >= 0 && i < j->n_lp && n < cap; i++) {
        const job_logprob *r = j->lp[i];
        if (done ? r->start >= j->len && r->end > r->start : r->end > j->taken) break;
        out[n++] = r;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void job_release(sched *s, job *j) {
    if (!j) return;
    pthread_mutex_lock(&s->mu);
    if (!j->ended) j->cancelled = true;
    pthread_cond_signal(&s->work);
    unref(j);
    pthread_mutex_unlock(&s->mu);
}
