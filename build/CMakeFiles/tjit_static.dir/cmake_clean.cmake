file(REMOVE_RECURSE
  "libtjit.a"
  "libtjit.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tjit_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
