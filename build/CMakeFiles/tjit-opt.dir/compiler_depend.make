# Empty compiler generated dependencies file for tjit-opt.
# This may be replaced when dependencies are built.
