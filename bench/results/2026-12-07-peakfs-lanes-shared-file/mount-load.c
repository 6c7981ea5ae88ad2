// A load on a mounted file system from P threads, for a machine without fio (the GPU
// machine): built here with `gcc -O2 -static -pthread`.
//
//   mount-load DIR randread|randwrite P SECONDS   4 KiB O_DIRECT random I/O on DIR/tN (32 MiB,
//                                                  written first), one file per thread
//   mount-load DIR sharedread|sharedwrite P SECONDS
//                                                  the same on one file, DIR/shared (written
//                                                  by thread 0 first), opened by each thread
//   mount-load DIR create P FILES                  create and close FILES empty files per
//                                                  thread in DIR/cN, then stat each, then
//                                                  unlink each
//
// Prints one line per phase: the phase, P, operations, seconds, operations per second.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES (32L << 20)
#define IO 4096

static const char *dir, *mode;
static long param;
static int shared;
static pthread_barrier_t start_line, filled;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what, const char *path) {
  perror(path);
  fprintf(stderr, "mount-load: %s failed\n", what);
  exit(1);
}

struct result {
  long ops[3];
  double secs[3];
};

static void *io_thread(void *arg) {
  long id = (long)arg;
  struct result *r = calloc(1, sizeof *r);
  char path[4096];
  if (shared)
    snprintf(path, sizeof path, "%s/shared", dir);
  else
    snprintf(path, sizeof path, "%s/t%ld", dir, id);
  void *buf;
  if (posix_memalign(&buf, IO, 1 << 20)) die("alloc", path);
  memset(buf, (int)id, 1 << 20);
  if (!shared || id == 0) {
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
    if (fd < 0) die("open", path);
    for (long off = 0; off < FILE_BYTES; off += 1 << 20)
      if (pwrite(fd, buf, 1 << 20, off) != 1 << 20) die("fill", path);
    if (fsync(fd) || close(fd)) die("fsync", path);
  }
  pthread_barrier_wait(&filled);
  int write_mode = strstr(mode, "write") != NULL;
  int fd = open(path, (write_mode ? O_RDWR : O_RDONLY) | O_DIRECT);
  if (fd < 0) die("open", path);
  unsigned seed = (unsigned)id * 7919u + 1;
  pthread_barrier_wait(&start_line);
  double t0 = now(), end = t0 + param;
  long ops = 0;
  while ((ops & 63) || now() < end) {
    off_t off = (off_t)(rand_r(&seed) % (FILE_BYTES / IO)) * IO;
    ssize_t n = write_mode ? pwrite(fd, buf, IO, off) : pread(fd, buf, IO, off);
    if (n != IO) die(write_mode ? "pwrite" : "pread", path);
    ops++;
  }
  r->ops[0] = ops;
  r->secs[0] = now() - t0;
  close(fd);
  pthread_barrier_wait(&filled);
  if (!shared || id == 0) unlink(path);
  return r;
}

static void *meta_thread(void *arg) {
  long id = (long)arg;
  struct result *r = calloc(1, sizeof *r);
  char d[4096], path[4200];
  snprintf(d, sizeof d, "%s/c%ld", dir, id);
  if (mkdir(d, 0755) && access(d, F_OK)) die("mkdir", d);
  for (int phase = 0; phase < 3; phase++) {
    pthread_barrier_wait(&start_line);
    double t0 = now();
    for (long i = 0; i < param; i++) {
      snprintf(path, sizeof path, "%s/f%ld", d, i);
      struct stat st;
      if (phase == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || close(fd)) die("create", path);
      } else if (phase == 1) {
        if (stat(path, &st)) die("stat", path);
      } else if (unlink(path)) {
        die("unlink", path);
      }
    }
    r->ops[phase] = param;
    r->secs[phase] = now() - t0;
  }
  rmdir(d);
  return r;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: mount-load DIR randread|randwrite|sharedread|sharedwrite|create P "
                    "SECONDS|FILES\n");
    return 2;
  }
  dir = argv[1];
  mode = argv[2];
  long p = atol(argv[3]);
  param = atol(argv[4]);
  int meta = strcmp(mode, "create") == 0;
  shared = strncmp(mode, "shared", 6) == 0;
  if (!meta && strcmp(mode, "randread") && strcmp(mode, "randwrite") &&
      strcmp(mode, "sharedread") && strcmp(mode, "sharedwrite")) {
    fprintf(stderr, "mount-load: unknown mode %s\n", mode);
    return 2;
  }
  if (p < 1 || p > 1024 || param < 1) {
    fprintf(stderr, "mount-load: bad P or count\n");
    return 2;
  }
  pthread_barrier_init(&start_line, NULL, (unsigned)p);
  pthread_barrier_init(&filled, NULL, (unsigned)p);
  pthread_t *t = calloc((size_t)p, sizeof *t);
  for (long i = 0; i < p; i++)
    pthread_create(&t[i], NULL, meta ? meta_thread : io_thread, (void *)i);
  long ops[3] = {0};
  double secs[3] = {0};
  for (long i = 0; i < p; i++) {
    struct result *r;
    pthread_join(t[i], (void **)&r);
    for (int k = 0; k < 3; k++) {
      ops[k] += r->ops[k];
      if (r->secs[k] > secs[k]) secs[k] = r->secs[k];
    }
    free(r);
  }
  const char *names[3] = {"create", "stat", "unlink"};
  for (int k = 0; k < (meta ? 3 : 1); k++)
    printf("%-9s P=%-3ld %8ld ops %6.2f s %10.0f ops/s\n", meta ? names[k] : mode, p, ops[k],
           secs[k], ops[k] / secs[k]);
  return 0;
}
