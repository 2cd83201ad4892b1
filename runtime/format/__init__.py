"""The `.pte` container: schema parsing, bounds-checked reading and writing of program.fbs."""
