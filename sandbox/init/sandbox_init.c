/* The init (PID 1) of every sandbox: starts commands for the manager and
 * reaps every process.
 *
 * It is a small static binary, embedded in the flashroll library and
 * executed from a sealed memfd after the sandbox is fully contained, so it
 * runs with the sandbox's bounded capabilities (sandbox/caps.h) and under
 * the seccomp filter like everything else in the sandbox, and works in any image (no dynamic loader needed).
 * Commands are children of this init: they inherit its namespaces,
 * cgroups, filter and dropped privileges by construction, and an exec costs
 * one fork here instead of re-entering namespaces from outside.
 *
 * Protocol: see sandbox/init_protocol.h. When the manager's end of the
 * control socket closes, init exits and the kernel kills the whole
 * sandbox with it, unless the sandbox is kept: then it waits for the next
 * manager on its listening socket, for a bounded time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/init_protocol.h"

#define MAX_EXECS 256

struct running {
  uint32_t exec_id;
  pid_t pid;
};

static struct running g_running[MAX_EXECS];
static int g_control = FR_INIT_CONTROL_FD; /* -1 while a kept sandbox has no manager */
static int g_listen = -1;                  /* kept: where the next manager connects */
static long long g_orphan_ms = 0;          /* kept: how long to wait for one */
static long long g_expires_ms = 0;         /* kept: the sandbox's TTL, CLOCK_REALTIME ms; 0: none */
static long long g_orphan_deadline = 0;    /* while g_control is -1: when to end the sandbox */

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The manager's end closed: the sandbox ends with it, or a kept one waits
 * for the next manager until its deadline. */
static void lose_manager(void) {
  if (g_listen < 0) _exit(0);
  if (g_control >= 0) close(g_control);
  g_control = -1;
  g_orphan_deadline = now_ms() + g_orphan_ms;
  if (g_expires_ms > 0 && g_expires_ms < g_orphan_deadline) g_orphan_deadline = g_expires_ms;
}

static void send_header(uint32_t type, uint32_t exec_id, int32_t value, int32_t value2, uint32_t stage) {
  struct fr_init_header h;
  memset(&h, 0, sizeof(h));
  h.type = type;
  h.exec_id = exec_id;
  h.value = value;
  h.value2 = value2;
  h.reserved = stage;
  if (g_control < 0) return; /* no manager to tell: the next one does not know the exec */
  if (send(g_control, &h, sizeof(h), MSG_NOSIGNAL) < 0) lose_manager();
}

/* Searches PATH from the command's own environment, as a shell would. */
static void exec_command(char** argv, char** envp) {
  const char* file = argv[0];
  if (strchr(file, '/') != NULL) {
    execve(file, argv, envp);
    return;
  }
  const char* path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (char** e = envp; *e != NULL; ++e) {
    if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  }
  int saved = ENOENT;
  char buf[4096];
  while (*path != '\0') {
    const char* end = strchr(path, ':');
    size_t len = end ? (size_t)(end - path) : strlen(path);
    if (len + strlen(file) + 2 < sizeof(buf)) {
      memcpy(buf, path, len);
      buf[len] = '/';
      strcpy(buf + len + 1, file);
      execve(buf, argv, envp);
      if (errno != ENOENT && errno != ENOTDIR) saved = errno;
    }
    if (end == NULL) break;
    path = end + 1;
  }
  errno = saved;
}

/* --- credentials of an exec's user, from the sandbox's own files (no NSS:
 * the init is static and runs in any image) --- */

#define MAX_GROUPS 1024

struct credentials {
  uid_t uid;
  gid_t gid;
  int ngroups;
  gid_t groups[MAX_GROUPS];
};

