/* atomic_file.c — temporary file, fsync, rename, directory fsync
 * (atomic_file.h says why and how to use it). */
#include "atomic_file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Does fd still have the name `name` in directory dfd (not removed or
 * replaced since it was opened)? */
static bool still_named(int fd, int dfd, const char *name) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* base.tmp.XXXXXX with mkostemp's six letters and digits */
static bool is_temp_of(const char *name, const char *base, size_t blen) {
    if (strncmp(name, base, blen) || strncmp(name + blen, ".tmp.", 5)) return false;
    const char *x = name + blen + 5;
    for (int i = 0; i < 6; i++)
        if (!isalnum((unsigned char)x[i])) return false;
    return x[6] == 0;
}

/* Remove the temporary files of earlier saves of af->path whose writers
 * died: those that can be locked without waiting (atomic_file.h). Best
 * effort, as a sweep: a file that cannot be opened or locked stays. */
static void remove_stale_temps(const kiln__afile *af) {
    DIR *d = opendir(af->dir);
    if (!d) return;
    const char *slash = strrchr(af->path, '/'), *base = slash ? slash + 1 : af->path;
    const char *mine = af->tmp + (base - af->path);
    size_t blen = strlen(base);
    int dfd = dirfd(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_temp_of(e->d_name, base, blen) || !strcmp(e->d_name, mine)) continue;
        int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat sb;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
            still_named(fd, dfd, e->d_name))
            unlinkat(dfd, e->d_name, 0);
        close(fd); /* drops the lock */
    }
    closedir(d);
}

/* A new temporary file beside the target, locked (atomic_file.h): its fd,
 * or -1 with errno set. A sweep by another save may remove the file
 * between its creation and the lock; then it is made again. */
static int create_locked(kiln__afile *af, size_t plen) {
    for (int tries = 0; tries < 8; tries++) {
        memcpy(af->tmp + plen, ".tmp.XXXXXX", 12);
        int fd = mkostemp(af->tmp, O_CLOEXEC);
        if (fd < 0) return -1;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK) return fd; /* a file system without locks: no sweep can lock it either */
        } else {
            const char *slash = strrchr(af->tmp, '/');
            int dfd = open(af->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            bool ours = dfd >= 0 && still_named(fd, dfd, slash ? slash + 1 : af->tmp);
            if (dfd >= 0) close(dfd);
            if (ours) return fd;
        }
        close(fd);
    }
    errno = EAGAIN;
    return -1;
}

kiln_status kiln__afile_open(kiln__afile *af, const char *path, const char *who) {
    *af = (kiln__afile){.path = path, .who = who, .lock_fd = -1};
    if (!path || !*path) return kiln__errs(KILN_ERR_ARG, "%s: path is NULL or empty", who);
    size_t plen = strlen(path);
    /* the temporary name and the directory's, in one block allocated now so
     * that commit allocates nothing once the file is renamed */
    if (!(af->tmp = kiln__malloc(2 * plen + 14))) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    memcpy(af->tmp, path, plen);
    af->dir = af->tmp + plen + 12;
    const char *slash = strrchr(path, '/');
    if (!slash) strcpy(af->dir, ".");
    else if (slash == path) strcpy(af->dir, "/");
    else {
        memcpy(af->dir, path, (size_t)(slash - path));
        af->dir[slash - path] = 0;
    }
    int fd = create_locked(af, plen);
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
    /* the lock lives as long as any descriptor of the file: this one stays
     * open until the rename, after the stream's own is closed */
    af->lock_fd = fd;
    int sfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (sfd < 0 || !(af->f = fdopen(sfd, "wb"))) {
        kiln_status s = kiln__errs(KILN_ERR_IO, "%s: %s: %s", who, af->tmp, strerror(errno));
        if (sfd >= 0) close(sfd);
        kiln__afile_abort(af);
        return s;
    }
    remove_stale_temps(af);
    return KILN_OK;
}

static void unlock(kiln__afile *af) {
    if (af->lock_fd >= 0) close(af->lock_fd);
    af->lock_fd = -1;
}

void kiln__afile_abort(kiln__afile *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    unlock(af);
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
    unlock(af);
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
