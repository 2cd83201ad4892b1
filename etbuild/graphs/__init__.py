"""What the lowering steps and backends' AOT halves both read of a program's graphs (etbuild.graphs.method)."""
