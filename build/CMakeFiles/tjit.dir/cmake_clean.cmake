file(REMOVE_RECURSE
  "libtjit.pdb"
  "libtjit.so"
  "libtjit.so.0"
  "libtjit.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tjit.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
