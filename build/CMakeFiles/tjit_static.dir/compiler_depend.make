# Empty compiler generated dependencies file for tjit_static.
# This may be replaced when dependencies are built.