/* A whole file (up to 4 MiB) as a NUL-terminated string, or NULL. */
static char* read_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  size_t cap = 65536, len = 0;
  char* buf = malloc(cap + 1);
  while (buf != NULL) {
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
    if (len == cap) {
      char* bigger = cap < (4u << 20) ? realloc(buf, cap * 2 + 1) : NULL;
      if (bigger == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  close(fd);
  if (buf != NULL) buf[len] = '\0';
  return buf;
}

/* A decimal id (what a name is not: all digits). */
static int parse_id(const char* s, uint32_t* out) {
  if (*s == '\0') return 0;
  uint64_t v = 0;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9') return 0;
    v = v * 10 + (uint64_t)(*s - '0');
    if (v >= 0xffffffffu) return 0;
  }
  *out = (uint32_t)v;
  return 1;
}

/* Splits the line at `line` (ending at '\n' or NUL) into up to `max`
 * ':'-separated fields in place; returns the number of fields and sets
 * *next to the following line. */
static int split_line(char* line, char** fields, int max, char** next) {
  char* end = strchr(line, '\n');
  *next = end != NULL ? end + 1 : line + strlen(line);
  if (end != NULL) *end = '\0';
  int n = 0;
  fields[n++] = line;
  for (char* c = line; *c != '\0' && n < max; ++c) {
    if (*c == ':') {
      *c = '\0';
      fields[n++] = c + 1;
    }
  }
  return n;
}

/* Whether the comma-separated `list` holds `name`. */
static int listed(const char* list, const char* name) {
  size_t len = strlen(name);
  for (const char* p = list; *p != '\0';) {
    const char* comma = strchr(p, ',');
    size_t item = comma != NULL ? (size_t)(comma - p) : strlen(p);
    if (item == len && strncmp(p, name, len) == 0) return 1;
    if (comma == NULL) break;
    p = comma + 1;
  }
  return 0;
}

/* Resolves `user` (a name or a uid) and `group` (a name or a gid) as a
 * container runtime does: a name must be in /etc/passwd (resp. /etc/group);
 * the primary group is `group`, else the user's passwd entry's, else 0; the
 * supplementary groups are the /etc/group entries that list the user's
 * name. Returns 0 or an errno (ENOENT: a name that is not there) and
 * then has written why to stderr. */
static int resolve_credentials(const char* user, const char* group, struct credentials* out) {
  memset(out, 0, sizeof(*out));
  char name[256] = "";
  int have_gid = 0;
  if (*user != '\0') {
    uint32_t id = 0;
    int numeric = parse_id(user, &id);
    int found = 0;
    char* passwd = read_file("/etc/passwd");
    for (char* line = passwd; line != NULL && *line != '\0' && !found;) {
      char* f[7];
      char* next;
      uint32_t uid = 0, gid = 0;
      if (split_line(line, f, 7, &next) >= 4 && parse_id(f[2], &uid) && parse_id(f[3], &gid) &&
          (numeric ? uid == id : strcmp(f[0], user) == 0)) {
        found = 1;
        out->uid = uid;
        out->gid = gid;
        have_gid = 1;
        snprintf(name, sizeof(name), "%s", f[0]);
      }
      line = next;
    }
    free(passwd);
    if (!found && !numeric) {
      dprintf(2, "flashroll-init: user \"%s\": no such user in the sandbox's /etc/passwd\n", user);
      return ENOENT;
    }
    if (!found) out->uid = id;
  }
  char* groups = read_file("/etc/group");
  int group_found = 0;
  uint32_t group_id = 0;
  int group_numeric = *group != '\0' && parse_id(group, &group_id);
  for (char* line = groups; line != NULL && *line != '\0';) {
    char* f[4];
    char* next;
    uint32_t gid = 0;
    int n = split_line(line, f, 4, &next);
    if (n >= 3 && parse_id(f[2], &gid)) {
      if (*group != '\0' && !group_numeric && strcmp(f[0], group) == 0) {
        group_found = 1;
        group_id = gid;
      }
      if (name[0] != '\0' && n == 4 && listed(f[3], name) && out->ngroups < MAX_GROUPS) {
        out->groups[out->ngroups++] = gid;
      }
    }
    line = next;
  }
  free(groups);
  if (*group != '\0') {
    if (!group_numeric && !group_found) {
      dprintf(2, "flashroll-init: group \"%s\": no such group in the sandbox's /etc/group\n", group);
      return ENOENT;
    }
    out->gid = group_id;
  } else if (!have_gid) {
    out->gid = 0;
  }
  return 0;
}

/* Becomes the exec's user: groups first, then the gid, then the uid (which
 * ends the capabilities of a non-root user, caps.h). */
static int become(const struct credentials* c) {
  if (syscall(SYS_setgroups, (size_t)c->ngroups, c->groups) != 0) return errno;
  if (syscall(SYS_setresgid, c->gid, c->gid, c->gid) != 0) return errno;
  if (syscall(SYS_setresuid, c->uid, c->uid, c->uid) != 0) return errno;
  return 0;
}

static void handle_exec(const struct fr_init_header* h, char* payload, size_t payload_len, const int* fds, int nfds) {
  int err = 0;
  pid_t pid = -1;
  char** argv = NULL;
  char** envp = NULL;
  const char* cwd = "/";
  const char* user = "";
  const char* group = "";
  int stage = FR_INIT_STAGE_EXEC;
  int slot = -1;
  for (int i = 0; i < MAX_EXECS; ++i) {
    if (g_running[i].pid == 0) {
      slot = i;
      break;
    }
  }
  if (nfds != 3 || h->argc == 0 || h->argc > 65536 || h->envc > 65536 || slot < 0) {
    err = slot < 0 ? EAGAIN : EINVAL;
    goto done;
  }
  argv = calloc(h->argc + 1, sizeof(char*));
  envp = calloc(h->envc + 1, sizeof(char*));
  if (argv == NULL || envp == NULL) {
    err = ENOMEM;
    goto done;
  }
  {
    size_t pos = 0;
    uint32_t need = h->argc + h->envc + 3;
    for (uint32_t i = 0; i < need; ++i) {
      if (pos >= payload_len) {
        err = EINVAL;
        goto done;
      }
      char* s = payload + pos;
      size_t len = strnlen(s, payload_len - pos);
      if (pos + len >= payload_len) {
        err = EINVAL;
        goto done;
      }
      if (i < h->argc) argv[i] = s;
      else if (i < h->argc + h->envc) envp[i - h->argc] = s;
      else if (i == h->argc + h->envc) cwd = s;
      else if (i == h->argc + h->envc + 1) user = s;
      else group = s;
      pos += len + 1;
    }
  }
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    err = errno;
    goto done;
  }
  pid = fork();
  if (pid < 0) {
    err = errno;
    close(report[0]);
    close(report[1]);
    goto done;
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    int e = 0, at = FR_INIT_STAGE_EXEC;
    if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) e = errno;
    if (e == 0) syscall(SYS_close_range, 3, ~0U, 0x4 /* CLOSE_RANGE_CLOEXEC */);
    if (e == 0 && (*user != '\0' || *group != '\0')) {
      static struct credentials creds;
      at = FR_INIT_STAGE_CREDENTIALS;
      e = resolve_credentials(user, group, &creds);
      if (e == 0 && (e = become(&creds)) != 0) {
        dprintf(2, "flashroll-init: user \"%s\" group \"%s\": cannot become uid %u gid %u: %s\n", user, group,
                (unsigned)creds.uid, (unsigned)creds.gid, strerror(e));
      }
      if (e == 0) at = FR_INIT_STAGE_EXEC;
    }
    /* As the user, so that a directory it may not enter is refused. */
    if (e == 0 && chdir(cwd) != 0) e = errno;
    if (e == 0) {
      exec_command(argv, envp);
      e = errno;
    }
    int why[2] = {e, at};
    (void)!write(report[1], why, sizeof(why));
    _exit(127);
  }
  close(report[1]);
  {
    int why[2] = {0, FR_INIT_STAGE_EXEC};
    ssize_t n;
    do {
      n = read(report[0], why, sizeof(why));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(why)) {
      err = why[0];
      stage = why[1];
    }
  }
  close(report[0]);
  if (err == 0) {
    g_running[slot].exec_id = h->exec_id;
    g_running[slot].pid = pid;
  }
