# Whether bridge/ (Python optimizers: the torch: and py: names, the
# `import twins` module; docs/extending.md) is built: the option
# TWINS_PYTHON, ON by default when Debian's python3-dev, pybind11-dev and
# python3-torch are found. Python3_EXECUTABLE (default /usr/bin/python3)
# must import a torch of this LibTorch's release: its libtorch_python is
# what wraps the C++ tensors (a LibTorch 2.x wheel brings its own,
# docs/cuda.md). Included before any target is defined, because with
# Python every object is compiled position-independent.
#
# Sets TWINS_PYTHON, TWINS_TORCH_PYTHON_LIBRARY and TWINS_PYTHON_PLATLIB
# (where pip installs for that Python).
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH
    "The Python whose torch matches LibTorch (Debian's python3-torch)")
endif()
find_package(Python3 3.8 COMPONENTS Interpreter Development QUIET)
set(_twins_py_missing "")
if(NOT Python3_Interpreter_FOUND)
  list(APPEND _twins_py_missing "a Python at ${Python3_EXECUTABLE}")
elseif(NOT Python3_Development_FOUND)
  list(APPEND _twins_py_missing "python3-dev")
endif()
# pybind11 only after a Python was found: without one its config falls back
# to its own Python search, which stops the configuration on failure.
# The Python's own pybind11 first (pip's, in a venv), else the system's.
if(Python3_Interpreter_FOUND AND Python3_Development_FOUND)
  # A wheel's LibTorch config has already run find_package(Python) for its
  # interpreter alone; pybind11 then builds with Python_* (not Python3_*)
  # and needs its development part: the same Python, found whole.
  if(Python_FOUND OR DEFINED Python_EXECUTABLE)
    set(Python_EXECUTABLE "${Python3_EXECUTABLE}")
    find_package(Python 3.8 COMPONENTS Interpreter Development QUIET)
  endif()
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import pybind11; print(pybind11.get_cmake_dir())"
    RESULT_VARIABLE _twins_pb_rc OUTPUT_VARIABLE _twins_pb_dir ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_twins_pb_rc EQUAL 0 AND EXISTS "${_twins_pb_dir}")
    find_package(pybind11 2.6 CONFIG QUIET HINTS "${_twins_pb_dir}"
                 NO_DEFAULT_PATH)
  endif()
  if(NOT pybind11_FOUND)
    find_package(pybind11 2.6 CONFIG QUIET)
  endif()
endif()
if(Python3_Interpreter_FOUND AND NOT pybind11_FOUND)
  list(APPEND _twins_py_missing "pybind11-dev")
endif()
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import glob, os, sysconfig, torch; t = os.path.dirname(torch.__file__); p = sysconfig.get_path('platlib'); print(torch.__version__); print(t); print(p); print(os.path.relpath(p, sysconfig.get_path('scripts'))); print(sysconfig.get_config_var('LIBDIR') or ''); print(','.join(os.path.relpath(d, p) for d in [os.path.join(t, 'lib')] + sorted(glob.glob(os.path.join(os.path.dirname(t), 'nvidia', '*', 'lib')))))"
    RESULT_VARIABLE _twins_py_rc OUTPUT_VARIABLE _twins_py_out ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(NOT Python3_Interpreter_FOUND)
  # said above
elseif(NOT _twins_py_rc EQUAL 0)
  list(APPEND _twins_py_missing "python3-torch")
else()
  string(REPLACE "\n" ";" _twins_py_out "${_twins_py_out}")
  list(GET _twins_py_out 0 _twins_py_torch_version)
  list(GET _twins_py_out 1 _twins_py_torch_dir)
  list(GET _twins_py_out 2 TWINS_PYTHON_PLATLIB)
  # For an installed twin-run (pyproject.toml): where the environment's
  # site-packages is from its scripts folder, the torch and CUDA library
  # folders inside site-packages, and the Python's own library folder.
  list(GET _twins_py_out 3 TWINS_PYTHON_SCRIPTS_TO_PLATLIB)
  list(GET _twins_py_out 4 TWINS_PYTHON_LIBDIR)
  list(GET _twins_py_out 5 TWINS_PYTHON_TORCH_LIBDIRS)
  string(REPLACE "," ";" TWINS_PYTHON_TORCH_LIBDIRS "${TWINS_PYTHON_TORCH_LIBDIRS}")
  set(TWINS_PYTHON_TORCH_VERSION "${_twins_py_torch_version}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _twins_py_mm "${_twins_py_torch_version}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _twins_lt_mm "${Torch_VERSION}")
  find_library(TWINS_TORCH_PYTHON_LIBRARY torch_python
    PATHS "${_twins_py_torch_dir}/lib" "${TORCH_INSTALL_PREFIX}/lib"
    NO_DEFAULT_PATH)
  if(NOT _twins_py_mm STREQUAL _twins_lt_mm)
    list(APPEND _twins_py_missing
      "a torch ${_twins_lt_mm} for ${Python3_EXECUTABLE} (it has ${_twins_py_torch_version})")
  elseif(NOT TWINS_TORCH_PYTHON_LIBRARY)
    list(APPEND _twins_py_missing "libtorch_python (in ${_twins_py_torch_dir}/lib)")
  endif()
endif()
if(_twins_py_missing)
  set(_twins_py_default OFF)
else()
  set(_twins_py_default ON)
endif()
option(TWINS_PYTHON
  "Python optimizers (torch:/py: names) and the twins Python module"
  ${_twins_py_default})
if(TWINS_PYTHON AND _twins_py_missing)
  list(JOIN _twins_py_missing ", " _twins_py_text)
  message(FATAL_ERROR "TWINS_PYTHON=ON needs ${_twins_py_text}")
elseif(TWINS_PYTHON)
  message(STATUS "Python optimizers: ON (${Python3_EXECUTABLE} "
    "${Python3_VERSION}, torch ${_twins_py_torch_version}, pybind11 "
    "${pybind11_VERSION}, ${TWINS_TORCH_PYTHON_LIBRARY})")
  # The bridge goes into twin-run and into a Python extension (a shared
  # object), so every object of the project is position-independent; one
  # flag for all keeps the shared precompiled header valid. It moves no
  # number (docs/performance.md).
  add_compile_options(-fPIC)
elseif(_twins_py_missing)
  list(JOIN _twins_py_missing ", " _twins_py_text)
  message(STATUS "Python optimizers: OFF (missing: ${_twins_py_text})")
else()
  message(STATUS "Python optimizers: OFF (TWINS_PYTHON=OFF)")
endif()
