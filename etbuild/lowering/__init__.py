"""From a core-ATen ExportedProgram to an unplanned program in the `.pte` format."""