done:
  for (int i = 0; i < nfds; ++i) close(fds[i]);
  free(argv);
  free(envp);
  send_header(FR_INIT_STARTED, h->exec_id, pid > 0 ? pid : -1, err, err != 0 ? (uint32_t)stage : 0);
}

/* Only an exec that is running (started, not yet reaped) is signalled: a
 * signal for an id that never started or has ended is stale (the manager
 * sends without waiting for the exec) and is ignored, so it can never reach
 * a later command. The command leads its own session and process group
 * (setsid above) and a session leader cannot leave its group, so killing
 * the group reaches it once: a second kill of the pid would deliver a
 * queued real-time signal twice. */
static void handle_signal(const struct fr_init_header* h) {
  int sig = h->value;
  if (sig <= 0 || sig > 64) return;
  for (int i = 0; i < MAX_EXECS; ++i) {
    if (g_running[i].pid > 0 && g_running[i].exec_id == h->exec_id) {
      kill(-g_running[i].pid, sig);
      return;
    }
  }
}

static void reap(void) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (int i = 0; i < MAX_EXECS; ++i) {
      if (g_running[i].pid == pid) {
        send_header(FR_INIT_EXITED, g_running[i].exec_id, status, 0, 0);
        g_running[i].pid = 0;
      }
    }
  }
}

