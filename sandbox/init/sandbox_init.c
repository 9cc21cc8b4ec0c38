/* The init (PID 1) of every sandbox: starts commands for the manager and
 * reaps every process.
 *
 * It is a small static binary, embedded in the flashroll library and
 * executed from a sealed memfd after the sandbox is fully contained, so it
 * runs with no capabilities and under the seccomp filter like everything
 * else in the sandbox, and works in any image (no dynamic loader needed).
 * Commands are children of this init: they inherit its namespaces,
 * cgroups, filter and dropped privileges by construction, and an exec costs
 * one fork here instead of re-entering namespaces from outside.
 *
 * Protocol: see sandbox/init_protocol.h. When the manager's end of the
 * control socket closes, init exits and the kernel kills the whole
 * sandbox with it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/init_protocol.h"

#define MAX_EXECS 256

struct running {
  uint32_t exec_id;
  pid_t pid;
};

static struct running g_running[MAX_EXECS];
static int g_control = FR_INIT_CONTROL_FD;

static void send_header(uint32_t type, uint32_t exec_id, int32_t value, int32_t value2) {
  struct fr_init_header h;
  memset(&h, 0, sizeof(h));
  h.type = type;
  h.exec_id = exec_id;
  h.value = value;
  h.value2 = value2;
  if (send(g_control, &h, sizeof(h), MSG_NOSIGNAL) < 0) _exit(0);
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

static void handle_exec(const struct fr_init_header* h, char* payload, size_t payload_len, const int* fds, int nfds) {
  int err = 0;
  pid_t pid = -1;
  char** argv = NULL;
  char** envp = NULL;
  const char* cwd = "/";
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
    uint32_t need = h->argc + h->envc + 1;
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
      else cwd = s;
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
    int e = 0;
    if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) e = errno;
    if (e == 0) {
      syscall(SYS_close_range, 3, ~0U, 0x4 /* CLOSE_RANGE_CLOEXEC */);
      if (chdir(cwd) != 0) e = errno;
    }
    if (e == 0) {
      exec_command(argv, envp);
      e = errno;
    }
    (void)!write(report[1], &e, sizeof(e));
    _exit(127);
  }
  close(report[1]);
  {
    int child_err = 0;
    ssize_t n;
    do {
      n = read(report[0], &child_err, sizeof(child_err));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(child_err)) err = child_err;
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
  send_header(FR_INIT_STARTED, h->exec_id, pid > 0 ? pid : -1, err);
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
        send_header(FR_INIT_EXITED, g_running[i].exec_id, status, 0);
        g_running[i].pid = 0;
      }
    }
  }
}

int main(void) {
  fcntl(g_control, F_SETFD, FD_CLOEXEC);
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
    struct pollfd p[2] = {{g_control, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof(info)) > 0) {
      }
      reap();
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
      if (n <= 0) return 0; /* the manager is gone: the sandbox ends with us */
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
