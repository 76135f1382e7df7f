// A full disk for tests, loaded with LD_PRELOAD into an unchanged onnxdp: write(), writev(),
// pwrite() and pwritev() on files under ONNXDP_FAULT_DIR share a budget of ONNXDP_FAULT_BYTES
// bytes; the write that crosses it is cut short (as a filling disk does) and every later one fails
// with ENOSPC. With ONNXDP_FAULT_FSYNC set, fsync() and fdatasync() of those files fail with that
// errno number instead (a disk that fills at write-back, or reports EIO). Other files pass through.
// libstdc++'s ofstream writes through write()/writev() (what onnxdp's checkpoints and metrics use);
// glibc's stdio calls its own internal write, which this cannot see.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static const char* fault_dir(void) {
  static const char* dir;
  static int read_env;
  if (!read_env) {
    dir = getenv("ONNXDP_FAULT_DIR");
    read_env = 1;
  }
  return dir && *dir ? dir : NULL;
}

// Is fd a file under ONNXDP_FAULT_DIR (an absolute, resolved path)?
static int watched(int fd) {
  const char* dir = fault_dir();
  if (!dir) return 0;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  const size_t len = strlen(dir);
  return strncmp(path, dir, len) == 0 && (path[len] == '/' || path[len] == '\0');
}

static long long used;  // bytes written under the folder so far (all threads)

// How many of want bytes still fit: 0 once the budget is spent.
static size_t room(size_t want) {
  const char* b = getenv("ONNXDP_FAULT_BYTES");
  if (!b) return want;
  const long long budget = atoll(b);
  const long long left = budget - __atomic_load_n(&used, __ATOMIC_SEQ_CST);
  if (left <= 0) return 0;
  return (long long)want < left ? want : (size_t)left;
}

static void count(ssize_t wrote) {
  if (wrote > 0) __atomic_add_fetch(&used, (long long)wrote, __ATOMIC_SEQ_CST);
}

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec*, int, off_t);
typedef int (*sync_fn)(int);
// The C library's own function of that name, found once.
#define REAL(name, type) \
  static type real_##name; \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void* buf, size_t n) {
  REAL(write, write_fn);
  if (n == 0 || !watched(fd)) return real_write(fd, buf, n);
  const size_t k = room(n);
  if (k == 0) { errno = ENOSPC; return -1; }
  const ssize_t r = real_write(fd, buf, k);
  count(r);
  return r;
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  REAL(pwrite, pwrite_fn);
  if (n == 0 || !watched(fd)) return real_pwrite(fd, buf, n, off);
  const size_t k = room(n);
  if (k == 0) { errno = ENOSPC; return -1; }
  const ssize_t r = real_pwrite(fd, buf, k, off);
  count(r);
  return r;
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

// The first iovcnt buffers cut to k bytes in all: the count of buffers used, written into out.
static int cut(const struct iovec* iov, int iovcnt, size_t k, struct iovec* out) {
  int m = 0;
  for (int i = 0; i < iovcnt && k > 0; ++i) {
    out[m] = iov[i];
    if (out[m].iov_len > k) out[m].iov_len = k;
    k -= out[m].iov_len;
    ++m;
  }
  return m;
}

static size_t total(const struct iovec* iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  REAL(writev, writev_fn);
  const size_t n = iovcnt > 0 ? total(iov, iovcnt) : 0;
  if (n == 0 || iovcnt > 1024 || !watched(fd)) return real_writev(fd, iov, iovcnt);
  const size_t k = room(n);
  if (k == 0) { errno = ENOSPC; return -1; }
  struct iovec part[1024];
  const ssize_t r = real_writev(fd, part, cut(iov, iovcnt, k, part));
  count(r);
  return r;
}

ssize_t pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  REAL(pwritev, pwritev_fn);
  const size_t n = iovcnt > 0 ? total(iov, iovcnt) : 0;
  if (n == 0 || iovcnt > 1024 || !watched(fd)) return real_pwritev(fd, iov, iovcnt, off);
  const size_t k = room(n);
  if (k == 0) { errno = ENOSPC; return -1; }
  struct iovec part[1024];
  const ssize_t r = real_pwritev(fd, part, cut(iov, iovcnt, k, part), off);
  count(r);
  return r;
}

ssize_t pwritev64(int fd, const struct iovec* iov, int iovcnt, off_t off) { return pwritev(fd, iov, iovcnt, off); }

// ONNXDP_FAULT_FSYNC=N: syncing a watched file fails with errno N.
static int sync_fault(int fd) {
  const char* e = getenv("ONNXDP_FAULT_FSYNC");
  if (!e || !*e || !watched(fd)) return 0;
  errno = atoi(e);
  return -1;
}

int fsync(int fd) {
  REAL(fsync, sync_fn);
  return sync_fault(fd) ? -1 : real_fsync(fd);
}

int fdatasync(int fd) {
  REAL(fdatasync, sync_fn);
  return sync_fault(fd) ? -1 : real_fdatasync(fd);
}
