# BPF programs of the sandbox: the network policy (sandbox/net_policy.cc) and
# the device policy (sandbox/device_policy.cc). Each <name>.bpf.c is compiled
# with clang -target bpf and embedded into flashroll_sandbox through a
# skeleton header from `bpftool gen skeleton`, so the binary carries its BPF
# objects and needs no file at run time.
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

set(flashroll_bpf_dir ${CMAKE_CURRENT_BINARY_DIR}/bpf)

# Compiles bpf/<name>.bpf.c into <name>.skel.h (skeleton name <name>_bpf).
# -g produces the BTF that libbpf needs for the map definitions; `bpftool gen
# object` then keeps BTF and drops the DWARF, so the embedded object stays small.
function(flashroll_bpf_skeleton name)
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/bpf/${name}.bpf.c)
  set(debug_obj ${flashroll_bpf_dir}/${name}.debug.bpf.o)
  set(obj ${flashroll_bpf_dir}/${name}.bpf.o)
  set(skel ${flashroll_bpf_dir}/${name}.skel.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${flashroll_bpf_dir}
    COMMAND ${FLASHROLL_BPF_CLANG} -g -O2 -target bpf -Wall -Wextra -Werror
            -I${flashroll_bpf_arch_include} -c ${src} -o ${debug_obj}
    COMMAND ${FLASHROLL_BPFTOOL} gen object ${obj} ${debug_obj}
    DEPENDS ${src}
    COMMENT "Compiling BPF object ${name}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${FLASHROLL_BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "Generating BPF skeleton ${name}.skel.h")
  target_sources(flashroll_sandbox PRIVATE ${skel})
endfunction()

flashroll_bpf_skeleton(net_policy)
flashroll_bpf_skeleton(device_policy)
target_include_directories(flashroll_sandbox PRIVATE ${flashroll_bpf_dir})
target_link_libraries(flashroll_sandbox PUBLIC PkgConfig::LIBBPF)
