/* atomic_file.h — crash-safe writing of a whole file (core/atomic_file.c),
 * for every writer of work (safetensors, checkpoints and optimizer state
 * through it, GGUF); not installed.
 *
 * The bytes go to a temporary file beside the target (path.tmp.XXXXXX,
 * same directory, so the rename stays within one file system), which is
 * flushed, checked, fsync'd and closed, then rename()d over the target,
 * and the directory is fsync'd so the rename itself survives a power cut.
 * A reader (or a later run after a crash, a SIGKILL, a full disk) sees the
 * old file or the new one, never a mixture or a truncated file; on any
 * error the temporary file is removed and the old file is untouched.
 *
 *     kiln__afile af;
 *     kiln_status s = kiln__afile_open(&af, path, who);
 *     if (s) return s;
 *     if (fwrite(p, 1, n, af.f) != n) s = kiln__errs(KILN_ERR_IO, ...);
 *     return s ? (kiln__afile_abort(&af), s) : kiln__afile_commit(&af);
 *
 * A process killed between open and commit leaves its path.tmp.XXXXXX
 * behind; it is never read as the target, and the next save of the same
 * path removes it. A writer holds an exclusive flock(2) on its temporary
 * file from creation until the rename, and the sweep removes only the
 * path.tmp.XXXXXX files it can lock without waiting: those of writers
 * that died (their locks died with them), never one that another thread
 * or process is still writing. (A writer of a kiln without the lock, or
 * on a file system without flock, is not protected: the former's file
 * looks stale, the latter's cannot be locked and stays.) */
#ifndef KILN_ATOMIC_FILE_H
#define KILN_ATOMIC_FILE_H

#include "internal.h"

#include <stdio.h>

typedef struct kiln__afile {
    FILE *f;          /* write the file's bytes here */
    char *tmp;        /* the temporary file's name, for messages */
    char *dir;        /* the target's directory (in tmp's block) */
    const char *path; /* the target (the caller's string, kept until commit/abort) */
    const char *who;  /* the public function, for messages */
    int lock_fd;      /* holds the flock on tmp until the rename (-1: none) */
} kiln__afile;

/* Create the temporary file beside path (its mode: the old file's if there
 * is one, else 0644). */
kiln_status kiln__afile_open(kiln__afile *af, const char *path, const char *who);
/* Flush, check the stream's error flag, fsync, close, rename over path,
 * fsync the directory. On failure the temporary file is removed and path
 * is as it was (unless only the directory sync failed: then path is the
 * new file and the error says it may not be durable). af is spent either
 * way. */
kiln_status kiln__afile_commit(kiln__afile *af);
/* Close and remove the temporary file; path is untouched. */
void kiln__afile_abort(kiln__afile *af);

/* The whole sequence around a callback: body writes the file's bytes to f
 * (tmp is its name, for messages); its error aborts the write. */
typedef kiln_status (*kiln__write_fn)(FILE *f, const char *tmp, void *arg);
kiln_status kiln__atomic_write(const char *path, const char *who, kiln__write_fn body, void *arg);

#endif
