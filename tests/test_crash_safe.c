/* test_crash_safe.c — files of work survive a writer that dies or fails
 * (core/atomic_file.c).
 *
 * crash_safe_checkpoint_sigkill: a child process resumes from the
 * checkpoint (parameters and Adam state) and saves a new version of it
 * again and again; the parent SIGKILLs it after a random delay, hundreds
 * of times, and after each kill loads the checkpoint and checks that it is
 * intact and exactly one version: every element of every parameter and
 * state tensor encodes the step count the metadata holds (a mixture of two
 * versions, a torn or truncated file fails), and versions never go back.
 * Kills that landed mid-write are counted by the temporary files they left.
 *
 * crash_safe_failed_writes: checkpoint, optimizer state and GGUF writes
 * that fail midway (the file-size limit: the kernel's EFBIG, as a full
 * disk) or cannot start (a read-only directory, when not root) return
 * KILN_ERR_IO with a message naming the cause, leave the old file byte for
 * byte, and leave no temporary file.
 *
 * crash_safe_stale_temps_swept: the next save of a path removes the
 * temporary files of its writers that died, and not that of a writer
 * still at work in another process. */
#include "kt.h"
#include "atomic_file.h"
#include "../optim/optim_impl.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NW 8192 /* w: 32 KiB, the file about 100 KiB with Adam's two moments */
#define NB 257
#define KILLS 200 /* KILN_CRASH_KILLS=N runs N */

typedef struct model {
    kiln_ctx *ctx;
    kiln_tensor *w, *b;
    kiln_optim *opt;
} model;

static bool make(model *m) {
    m->ctx = kiln_ctx_new();
    m->w = kiln_param(m->ctx, "w", KILN_F32, 1, (int64_t[]){NW});
    m->b = kiln_param(m->ctx, "b", KILN_F32, 1, (int64_t[]){NB});
    m->opt = m->w && m->b ? kiln_adam_new(m->ctx, NULL) : NULL;
    return m->opt != NULL;
}

/* Version v: parameter element i is v/2 + i, state element i is -v - i,
 * the step count v. Exact in f32 for the v reached here. */
static float param_value(int64_t v, int64_t i) { return 0.5f * (float)v + (float)i; }
static float state_value(int64_t v, int64_t i) { return -(float)v - (float)i; }

static void set_version(model *m, int64_t v) {
    kiln_tensor *ps[2] = {m->w, m->b};
    for (int k = 0; k < 2; k++) {
        float *d = kiln_tensor_data(ps[k]);
        for (int64_t i = 0; i < kiln_tensor_numel(ps[k]); i++) d[i] = param_value(v, i);
    }
    for (const kiln__optim_state_entry *e = m->opt->state; e; e = e->next) {
        float *d = kiln_tensor_data(e->t);
        for (int64_t i = 0; i < kiln_tensor_numel(e->t); i++) d[i] = state_value(v, i);
    }
    m->opt->steps = v;
}

/* Does everything loaded say version v? */
static bool is_version(const model *m, int64_t v) {
    const kiln_tensor *ps[2] = {m->w, m->b};
    for (int k = 0; k < 2; k++) {
        const float *d = kiln_tensor_data(ps[k]);
        for (int64_t i = 0; i < kiln_tensor_numel(ps[k]); i++)
            if (d[i] != param_value(v, i)) return false;
    }
    for (const kiln__optim_state_entry *e = m->opt->state; e; e = e->next) {
        const float *d = kiln_tensor_data(e->t);
        for (int64_t i = 0; i < kiln_tensor_numel(e->t); i++)
            if (d[i] != state_value(v, i)) return false;
    }
    return true;
}

/* The writer: resume from path if it is there, then save versions until
 * killed. Exit 2: the checkpoint did not load; 3: a save failed. */
