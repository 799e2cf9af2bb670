# The CUDA backend (kernels/cuda/, core/cuda.cpp, comm/nccl.cpp): -DTESSEL_CUDA=ON|OFF, on by
# default when nvcc is found. Compiled for Hopper (sm_90 machine code) with compute_90 PTX beside
# it, so that a newer GPU can still run it through the driver's compiler. Without it the build is
# the CPU build alone, unchanged.
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # the toolkit's usual place, off the PATH
endif()
check_language(CUDA)
set(TESSEL_CUDA_DEFAULT OFF)
if(CMAKE_CUDA_COMPILER)
  set(TESSEL_CUDA_DEFAULT ON)
endif()
option(TESSEL_CUDA "Build the CUDA kernel table and the NCCL communicator" ${TESSEL_CUDA_DEFAULT})

if(TESSEL_CUDA)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  file(GLOB TESSEL_CUDA_SOURCES CONFIGURE_DEPENDS src/tessel/kernels/cuda/*.cu
       src/tessel/kernels/cuda/*.cpp src/tessel/core/cuda.cpp src/tessel/comm/nccl.cpp)
  target_sources(tessel_core PRIVATE ${TESSEL_CUDA_SOURCES})
  # CMake 3.25 does not know nvcc 13's C++20 flag; CUDA sources follow CXX_STANDARD (20).
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set_target_properties(tessel_core PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  # -lineinfo: source lines in profiles and sanitizer reports, at no run-time cost.
  target_compile_options(tessel_core PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  target_compile_definitions(tessel_core PUBLIC TESSEL_CUDA)
  target_include_directories(tessel_core PUBLIC ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  # cuBLASLt is not linked: kernels/cuda/gemm.cu opens it on the first GEMM (its initialisers
  # would cost every process half a second at start), falling back to the toolkit's directory.
  target_compile_definitions(tessel_core PRIVATE
                             TESSEL_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_link_libraries(tessel_core PUBLIC CUDA::cudart_static ${NCCL_LIBRARY} ${CMAKE_DL_LIBS})
  message(STATUS "TESSEL_CUDA: on (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "TESSEL_CUDA: off (no nvcc found, or -DTESSEL_CUDA=OFF): CPU backend only")
endif()
