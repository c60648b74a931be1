# nvmeio_find_torch(): finds the torch an interpreter imports, and declares the imported target
# nvmeio::torch_extension (its headers, libraries and ABI flags) that nvmeio_torch builds with.
#
# The interpreter is Python3_EXECUTABLE where given, else the first of `python3` on PATH and
# /usr/bin/python3 that imports torch. Torch is asked directly (torch.utils.cpp_extension)
# rather than through its TorchConfig.cmake: a CUDA wheel from PyPI refuses find_package(Torch)
# on a machine without the CUDA toolkit, and nvmeio_torch needs none of CUDA at build time
# (it loads the driver at run time). Sets NVMEIO_TORCH_FOUND, NVMEIO_TORCH_VERSION,
# NVMEIO_TORCH_CXX_STANDARD and, where unset, Python3_EXECUTABLE (the version and the
# interpreter in the cache).
function(nvmeio_find_torch)
  set(NVMEIO_TORCH_FOUND FALSE PARENT_SCOPE)
  set(_candidates "${Python3_EXECUTABLE}")
  if(NOT Python3_EXECUTABLE)
    unset(_nvmeio_path_python3 CACHE)  # not NO_CACHE: CMake 3.16 lacks it
    find_program(_nvmeio_path_python3 NAMES python3)
    set(_candidates "${_nvmeio_path_python3}" /usr/bin/python3)
  endif()
  set(_query [=[
import torch
from torch.utils import cpp_extension
print(torch.__version__.split('+')[0])
print(':'.join(cpp_extension.include_paths()))
print(':'.join(cpp_extension.library_paths()))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
]=])
  foreach(_python IN LISTS _candidates)
    if(NOT _python OR NOT EXISTS "${_python}")
      if(_python)
        message(STATUS "nvmeio: ${_python} does not exist")
      endif()
      continue()
    endif()
    # An interpreter that hangs is given up on; an answer not of the query's shape (a script
    # that prints something else) is no torch.
    execute_process(COMMAND "${_python}" -c "${_query}" RESULT_VARIABLE _status
                    OUTPUT_VARIABLE _answer ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE
                    TIMEOUT 120)
    string(REPLACE "\n" ";" _lines "${_answer}")
    list(LENGTH _lines _count)
    if(_status EQUAL 0 AND _count EQUAL 4 AND _answer MATCHES "^[0-9]+\\.[0-9]+")
      set(_found_python "${_python}")
      break()
    elseif(Python3_EXECUTABLE)
      message(STATUS "nvmeio: ${_python} gives no torch (exit status ${_status}, or another answer "
                     "than the query's)")
    endif()
  endforeach()
  if(NOT _found_python)
    return()
  endif()
  list(GET _lines 0 _version)
  list(GET _lines 1 _includes)
  list(GET _lines 2 _library_dirs)
  list(GET _lines 3 _cxx11_abi)
  string(REPLACE ":" ";" _includes "${_includes}")
  foreach(_dir IN LISTS _includes)  # torch 1.13 names folders it no longer ships (TH, THC)
    if(NOT IS_DIRECTORY "${_dir}")
      list(REMOVE_ITEM _includes "${_dir}")
    endif()
  endforeach()
  string(REPLACE ":" ";" _library_dirs "${_library_dirs}")

  set(_libraries)
  foreach(_name c10 torch torch_cpu torch_python)
    unset(_nvmeio_torch_lib_${_name} CACHE)  # found anew for each interpreter
    find_library(_nvmeio_torch_lib_${_name} ${_name} HINTS ${_library_dirs})
    if(NOT _nvmeio_torch_lib_${_name})
      message(STATUS "nvmeio: ${_found_python} imports torch ${_version}, but lib${_name} "
                     "is not beside it (${_library_dirs})")
      return()
    endif()
    list(APPEND _libraries "${_nvmeio_torch_lib_${_name}}")
  endforeach()
  # Wheels from PyPI carry pybind11 in torch's include folder; Debian's torch relies on
  # pybind11-dev. Either way the headers torch's own bindings were built with come first.
  set(_pybind11_include)
  foreach(_dir IN LISTS _includes)
    if(EXISTS "${_dir}/pybind11/pybind11.h")
      set(_pybind11_include "${_dir}")
    endif()
  endforeach()
  if(NOT _pybind11_include)
    unset(_nvmeio_pybind11_dir CACHE)
    find_path(_nvmeio_pybind11_dir pybind11/pybind11.h)
    set(_pybind11_include "${_nvmeio_pybind11_dir}")
    if(NOT _nvmeio_pybind11_dir)
      message(STATUS "nvmeio: torch ${_version} found through ${_found_python}, but no "
                     "pybind11 headers (Debian: pybind11-dev)")
      return()
    endif()
  endif()

  if(NOT TARGET nvmeio::torch_extension)
    add_library(nvmeio::torch_extension INTERFACE IMPORTED GLOBAL)
    set_target_properties(nvmeio::torch_extension PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${_includes};${_pybind11_include}"
      INTERFACE_LINK_LIBRARIES "${_libraries}"
      INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${_cxx11_abi};TORCH_API_INCLUDE_EXTENSION_H")
  endif()
  # torch's newest headers refuse anything before C++20; 1.13's were written for C++17.
  set(_standard 17)
  if(_version VERSION_GREATER_EQUAL 2.0)
    set(_standard 20)
  endif()
  set(NVMEIO_TORCH_FOUND TRUE PARENT_SCOPE)
  set(NVMEIO_TORCH_VERSION "${_version}" CACHE INTERNAL "The torch nvmeio_torch is built for")
  set(NVMEIO_TORCH_CXX_STANDARD ${_standard} PARENT_SCOPE)
  set(Python3_EXECUTABLE "${_found_python}" CACHE FILEPATH "The interpreter nvmeio_torch is for")
endfunction()
