# Builds and runs the consumer program (main.cpp) one of the ways users take nvmeio in, from
# scratch in WORK_DIR. Run by ctest as `cmake -D... -P run_consumer.cmake`.
#
#   WAY                find_package | add_subdirectory | fetch_content | pkg_config | bare_include
#                      | conan_exports (also needs PYTHON, CONANFILE; EXPECT_TORCH optional)
#   NVMEIO_SOURCE_DIR  nvmeio's source tree
#   WORK_DIR           an empty-able folder in the build tree
#   SCRATCH_DIR        where the program writes and reads its O_DIRECT file
#   CXX                the C++ compiler;  GENERATOR  the CMake generator;  VERSION  nvmeio's version
#   NVMEIO_OPTIONS     nvmeio cache options to pass on (e.g. -DNVMEIO_WITH_XSIMD=ON), |-separated
cmake_minimum_required(VERSION 3.16)

foreach(_required WAY NVMEIO_SOURCE_DIR WORK_DIR SCRATCH_DIR CXX GENERATOR VERSION)
  if(NOT DEFINED ${_required})
    message(FATAL_ERROR "run_consumer.cmake: ${_required} is not set")
  endif()
endforeach()
set(_here "${CMAKE_CURRENT_LIST_DIR}")
string(REPLACE "|" ";" NVMEIO_OPTIONS "${NVMEIO_OPTIONS}")

# Runs a command; stops the test with its output when it fails.
function(run)
  string(REPLACE ";" " " _shown "${ARGN}")
  message(STATUS "$ ${_shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _result OUTPUT_VARIABLE _out
                  ERROR_VARIABLE _out)
  if(NOT _result EQUAL 0)
    message(FATAL_ERROR "failed (${_result}):\n${_out}")
  elseif(_out MATCHES "^nvmeio ")
    message(STATUS "${_out}")  # the consumer's own report
  endif()
endfunction()

# Configures, builds and runs one of the CMake consumer projects.
function(build_and_run_cmake_consumer project)
  run("${CMAKE_COMMAND}" -S "${_here}/${project}" -B "${WORK_DIR}/consumer" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release
      "-DNVMEIO_SOURCE_DIR=${NVMEIO_SOURCE_DIR}" "-DNVMEIO_EXPECTED_VERSION=${VERSION}"
      ${NVMEIO_OPTIONS} ${ARGN})
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/consumer")
  run("${WORK_DIR}/consumer/consumer" "${SCRATCH_DIR}")
endfunction()

# Installs nvmeio (headers and package files only: nothing to compile) into WORK_DIR/prefix.
function(install_nvmeio)
  run("${CMAKE_COMMAND}" -S "${NVMEIO_SOURCE_DIR}" -B "${WORK_DIR}/nvmeio-build" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix"
      -DNVMEIO_BUILD_TESTS=OFF -DNVMEIO_BUILD_EXAMPLES=OFF -DNVMEIO_BUILD_BENCH=OFF
      -DNVMEIO_BUILD_PYTHON=OFF ${NVMEIO_OPTIONS})
  run("${CMAKE_COMMAND}" --install "${WORK_DIR}/nvmeio-build")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

if(WAY STREQUAL "find_package")
  install_nvmeio()
  build_and_run_cmake_consumer(find_package "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
elseif(WAY STREQUAL "add_subdirectory" OR WAY STREQUAL "fetch_content")
  build_and_run_cmake_consumer(${WAY})
elseif(WAY STREQUAL "pkg_config")
  find_program(_pkg_config NAMES pkg-config pkgconf)
  if(NOT _pkg_config)
    message(FATAL_ERROR "pkg-config not found (Debian: apt-get install pkgconf)")
  endif()
  install_nvmeio()
  set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/prefix/share/pkgconfig")
  execute_process(COMMAND "${_pkg_config}" --modversion nvmeio OUTPUT_VARIABLE _version
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _result)
  if(NOT _result EQUAL 0 OR NOT _version STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config --modversion nvmeio gave '${_version}', expected ${VERSION}")
  endif()
  execute_process(COMMAND "${_pkg_config}" --cflags --libs nvmeio OUTPUT_VARIABLE _flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _result)
  if(NOT _result EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs nvmeio failed")
  endif()
  message(STATUS "pkg-config --cflags --libs nvmeio: ${_flags}")
  separate_arguments(_flags UNIX_COMMAND "${_flags}")
  run("${CXX}" -std=c++17 "${_here}/main.cpp" ${_flags} -o "${WORK_DIR}/consumer")
  run("${WORK_DIR}/consumer" "${SCRATCH_DIR}")
elseif(WAY STREQUAL "conan_exports")
  # What `conan create` builds: only the files the recipe exports, configured with the cache
  # variables the recipe sets (every other option at its default, so nvmeio_torch is on where
  # an interpreter imports torch), built and installed; then the find_package consumer against that package.
  set(_exported "${WORK_DIR}/exported")
  run("${PYTHON}" "${_here}/recipe_exports.py" "${CONANFILE}" "${NVMEIO_SOURCE_DIR}"
      "${_exported}" "${WORK_DIR}/recipe_options.txt")
  file(STRINGS "${WORK_DIR}/recipe_options.txt" _recipe_options)
  run("${CMAKE_COMMAND}" -S "${_exported}" -B "${WORK_DIR}/nvmeio-build" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix"
      -DCMAKE_BUILD_TYPE=Release ${_recipe_options} ${NVMEIO_OPTIONS})
  # Where this build found Torch, the copy must have seen it too, or python/ went unchecked.
  if(EXPECT_TORCH)
    file(STRINGS "${WORK_DIR}/nvmeio-build/CMakeCache.txt" _torch REGEX "^NVMEIO_TORCH_VERSION:")
    if(NOT _torch)
      message(FATAL_ERROR "Torch is installed but the exported tree did not find it")
    endif()
  endif()
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/nvmeio-build")
  run("${CMAKE_COMMAND}" --install "${WORK_DIR}/nvmeio-build")
  build_and_run_cmake_consumer(find_package "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
elseif(WAY STREQUAL "bare_include")
  # The headers copied into a project's own tree; nothing but -I and -laio.
  file(COPY "${NVMEIO_SOURCE_DIR}/include/nvmeio" DESTINATION "${WORK_DIR}/third_party")
  run("${CXX}" -std=c++17 "-I${WORK_DIR}/third_party" "${_here}/main.cpp" -laio
      -o "${WORK_DIR}/consumer")
  run("${WORK_DIR}/consumer" "${SCRATCH_DIR}")
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown WAY '${WAY}'")
endif()
