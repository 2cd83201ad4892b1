"""The Ethos-U delegate blob (`vela_bin_stream`), packed and parsed by the same layout facts. Torch-free."""
