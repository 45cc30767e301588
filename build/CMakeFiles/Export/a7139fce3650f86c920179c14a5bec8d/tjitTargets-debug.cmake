#----------------------------------------------------------------
# Generated CMake target import file for configuration "Debug".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "tjit::tjit" for configuration "Debug"
set_property(TARGET tjit::tjit APPEND PROPERTY IMPORTED_CONFIGURATIONS DEBUG)
set_target_properties(tjit::tjit PROPERTIES
  IMPORTED_LINK_DEPENDENT_LIBRARIES_DEBUG "LLVM"
  IMPORTED_LOCATION_DEBUG "${_IMPORT_PREFIX}/lib/libtjit.so.0.1.0"
  IMPORTED_SONAME_DEBUG "libtjit.so.0"
  )

list(APPEND _cmake_import_check_targets tjit::tjit )
list(APPEND _cmake_import_check_files_for_tjit::tjit "${_IMPORT_PREFIX}/lib/libtjit.so.0.1.0" )

# Import target "tjit::tjit_static" for configuration "Debug"
set_property(TARGET tjit::tjit_static APPEND PROPERTY IMPORTED_CONFIGURATIONS DEBUG)
set_target_properties(tjit::tjit_static PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_DEBUG "C"
  IMPORTED_LOCATION_DEBUG "${_IMPORT_PREFIX}/lib/libtjit.a"
  )

list(APPEND _cmake_import_check_targets tjit::tjit_static )
list(APPEND _cmake_import_check_files_for_tjit::tjit_static "${_IMPORT_PREFIX}/lib/libtjit.a" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
