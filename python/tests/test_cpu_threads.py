import torch  # noqa: F401  (loads the OpenBLAS that cpu_threads sets)

from flashroll import cpu_threads


def test_sets_the_loaded_openblas_thread_count():
    assert cpu_threads.set_blas_threads(2)
    assert cpu_threads.blas_threads() == 2
    assert cpu_threads.set_blas_threads(1)
    assert cpu_threads.blas_threads() == 1
