# Empty custom commands generated dependencies file for ARMTargetParserTableGen.
# This may be replaced when dependencies are built.
