"""Thread counts for a trainer that shares its cores with the engine.

Debian's torch runs every matmul through the system BLAS (OpenBLAS, see
scripts/install-deps.sh), which keeps a pool of its own threads, one per
core by default, beside torch's OpenMP threads (torch.set_num_threads does
not reach it). OpenBLAS's workers spin between calls; next to an engine
busy on the same two cores they preempt one another, and a step took twice
as long as with one BLAS thread (docs/BENCHMARKS.md, "Trainer step").

Torch's own OpenMP workers spin likewise. libgomp reads OMP_WAIT_POLICY once,
when torch loads it, so no call here can change it: the RL job starts its
trainer with OMP_WAIT_POLICY=PASSIVE unless one is set (scheduler/rl_job.cc).
"""
import ctypes
import os


def _loaded_openblas():
    """The OpenBLAS this process has loaded, or None; never loads one."""
    for name in ("libopenblas.so.0", "libopenblas.so"):
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
    return None


def set_blas_threads(n):
    """Sets the OpenBLAS already loaded in this process (by torch) to n
    threads. Returns False when the process has no OpenBLAS (another BLAS,
    or torch not imported yet): nothing is changed then."""
    lib = _loaded_openblas()
    if lib is None:
        return False
    lib.openblas_set_num_threads(ctypes.c_int(n))
    return True


def blas_threads():
    """The loaded OpenBLAS's thread count, or None without one."""
    lib = _loaded_openblas()
    return None if lib is None else int(lib.openblas_get_num_threads())
