# Which LibTorch twins builds against (sets what find_package(Torch) sets:
# TORCH_LIBRARIES, TORCH_INCLUDE_DIRS, TORCH_CXX_FLAGS, TORCH_LIBRARY,
# TORCH_INSTALL_PREFIX, Torch_VERSION):
#
# - by default find_package(Torch): Debian's libtorch-dev, or the LibTorch
#   CMAKE_PREFIX_PATH names (scripts/build-cuda.sh names a wheel's);
# - with TWINS_TORCH_FROM_PYTHON (on under `pip install`, docs/extending.md)
#   the torch that Python3_EXECUTABLE imports: the environment the package
#   is installed into. Its CMake config is used, except for a CUDA build of
#   torch where no CUDA toolkit (nvcc) is found: that config insists on the
#   toolkit, and twins compiles no CUDA code, so the targets are then made
#   here from the package's own headers and libraries (twin-run still runs
#   on the GPU through libtorch, which loads libtorch_cuda).
if(DEFINED SKBUILD)
  set(_twins_from_python_default ON)
else()
  set(_twins_from_python_default OFF)
endif()
option(TWINS_TORCH_FROM_PYTHON
  "Build against the torch that Python3_EXECUTABLE imports (pip install)"
  ${_twins_from_python_default})
set(TWINS_TORCH_WITHOUT_CONFIG OFF)

if(TWINS_TORCH_FROM_PYTHON)
  if(NOT Python3_EXECUTABLE)
    find_package(Python3 3.8 COMPONENTS Interpreter REQUIRED)
  endif()
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
      "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(torch.version.cuda or ''); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    RESULT_VARIABLE _twins_rc OUTPUT_VARIABLE _twins_out ERROR_VARIABLE _twins_err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _twins_rc EQUAL 0)
    message(FATAL_ERROR "twins builds against the torch of the environment it "
      "is installed into, and ${Python3_EXECUTABLE} imports none. Install "
      "torch >= 2.1 there first, then `pip install --no-build-isolation .` "
      "(pip's default isolated build environment has no torch).")
  endif()
  string(REPLACE "\n" ";" _twins_out "${_twins_out}")
  list(GET _twins_out 0 TWINS_PYTHON_TORCH_DIR)
  list(GET _twins_out 1 _twins_torch_version)
  list(GET _twins_out 2 _twins_torch_cuda)
  list(GET _twins_out 3 _twins_torch_abi)
  if(_twins_torch_version VERSION_LESS 2.1)
    message(FATAL_ERROR "twins needs torch >= 2.1 in the environment it is "
      "installed into; ${Python3_EXECUTABLE} has ${_twins_torch_version}")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${TWINS_PYTHON_TORCH_DIR}")
  if(_twins_torch_cuda)
    find_program(TWINS_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH
                 PATH_SUFFIXES bin)
    if(NOT TWINS_NVCC AND NOT DEFINED ENV{CUDACXX})
      set(TWINS_TORCH_WITHOUT_CONFIG ON)
      message(STATUS "torch ${_twins_torch_version} is a CUDA ${_twins_torch_cuda} "
        "build and no nvcc is found: built against its headers and libraries "
        "without its CMake config (twin-run links libtorch, which loads "
        "libtorch_cuda at run time)")
    endif()
  endif()
endif()

if(NOT TWINS_TORCH_WITHOUT_CONFIG)
  find_package(Torch REQUIRED)
  return()
endif()

set(TORCH_INSTALL_PREFIX "${TWINS_PYTHON_TORCH_DIR}")
set(Torch_VERSION "${_twins_torch_version}")
set(TORCH_INCLUDE_DIRS "${TWINS_PYTHON_TORCH_DIR}/include"
  "${TWINS_PYTHON_TORCH_DIR}/include/torch/csrc/api/include")
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=${_twins_torch_abi}")
foreach(lib torch torch_cpu c10)
  find_library(TWINS_LIB_${lib} ${lib} PATHS "${TWINS_PYTHON_TORCH_DIR}/lib"
               NO_DEFAULT_PATH REQUIRED)
endforeach()
set(TORCH_LIBRARY "${TWINS_LIB_torch}")
add_library(twins_torch INTERFACE)
target_include_directories(twins_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
# libtorch first: its NEEDED list loads libtorch_cuda and registers the
# CUDA kernels, as under the CMake config.
target_link_libraries(twins_torch INTERFACE
  -Wl,--no-as-needed "${TWINS_LIB_torch}" -Wl,--as-needed
  "${TWINS_LIB_torch_cpu}" "${TWINS_LIB_c10}")
set(TORCH_LIBRARIES twins_torch)
