/* atomic_file.c — temporary file, fsync, rename, directory fsync
 * (atomic_file.h says why and how to use it). */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status kiln__afile_open(kiln__afile *af, const char *path, const char *who) {
    *af = (kiln__afile){.path = path, .who = who};
    if (!path || !*path) return kiln__errs(KILN_ERR_ARG, "%s: path is NULL or empty", who);
    size_t plen = strlen(path);
    /* the temporary name and the directory's, in one block allocated now so
     * that commit allocates nothing once the file is renamed */
    if (!(af->tmp = kiln__malloc(2 * plen + 14))) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    memcpy(af->tmp, path, plen);
    memcpy(af->tmp + plen, ".tmp.XXXXXX", 12);
    af->dir = af->tmp + plen + 12;
    const char *slash = strrchr(path, '/');
    if (!slash) strcpy(af->dir, ".");
    else if (slash == path) strcpy(af->dir, "/");
    else {
        memcpy(af->dir, path, (size_t)(slash - path));
        af->dir[slash - path] = 0;
    }
    int fd = mkostemp(af->tmp, O_CLOEXEC);
    if (fd < 0) {
        kiln_status s = kiln__errs(KILN_ERR_IO, "%s: cannot create a temporary file beside %s: %s", who, path,
                                   strerror(errno));
        free(af->tmp);
        af->tmp = NULL;
        return s;
    }
    /* mkostemp makes it 0600; a replaced file keeps its mode */
    struct stat old;
    (void)fchmod(fd, stat(path, &old) == 0 ? (old.st_mode & 07777) : 0644);
    if (!(af->f = fdopen(fd, "wb"))) {
        kiln_status s = kiln__errs(KILN_ERR_IO, "%s: %s: %s", who, af->tmp, strerror(errno));
        close(fd);
        kiln__afile_abort(af);
        return s;
    }
    return KILN_OK;
}

void kiln__afile_abort(kiln__afile *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->tmp);
    af->f = NULL;
    af->tmp = NULL;
}

/* The rename is durable once the directory's entry is on disk. File
 * systems that cannot sync a directory (EINVAL) are not an error. */
static kiln_status sync_dir(const kiln__afile *af) {
    int fd = open(af->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    kiln_status s = KILN_OK;
    if (fd < 0 || (fsync(fd) && errno != EINVAL && errno != ENOTSUP))
        s = kiln__errs(KILN_ERR_IO, "%s: %s was written but syncing its directory %s failed (it may not survive a crash): %s",
                       af->who, af->path, af->dir, strerror(errno));
    if (fd >= 0) close(fd);
    return s;
}

kiln_status kiln__afile_commit(kiln__afile *af) {
    const char *who = af->who;
    kiln_status s = KILN_OK;
    errno = 0;
    if (fflush(af->f) || ferror(af->f))
        s = kiln__errs(KILN_ERR_IO, "%s: writing %s: %s", who, af->tmp, strerror(errno ? errno : EIO));
    else if (fsync(fileno(af->f)))
        s = kiln__errs(KILN_ERR_IO, "%s: syncing %s: %s", who, af->tmp, strerror(errno));
    FILE *f = af->f;
    af->f = NULL;
    if (fclose(f) && !s) s = kiln__errs(KILN_ERR_IO, "%s: closing %s: %s", who, af->tmp, strerror(errno));
    if (!s && rename(af->tmp, af->path))
        s = kiln__errs(KILN_ERR_IO, "%s: renaming %s to %s: %s", who, af->tmp, af->path, strerror(errno));
    if (s) {
        kiln__afile_abort(af);
        return s;
    }
    s = sync_dir(af);
    free(af->tmp);
    af->tmp = NULL;
    return s;
}

kiln_status kiln__atomic_write(const char *path, const char *who, kiln__write_fn body, void *arg) {
    kiln__afile af;
    kiln_status s = kiln__afile_open(&af, path, who);
    if (s) return s;
    errno = 0;
    if ((s = body(af.f, af.tmp, arg))) {
        kiln__afile_abort(&af);
        return s;
    }
    return kiln__afile_commit(&af);
}