static _Noreturn void writer(const char *path) {
    model m;
    if (!make(&m)) _exit(4);
    int64_t v = 0;
    if (access(path, F_OK) == 0) {
        if (kiln_checkpoint_load(m.opt, path)) _exit(2);
        v = kiln_optim_steps(m.opt);
    }
    for (;;) {
        set_version(&m, ++v);
        if (kiln_checkpoint_save(m.opt, path)) _exit(3);
    }
}

/* Remove the temporary files a killed writer left beside path; how many. */
static int sweep_temps(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    int n = 0;
    char prefix[64], p[512];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            n += unlink(p) == 0;
        }
    if (d) closedir(d);
    return n;
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

KT_TEST(crash_safe_checkpoint_sigkill) {
    char dir[] = "/tmp/kiln-crash-XXXXXX";
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    model check;
    KT_REQUIRE(make(&check), "%s", kiln_last_error());
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    int64_t last = 0;
    int kills = 0, midwrite = 0, advanced = 0, bad = 0, stalls = 0;
    const char *env = getenv("KILN_CRASH_KILLS");
    int n_kills = env && atoi(env) > 0 ? atoi(env) : KILLS;
    double t0 = now();
    for (int k = 0; k < n_kills && !bad; k++) {
        pid_t pid = fork();
        KT_REQUIRE(pid >= 0, "fork");
        if (pid == 0) writer(path);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        /* 0-10 ms: before, during and between saves; longer after kills
         * that saw no progress, so a slow (loaded) machine still advances */
        usleep((useconds_t)((rng >> 33) % (10000u * (1u + (unsigned)stalls))));
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
            kt_fail(__FILE__, __LINE__, "kill %d: the writer ended by itself (status %d: %s)", k, st,
                    WIFEXITED(st) && WEXITSTATUS(st) == 2 ? "the checkpoint did not load" : "a save failed");
            bad++;
            break;
        }
        kills++;
        midwrite += sweep_temps(dir, "ckpt.safetensors") > 0;
        if (access(path, F_OK) != 0) { /* killed before the first save finished */
            KT_CHECK(last == 0, "kill %d: the checkpoint of version %lld vanished", k, (long long)last);
            stalls = stalls < 9 ? stalls + 1 : 9;
            continue;
        }
        kiln_status s = kiln_checkpoint_load(check.opt, path);
        int64_t v = kiln_optim_steps(check.opt);
        if (s || v < last || !is_version(&check, v)) {
            kt_fail(__FILE__, __LINE__, "kill %d: the checkpoint is %s (version %lld, last %lld): %s", k,
                    s ? "unreadable" : v < last ? "older than before" : "a mixture", (long long)v, (long long)last,
                    s ? kiln_last_error() : "");
            bad++;
        }
        advanced += v > last;
        stalls = v > last ? 0 : stalls < 9 ? stalls + 1 : 9;
        last = v;
    }
    fprintf(stderr, "    %d SIGKILLs in %.1f s: %d mid-write (temp file left), checkpoint intact after every kill, "
                    "version %lld reached, advanced after %d kills\n",
            kills, now() - t0, midwrite, (long long)last, advanced);
    KT_CHECK(kills == n_kills, "%d kills of %d", kills, n_kills);
    /* the test means something only if kills landed inside writes and the
     * writer made progress between them */
    KT_CHECK(midwrite >= 10 && advanced >= 10 && last >= advanced, "mid-write %d, advanced %d, last version %lld", midwrite,
             advanced, (long long)last);
    kiln_ctx_free(check.ctx);
    rm_dir(dir);
}

/* ---- failed writes ---- */

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *p = malloc((size_t)len + 1);
    *n = p ? fread(p, 1, (size_t)len, f) : 0;
    fclose(f);
    return p;
}

