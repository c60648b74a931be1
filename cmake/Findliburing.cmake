# Finds liburing (no CMake package of its own) and defines the imported target liburing::liburing.
find_path(LIBURING_INCLUDE_DIR liburing.h)
find_library(LIBURING_LIBRARY NAMES uring liburing.so.2)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(liburing REQUIRED_VARS LIBURING_LIBRARY LIBURING_INCLUDE_DIR)

if(liburing_FOUND AND NOT TARGET liburing::liburing)
  add_library(liburing::liburing UNKNOWN IMPORTED)
  set_target_properties(liburing::liburing PROPERTIES
    IMPORTED_LOCATION "${LIBURING_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LIBURING_INCLUDE_DIR}")
endif()
mark_as_advanced(LIBURING_INCLUDE_DIR LIBURING_LIBRARY)
