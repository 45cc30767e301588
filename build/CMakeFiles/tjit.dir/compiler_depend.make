# Empty compiler generated dependencies file for tjit.
# This may be replaced when dependencies are built.