typedef kiln_status (*save_fn)(model *m, const char *path);
static kiln_status save_ckpt(model *m, const char *path) { return kiln_checkpoint_save(m->opt, path); }
static kiln_status save_optim(model *m, const char *path) { return kiln_optim_save(m->opt, path); }
static kiln_status save_gguf(model *m, const char *path) {
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    kiln_status s = w ? kiln_gguf_set_string(w, "general.name", "crash-safe") : kiln_last_status();
    if (!s) s = kiln_gguf_add_tensor(w, "w", m->w);
    if (!s) s = kiln_gguf_add_tensor(w, "b", m->b);
    if (!s) s = kiln_gguf_writer_save(w, path);
    kiln_gguf_writer_free(w);
    return s;
}

/* Version 1 saved; version 2 fails as cause says; the file is still version 1. */
static void check_failure(save_fn save, const char *what, const char *dir, const char *file, bool read_only_dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    model m;
    KT_REQUIRE(make(&m), "%s", kiln_last_error());
    set_version(&m, 1);
    KT_OK(save(&m, path));
    KT_REQUIRE(chmod(path, 0640) == 0, "chmod");
    size_t n0 = 0, n1 = 0;
    unsigned char *before = slurp(path, &n0);
    KT_NOTNULL(before);
    set_version(&m, 2);
    struct rlimit old, lim;
    kiln_clear_error();
    kiln_status s;
    const char *want;
    if (read_only_dir) {
        chmod(dir, 0555);
        s = save(&m, path);
        chmod(dir, 0755);
        want = "cannot create a temporary file";
    } else { /* the kernel refuses to grow a file past the limit: EFBIG midway */
        signal(SIGXFSZ, SIG_IGN);
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = n0 / 2;
        setrlimit(RLIMIT_FSIZE, &lim);
        s = save(&m, path);
        setrlimit(RLIMIT_FSIZE, &old);
        want = "File too large";
    }
    KT_CHECK(s == KILN_ERR_IO && strstr(kiln_last_error(), want), "%s: %s: %s", what, kiln_status_name(s),
             kiln_last_error());
    unsigned char *after = slurp(path, &n1);
    KT_CHECK(after && n1 == n0 && !memcmp(before, after, n0), "%s: the old file changed", what);
    KT_CHECK(count_files(dir) == 1, "%s: %d files in the directory (a temporary file left?)", what, count_files(dir));
    struct stat sb;
    KT_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640, "%s: mode", what);
    /* and a write that succeeds keeps the file's mode */
    KT_OK(save(&m, path));
    KT_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640, "%s: mode %o after a replace", what,
             (unsigned)(sb.st_mode & 0777));
    unlink(path);
    free(before);
    free(after);
    kiln_ctx_free(m.ctx);
}

KT_TEST(crash_safe_failed_writes) {
    char dir[] = "/tmp/kiln-fail-XXXXXX";
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    check_failure(save_ckpt, "kiln_checkpoint_save, full disk", dir, "c.safetensors", false);
    check_failure(save_optim, "kiln_optim_save, full disk", dir, "o.safetensors", false);
    check_failure(save_gguf, "kiln_gguf_writer_save, full disk", dir, "m.gguf", false);
    /* a bare file name: the temporary file and the directory sync in "." */
    model m;
    KT_REQUIRE(make(&m), "%s", kiln_last_error());
    KT_REQUIRE(chdir(dir) == 0, "chdir");
    KT_OK(kiln_checkpoint_save(m.opt, "bare.safetensors"));
    KT_OK(kiln_checkpoint_load(m.opt, "bare.safetensors"));
    KT_CHECK(count_files(".") == 1, "%d files after a save by bare name", count_files("."));
    unlink("bare.safetensors");
    KT_REQUIRE(chdir("/") == 0, "chdir");
    kiln_ctx_free(m.ctx);
    if (geteuid() != 0) { /* root writes into read-only directories */
        check_failure(save_ckpt, "kiln_checkpoint_save, read-only directory", dir, "c.safetensors", true);
        check_failure(save_gguf, "kiln_gguf_writer_save, read-only directory", dir, "m.gguf", true);
    }
    rm_dir(dir);
}

