"""The build stages, one module each: export, lower, plan, emit, verify.

Each stage is a typed function from its inputs to an artifact, plus a `run_*` wrapper that
reads and writes the files under `build/<recipe>/`; etbuild.tasks turns them into doit tasks.
"""
