"""ExecuTorch's developer-tool formats, read and written without torch: bundled programs (`.bpte`) and ETDumps."""
