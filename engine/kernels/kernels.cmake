# Per-file instruction-set flags of the CPU kernels. engine/CMakeLists.txt
# includes this after add_library(flashroll_engine ...). Only these files get
# the flags; cpu_isa.cc picks at run time which of their tables is called.
# -Wno-(maybe-)uninitialized: GCC 12's avx512fintrin.h initialises
# _mm512_undefined_* from itself and warns about its own header once inlined
# (GCC bug 105593).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/kernels_avx512.cc PROPERTIES COMPILE_OPTIONS
  "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c;-Wno-uninitialized;-Wno-maybe-uninitialized")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/kernels_avx2.cc PROPERTIES COMPILE_OPTIONS
  "-mavx2;-mfma;-mf16c")
