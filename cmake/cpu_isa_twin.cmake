# The CPU kernels' AVX2 twin (TESSEL_CPU_ISA=avx2, kernels/cpu_isa.cpp): where -march=native has
# AVX-512, kernels/cpu/ is compiled a second time as an AVX2-only CPU's native build compiles it
# (-mavx2 -mfma, no -march=native), into namespace tessel::cpu_avx2 instead of tessel::cpu. The
# kernels are where the ISA decides the arithmetic (the lanes of their `omp simd` reductions; oneDNN
# is capped at run time), so one build then computes both ways, and an AVX-512 machine runs the
# tests as an AVX2 user's CPU does without a second build (scripts/test-avx2.sh). The rename is a
# macro on these files' command line: their include closure names `cpu` only as that namespace.
# Only beside a native AVX-512 build: in a portable build, an inline function that the twin's
# objects compile with AVX2 could be the copy the linker keeps for the whole program.
include(CheckCXXSourceCompiles)
set(TESSEL_CPU_AVX2_TWIN OFF)
if(TESSEL_NATIVE)
  set(CMAKE_REQUIRED_FLAGS -march=native)
  check_cxx_source_compiles("#ifndef __AVX512F__\n#error no AVX-512\n#endif\nint main() {}"
                            TESSEL_NATIVE_HAS_AVX512)
  unset(CMAKE_REQUIRED_FLAGS)
  set(TESSEL_CPU_AVX2_TWIN ${TESSEL_NATIVE_HAS_AVX512})
endif()
if(TESSEL_CPU_AVX2_TWIN)
  add_library(tessel_cpu_kernels_avx2 OBJECT ${TESSEL_CPU_KERNEL_SOURCES})
  set_target_properties(tessel_cpu_kernels_avx2 PROPERTIES TESSEL_PORTABLE_ISA ON)
  target_compile_options(tessel_cpu_kernels_avx2 PRIVATE -mavx2 -mfma)
  target_compile_definitions(tessel_cpu_kernels_avx2 PRIVATE cpu=cpu_avx2)
  target_include_directories(tessel_cpu_kernels_avx2 PRIVATE src ${DNNL_INCLUDE_DIR})
  target_link_libraries(tessel_cpu_kernels_avx2 PRIVATE OpenMP::OpenMP_CXX fmt::fmt
                                                        nlohmann_json::nlohmann_json MPI::MPI_CXX)
  target_sources(tessel_core PRIVATE $<TARGET_OBJECTS:tessel_cpu_kernels_avx2>)
  set_source_files_properties(src/tessel/kernels/cpu_isa.cpp PROPERTIES
                              COMPILE_DEFINITIONS TESSEL_CPU_AVX2_TWIN)
endif()
