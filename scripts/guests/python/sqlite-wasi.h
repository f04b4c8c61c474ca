/*
 * Forced include for building SQLite's unix VFS for wasm32-wasi
 * (scripts/guests/build-python.sh). WASI has no file ownership, modes or
 * POSIX advisory locks: a sandbox's files belong to one process, so chmod
 * and chown succeed without effect and every lock request is granted.
 */
#ifndef HYBOX_SQLITE_WASI_H
#define HYBOX_SQLITE_WASI_H
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef F_RDLCK
#define F_RDLCK 0
#define F_WRLCK 1
#define F_UNLCK 2
#endif
#ifndef F_GETLK
#define F_GETLK 5
#define F_SETLK 6
#define F_SETLKW 7
#endif

static inline int hybox_fchmod(int fd, mode_t mode)
{
	(void)fd;
	(void)mode;
	return 0;
}

static inline int hybox_fchown(int fd, uid_t uid, gid_t gid)
{
	(void)fd;
	(void)uid;
	(void)gid;
	return 0;
}

static inline uid_t hybox_geteuid(void) { return 0; }

static inline int hybox_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	switch (cmd) {
	case F_GETLK:
		((struct flock *)arg)->l_type = F_UNLCK;
		return 0;
	case F_SETLK:
	case F_SETLKW:
		return 0;
	default:
		return fcntl(fd, cmd, (int)(intptr_t)arg);
	}
}

#define fchmod hybox_fchmod
#define fchown hybox_fchown
#define geteuid hybox_geteuid
#define fcntl hybox_fcntl
#endif
