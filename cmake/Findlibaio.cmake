# Finds libaio (which ships no CMake package) and defines the imported target libaio::libaio.
find_path(LIBAIO_INCLUDE_DIR libaio.h)
find_library(LIBAIO_LIBRARY NAMES aio libaio.so.1)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(libaio REQUIRED_VARS LIBAIO_LIBRARY LIBAIO_INCLUDE_DIR)

if(libaio_FOUND AND NOT TARGET libaio::libaio)
  add_library(libaio::libaio UNKNOWN IMPORTED)
  set_target_properties(libaio::libaio PROPERTIES
    IMPORTED_LOCATION "${LIBAIO_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LIBAIO_INCLUDE_DIR}")
endif()
mark_as_advanced(LIBAIO_INCLUDE_DIR LIBAIO_LIBRARY)
