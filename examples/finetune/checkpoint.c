/* checkpoint.c — a run saved so that it resumes bit for bit: the adapters
 * in PEFT's files (f32, exact), the optimizer's state (kiln_optim_save:
 * moments, step count, lr), and the run's place (step, epoch, next window;
 * the window order is a function of seed and epoch) in trainer_state.txt,
 * written last and renamed into place. */
#include "finetune.h"

#include <stdio.h>
#include <string.h>

#define FORMAT "kiln finetune state 2"

static void path_in(char *out, size_t n, const char *dir, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

bool checkpoint_save(const char *dir, const lora *l, const kiln_optim *opt, const run_state *rs) {
    char path[4096], tmp[4200];
    path_in(path, sizeof path, dir, "optimizer.safetensors");
    if (lora_save_peft(l, dir) || kiln_optim_save(opt, path)) {
        fprintf(stderr, "finetune: checkpoint %s: %s\n", dir, kiln_last_error());
        return false;
    }
    path_in(path, sizeof path, dir, "trainer_state.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fprintf(f, "%s\nstep %lld\nepoch %lld\npos %lld\nseed %llu\nbatch %lld\nseq %lld\noptim %s\nbase %s\n",
                           FORMAT, (long long)rs->step, (long long)rs->epoch, (long long)rs->pos,
                           (unsigned long long)rs->seed, (long long)rs->batch, (long long)rs->seq, rs->optim, rs->base) > 0;
    ok = f && !fclose(f) && ok && !rename(tmp, path);
    if (!ok) {
        remove(tmp);
        fprintf(stderr, "finetune: checkpoint %s: cannot write %s\n", dir, path);
    }
    return ok;
}

bool checkpoint_load(const char *dir, lora *l, kiln_optim *opt, run_state *rs) {
    char path[4096], line[64];
    path_in(path, sizeof path, dir, "trainer_state.txt");
    FILE *f = fopen(path, "r");
    run_state got = {0};
    long long step, epoch, pos, batch, seq;
    unsigned long long seed;
    bool ok = f && fgets(line, sizeof line, f) && !strncmp(line, FORMAT "\n", sizeof FORMAT) &&
              fscanf(f, "step %lld\nepoch %lld\npos %lld\nseed %llu\nbatch %lld\nseq %lld\noptim %15s\nbase %15s", &step,
                     &epoch, &pos, &seed, &batch, &seq, got.optim, got.base) == 8;
    if (f) fclose(f);
    if (!ok || step < 0 || epoch < 0 || pos < 0) {
        fprintf(stderr, "finetune: --resume %s: %s is missing or not a %s file\n", dir, path, FORMAT);
        return false;
    }
    if (seed != rs->seed || batch != rs->batch || seq != rs->seq || strcmp(got.optim, rs->optim) ||
        strcmp(got.base, rs->base)) {
        fprintf(stderr,
                "finetune: --resume %s: the checkpoint was made with --seed %llu --batch %lld --seq %lld, %s and %s, "
                "this run has --seed %llu --batch %lld --seq %lld, %s and %s\n",
                dir, seed, batch, seq, got.optim, got.base, (unsigned long long)rs->seed, (long long)rs->batch,
                (long long)rs->seq, rs->optim, rs->base);
        return false;
    }
    path_in(path, sizeof path, dir, "optimizer.safetensors");
    if (lora_load_peft(l, dir) || kiln_optim_load(opt, path)) {
        fprintf(stderr, "finetune: --resume %s: %s\n", dir, kiln_last_error());
        return false;
    }
    if (kiln_optim_steps(opt) + kiln_optim_skipped_steps(opt) != step) {
        fprintf(stderr,
                "finetune: --resume %s: the optimizer has taken (or skipped) %lld steps, trainer_state.txt says %lld\n",
                dir, (long long)(kiln_optim_steps(opt) + kiln_optim_skipped_steps(opt)), step);
        return false;
    }
    rs->step = step, rs->epoch = epoch, rs->pos = pos;
    return true;
}
