"""The build stages, one module each, in the order they run: export, quantize (when the recipe
has the section), lower, plan, emit, select. Verification stands above them, in etbuild.verify.

Each stage is a typed function from its inputs to an artifact, plus a `run_*` wrapper that
reads and writes the files under `build/<recipe>/` (module docstrings say what each takes and
gives); etbuild.build.stage_table lists them and etbuild.build.tasks makes them doit tasks.
"""