/* ---- stale temporary files ---- */

static bool exists(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* A writer of path that starts a save, writes part of it, tells the
 * parent its temporary file's name on `out`, then dies (SIGKILL) or, when
 * `go` is open, waits for a byte on it and finishes the save. */
static _Noreturn void partial_writer(const char *path, int out, int go) {
    kiln__afile af;
    if (kiln__afile_open(&af, path, "partial_writer") || fwrite("kiln", 1, 4, af.f) != 4 || fflush(af.f)) _exit(3);
    const char *name = strrchr(af.tmp, '/') + 1;
    if (write(out, name, strlen(name) + 1) < 0) _exit(3);
    if (go < 0) kill(getpid(), SIGKILL);
    char c;
    if (read(go, &c, 1) != 1) _exit(3);
    _exit(kiln__afile_commit(&af) ? 4 : 0);
}

/* Start a partial writer of path (go: the pipe it waits on, or NULL for
 * one that dies); its temporary file's name into name. */
static pid_t start_writer(const char *path, const int *go, char *name, size_t n) {
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        if (go) close(go[1]); /* the parent's end: its exit ends the wait */
        partial_writer(path, p[1], go ? go[0] : -1);
    }
    close(p[1]);
    ssize_t got = pid > 0 ? read(p[0], name, n - 1) : -1;
    name[got > 0 ? got : 0] = 0;
    close(p[0]);
    return got > 0 ? pid : -1;
}

KT_TEST(crash_safe_stale_temps_swept) {
    char dir[] = "/tmp/kiln-stale-XXXXXX", path[256], dead[64], live[64], p[512];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    int st = 0, go[2];
    KT_REQUIRE(pipe(go) == 0, "pipe");
    /* the live writer first: a writer's start sweeps what is stale then */
    pid_t working = start_writer(path, go, live, sizeof live);
    KT_REQUIRE(working > 0, "the live writer");
    pid_t killed = start_writer(path, NULL, dead, sizeof dead);
    KT_REQUIRE(killed > 0 && waitpid(killed, &st, 0) == killed && WIFSIGNALED(st), "the killed writer");
    /* a temp file of an older kiln (no lock), and names the sweep must not touch */
    const char *old = "ckpt.safetensors.tmp.Ab12Cd";
    const char *keep[] = {"ckpt.safetensors.tmp.notes", "other.safetensors.tmp.Ab12Cd", "ckpt.safetensors.tmp.Ab12Cd7"};
    for (int i = -1; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, i < 0 ? old : keep[i]);
        fclose(fopen(p, "w"));
    }
    KT_REQUIRE(exists(dir, dead) && exists(dir, live), "the writers' temporary files %s %s", dead, live);
    model m;
    KT_REQUIRE(make(&m), "%s", kiln_last_error());
    KT_OK(kiln_checkpoint_save(m.opt, path));
    KT_CHECK(!exists(dir, dead), "the killed writer's %s is still there", dead);
    KT_CHECK(!exists(dir, old), "an unlocked %s is still there", old);
    KT_CHECK(exists(dir, live), "the live writer's %s was removed", live);
    for (int i = 0; i < 3; i++) KT_CHECK(exists(dir, keep[i]), "%s was removed", keep[i]);
    /* the live writer finishes its save, then the next save finds nothing stale */
    KT_CHECK(write(go[1], "g", 1) == 1 && waitpid(working, &st, 0) == working && WIFEXITED(st) && WEXITSTATUS(st) == 0,
             "the live writer's commit failed (status %d)", st);
    KT_OK(kiln_checkpoint_save(m.opt, path));
    KT_CHECK(count_files(dir) == 4, "%d files: the checkpoint and the three others expected", count_files(dir));
    close(go[0]);
    close(go[1]);
    kiln_ctx_free(m.ctx);
    rm_dir(dir);
}
