/* The wire protocol between the manager and a sandbox's init process.
 *
 * One SOCK_SEQPACKET socket pair per sandbox; the init end is fd 3 in the
 * sandbox. Every message starts with an fr_init_header; messages keep their
 * boundaries, so no framing is needed.
 *
 *   manager -> init  EXEC    header (exec_id, argc, envc, payload_len) then
 *                            argv, envp, cwd, user and group as
 *                            NUL-terminated strings (user and group: a name
 *                            or a number, empty for the init's own, root);
 *                            SCM_RIGHTS carries stdin, stdout, stderr.
 *   manager -> init  SIGNAL  header (exec_id, value = signal number): sent to
 *                            the exec's process group.
 *   init -> manager  STARTED header (exec_id, value = pid inside, value2 =
 *                            errno when the command could not be started,
 *                            reserved = the fr_init_start_stage that failed).
 *   init -> manager  EXITED  header (exec_id, value = wait status).
 *
 * The init is inside the sandbox and so untrusted: the manager checks every
 * message it receives.
 *
 * A kept sandbox (sandbox.h, Options::keep_sandboxes) outlives its
 * manager: its init also holds a listening SOCK_SEQPACKET socket on fd 4
 * (bound by the manager at a root-only host path, kept.h) and the lock of
 * its uid range on fd 5, and gets argv[1] "ORPHAN_MS:EXPIRES_MS". When the
 * control socket closes it keeps running and accepts the next manager's
 * connection as its control socket; after ORPHAN_MS without one, or at
 * EXPIRES_MS (CLOCK_REALTIME ms; 0: none), it exits, ending the sandbox.
 * Without fd 4 the init exits as soon as the control socket closes.
 *
 * Shared by C (the init, sandbox/init/sandbox_init.c) and C++.
 */
#ifndef FLASHROLL_SANDBOX_INIT_PROTOCOL_H_
#define FLASHROLL_SANDBOX_INIT_PROTOCOL_H_

#include <stdint.h>

#define FR_INIT_CONTROL_FD 3
#define FR_INIT_LISTEN_FD 4
#define FR_INIT_RANGE_LOCK_FD 5
#define FR_INIT_MAX_MESSAGE (256 * 1024)

enum fr_init_message_type {
  FR_INIT_EXEC = 1,
  FR_INIT_SIGNAL = 2,
  FR_INIT_STARTED = 3,
  FR_INIT_EXITED = 4,
};

/* Where a command that could not be started failed. */
enum fr_init_start_stage {
  FR_INIT_STAGE_EXEC = 0,        /* the exec itself (or the stdio, the cwd) */
  FR_INIT_STAGE_CREDENTIALS = 1, /* the user or group: ENOENT when the name is in
                                    neither /etc/passwd nor /etc/group */
};

struct fr_init_header {
  uint32_t type;
  uint32_t exec_id;
  int32_t value;
  int32_t value2;
  uint32_t argc;
  uint32_t envc;
  uint32_t payload_len;
  uint32_t reserved;
};

#endif /* FLASHROLL_SANDBOX_INIT_PROTOCOL_H_ */
