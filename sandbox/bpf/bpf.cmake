# BPF programs of the sandbox's network policy (sandbox/net_policy.cc).
# net_policy.bpf.c is compiled with clang -target bpf and embedded into
# flashroll_sandbox through a skeleton header from `bpftool gen skeleton`, so
# the binary carries its BPF object and needs no file at run time.
# Included from sandbox/CMakeLists.txt after flashroll_sandbox is defined.
# Debian packages: clang, bpftool, libbpf-dev (scripts/install-deps.sh).
find_program(FLASHROLL_BPF_CLANG NAMES clang clang-16 clang-15 clang-14 REQUIRED)
find_program(FLASHROLL_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)
pkg_check_modules(LIBBPF REQUIRED IMPORTED_TARGET libbpf)

# <linux/bpf.h> includes <asm/types.h>, which lives in the multiarch include
# directory that clang -target bpf does not search by itself.
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(flashroll_bpf_arch_include /usr/include/${CMAKE_LIBRARY_ARCHITECTURE})
else()
  set(flashroll_bpf_arch_include /usr/include/${CMAKE_SYSTEM_PROCESSOR}-linux-gnu)
endif()

set(flashroll_bpf_src ${CMAKE_CURRENT_SOURCE_DIR}/bpf/net_policy.bpf.c)
set(flashroll_bpf_dir ${CMAKE_CURRENT_BINARY_DIR}/bpf)
set(flashroll_bpf_debug_obj ${flashroll_bpf_dir}/net_policy.debug.bpf.o)
set(flashroll_bpf_obj ${flashroll_bpf_dir}/net_policy.bpf.o)
set(flashroll_bpf_skel ${flashroll_bpf_dir}/net_policy.skel.h)

# -g produces the BTF that libbpf needs for the map definitions; `bpftool gen
# object` then keeps BTF and drops the DWARF, so the embedded object stays small.
add_custom_command(
  OUTPUT ${flashroll_bpf_obj}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${flashroll_bpf_dir}
  COMMAND ${FLASHROLL_BPF_CLANG} -g -O2 -target bpf -Wall -Wextra -Werror
          -I${flashroll_bpf_arch_include} -c ${flashroll_bpf_src} -o ${flashroll_bpf_debug_obj}
  COMMAND ${FLASHROLL_BPFTOOL} gen object ${flashroll_bpf_obj} ${flashroll_bpf_debug_obj}
  DEPENDS ${flashroll_bpf_src}
  COMMENT "Compiling BPF object net_policy.bpf.o"
  VERBATIM)
add_custom_command(
  OUTPUT ${flashroll_bpf_skel}
  COMMAND ${FLASHROLL_BPFTOOL} gen skeleton ${flashroll_bpf_obj} name net_policy_bpf > ${flashroll_bpf_skel}
  DEPENDS ${flashroll_bpf_obj}
  COMMENT "Generating BPF skeleton net_policy.skel.h")

target_sources(flashroll_sandbox PRIVATE ${flashroll_bpf_skel})
target_include_directories(flashroll_sandbox PRIVATE ${flashroll_bpf_dir})
target_link_libraries(flashroll_sandbox PUBLIC PkgConfig::LIBBPF)
