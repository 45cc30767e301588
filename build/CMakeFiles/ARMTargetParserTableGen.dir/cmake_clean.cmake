
# Per-language clean rules from dependency scanning.
foreach(lang )
  include(CMakeFiles/ARMTargetParserTableGen.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