/* argv[1] of a kept sandbox: "ORPHAN_MS:EXPIRES_MS". */
static void parse_keep(int argc, char** argv) {
  if (argc < 2 || fcntl(FR_INIT_LISTEN_FD, F_GETFD) < 0) return;
  char* end = NULL;
  long long orphan = strtoll(argv[1], &end, 10);
  if (end == argv[1] || *end != ':' || orphan < 0) return;
  char* rest = end + 1;
  long long expires = strtoll(rest, &end, 10);
  if (end == rest || *end != '\0' || expires < 0) return;
  g_listen = FR_INIT_LISTEN_FD;
  g_orphan_ms = orphan;
  g_expires_ms = expires;
  fcntl(g_listen, F_SETFD, FD_CLOEXEC);
  fcntl(FR_INIT_RANGE_LOCK_FD, F_SETFD, FD_CLOEXEC); /* held, never read */
}

int main(int argc, char** argv) {
  fcntl(g_control, F_SETFD, FD_CLOEXEC);
  parse_keep(argc, argv);
  /* No process in the sandbox may read or write this one's memory. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 1;
  char* buf = malloc(FR_INIT_MAX_MESSAGE);
  if (buf == NULL) return 1;
  for (;;) {
    /* Without a manager, a kept sandbox's init listens for the next one. */
    const int orphaned = g_control < 0;
    int timeout = -1;
    if (orphaned) {
      const long long left = g_orphan_deadline - now_ms();
      if (left <= 0) return 0; /* nobody came: the sandbox ends with us */
      timeout = left > 60000 ? 60000 : (int)left;
    }
    struct pollfd p[2] = {{orphaned ? g_listen : g_control, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(p, 2, timeout) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof(info)) > 0) {
      }
      reap();
    }
    if (orphaned) {
      if (p[0].revents & POLLIN) {
        int next = accept4(g_listen, NULL, NULL, SOCK_CLOEXEC);
        if (next >= 0) g_control = next;
      }
      continue;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * 3)];
      } control;
      struct iovec iov = {buf, FR_INIT_MAX_MESSAGE};
      struct msghdr msg;
      memset(&msg, 0, sizeof(msg));
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control.space;
      msg.msg_controllen = sizeof(control.space);
      ssize_t n = recvmsg(g_control, &msg, MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        lose_manager(); /* the manager is gone: the sandbox ends with us, unless kept */
        continue;
      }
      int fds[3];
      int nfds = 0;
      for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
          int* in = (int*)CMSG_DATA(c);
          for (int i = 0; i < count; ++i) {
            if (nfds < 3) fds[nfds++] = in[i];
            else close(in[i]);
          }
        }
      }
      if ((size_t)n < sizeof(struct fr_init_header) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        for (int i = 0; i < nfds; ++i) close(fds[i]);
        continue;
      }
      struct fr_init_header h;
      memcpy(&h, buf, sizeof(h));
      if (h.type == FR_INIT_EXEC && h.payload_len == (size_t)n - sizeof(h)) {
        handle_exec(&h, buf + sizeof(h), h.payload_len, fds, nfds);
      } else {
        for (int i = 0; i < nfds; ++i) close(fds[i]);
        if (h.type == FR_INIT_SIGNAL) handle_signal(&h);
      }
    }
  }
}
