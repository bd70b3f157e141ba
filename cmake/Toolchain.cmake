# What this compiler needs, beyond the standard flags, to build minitrain correctly.

# Note [GCC 12's wrong broadcast]: GCC 12.2 (Debian 12's compiler) can build a 256-bit constant in
# the wrong way when -march enables AVX-512 (skylake-avx512, icelake-server, rocketlake: what
# -march=native picks on Intel Xeons; on a Zen 4 host GCC 12.2's native is znver3 plus AVX-512;
# x86-64-v4 too, while haswell, skylake and plain znver3 are fine). Passing nn::Conv2d's options by
# value, `Conv2d(3, 8, 3)` with the default `{}`, copies {stride 1, 1, padding 0, 0} onto the stack
# as one 256-bit constant; the x86 back end sees that the constant's two nonzero 64-bit words are
# equal and broadcasts the first into all four lanes, so the layer gets padding 1x1 and computes a
# different convolution, with no error anywhere (`{.stride = 2}` got padding 2). The back end's check
# misses that the constant's upper words are implicit zeros (newer GCC's i386-expand.cc checks that
# the constant fills the whole mode before it broadcasts). The broadcast is only tried when moves
# from general registers to vector registers are enabled for the tuning, so
# -mtune-ctrl=^inter_unit_moves_to_vec turns exactly that path off, at the price of such moves going
# through memory. Found by tests/nn/test_cnn.cpp's padding error on an Intel Xeon (2026-12-03); on
# a Zen 4 host (2026-12-04) the first probe passed while tests/nn/test_toolchain.cpp failed, since
# there only the shape without the bias flag is built wrong, so the probe now holds both shapes.
# Rather than guess which compilers and CPUs are affected, a native build compiles and runs
# cmake/native_codegen_probe.cpp, the same patterns in one file: if it computes a wrong value, the
# flag is added and the probe must then pass, or configuring stops. tests/nn/test_toolchain.cpp
# keeps the pattern under test in every build.
#
# Sets out_var to a native build's flags here: -march=native, plus the workaround where the probe
# shows this compiler needs it. The answer is cached with the probe's hash, so a build folder
# configured before the probe changed runs the new probe instead of keeping the old answer.
function(mt_native_flags out_var)
  set(probe ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/native_codegen_probe.cpp)
  file(MD5 ${probe} probe_md5)
  if(NOT DEFINED CACHE{MT_NATIVE_WORKAROUNDS} OR NOT "$CACHE{MT_NATIVE_PROBE_MD5}" STREQUAL probe_md5)
    set(workarounds "")
    if(NOT CMAKE_CROSSCOMPILING)
      try_run(plain_ran plain_compiled ${CMAKE_BINARY_DIR}/native_codegen_probe ${probe}
              COMPILE_DEFINITIONS -O2 -march=native)
      if(plain_compiled AND NOT plain_ran EQUAL 0)
        set(workarounds -mtune-ctrl=^inter_unit_moves_to_vec)
        try_run(fixed_ran fixed_compiled ${CMAKE_BINARY_DIR}/native_codegen_probe ${probe}
                COMPILE_DEFINITIONS -O2 -march=native ${workarounds})
        if(NOT fixed_compiled OR NOT fixed_ran EQUAL 0)
          message(FATAL_ERROR "minitrain: ${CMAKE_CXX_COMPILER} -march=native miscompiles cmake/native_codegen_probe.cpp "
                              "even with ${workarounds} (Note [GCC 12's wrong broadcast], cmake/Toolchain.cmake); "
                              "configure with -DMT_NATIVE=OFF or another compiler")
        endif()
      endif()
    endif()
    set(MT_NATIVE_WORKAROUNDS "${workarounds}" CACHE INTERNAL "Note [GCC 12's wrong broadcast]: extra flags for -march=native")
    set(MT_NATIVE_PROBE_MD5 "${probe_md5}" CACHE INTERNAL "the probe that answered MT_NATIVE_WORKAROUNDS")
  endif()
  if(MT_NATIVE_WORKAROUNDS)
    message(STATUS "minitrain: -march=native miscompiles the by-value options probe here; adding ${MT_NATIVE_WORKAROUNDS} "
                   "(Note [GCC 12's wrong broadcast])")
  endif()
  set(${out_var} -march=native ${MT_NATIVE_WORKAROUNDS} PARENT_SCOPE)
endfunction()

# Note [Test code at a lower -O]: the test programs' own files (tests/) are harness code: the
# library they test keeps the build's flags, so compiling the harness lighter checks the same
# library, and a cold CI build spends most of its time compiling. Measured on the AMD host
# (2026-12-03, one file, seconds): tests/tensor/test_cpu_backend.cpp 8.9 at the Release build's -O3
# against 4.9 at -O1; under the sanitizers 13.2 at -O1 against 5.6 at -O0, and
# apps/mini_train/options.cpp (CLI11's templates) 33.6 against 15.1. So the tests compile at -O1 in
# an optimised build, and the tests and the programs (mini_train, examples/) at -O0 in a sanitizer
# build, which still instruments every line (-O0 hides no access from AddressSanitizer). An
# optimised build's programs keep -O3: they are what users run. One file keeps the library's flags:
# tests/nn/test_toolchain.cpp checks the build's own code generation (Note [GCC 12's wrong
# broadcast]), which shows only from -O2 up.
function(mt_lighter_harness target)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
  if(MT_SANITIZE)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-O0>")
  elseif(CMAKE_CXX_FLAGS_${config} MATCHES "-O[23]")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-O1>")
  endif()
endfunction()

# The build configuration's own -O flag on one source of a mt_lighter_harness target.
function(mt_library_optimization source)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
  string(REGEX MATCH "-O[0-3gsz]?" level "${CMAKE_CXX_FLAGS_${config}}")
  if(level)
    set_source_files_properties(${source} PROPERTIES COMPILE_OPTIONS "${level}")
  endif()
endfunction()
