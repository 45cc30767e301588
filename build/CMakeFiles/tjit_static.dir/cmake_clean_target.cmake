file(REMOVE_RECURSE
  "libtjit.a"
)
